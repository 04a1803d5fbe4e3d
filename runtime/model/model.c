#include "runtime/model/model.h"
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/base/base.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int add_tensor(tensor_info *t, int n, const char *name, uint64_t *off, int rows, int cols,
                      int init, int role) {
    uint64_t numel = (uint64_t)rows * (cols ? cols : 1);
    t[n] = (tensor_info){name, *off, numel, rows, cols, init, role, -1};
    *off += numel;
    return n + 1;
}

// E matrices of one role in turn, expert-major: expert e's at the block's start + e * rows * cols.
static int add_experts(tensor_info *t, int n, const char *name, uint64_t *off, int E, int rows,
                       int cols, int role) {
    for (int e = 0; e < E; e++) {
        n = add_tensor(t, n, name, off, rows, cols, TENSOR_NORMAL, role);
        t[n - 1].expert = e;
    }
    return n;
}

int mt_layer_is_moe(const mt_config *c, int l) {
    if (c->experts <= 0 || (l + 1) % (c->moe_every > 0 ? c->moe_every : 1)) return 0;
    for (const char *p = c->dense_layers; *p;) { // "0,5,7"
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break; // config.c has checked the list
        if (v == l) return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return 1;
}

int mt_moe_layers(const mt_config *c) {
    int n = 0;
    for (int l = 0; l < c->layers; l++) n += mt_layer_is_moe(c, l);
    return n;
}

// The hub's names for a MoE MLP's tensors (model.moe_names): router, gate, up, down.
static const char *const moe_names[][4] = {
    {"model.layers.%d.mlp.gate.weight", "model.layers.%d.mlp.experts.%e.gate_proj.weight",
     "model.layers.%d.mlp.experts.%e.up_proj.weight",
     "model.layers.%d.mlp.experts.%e.down_proj.weight"},
    {"model.layers.%d.block_sparse_moe.gate.weight",
     "model.layers.%d.block_sparse_moe.experts.%e.w1.weight",
     "model.layers.%d.block_sparse_moe.experts.%e.w3.weight",
     "model.layers.%d.block_sparse_moe.experts.%e.w2.weight"},
};

static int moe_tensors(const mt_config *c, tensor_info *t, int n, uint64_t *off) {
    const char *const *nm = moe_names[strcmp(c->moe_names, "block_sparse_moe") == 0];
    int D = c->dim, E = c->experts, F = c->moe_ffn_dim;
    n = add_tensor(t, n, nm[0], off, E, D, TENSOR_NORMAL, T_ROUTER);
    n = add_experts(t, n, nm[1], off, E, F, D, T_EXP_GATE);
    n = add_experts(t, n, nm[2], off, E, F, D, T_EXP_UP);
    return add_experts(t, n, nm[3], off, E, D, F, T_EXP_DOWN);
}

static int dense_mlp_tensors(const mt_config *c, tensor_info *t, int n, uint64_t *off) {
    int D = c->dim, F = c->ffn_dim;
    n = add_tensor(t, n, "model.layers.%d.mlp.gate_proj.weight", off, F, D, TENSOR_NORMAL,
                   T_W_GATE);
    n = add_tensor(t, n, "model.layers.%d.mlp.up_proj.weight", off, F, D, TENSOR_NORMAL, T_W_UP);
    return add_tensor(t, n, "model.layers.%d.mlp.down_proj.weight", off, D, F, TENSOR_NORMAL,
                      T_W_DOWN);
}

// What a layer adds after its MLP: q/k/v biases, q/k norms and a shared expert. Appended, not
// interleaved, so that a dense Llama layer's nine tensors keep their offsets.
static int extra_tensors(const mt_config *c, int moe, tensor_info *t, int n, uint64_t *off) {
    int hd = mt_head_dim(c), q = c->heads * hd, kv = c->kv_heads * hd, D = c->dim;
    if (c->qkv_bias) {
        n = add_tensor(t, n, "model.layers.%d.self_attn.q_proj.bias", off, q, 0, TENSOR_ZEROS,
                       T_BQ);
        n = add_tensor(t, n, "model.layers.%d.self_attn.k_proj.bias", off, kv, 0, TENSOR_ZEROS,
                       T_BK);
        n = add_tensor(t, n, "model.layers.%d.self_attn.v_proj.bias", off, kv, 0, TENSOR_ZEROS,
                       T_BV);
    }
    if (mt_qk_norm(c) != QK_NONE) {
        int all = mt_qk_norm(c) == QK_ALL;
        n = add_tensor(t, n, "model.layers.%d.self_attn.q_norm.weight", off, all ? q : hd, 0,
                       TENSOR_ONES, T_Q_NORM);
        n = add_tensor(t, n, "model.layers.%d.self_attn.k_norm.weight", off, all ? kv : hd, 0,
                       TENSOR_ONES, T_K_NORM);
    }
    if (!moe || c->shared_ffn_dim <= 0) return n;
    int S = c->shared_ffn_dim;
    n = add_tensor(t, n, "model.layers.%d.mlp.shared_expert.gate_proj.weight", off, S, D,
                   TENSOR_NORMAL, T_SH_GATE);
    n = add_tensor(t, n, "model.layers.%d.mlp.shared_expert.up_proj.weight", off, S, D,
                   TENSOR_NORMAL, T_SH_UP);
    n = add_tensor(t, n, "model.layers.%d.mlp.shared_expert.down_proj.weight", off, D, S,
                   TENSOR_NORMAL, T_SH_DOWN);
    return add_tensor(t, n, "model.layers.%d.mlp.shared_expert_gate.weight", off, 1, D,
                      TENSOR_NORMAL, T_SH_ROUTE);
}

static int layer_tensors(const mt_config *c, int layer, tensor_info *t, uint64_t *off) {
    int hd = mt_head_dim(c), q = c->heads * hd, kv = c->kv_heads * hd, D = c->dim, n = 0;
    int moe = mt_layer_is_moe(c, layer);
    n = add_tensor(t, n, "model.layers.%d.input_layernorm.weight", off, D, 0, TENSOR_ONES,
                   T_ATTN_NORM);
    n = add_tensor(t, n, "model.layers.%d.self_attn.q_proj.weight", off, q, D, TENSOR_NORMAL, T_WQ);
    n = add_tensor(t, n, "model.layers.%d.self_attn.k_proj.weight", off, kv, D, TENSOR_NORMAL,
                   T_WK);
    n = add_tensor(t, n, "model.layers.%d.self_attn.v_proj.weight", off, kv, D, TENSOR_NORMAL,
                   T_WV);
    n = add_tensor(t, n, "model.layers.%d.self_attn.o_proj.weight", off, D, q, TENSOR_NORMAL, T_WO);
    n = add_tensor(t, n, "model.layers.%d.post_attention_layernorm.weight", off, D, 0, TENSOR_ONES,
                   T_FFN_NORM);
    n = moe ? moe_tensors(c, t, n, off) : dense_mlp_tensors(c, t, n, off);
    return extra_tensors(c, moe, t, n, off);
}

int model_group_tensors(const mt_config *c, int g, tensor_info *t, uint64_t *numel) {
    uint64_t off = 0;
    int n = 0;
    if (g == 0) {
        n = add_tensor(t, n, "model.embed_tokens.weight", &off, c->vocab, c->dim, TENSOR_NORMAL,
                       T_EMBED);
    } else if (g == model_head_group(c)) {
        n = add_tensor(t, n, "model.norm.weight", &off, c->dim, 0, TENSOR_ONES, T_FINAL_NORM);
        if (!c->tied_embeddings)
            n = add_tensor(t, n, "lm_head.weight", &off, c->vocab, c->dim, TENSOR_NORMAL,
                           T_LM_HEAD);
    } else {
        n = layer_tensors(c, g - 1, t, &off);
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

uint64_t model_largest_layer(const mt_config *c) {
    uint64_t most = 0;
    for (int l = 0; l < c->layers; l++) {
        uint64_t n = model_group_numel(c, model_layer_group(l));
        most = n > most ? n : most;
    }
    return most;
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

int model_update_order(const mt_config *c, int first, int *order) {
    int groups = model_group_count(c), n = 0;
    if (model_grad_ring_depth(c))
        model_grad_order(c, order);
    else
        for (int g = 0; g < groups; g++) order[g] = g;
    for (int i = 0; i < groups; i++) // in place: n never passes i
        if (order[i] >= first) order[n++] = order[i];
    return n;
}

int model_grad_ring_depth(const mt_config *c) {
    if (strcmp(c->grad_slots, "all") == 0) return 0;
    if (strcmp(c->grad_slots, "ring") == 0 || c->clip <= 0) return MODEL_GRAD_RING_DEPTH;
    return 0;
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

void model_layer_offsets(const mt_config *c, int layer, uint64_t off[T_ROLES]) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(c, model_layer_group(layer), t, &numel);
    for (int r = 0; r < T_ROLES; r++) off[r] = UINT64_MAX;
    for (int k = n - 1; k >= 0; k--) off[t[k].role] = t[k].offset; // an expert block: expert 0's
}

void layer_params_bind(layer_params *p, const mt_config *c, int layer, float *flat) {
    uint64_t off[T_ROLES];
    model_layer_offsets(c, layer, off);
    float **slot[T_ROLES] = {[T_ATTN_NORM] = &p->attn_norm,
                             [T_WQ] = &p->wq,
                             [T_WK] = &p->wk,
                             [T_WV] = &p->wv,
                             [T_WO] = &p->wo,
                             [T_FFN_NORM] = &p->ffn_norm,
                             [T_W_GATE] = &p->w_gate,
                             [T_W_UP] = &p->w_up,
                             [T_W_DOWN] = &p->w_down,
                             [T_BQ] = &p->bq,
                             [T_BK] = &p->bk,
                             [T_BV] = &p->bv,
                             [T_Q_NORM] = &p->q_norm,
                             [T_K_NORM] = &p->k_norm,
                             [T_ROUTER] = &p->router,
                             [T_EXP_GATE] = &p->exp_gate,
                             [T_EXP_UP] = &p->exp_up,
                             [T_EXP_DOWN] = &p->exp_down,
                             [T_SH_GATE] = &p->sh_gate,
                             [T_SH_UP] = &p->sh_up,
                             [T_SH_DOWN] = &p->sh_down,
                             [T_SH_ROUTE] = &p->sh_route};
    for (int r = T_ATTN_NORM; r < T_ROLES; r++)
        *slot[r] = off[r] == UINT64_MAX ? NULL : flat + off[r];
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

// model.c's names carry "%d" for the layer and "%e" for the expert; expanded by hand, not as
// a format string.
void model_tensor_name(char *out, size_t cap, const tensor_info *t, int layer) {
    size_t n = 0;
    for (const char *p = t->name; *p && n + 1 < cap; p++) {
        if (p[0] == '%' && (p[1] == 'd' || p[1] == 'e')) {
            n += snprintf(out + n, cap - n, "%d", p[1] == 'd' ? layer : t->expert);
            p++;
        } else {
            out[n++] = *p;
        }
        if (n >= cap) n = cap - 1;
    }
    out[n < cap ? n : cap - 1] = 0;
}

uint64_t model_state_piece(void) {
    static uint64_t piece;
    if (!piece) {
        const char *knob = getenv("MT_TEST_PIECE_FLOATS");
        long long v = knob ? atoll(knob) : 0;
        uint64_t block = MT_STORAGE_ALIGN / sizeof(float);
        piece = v > 0 && (uint64_t)v < MT_STATE_PIECE ? ((uint64_t)v + block - 1) / block * block
                                                      : MT_STATE_PIECE;
    }
    return piece;
}
