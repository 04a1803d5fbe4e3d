// The decoder-layer template on the CPU backend: the skeleton, norm -> attention part ->
// residual -> norm -> MLP part -> residual, with each part's functions from the row of the
// layer's kind (layer_parts.h); forward and backward side by side.
#include "runtime/engine/layer.h"
#include "runtime/engine/layer_parts.h"
#include "kernels/cpu/kernels_cpu.h"
#include "shm/syscheck.h"
#include <string.h>

static void add_into(float *dst, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

// The token-wise work runs by chunks (mt_chunk_of, as on the GPU): the same arithmetic as the CUDA
// backend's chunks, on full-size buffers. One chunk, the default at the tests' sizes, is the
// unchunked sequence of calls.

static const attn_part *const attn_parts[ATTN_KINDS] = {
    [ATTN_SOFTMAX] = &attn_softmax_cpu, [ATTN_GDN] = &attn_gdn_cpu, [ATTN_MLA] = &attn_mla_cpu};
static const mlp_part *const mlp_parts[MLP_KINDS] = {
    [MLP_DENSE] = &mlp_dense_cpu, [MLP_MOE] = &mlp_moe_cpu};

// One chunk of h = x + o(att) and out = h + mlp(norm(h)), o the attention part's projection.
static void block_forward(const layer_call *k, const mlp_part *mlp, const attn_out *o, float *out,
                          int t0, int rows) {
    const mt_model *m = &k->c->model;
    layer_scratch *s = k->s;
    int D = m->dim;
    size_t d = (size_t)t0 * D;
    linear_forward(out + d, o->in + (size_t)t0 * o->width, o->w, o->b, rows, o->width, D);
    add_into(s->h + d, k->x + d, out + d, (size_t)rows * D);
    rmsnorm_offset_forward(s->n2 + d, s->rstd2 + t0, s->h + d, k->w->ffn_norm, mt_norm_offset(m),
                           rows, D, (float)m->norm_eps);
    mlp->forward(k, out, t0, rows);
    add_into(out + d, s->h + d, out + d, (size_t)rows * D);
}

void layer_forward(const mt_config *c, int l, const layer_params *w, layer_scratch *s,
                   const float *x, float *out, int have_att) {
    const mt_layer_kind *kind = mt_layer_kind_of(&c->model, l);
    int n = s->B * s->T;
    layer_call k = {c, kind, w, NULL, s, x, mt_chunk_of(c, n)};
    const attn_part *att = attn_parts[kind->attention];
    att->forward(&k, have_att);
    const attn_out o = att->out(&k);
    for (int t0 = 0; t0 < n; t0 += k.chunk)
        block_forward(&k, mlp_parts[kind->mlp], &o, out, t0, mt_chunk_rows(n, t0, k.chunk));
}

// One chunk of the MLP block's backward and the output projection's: d_h, the residual
// stream's gradient below the MLP, and the projection input's gradient for the attention
// part's backward.
static void block_backward(const layer_call *k, const mlp_part *mlp, const attn_out *o,
                           const float *dout, int t0, int rows) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    int D = m->dim;
    size_t d = (size_t)t0 * D, rD = (size_t)rows * D, a = (size_t)t0 * o->width;
    memset(s->d_n2 + d, 0, sizeof(float) * rD);
    mlp->backward(k, dout, t0, rows);
    memcpy(s->d_h + d, dout + d, sizeof(float) * rD); // the residual path
    rmsnorm_offset_backward(s->d_h + d, dw->ffn_norm, s->d_n2 + d, s->h + d, w->ffn_norm,
                            mt_norm_offset(m), s->rstd2 + t0, rows, D);
    memset(o->d_in + a, 0, sizeof(float) * rows * o->width);
    linear_backward(o->d_in + a, o->dw, o->db, s->d_h + d, o->in + a, o->w, rows, o->width, D);
}

void layer_backward(const mt_config *c, int l, const layer_params *w, const layer_params *dw,
                    layer_scratch *s, const float *x, const float *dout, float *dx) {
    const mt_layer_kind *kind = mt_layer_kind_of(&c->model, l);
    int n = s->B * s->T;
    layer_call k = {c, kind, w, dw, s, x, mt_chunk_of(c, n)};
    const attn_part *att = attn_parts[kind->attention];
    const attn_out o = att->out(&k);
    for (int t0 = 0; t0 < n; t0 += k.chunk)
        block_backward(&k, mlp_parts[kind->mlp], &o, dout, t0, mt_chunk_rows(n, t0, k.chunk));
    att->backward(&k, dx);
}
