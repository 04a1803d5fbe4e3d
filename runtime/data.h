// Training data: a memory-mapped token stream (byte-level for now: one token per byte of
// text), split into a training head and a validation tail. Batches are drawn at offsets that
// are a pure function of (seed, step, micro-batch, row), so a resumed run reads exactly what
// the uninterrupted one would have, with no data-loader state to save.
#ifndef MT_DATA_H
#define MT_DATA_H

#include "runtime/config.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *bytes; // NULL for synthetic data
    size_t n, n_train;
    int vocab; // synthetic data: uniform tokens in [0, vocab), a hash of the position
} dataset;

enum { SPLIT_TRAIN, SPLIT_VAL };

// Exits with a one-line message naming the file when it is unreadable or too short.
void dataset_open(dataset *ds, const mt_config *c);
void dataset_close(dataset *ds);
// rows x (seq+1) window: inputs[r*T + t] = tokens[o + t], targets = tokens[o + t + 1].
void dataset_batch(const dataset *ds, int split, uint64_t seed, int64_t step, int micro, int rows,
                   int T, int32_t *inputs, int32_t *targets);

#endif
