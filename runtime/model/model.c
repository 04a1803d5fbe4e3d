#include "runtime/model/model.h"
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/base/base.h"
#include <math.h>
#include <string.h>

static int add_tensor(tensor_info *t, int n, const char *name, uint64_t *off, int rows, int cols,
                      int init) {
    uint64_t numel = (uint64_t)rows * (cols ? cols : 1);
    t[n] = (tensor_info){name, *off, numel, rows, cols, init};
    *off += numel;
    return n + 1;
}

static int layer_tensors(const mt_config *c, tensor_info *t, uint64_t *off) {
    int hd = mt_head_dim(c), q = c->heads * hd, kv = c->kv_heads * hd, n = 0;
    n = add_tensor(t, n, "model.layers.%d.input_layernorm.weight", off, c->dim, 0, TENSOR_ONES);
    n = add_tensor(t, n, "model.layers.%d.self_attn.q_proj.weight", off, q, c->dim, TENSOR_NORMAL);
    n = add_tensor(t, n, "model.layers.%d.self_attn.k_proj.weight", off, kv, c->dim, TENSOR_NORMAL);
    n = add_tensor(t, n, "model.layers.%d.self_attn.v_proj.weight", off, kv, c->dim, TENSOR_NORMAL);
    n = add_tensor(t, n, "model.layers.%d.self_attn.o_proj.weight", off, c->dim, q, TENSOR_NORMAL);
    n = add_tensor(t, n, "model.layers.%d.post_attention_layernorm.weight", off, c->dim, 0,
                   TENSOR_ONES);
    n = add_tensor(t, n, "model.layers.%d.mlp.gate_proj.weight", off, c->ffn_dim, c->dim,
                   TENSOR_NORMAL);
    n = add_tensor(t, n, "model.layers.%d.mlp.up_proj.weight", off, c->ffn_dim, c->dim,
                   TENSOR_NORMAL);
    n = add_tensor(t, n, "model.layers.%d.mlp.down_proj.weight", off, c->dim, c->ffn_dim,
                   TENSOR_NORMAL);
    if (!c->qkv_bias) return n;
    // Appended, not interleaved: the nine weights keep their indices and offsets.
    n = add_tensor(t, n, "model.layers.%d.self_attn.q_proj.bias", off, q, 0, TENSOR_ZEROS);
    n = add_tensor(t, n, "model.layers.%d.self_attn.k_proj.bias", off, kv, 0, TENSOR_ZEROS);
    n = add_tensor(t, n, "model.layers.%d.self_attn.v_proj.bias", off, kv, 0, TENSOR_ZEROS);
    return n;
}

int model_group_tensors(const mt_config *c, int g, tensor_info *t, uint64_t *numel) {
    uint64_t off = 0;
    int n = 0;
    if (g == 0) {
        n = add_tensor(t, n, "model.embed_tokens.weight", &off, c->vocab, c->dim, TENSOR_NORMAL);
    } else if (g == model_head_group(c)) {
        n = add_tensor(t, n, "model.norm.weight", &off, c->dim, 0, TENSOR_ONES);
        if (!c->tied_embeddings)
            n = add_tensor(t, n, "lm_head.weight", &off, c->vocab, c->dim, TENSOR_NORMAL);
    } else {
        n = layer_tensors(c, t, &off);
    }
    *numel = off;
    return n;
}

uint64_t model_group_numel(const mt_config *c, int g) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    model_group_tensors(c, g, t, &numel);
    return numel;
}

uint64_t model_param_count(const mt_config *c) {
    uint64_t total = 0;
    for (int g = 0; g < model_group_count(c); g++) total += model_group_numel(c, g);
    return total;
}

void model_grad_order(const mt_config *c, int *order) {
    int n = 0;
    order[n++] = model_head_group(c);
    for (int l = c->layers - 1; l >= 0; l--) order[n++] = model_layer_group(l);
    order[n++] = 0;
}

int model_grad_ring_depth(const mt_config *c) {
    if (strcmp(c->grad_slots, "all") == 0) return 0;
    if (strcmp(c->grad_slots, "ring") == 0 || c->clip <= 0) return MODEL_GRAD_RING_DEPTH;
    return 0;
}

int model_grad_host_ring(const mt_config *c) {
    int ring = model_grad_ring_depth(c);
    return ring ? ring : c->storage_grads ? MODEL_GRAD_RING_DEPTH : 0;
}

// Box-Muller on two uniforms drawn from a counter-based hash: no state to carry or shard.
static float normal_at(uint64_t seed, int g, uint64_t i) {
    uint64_t key = splitmix64(seed ^ splitmix64(((uint64_t)g << 48) ^ i));
    double u1 = ((key >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (splitmix64(key) >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void model_init_slice(const mt_config *c, int g, uint64_t lo, uint64_t len, float *out) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(c, g, t, &numel);
    for (int k = 0; k < n; k++) {
        uint64_t a = t[k].offset > lo ? t[k].offset : lo;
        uint64_t b = t[k].offset + t[k].numel < lo + len ? t[k].offset + t[k].numel : lo + len;
        // Each value depends on (seed, group, index) alone: threads give the same bits, and a 7B
        // start no longer waits a minute on one core per optimizer rank.
#pragma omp parallel for schedule(static)
        for (uint64_t i = a; i < b; i++)
            out[i - lo] = t[k].init == TENSOR_ONES    ? 1.0f
                          : t[k].init == TENSOR_ZEROS ? 0.0f
                                                      : 0.02f * normal_at(c->seed, g, i);
    }
}

void layer_params_bind(layer_params *p, const mt_config *c, float *flat) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    model_group_tensors(c, model_layer_group(0), t, &numel);
    float **slots[] = {&p->attn_norm, &p->wq,   &p->wk,     &p->wv, &p->wo, &p->ffn_norm,
                       &p->w_gate,    &p->w_up, &p->w_down, &p->bq, &p->bk, &p->bv};
    int n = LAYER_WEIGHTS + (c->qkv_bias ? 3 : 0);
    for (int k = 0; k < (int)(sizeof slots / sizeof *slots); k++)
        *slots[k] = k < n ? flat + t[k].offset : NULL;
}

void head_params_bind(head_params *p, const mt_config *c, float *flat) {
    p->final_norm = flat;
    p->lm_head = c->tied_embeddings ? NULL : flat + c->dim;
}

void model_rope_inv_freq(const mt_config *c, float *inv_freq) {
    rope_inv_freq(inv_freq, mt_head_dim(c), (float)c->rope_theta);
    if (strcmp(c->rope_type, "llama3") == 0)
        rope_llama3_scale(inv_freq, mt_head_dim(c), c->rope_factor, c->rope_low_freq_factor,
                          c->rope_high_freq_factor, c->rope_original_max_pos);
}

// model.c's names carry "%d" for the layer; expanded by hand, not as a format string.
void model_tensor_name(char *out, size_t cap, const char *pattern, int layer) {
    const char *p = strstr(pattern, "%d");
    if (!p)
        snprintf(out, cap, "%s", pattern);
    else
        snprintf(out, cap, "%.*s%d%s", (int)(p - pattern), pattern, layer, p + 2);
}
