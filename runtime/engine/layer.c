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

static const attn_part *const attn_parts[ATTN_KINDS] = {[ATTN_SOFTMAX] = &attn_softmax_cpu};
static const mlp_part *const mlp_parts[MLP_KINDS] = {
    [MLP_DENSE] = &mlp_dense_cpu, [MLP_MOE] = &mlp_moe_cpu};

// One chunk of h = x + o(att) and out = h + mlp(norm(h)).
static void block_forward(const layer_call *k, const mlp_part *mlp, float *out, int t0, int rows) {
    const mt_config *c = k->c;
    layer_scratch *s = k->s;
    int D = c->dim, Q = c->heads * mt_head_dim(c);
    size_t d = (size_t)t0 * D;
    linear_forward(out + d, s->att + (size_t)t0 * Q, k->w->wo, k->w->bo, rows, Q, D);
    add_into(s->h + d, k->x + d, out + d, (size_t)rows * D);
    rmsnorm_forward(s->n2 + d, s->rstd2 + t0, s->h + d, k->w->ffn_norm, rows, D,
                    (float)c->norm_eps);
    mlp->forward(k, out, t0, rows);
    add_into(out + d, s->h + d, out + d, (size_t)rows * D);
}

void layer_forward(const mt_config *c, int l, const layer_params *w, layer_scratch *s,
                   const float *x, float *out, int have_att) {
    const mt_layer_kind *kind = mt_layer_kind_of(c, l);
    int n = s->B * s->T;
    layer_call k = {c, kind, w, NULL, s, x, mt_chunk_of(c, n)};
    attn_parts[kind->attention]->forward(&k, have_att);
    for (int t0 = 0; t0 < n; t0 += k.chunk)
        block_forward(&k, mlp_parts[kind->mlp], out, t0, mt_chunk_rows(n, t0, k.chunk));
}

// One chunk of the MLP block's backward and the output projection's: d_h, the residual
// stream's gradient below the MLP, and d_att for the attention part's backward.
static void block_backward(const layer_call *k, const mlp_part *mlp, const float *dout, int t0,
                           int rows) {
    const mt_config *c = k->c;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    int D = c->dim, Q = c->heads * mt_head_dim(c);
    size_t d = (size_t)t0 * D, rD = (size_t)rows * D;
    memset(s->d_n2 + d, 0, sizeof(float) * rD);
    mlp->backward(k, dout, t0, rows);
    memcpy(s->d_h + d, dout + d, sizeof(float) * rD); // the residual path
    rmsnorm_backward(s->d_h + d, dw->ffn_norm, s->d_n2 + d, s->h + d, w->ffn_norm, s->rstd2 + t0,
                     rows, D);
    memset(s->d_att + (size_t)t0 * Q, 0, sizeof(float) * rows * Q);
    linear_backward(s->d_att + (size_t)t0 * Q, dw->wo, dw->bo, s->d_h + d, s->att + (size_t)t0 * Q,
                    w->wo, rows, Q, D);
}

void layer_backward(const mt_config *c, int l, const layer_params *w, const layer_params *dw,
                    layer_scratch *s, const float *x, const float *dout, float *dx) {
    const mt_layer_kind *kind = mt_layer_kind_of(c, l);
    int n = s->B * s->T;
    layer_call k = {c, kind, w, dw, s, x, mt_chunk_of(c, n)};
    for (int t0 = 0; t0 < n; t0 += k.chunk)
        block_backward(&k, mlp_parts[kind->mlp], dout, t0, mt_chunk_rows(n, t0, k.chunk));
    attn_parts[kind->attention]->backward(&k, dx);
}
