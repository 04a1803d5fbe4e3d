// The CPU backend: the fp32 OpenMP reference. Fetched weights are fp32 (the master rounded to
// bf16, as the GPU gets it), so it computes exactly what the CUDA backend approximates.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/backend.h"
#include "runtime/engine/host_buffers.h"
#include "runtime/engine/layer.h"
#include "runtime/plan/plan.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

struct backend {
    const mt_config *c;
    int B, T;
    layer_scratch *scratch;
    layer_scratch **kept; // kept activations: one whole working set per slot
    int n_kept;
    float **att, **lse; // kept attention outputs (keep_attention)
    int n_att;
    float *tmp, *xf, *dxf, *rstd_f;
    int32_t *inputs, *targets;
    int32_t *doc_start; // [M * n] with data.pack "documents"; packed: this batch has them
    int packed;
    double loss;
    // MoE: per micro-batch and MoE layer (moe_index), each expert's tokens and probability
    // sums; per micro-batch the load-balancing loss's gradient on the probabilities
    int *moe_index, moe_layers, aux_micro;
    int32_t *counts;
    float *psum, *aux_g;
    float *frozen;      // the layers' frozen images (set_frozen)
    int64_t *frozen_at; // 1 + where layer l's image lies in frozen; 0: none came
    moe_route_io route;
    double aux;
    mt_buffer_shape shape;
    size_t allocated; // the working sets' bytes since the start (the lists' and the slots')
};

static void *cpu_alloc(backend *b, size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) mt_die("out of memory: %zu MiB for the compute rank's buffers", bytes >> 20);
    return p;
}
static void cpu_release(backend *b, void *p) {
    free(p);
}
static void cpu_zero(backend *b, void *p, size_t bytes) {
    memset(p, 0, bytes);
}
static void cpu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}

static int tokens(const backend *b) {
    return b->B * b->T;
}

static void cpu_load_tokens(backend *b, const int32_t *inputs, const int32_t *targets,
                            const int32_t *doc_start, int count) {
    memcpy(b->inputs, inputs, sizeof(int32_t) * count * tokens(b));
    memcpy(b->targets, targets, sizeof(int32_t) * count * tokens(b));
    b->packed = doc_start != NULL;
    if (doc_start) memcpy(b->doc_start, doc_start, sizeof(int32_t) * count * tokens(b));
}

// Micro-batch m's document starts for the layer's RoPE and attention, or NULL.
static layer_scratch *for_micro(backend *b, layer_scratch *s, int m) {
    s->doc_start = b->packed ? b->doc_start + (size_t)m * tokens(b) : NULL;
    return s;
}

static void cpu_embed_forward(backend *b, float *out, const void *table, int m) {
    embedding_forward(out, b->inputs + (size_t)m * tokens(b), table, tokens(b), b->c->model.dim);
}

static void cpu_embed_backward(backend *b, float *dtable, const float *dout, int m) {
    embedding_backward(dtable, dout, b->inputs + (size_t)m * tokens(b), tokens(b), b->c->model.dim);
}

// A slot is a whole working set, gradient scratch included: simple, and the CPU reference
// only keeps what fits in an eighth of the free memory.
static int cpu_keep_reserve(backend *b, int wanted) {
    const mt_config *c = b->c;
    size_t slot = plan_kept_pass_bytes(c, 0); // layer_scratch_new's bytes
    size_t spare = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE) / 8;
    size_t fit = spare / slot;
    b->n_kept = wanted < (long)fit ? wanted : (int)fit;
    b->kept = cpu_alloc(b, sizeof *b->kept * (b->n_kept + 1));
    for (int i = 0; i < b->n_kept; i++) {
        b->kept[i] = layer_scratch_new(c, b->B, b->T);
        b->allocated += b->kept[i]->bytes;
    }
    return b->n_kept;
}

static layer_scratch *internals(backend *b, int keep) {
    return keep >= 0 ? b->kept[keep] : b->scratch;
}

// Each slot: MT_CPU_ATTENTION_SLOT's buffers (buffers.h).
#define SLOT_I(o, type, name, count) (void **)(1 ? &(o)->name[i] : (type **)0),

static int cpu_attention_reserve(backend *b, int slots) {
    mt_buffer_list l;
    mt_buffers_cpu_attention_slot(&l, &b->shape);
    b->att = cpu_alloc(b, sizeof(float *) * (slots + 1));
    b->lse = cpu_alloc(b, sizeof(float *) * (slots + 1));
    for (int i = 0; i < slots; i++) {
        void **parts[] = {MT_CPU_ATTENTION_SLOT(SLOT_I, b, _)};
        b->allocated += host_buffers_new(&l, HOST_SLOTS(parts), "a kept attention output");
    }
    return b->n_att = slots;
}

// A pass with an attention slot runs in the working set with the slot's output in place of
// the working set's own (put back after).
static layer_scratch *with_attention(backend *b, layer_scratch *s, att_ref att) {
    if (att.slot >= 0) s->att = b->att[att.slot], s->lse = b->lse[att.slot];
    return s;
}
static void put_back(layer_scratch *s, float *att, float *lse) {
    s->att = att, s->lse = lse;
}

// Where MoE layer l's pass over micro-batch m records its routing, and the load-balancing
// gradient it takes in its backward; NULL for a dense layer.
static moe_route_io *route_of(backend *b, int l, int m) {
    int i = b->moe_index ? b->moe_index[l] : -1, E = b->c->model.experts;
    if (i < 0) return NULL;
    size_t at = ((size_t)m * b->moe_layers + i) * E;
    b->route = (moe_route_io){b->counts + at, b->psum + at, b->aux_g + (size_t)m * E};
    return &b->route;
}

// Layer l's weights in fetched buffer w, its frozen tensors from its image where it came.
static void bind_weights(backend *b, layer_params *p, int l, const void *w) {
    const mt_model *m = &b->c->model;
    layer_params_bind(p, m, l, (float *)w);
    if (b->frozen_at && b->frozen_at[l] > 0)
        layer_params_bind_frozen(p, m, l, b->frozen + b->frozen_at[l] - 1);
}

static void cpu_set_frozen(backend *b, int l, const float *image) {
    const mt_model *m = &b->c->model;
    uint64_t base = model_frozen_base(m, l);
    memcpy(b->frozen + base, image, model_frozen_numel(m, l) * sizeof(float));
    b->frozen_at[l] = 1 + (int64_t)base; // bound every layer call: located once here
}

static void cpu_layer_forward(backend *b, int l, int m, const void *w, const float *x, float *out,
                              int keep, att_ref att) {
    layer_params p;
    bind_weights(b, &p, l, w);
    if (keep >= 0) att = ATT_NONE; // a kept pass holds its own
    layer_scratch *s = for_micro(b, internals(b, keep), m);
    s->route = route_of(b, l, m);
    float *own_att = s->att, *own_lse = s->lse;
    layer_forward(b->c, l, &p, with_attention(b, s, att), x, out, att.slot >= 0 && att.ready);
    put_back(s, own_att, own_lse);
}

static void cpu_layer_backward(backend *b, int l, int m, const void *w, float *dw, const float *x,
                               const float *dout, float *dx, int keep, att_ref att) {
    layer_params p, dp;
    bind_weights(b, &p, l, w);
    layer_params_bind(&dp, &b->c->model, l, dw);
    if (keep >= 0) {
        layer_scratch *k = for_micro(b, b->kept[keep], m);
        k->route = route_of(b, l, m);
        layer_backward(b->c, l, &p, &dp, k, x, dout, dx);
        return;
    }
    layer_scratch *s = for_micro(b, b->scratch, m);
    s->route = route_of(b, l, m);
    float *own_att = s->att, *own_lse = s->lse;
    layer_forward(b->c, l, &p, with_attention(b, s, att), x, b->tmp, att.slot >= 0);
    layer_backward(b->c, l, &p, &dp, s, x, dout, dx);
    put_back(s, own_att, own_lse);
}

// Micro-batch m's load-balancing loss, from its MoE layers' routing, and its gradient.
static void moe_aux_of(backend *b, int m, float daux) {
    const mt_model *model = &b->c->model;
    if (!b->moe_layers) return;
    size_t at = (size_t)m * b->moe_layers * model->experts;
    b->aux += moe_aux_loss(b->aux_g + (size_t)m * model->experts, b->counts + at, b->psum + at,
                           b->moe_layers, tokens(b), model->experts, daux);
    if (m + 1 > b->aux_micro) b->aux_micro = m + 1;
}

static double cpu_take_aux(backend *b, int64_t *load) {
    if (load)
        moe_sum_load(load, b->counts, b->aux_micro, (size_t)b->moe_layers * b->c->model.experts);
    double aux = b->aux;
    b->aux = 0, b->aux_micro = 0;
    return aux;
}

// MT_CPU_MOE_STATS's buffers (buffers.h), with MoE layers.
static void moe_stats_new(backend *b) {
    const mt_model *m = &b->c->model;
    b->moe_layers = mt_moe_layers(m);
    if (!b->moe_layers) return;
    mt_buffer_list l;
    mt_buffers_cpu_moe_stats(&l, &b->shape);
    void **slots[] = {MT_CPU_MOE_STATS(MT_BUFFER_SLOT, b, _)};
    b->allocated += host_buffers_new(&l, HOST_SLOTS(slots), "the routing statistics");
    for (int l = 0, i = 0; l < m->layers; l++) b->moe_index[l] = mt_layer_is_moe(m, l) ? i++ : -1;
}

static void cpu_head(backend *b, const void *head_w, const void *cls_w, float *head_g, float *cls_g,
                     const float *x, float *dx, int m, float dloss, float daux) {
    const mt_model *model = &b->c->model;
    int n = tokens(b);
    moe_aux_of(b, m, daux);
    head_params hp, gp;
    head_params_bind(&hp, model, (float *)head_w);
    const int32_t *targets = b->targets + (size_t)m * n;
    rmsnorm_offset_forward(b->xf, b->rstd_f, x, hp.final_norm, mt_norm_offset(model), n, model->dim,
                           (float)model->norm_eps);
    b->loss += classifier_forward(b->xf, cls_w, targets, n, model->dim, model->vocab);
    if (dloss == 0) return;
    head_params_bind(&gp, model, head_g);
    memset(b->dxf, 0, sizeof(float) * n * model->dim);
    classifier_backward(b->dxf, cls_g, b->xf, cls_w, targets, n, model->dim, model->vocab, dloss);
    memset(dx, 0, sizeof(float) * n * model->dim);
    rmsnorm_offset_backward(dx, gp.final_norm, b->dxf, x, hp.final_norm, mt_norm_offset(model),
                            b->rstd_f, n, model->dim);
}

static double cpu_take_loss(backend *b) {
    double l = b->loss;
    b->loss = 0;
    return l;
}

static void cpu_set_shape(backend *b, int B, int T) {
    b->B = b->scratch->B = B;
    b->T = b->scratch->T = T;
}

static void cpu_last_logits(backend *b, const void *head_w, const void *cls_w, const float *x,
                            int len, float *logits) {
    const mt_model *m = &b->c->model;
    head_params hp;
    head_params_bind(&hp, m, (float *)head_w);
    const float *last = x + (size_t)(len - 1) * m->dim;
    rmsnorm_offset_forward(b->xf, b->rstd_f, last, hp.final_norm, mt_norm_offset(m), 1, m->dim,
                           (float)m->norm_eps);
    linear_forward(logits, b->xf, cls_w, NULL, 1, m->dim, m->vocab);
}

static void cpu_destroy(backend *b) {
    layer_scratch_free(b->scratch);
    for (int i = 0; i < b->n_kept; i++) layer_scratch_free(b->kept[i]);
    free(b->kept);
    for (int i = 0; i < b->n_att; i++) {
        void **parts[] = {MT_CPU_ATTENTION_SLOT(SLOT_I, b, _)};
        host_buffers_free(HOST_SLOTS(parts));
    }
    free(b->att), free(b->lse);
    void **own[] = {MT_CPU_BACKEND(MT_BUFFER_SLOT, b, _) MT_CPU_MOE_STATS(MT_BUFFER_SLOT, b, _)};
    host_buffers_free(HOST_SLOTS(own));
    free(b);
}

static size_t cpu_device_bytes(backend *b) {
    return 0;
}
static size_t cpu_allocated_bytes(backend *b) {
    return b->allocated;
}
static size_t cpu_device_free(backend *b) {
    return SIZE_MAX;
}
// On the CPU the copies are done when the call returns: nothing to wait for.
static void cpu_to_host(backend *b, void *dst, const void *src, size_t bytes, int slot) {
    memcpy(dst, src, bytes);
}
static void cpu_slot_wait(backend *b, int slot) {}

// The layer's working set, then MT_CPU_BACKEND's buffers and the routing statistics
// (buffers.h).
backend *backend_cpu_new(const mt_config *c) {
    backend *b = cpu_alloc(NULL, sizeof *b);
    b->c = c;
    b->B = c->micro_batch, b->T = c->seq_len;
    mt_buffer_shape_of(&b->shape, c, b->B, b->T);
    b->scratch = layer_scratch_new(c, b->B, b->T);
    b->allocated = b->scratch->bytes;
    mt_buffer_list l;
    mt_buffers_cpu_backend(&l, &b->shape);
    void **slots[] = {MT_CPU_BACKEND(MT_BUFFER_SLOT, b, _)};
    b->allocated += host_buffers_new(&l, HOST_SLOTS(slots), "the compute rank's buffers");
    moe_stats_new(b);
    return b;
}

// What a fetch brings for master p: rounded to bf16, kept in fp32.
static void cpu_weights_of(backend *b, void *w, const float *p, size_t n) {
    float *out = w;
    for (size_t i = 0; i < n; i++) out[i] = bf16_to_float(bf16_from_float(p[i]));
}

// The optimizer ranks' own routine, then the rounding a fetch does.
static void cpu_adamw(backend *b, float *p, float *m, float *v, void *w, const float *g, size_t n,
                      const adamw_params *hp) {
    adamw_update(p, m, v, NULL, g, n, hp);
    cpu_weights_of(b, w, p, n);
}

const backend_ops *backend_cpu_ops(void) {
    static const backend_ops ops = {
        "cpu",
        4,
        0,
        cpu_alloc,
        cpu_release,
        cpu_zero,
        cpu_copy,
        cpu_copy,
        cpu_copy,
        cpu_load_tokens,
        cpu_embed_forward,
        cpu_embed_backward,
        cpu_keep_reserve,
        cpu_attention_reserve,
        cpu_layer_forward,
        cpu_layer_backward,
        cpu_head,
        cpu_take_loss,
        cpu_take_aux,
        cpu_set_shape,
        cpu_last_logits,
        cpu_destroy,
        cpu_device_bytes,
        cpu_device_free,
        cpu_alloc,
        cpu_release,
        cpu_to_host,
        cpu_to_host,
        cpu_slot_wait,
        cpu_adamw,
        cpu_weights_of,
        cpu_set_frozen,
        cpu_allocated_bytes,
    };
    return &ops;
}
