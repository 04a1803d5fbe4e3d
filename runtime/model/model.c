#include "runtime/model/model.h"
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/base/base.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int add_tensor(tensor_info *t, int n, const char *name, uint64_t *off, int rows, int cols,
                      int init, int role) {
    uint64_t numel = (uint64_t)rows * (cols ? cols : 1);
    t[n] = (tensor_info){name, *off, numel, rows, cols, init, role, -1, HUB_PLAIN, 0};
    *off += numel;
    return n + 1;
}

// model.moe_every and model.dense_layers ("0,5,7", checked by config.c) as transformers reads
// decoder_sparse_step and mlp_only_layers.
static int moe_by_fields(const mt_model *m, int l) {
    if (m->experts <= 0 || (l + 1) % (m->moe_every > 0 ? m->moe_every : 1)) return 0;
    for (const char *p = m->dense_layers; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v == l) return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return 1;
}

static int is_type(const char *p, size_t len, const char *name) {
    return len == strlen(name) && strncmp(p, name, len) == 0;
}

// The entry of model.layer_types at p: its length; p moves past it and its comma.
static size_t next_type(const char **p, const char **entry) {
    size_t len = strcspn(*p, ",");
    *entry = *p;
    *p += len + ((*p)[len] == ',');
    return len;
}

int model_check_layer_types(const mt_model *m, char *why, size_t n) {
    if (!m->layer_types[0]) return 0;
    int count = 1;
    for (const char *p = m->layer_types; *p; p++) count += *p == ',';
    if (count != m->layers)
        return snprintf(why, n, "lists %d layers; model.layers = %d", count, m->layers), -1;
    const char *p = m->layer_types, *e;
    for (int l = 0; l < count; l++) {
        size_t len = next_type(&p, &e);
        int sliding = is_type(e, len, "sliding_attention");
        int linear = is_type(e, len, "linear_attention");
        if (!sliding && !linear && !is_type(e, len, "full_attention"))
            return snprintf(why, n,
                            "layer %d is \"%.*s\": not full_attention, sliding_attention or "
                            "linear_attention",
                            l, (int)len, e),
                   -1;
        if (linear && !(m->linear_k_heads > 0 && m->linear_v_heads > 0 && m->linear_k_dim > 0 &&
                        m->linear_v_dim > 0))
            return snprintf(why, n,
                            "layer %d is linear_attention, but model.linear_k_heads, "
                            "linear_v_heads, linear_k_dim and linear_v_dim are not all set",
                            l),
                   -1;
        if (sliding && m->sliding_window <= 0)
            return snprintf(why, n, "layer %d is sliding_attention, but model.sliding_window is 0",
                            l),
                   -1;
    }
    return 0;
}

// A layer slides when the model has a window and layer_types (checked by config.c) says so, or
// is empty: then every layer does.
void model_describe_layers(mt_model *m) {
    int n = m->layers > 0 && m->layers <= MT_MAX_LAYERS ? m->layers : 0; // else out of range
    const char *p = m->layer_types, *e;
    for (int l = 0; l < n; l++) {
        size_t len = next_type(&p, &e);
        int slides =
            m->sliding_window > 0 && (!m->layer_types[0] || is_type(e, len, "sliding_attention"));
        m->layer_kind[l] = (mt_layer_kind){
            .attention = is_type(e, len, "linear_attention") ? ATTN_GDN
                         : m->mla_kv_rank > 0                ? ATTN_MLA
                                                             : ATTN_SOFTMAX,
            .mlp = moe_by_fields(m, l) ? MLP_MOE : MLP_DENSE,
            .sinks = !!m->attn_sinks,
            .window = slides ? m->sliding_window : 0,
        };
    }
    m->n_described = n;
}

const mt_layer_kind *mt_layer_kind_of(const mt_model *m, int l) {
    if (m->n_described != m->layers || l < 0 || l >= m->layers)
        mt_die("internal: layer %d's kinds asked of a model description of %d layers, %d described",
               l, m->layers, m->n_described);
    return &m->layer_kind[l];
}

int mt_moe_layers(const mt_model *m) {
    int n = 0;
    for (int l = 0; l < m->layers; l++) n += mt_layer_is_moe(m, l);
    return n;
}

int mt_gdn_layers(const mt_model *m) {
    int n = 0;
    for (int l = 0; l < m->layers; l++) n += mt_layer_kind_of(m, l)->attention == ATTN_GDN;
    return n;
}

// The layer roles of roles.h, as data: each row's Hugging Face names, when it is present and
// its shape.
typedef struct {
    int role, present;
    const char *name, *bsm_name; // bsm_name: under moe_names "block_sparse_moe" (NULL: name)
    const char *oss_name;        // under moe_names "gpt_oss" (NULL: name), laid out as oss_layout
    int oss_layout, rows, cols, init;
} role_row;

static const role_row role_rows[] = {
#define MT_ROLE_ROW(field, role, present, name, bsm, oss, oss_layout, rows, cols, init)            \
    {role, present, name, bsm, oss, oss_layout, rows, cols, init},
    MT_LAYER_ROLES(MT_ROLE_ROW)
#undef MT_ROLE_ROW
};

static int role_present(const mt_model *m, int layer, int present) {
    int moe = mt_layer_is_moe(m, layer);
    int softmax = mt_layer_kind_of(m, layer)->attention == ATTN_SOFTMAX;
    switch (present) {
    case ROLE_SOFTMAX:
        return softmax;
    case ROLE_GDN:
        return mt_layer_kind_of(m, layer)->attention == ATTN_GDN;
    case ROLE_DENSE_MLP:
        return !moe;
    case ROLE_MOE:
    case ROLE_EXPERTS:
        return moe;
    case ROLE_QKV_BIAS:
        return softmax && m->qkv_bias;
    case ROLE_QK_NORM:
        return softmax && mt_qk_norm(m) != QK_NONE;
    case ROLE_SHARED:
        return moe && m->shared_ffn_dim > 0;
    case ROLE_O_BIAS:
        return softmax && m->o_bias;
    case ROLE_SINKS:
        return softmax && mt_layer_kind_of(m, layer)->sinks;
    case ROLE_ROUTER_BIAS:
        return moe && m->router_bias;
    case ROLE_EXPERT_BIAS:
        return moe && m->expert_bias;
    case ROLE_MLA:
        return mt_layer_kind_of(m, layer)->attention == ATTN_MLA;
    case ROLE_MLA_Q:
        return mt_layer_kind_of(m, layer)->attention == ATTN_MLA && m->mla_q_rank <= 0;
    case ROLE_MLA_QLORA:
        return mt_layer_kind_of(m, layer)->attention == ATTN_MLA && m->mla_q_rank > 0;
    case ROLE_ROUTER_CORR:
        return moe && m->router_correction;
    case ROLE_SHARED_GATE:
        return moe && m->shared_ffn_dim > 0 && m->shared_gate;
    }
    return 1; // ROLE_ALWAYS
}

static int dim_of(const mt_model *m, int dim) {
    int hd = mt_head_dim(m), all = mt_qk_norm(m) == QK_ALL;
    switch (dim) {
    case DIM_ONE:
        return 1;
    case DIM_D:
        return m->dim;
    case DIM_Q:
        return m->heads * hd;
    case DIM_KV:
        return m->kv_heads * hd;
    case DIM_F:
        return m->ffn_dim;
    case DIM_E:
        return m->experts;
    case DIM_FE:
        return m->moe_ffn_dim;
    case DIM_S:
        return m->shared_ffn_dim;
    case DIM_QN:
        return all ? m->heads * hd : hd;
    case DIM_KN:
        return all ? m->kv_heads * hd : hd;
    case DIM_H:
        return m->heads;
    case DIM_QW:
        return m->heads * hd * (m->attn_output_gate ? 2 : 1);
    case DIM_LA_CONV:
        return 2 * m->linear_k_heads * m->linear_k_dim + m->linear_v_heads * m->linear_v_dim;
    case DIM_LA_V:
        return m->linear_v_heads * m->linear_v_dim;
    case DIM_LA_H:
        return m->linear_v_heads;
    case DIM_LA_DV:
        return m->linear_v_dim;
    case DIM_LA_TAPS:
        return m->linear_conv;
    case DIM_MLA_QR:
        return m->mla_q_rank;
    case DIM_MLA_KVR:
        return m->mla_kv_rank;
    case DIM_MLA_KVA:
        return m->mla_kv_rank + m->mla_rope_dim;
    case DIM_MLA_Q:
        return m->heads * (m->mla_nope_dim + m->mla_rope_dim);
    case DIM_MLA_KVB:
        return m->heads * (m->mla_nope_dim + m->mla_v_dim);
    case DIM_MLA_O:
        return m->heads * m->mla_v_dim;
    }
    return 0; // DIM_NONE
}

// A family's own hub names for some roles (roles.h's X(role, name, layout) lists): t's hub name
// and layout when its role is one of them.
typedef struct {
    int role;
    const char *name;
    int layout;
} hub_rename;
#define MT_RENAME_ROW(role, name, layout) {role, name, layout},
static const hub_rename gdn_fused[] = {MT_GDN_FUSED_NAMES(MT_RENAME_ROW)}; // Qwen3-Next's
static const hub_rename deepseek_shared[] = {MT_DEEPSEEK_SHARED_NAMES(MT_RENAME_ROW)};
#undef MT_RENAME_ROW

static void rename_by(const hub_rename *rows, size_t n, tensor_info *t) {
    for (size_t i = 0; i < n; i++)
        if (rows[i].role == t->role) t->name = rows[i].name, t->hub_layout = rows[i].layout;
}

// transformers 5's fused experts (model.hub_experts_fused) bear gpt-oss's names: the layout of
// each, from gpt-oss's.
static int fused_expert_layout(int oss_layout) {
    return oss_layout == HUB_GATE_UP_EVEN  ? HUB_FUSED_GATE
           : oss_layout == HUB_GATE_UP_ODD ? HUB_FUSED_UP
                                           : HUB_FUSED_DOWN;
}

// The layer's tensors in the role table's order, each expert block E matrices in turn.
static int layer_tensors(const mt_model *m, int layer, tensor_info *t, uint64_t *off) {
    int bsm = m->moe_names == MOE_NAMES_BLOCK_SPARSE, oss = m->moe_names == MOE_NAMES_GPT_OSS;
    int n = 0;
    for (size_t i = 0; i < sizeof role_rows / sizeof *role_rows; i++) {
        const role_row *r = &role_rows[i];
        if (!role_present(m, layer, r->present)) continue;
        const char *name = bsm && r->bsm_name ? r->bsm_name : r->name;
        if (oss && r->oss_name) name = r->oss_name;
        int per_expert = r->present == ROLE_EXPERTS || r->present == ROLE_EXPERT_BIAS;
        for (int e = 0; e < (per_expert ? m->experts : 1); e++) {
            n = add_tensor(t, n, name, off, dim_of(m, r->rows), dim_of(m, r->cols), r->init,
                           r->role);
            if (per_expert) t[n - 1].expert = e;
            // the layout goes with the gpt_oss name, or with the role's only name
            if (oss || !r->oss_name) t[n - 1].hub_layout = r->oss_layout;
            if (m->hub_gdn_fused)
                rename_by(gdn_fused, sizeof gdn_fused / sizeof *gdn_fused, &t[n - 1]);
            if (m->moe_names == MOE_NAMES_DEEPSEEK)
                rename_by(deepseek_shared, sizeof deepseek_shared / sizeof *deepseek_shared,
                          &t[n - 1]);
            if (m->hub_experts_fused && r->present == ROLE_EXPERTS) {
                t[n - 1].name = r->oss_name; // gpt-oss's names, another layout
                t[n - 1].hub_layout = fused_expert_layout(r->oss_layout);
            }
        }
    }
    return n;
}

int model_group_tensors(const mt_model *m, int g, tensor_info *t, uint64_t *numel) {
    uint64_t off = 0;
    int n = 0;
    if (g == 0) {
        n = add_tensor(t, n, "model.embed_tokens.weight", &off, m->vocab, m->dim, TENSOR_NORMAL,
                       T_EMBED);
    } else if (g == model_head_group(m)) {
        n = add_tensor(t, n, "model.norm.weight", &off, m->dim, 0, TENSOR_NORM, T_FINAL_NORM);
        if (!m->tied_embeddings)
            n = add_tensor(t, n, "lm_head.weight", &off, m->vocab, m->dim, TENSOR_NORMAL,
                           T_LM_HEAD);
    } else {
        n = layer_tensors(m, g - 1, t, &off);
    }
    for (int k = 0; k < n; k++)
        t[k].lm_nested = m->hub_lm_nested && strncmp(t[k].name, "model.", 6) == 0;
    *numel = off;
    return n;
}

static int role_frozen(int role) {
#define MT_FROZEN_CASE(r) case r:
    switch (role) {
        MT_FROZEN_ROLES(MT_FROZEN_CASE)
        return 1;
    }
#undef MT_FROZEN_CASE
    return 0;
}

int model_frozen_spans(const mt_model *m, int g, uint64_t lo[MODEL_MAX_FROZEN],
                       uint64_t hi[MODEL_MAX_FROZEN]) {
    static _Thread_local tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(m, g, t, &numel), spans = 0;
    for (int i = 0; i < n; i++) {
        if (!role_frozen(t[i].role)) continue;
        if (spans == MODEL_MAX_FROZEN) mt_die("group %d: more than %d frozen tensors", g, spans);
        lo[spans] = t[i].offset, hi[spans] = t[i].offset + t[i].numel, spans++;
    }
    return spans;
}

uint64_t model_frozen_run(const uint64_t *lo, const uint64_t *hi, int spans, uint64_t at,
                          uint64_t end, int *frozen) {
    *frozen = 0;
    for (int i = 0; i < spans; i++) {
        if (at >= hi[i]) continue;
        if (at >= lo[i]) {
            *frozen = 1;
            return hi[i] < end ? hi[i] : end;
        }
        return lo[i] < end ? lo[i] : end; // trained up to the next frozen span
    }
    return end;
}

uint64_t model_frozen_numel(const mt_model *m, int layer) {
    uint64_t lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN], n = 0;
    int spans = model_frozen_spans(m, model_layer_group(layer), lo, hi);
    for (int i = 0; i < spans; i++) n += hi[i] - lo[i];
    return n;
}

uint64_t model_frozen_base(const mt_model *m, int layer) {
    uint64_t n = 0;
    for (int l = 0; l < layer; l++) n += model_frozen_numel(m, l);
    return n;
}

// Where the frozen tensor at element `off` of its group lies in the layer's frozen image, from
// the group's frozen spans; -1 where no span starts there.
static int64_t image_at(uint64_t off, const uint64_t *lo, const uint64_t *hi, int spans) {
    uint64_t at = 0;
    for (int i = 0; i < spans; at += hi[i] - lo[i], i++)
        if (lo[i] == off) return (int64_t)at;
    return -1;
}

int64_t model_frozen_at(const mt_model *m, int layer, int role) {
    uint64_t lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN], off[T_ROLES];
    if (!role_frozen(role)) return -1;
    model_layer_offsets(m, layer, off);
    int spans = model_frozen_spans(m, model_layer_group(layer), lo, hi);
    return image_at(off[role], lo, hi, spans);
}

uint64_t model_group_numel(const mt_model *m, int g) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    model_group_tensors(m, g, t, &numel);
    return numel;
}

uint64_t model_lead_numel(const mt_model *m, int groups) {
    uint64_t n = 0;
    for (int g = 0; g < groups; g++) n += model_group_numel(m, g);
    return n;
}

uint64_t model_largest_layer(const mt_model *m) {
    uint64_t most = 0;
    for (int l = 0; l < m->layers; l++) {
        uint64_t n = model_group_numel(m, model_layer_group(l));
        most = n > most ? n : most;
    }
    return most;
}

uint64_t model_param_count(const mt_model *m) {
    uint64_t total = 0;
    for (int g = 0; g < model_group_count(m); g++) total += model_group_numel(m, g);
    return total;
}

void model_grad_order(const mt_model *m, int *order) {
    int n = 0;
    order[n++] = model_head_group(m);
    for (int l = m->layers - 1; l >= 0; l--) order[n++] = model_layer_group(l);
    order[n++] = 0;
}

int model_update_order(const mt_config *c, int first, int *order) {
    int groups = model_group_count(&c->model), n = 0;
    if (model_grad_ring_depth(c))
        model_grad_order(&c->model, order);
    else
        for (int g = 0; g < groups; g++) order[g] = g;
    for (int i = 0; i < groups; i++) // in place: n never passes i
        if (order[i] >= first) order[n++] = order[i];
    return n;
}

int model_ring_by_urgency(const mt_config *c, int nodes) {
    if (!model_grad_ring_depth(c) || c->storage_grads || c->storage_adam) return 0;
    if (c->shard_across_nodes && nodes > 1) return 0;
    const char *order = getenv("MT_RING_ORDER");
    return !order || strcmp(order, "arrival") != 0;
}

int model_grad_ring_depth(const mt_config *c) {
    if (c->grad_slots == GRAD_SLOTS_ALL) return 0;
    if (c->grad_slots == GRAD_SLOTS_RING || c->clip <= 0) return MODEL_GRAD_RING_DEPTH;
    return 0;
}

// Box-Muller on two uniforms drawn from a counter-based hash: no state to carry or shard.
static float normal_at(uint64_t seed, int g, uint64_t i) {
    uint64_t key = splitmix64(seed ^ splitmix64(((uint64_t)g << 48) ^ i));
    double u1 = ((key >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (splitmix64(key) >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

// Element i of group g under init (TENSOR_NORM resolved): a pure function of (seed, g, i).
static float init_value(const mt_config *c, int init, int g, uint64_t i) {
    switch (init) {
    case TENSOR_ONES:
        return 1.0f;
    case TENSOR_ZEROS:
        return 0.0f;
    case TENSOR_A_LOG: // U(1, 16) from the normal draw's CDF, logged
        return logf(1.0f + 15.0f * 0.5f * erfcf(-normal_at(c->seed, g, i) / sqrtf(2.0f)));
    }
    return 0.02f * normal_at(c->seed, g, i);
}

void model_init_slice(const mt_config *c, int g, uint64_t lo, uint64_t len, float *out) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(&c->model, g, t, &numel);
    for (int k = 0; k < n; k++) {
        uint64_t a = t[k].offset > lo ? t[k].offset : lo;
        uint64_t b = t[k].offset + t[k].numel < lo + len ? t[k].offset + t[k].numel : lo + len;
        // Each value depends on (seed, group, index) alone: threads give the same bits, and a 7B
        // start no longer waits a minute on one core per optimizer rank.
        int init = t[k].init;
        if (init == TENSOR_NORM) init = c->model.norm_zero_centered ? TENSOR_ZEROS : TENSOR_ONES;
#pragma omp parallel for schedule(static)
        for (uint64_t i = a; i < b; i++) out[i - lo] = init_value(c, init, g, i);
    }
}

void model_layer_offsets(const mt_model *m, int layer, uint64_t off[T_ROLES]) {
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(m, model_layer_group(layer), t, &numel);
    for (int r = 0; r < T_ROLES; r++) off[r] = UINT64_MAX;
    for (int k = n - 1; k >= 0; k--) off[t[k].role] = t[k].offset; // an expert block: expert 0's
}

void layer_params_bind(layer_params *r, const mt_model *m, int layer, float *base) {
    uint64_t off[T_ROLES];
    model_layer_offsets(m, layer, off);
    MT_LAYER_ROLES(MT_ROLE_BIND)
}

void layer_params_bind_frozen(layer_params *r, const mt_model *m, int layer, float *image) {
    uint64_t lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN], off[T_ROLES];
    model_layer_offsets(m, layer, off);
    int spans = model_frozen_spans(m, model_layer_group(layer), lo, hi);
    int64_t at;
#define MT_BIND_FROZEN(field, role, ...)                                                           \
    if (role_frozen(role) && (at = image_at(off[role], lo, hi, spans)) >= 0) r->field = image + at;
    MT_LAYER_ROLES(MT_BIND_FROZEN)
#undef MT_BIND_FROZEN
}

void head_params_bind(head_params *p, const mt_model *m, float *flat) {
    p->final_norm = flat;
    p->lm_head = m->tied_embeddings ? NULL : flat + m->dim;
}

float model_rope_inv_freq(const mt_model *m, float *inv_freq) {
    if (m->rope_type == ROPE_YARN) {
        const rope_yarn yarn = {.factor = m->rope_factor,
                                .orig_ctx = m->rope_original_max_pos,
                                .beta_fast = m->rope_beta_fast,
                                .beta_slow = m->rope_beta_slow,
                                .attention_factor = m->rope_attention_factor,
                                .mscale = m->rope_mscale,
                                .mscale_all_dim = m->rope_mscale_all_dim,
                                .truncate = m->rope_truncate};
        return (float)rope_yarn_inv_freq(inv_freq, mt_rope_dim(m), (float)m->rope_theta, &yarn);
    }
    rope_inv_freq(inv_freq, mt_rope_dim(m), (float)m->rope_theta);
    if (m->rope_type == ROPE_LLAMA3)
        rope_llama3_scale(inv_freq, mt_rope_dim(m), m->rope_factor, m->rope_low_freq_factor,
                          m->rope_high_freq_factor, m->rope_original_max_pos);
    return 1.0f;
}

float model_mla_softmax_scale(const mt_model *model) {
    double scale = pow(mt_mla_qk_dim(model), -0.5);
    if (model->rope_type != ROPE_PLAIN && model->rope_mscale_all_dim) {
        double m = rope_yarn_mscale(model->rope_factor, model->rope_mscale_all_dim);
        scale = scale * m * m;
    }
    return (float)scale;
}

// model.c's names carry "%d" for the layer and "%e" for the expert; expanded by hand, not as
// a format string.
void model_tensor_name(char *out, size_t cap, const tensor_info *t, int layer) {
    size_t n = 0;
    const char *p = t->name;
    if (t->lm_nested) { // "model." -> "model.language_model."
        n = (size_t)snprintf(out, cap, "model.language_model.");
        p += strlen("model.");
        if (n >= cap) n = cap - 1;
    }
    for (; *p && n + 1 < cap; p++) {
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

const char *mt_choice_name(const char *const *names, int v) {
    for (int i = 0; names[i]; i++)
        if (i == v) return names[i];
    return "?";
}

int mt_choice_index(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
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
