// Training data: one virtual token stream over memory-mapped files, split into a training
// head and a validation tail, or, with data.val_path, all for training and a second stream of
// the same format for validation. The stream is raw text (one token per byte), token shards (ours,
// "MTCTOKS1", or llm.c's .bin; docs/data-format.md) concatenated in sorted path order, or
// synthetic tokens. Batches are drawn at offsets that are a pure function of (seed, split,
// step, micro-batch, row), so a resumed run reads exactly what the uninterrupted one would
// have, with no data-loader state to save. Windows may cross shard boundaries.
#ifndef MT_DATA_H
#define MT_DATA_H

#include "runtime/config.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *path;
    const uint8_t *map;     // the whole file, mapped read-only
    size_t map_len, header; // header: bytes before the first token
    const void *tokens;     // map + header
    size_t n, start;        // its token count, and the index of its first token in the stream
    int width;              // bytes per token: 1 (text), 2 or 4
} data_shard;

typedef struct {
    data_shard *shards; // in stream order; none for synthetic data
    int nshards;
    size_t n, n_train;      // validation reads [n_train, n), unless val_path's stream is there
    int vocab;              // synthetic data: uniform tokens in [0, vocab), a hash of the position
    data_shard *val_shards; // data.val_path's stream (n_train is then n); none without it
    int val_nshards;
    size_t val_n;
} dataset;

enum { SPLIT_TRAIN, SPLIT_VAL };

// The config loader's check of data.format "tokens": expands data.path (a glob or a folder),
// reads every header and checks it against its file's size, without mapping any tokens.
// Returns 0 and the total token count, or -1 with one line in err naming the file.
int dataset_check_shards(const char *pattern, size_t *ntokens, char *err, size_t errlen);

// Exits with a one-line message naming the file when it is unreadable, malformed or too
// short, or (for shards) holds a token >= vocab, with that token's index in the file.
void dataset_open(dataset *ds, const mt_config *c);
void dataset_close(dataset *ds);
// rows x (seq+1) window: inputs[r*T + t] = tokens[o + t], targets = tokens[o + t + 1]. The
// offset o is drawn the same way whichever stream holds the split.
void dataset_batch(const dataset *ds, int split, uint64_t seed, int64_t step, int micro, int rows,
                   int T, int32_t *inputs, int32_t *targets);

#endif
