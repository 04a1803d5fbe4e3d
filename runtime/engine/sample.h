// Choosing the next token of text sampled from the trained weights (engine.c's sample_text).
#ifndef MT_SAMPLE_H
#define MT_SAMPLE_H

#include "runtime/model/model.h"
#include <stdint.h>

// A token drawn from softmax(logits / temperature), a pure function of the logits and key.
int sample_token(const float *logits, int vocab, float temperature, uint64_t key);
// Whether tok ends a text: the config's eos id, or one of Llama 3's further ones.
int sample_is_eos(const mt_model *m, int tok);

#endif
