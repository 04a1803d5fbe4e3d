// The Llama model as the trainer sees it: parameter groups (flat fp32 arrays that stream and
// shard as units) and the tensors inside each group. Group 0 is the token embedding, groups
// 1..L the decoder layers, group L+1 the head (final norm, plus lm_head when untied).
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include "runtime/config.h"
#include <stdint.h>

enum { TENSOR_NORMAL, TENSOR_ONES, TENSOR_ZEROS }; // how a tensor is initialized

typedef struct {
    const char *name; // Hugging Face name pattern, "%d" for the layer index
    uint64_t offset, numel;
    int rows, cols; // cols == 0 for vectors
    int init;
} tensor_info;

#define MODEL_MAX_TENSORS 12

static inline int model_group_count(const mt_config *c) {
    return c->layers + 2;
}
static inline int model_head_group(const mt_config *c) {
    return c->layers + 1;
}
static inline int model_layer_group(int layer) {
    return layer + 1;
}

// Fills tensors[] for group g and returns how many; *numel gets the group's total size.
int model_group_tensors(const mt_config *c, int g, tensor_info *tensors, uint64_t *numel);
uint64_t model_group_numel(const mt_config *c, int g);
uint64_t model_param_count(const mt_config *c);

// Initial value of element i of group g: N(0, 0.02) for matrices, ones for norm weights and
// zeros for biases, as transformers initializes Llama and Qwen2. It is a pure function of
// (seed, g, i), so every optimizer rank initializes its own slice and any sharding gives the
// same model.
void model_init_slice(const mt_config *c, int g, uint64_t lo, uint64_t len, float *out);

// Pointers into one decoder layer's flat weights (or gradients): the binding of a template.
// A layer group holds its tensors in this order, at the offsets model_group_tensors() gives:
// tensors 0..8 always; with model.qkv_bias (Qwen2) the q, k and v biases follow as tensors
// 9, 10, 11, so that adding them moves no other tensor. bq, bk, bv are NULL without them.
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
    float *bq, *bk, *bv;
} layer_params;

enum { LAYER_WEIGHTS = 9 }; // tensors 0..8; the biases, when there, are 9..11

void layer_params_bind(layer_params *p, const mt_config *c, float *flat);

// The head group: final norm and, when untied, the classifier.
typedef struct {
    float *final_norm, *lm_head;
} head_params;

void head_params_bind(head_params *p, const mt_config *c, float *flat);

// RoPE's inv_freq[head_dim / 2] for c: rope_theta's plain table, rescaled when
// model.rope_scaling asks for it. The layer template takes its table from here; backend_cuda.c
// still uploads rope_inv_freq's plain one, so config.c refuses rope_scaling on CUDA until then.
void model_rope_inv_freq(const mt_config *c, float *inv_freq);

#endif
