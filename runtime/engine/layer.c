#include "runtime/engine/layer.h"
#include "runtime/engine/host_buffers.h"
#include "kernels/cpu/kernels_cpu.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <string.h>

// The buffers are MT_CPU_LAYER's (buffers.h).
layer_scratch *layer_scratch_new(const mt_config *c, int B, int T) {
    layer_scratch *s = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    s->B = B, s->T = T;
    mt_buffer_shape shape;
    mt_buffer_shape_of(&shape, c, B, T);
    mt_buffer_list l;
    mt_buffers_cpu_layer(&l, &shape);
    void **slots[] = {MT_CPU_LAYER(MT_BUFFER_SLOT, s, _)};
    s->bytes = host_buffers_new(&l, HOST_SLOTS(slots), "the layer working set");
    model_rope_inv_freq(c, s->inv_freq);
    if (c->experts > 0) {
        s->moe = moe_scratch_new(c, B * T);
        s->bytes += moe_scratch_bytes(s->moe);
    }
    return s;
}

void layer_scratch_free(layer_scratch *s) {
    if (!s) return;
    void **slots[] = {MT_CPU_LAYER(MT_BUFFER_SLOT, s, _)};
    host_buffers_free(HOST_SLOTS(slots));
    moe_scratch_free(s->moe);
    free(s);
}

static void add_into(float *dst, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

// The token-wise work runs by chunks (mt_chunk_of, as on the GPU): the same arithmetic as the
// CUDA backend's chunks, on full-size buffers. One chunk, the default at the tests' sizes, is
// the unchunked sequence of calls.

// qk_norm: RMSNorm of q and k (from q_raw, k_raw) before RoPE, over each head ("head": rows of
// head_dim) or the whole projection ("all").
static int qk_norm_width(const mt_config *c, int heads) {
    return mt_qk_norm(c) == QK_ALL ? heads * mt_head_dim(c) : mt_head_dim(c);
}

static void qk_norm_forward(const mt_config *c, const layer_params *w, layer_scratch *s, int n) {
    int wq = qk_norm_width(c, c->heads), wk = qk_norm_width(c, c->kv_heads);
    long nq = (long)n * c->heads * mt_head_dim(c) / wq,
         nk = (long)n * c->kv_heads * mt_head_dim(c) / wk;
    float eps = (float)c->norm_eps;
    rmsnorm_forward(s->q, s->rstd_q, s->q_raw, w->q_norm, (int)nq, wq, eps);
    rmsnorm_forward(s->k, s->rstd_k, s->k_raw, w->k_norm, (int)nk, wk, eps);
}

// d_q, d_k: the gradients of the normalized q and k, replaced by those of q_raw and k_raw.
static void qk_norm_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                             layer_scratch *s, int n) {
    int hd = mt_head_dim(c), wq = qk_norm_width(c, c->heads), wk = qk_norm_width(c, c->kv_heads);
    size_t Q = (size_t)n * c->heads * hd, KV = (size_t)n * c->kv_heads * hd;
    float *dq = s->d_att; // free once attention's backward is done, and as large
    memset(dq, 0, sizeof(float) * Q);
    rmsnorm_backward(dq, dw->q_norm, s->d_q, s->q_raw, w->q_norm, s->rstd_q, (int)(Q / wq), wq);
    memcpy(s->d_q, dq, sizeof(float) * Q);
    float *dk = s->q_raw; // read for the last time above; KV <= Q
    memset(dk, 0, sizeof(float) * KV);
    rmsnorm_backward(dk, dw->k_norm, s->d_k, s->k_raw, w->k_norm, s->rstd_k, (int)(KV / wk), wk);
    memcpy(s->d_k, dk, sizeof(float) * KV);
}

// q, k and v for the whole micro-batch (the first norm and projections by chunk), RoPE, and
// attention over all of it.
static void attention_part(const mt_config *c, const layer_params *w, layer_scratch *s,
                           const float *x, int chunk, int have_att) {
    int B = s->B, T = s->T, n = B * T, D = c->dim, hd = mt_head_dim(c);
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    for (int t0 = 0; t0 < n; t0 += chunk) {
        int rows = mt_chunk_rows(n, t0, chunk);
        size_t d = (size_t)t0 * D;
        rmsnorm_forward(s->n1 + d, s->rstd1 + t0, x + d, w->attn_norm, rows, D, (float)c->norm_eps);
        // biases (Qwen2) before RoPE, or NULL
        float *q = w->q_norm ? s->q_raw : s->q, *k = w->q_norm ? s->k_raw : s->k;
        linear_forward(q + (size_t)t0 * Q, s->n1 + d, w->wq, w->bq, rows, D, Q);
        linear_forward(k + (size_t)t0 * KV, s->n1 + d, w->wk, w->bk, rows, D, KV);
        linear_forward(s->v + (size_t)t0 * KV, s->n1 + d, w->wv, w->bv, rows, D, KV);
    }
    if (w->q_norm) qk_norm_forward(c, w, s, n);
    rope_forward(s->q, s->inv_freq, B, T, c->heads, hd, s->doc_start);
    rope_forward(s->k, s->inv_freq, B, T, c->kv_heads, hd, s->doc_start);
    if (!have_att)
        attention_forward(s->att, s->lse, s->q, s->k, s->v, B, T, c->heads, c->kv_heads, hd,
                          s->doc_start);
}

// One chunk of h = x + o(att) and out = h + down(swiglu(gate(n2), up(n2))).
static void mlp_forward(const mt_config *c, const layer_params *w, layer_scratch *s, const float *x,
                        float *out, int t0, int rows) {
    int D = c->dim, Q = c->heads * mt_head_dim(c), F = c->ffn_dim;
    size_t d = (size_t)t0 * D, f = (size_t)t0 * F;
    linear_forward(out + d, s->att + (size_t)t0 * Q, w->wo, NULL, rows, Q, D);
    add_into(s->h + d, x + d, out + d, (size_t)rows * D);
    rmsnorm_forward(s->n2 + d, s->rstd2 + t0, s->h + d, w->ffn_norm, rows, D, (float)c->norm_eps);
    if (w->router) {
        moe_mlp_forward(c, w, s->moe, s->route, s->n2 + d, out + d, t0, rows);
        add_into(out + d, s->h + d, out + d, (size_t)rows * D);
        return;
    }
    linear_forward(s->gate + f, s->n2 + d, w->w_gate, NULL, rows, D, F);
    linear_forward(s->up + f, s->n2 + d, w->w_up, NULL, rows, D, F);
    swiglu_forward(s->act + f, s->gate + f, s->up + f, (long)rows * F);
    linear_forward(out + d, s->act + f, w->w_down, NULL, rows, F, D);
    add_into(out + d, s->h + d, out + d, (size_t)rows * D);
}

void layer_forward(const mt_config *c, const layer_params *w, layer_scratch *s, const float *x,
                   float *out, int have_att) {
    int n = s->B * s->T, chunk = mt_chunk_of(c, n);
    attention_part(c, w, s, x, chunk, have_att);
    for (int t0 = 0; t0 < n; t0 += chunk)
        mlp_forward(c, w, s, x, out, t0, mt_chunk_rows(n, t0, chunk));
}

static void mlp_norm_and_wo_backward(const mt_config *c, const layer_params *w,
                                     const layer_params *dw, layer_scratch *s, const float *dout,
                                     int t0, int rows);

// One chunk of the MLP block's backward and the output projection's: d_h, the residual
// stream's gradient below the MLP, and d_att for the attention backward.
static void mlp_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                         layer_scratch *s, const float *dout, int t0, int rows) {
    int D = c->dim, F = c->ffn_dim;
    size_t d = (size_t)t0 * D, f = (size_t)t0 * F, rD = (size_t)rows * D, rF = (size_t)rows * F;
    memset(s->d_n2 + d, 0, sizeof(float) * rD);
    if (w->router) {
        moe_mlp_backward(c, w, dw, s->moe, s->route, s->n2 + d, dout + d, s->d_n2 + d, t0, rows);
        mlp_norm_and_wo_backward(c, w, dw, s, dout, t0, rows);
        return;
    }
    memset(s->d_act + f, 0, sizeof(float) * rF);
    linear_backward(s->d_act + f, dw->w_down, NULL, dout + d, s->act + f, w->w_down, rows, F, D);
    memset(s->d_gate + f, 0, sizeof(float) * rF);
    memset(s->d_up + f, 0, sizeof(float) * rF);
    swiglu_backward(s->d_gate + f, s->d_up + f, s->d_act + f, s->gate + f, s->up + f, (long)rF);
    linear_backward(s->d_n2 + d, dw->w_gate, NULL, s->d_gate + f, s->n2 + d, w->w_gate, rows, D, F);
    linear_backward(s->d_n2 + d, dw->w_up, NULL, s->d_up + f, s->n2 + d, w->w_up, rows, D, F);
    mlp_norm_and_wo_backward(c, w, dw, s, dout, t0, rows);
}

// Below the MLP of one chunk (d_n2 at hand): the second norm's backward, the residual path and
// the output projection's, into d_h and d_att.
static void mlp_norm_and_wo_backward(const mt_config *c, const layer_params *w,
                                     const layer_params *dw, layer_scratch *s, const float *dout,
                                     int t0, int rows) {
    int D = c->dim, Q = c->heads * mt_head_dim(c);
    size_t d = (size_t)t0 * D, rD = (size_t)rows * D;
    memcpy(s->d_h + d, dout + d, sizeof(float) * rD); // the residual path
    rmsnorm_backward(s->d_h + d, dw->ffn_norm, s->d_n2 + d, s->h + d, w->ffn_norm, s->rstd2 + t0,
                     rows, D);
    memset(s->d_att + (size_t)t0 * Q, 0, sizeof(float) * rows * Q);
    linear_backward(s->d_att + (size_t)t0 * Q, dw->wo, NULL, s->d_h + d, s->att + (size_t)t0 * Q,
                    w->wo, rows, Q, D);
}

// One chunk of the q, k, v projections' backward (d_q, d_k with RoPE undone, and d_v are their
// outputs' gradients; the bias gradients their column sums, in token order) and the first
// norm's: dx = d_h + the attention block's gradient.
static void qkv_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                         layer_scratch *s, const float *x, float *dx, int t0, int rows) {
    int D = c->dim, hd = mt_head_dim(c), Q = c->heads * hd, KV = c->kv_heads * hd;
    size_t d = (size_t)t0 * D, q = (size_t)t0 * Q, kv = (size_t)t0 * KV;
    memset(s->d_n1 + d, 0, sizeof(float) * rows * D);
    linear_backward(s->d_n1 + d, dw->wq, dw->bq, s->d_q + q, s->n1 + d, w->wq, rows, D, Q);
    linear_backward(s->d_n1 + d, dw->wk, dw->bk, s->d_k + kv, s->n1 + d, w->wk, rows, D, KV);
    linear_backward(s->d_n1 + d, dw->wv, dw->bv, s->d_v + kv, s->n1 + d, w->wv, rows, D, KV);
    memcpy(dx + d, s->d_h + d, sizeof(float) * rows * D);
    rmsnorm_backward(dx + d, dw->attn_norm, s->d_n1 + d, x + d, w->attn_norm, s->rstd1 + t0, rows,
                     D);
}

void layer_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                    layer_scratch *s, const float *x, const float *dout, float *dx) {
    int B = s->B, T = s->T, n = B * T, hd = mt_head_dim(c);
    int Q = c->heads * hd, KV = c->kv_heads * hd, chunk = mt_chunk_of(c, n);
    for (int t0 = 0; t0 < n; t0 += chunk)
        mlp_backward(c, w, dw, s, dout, t0, mt_chunk_rows(n, t0, chunk));
    memset(s->d_q, 0, sizeof(float) * n * Q);
    memset(s->d_k, 0, sizeof(float) * n * KV);
    memset(s->d_v, 0, sizeof(float) * n * KV);
    attention_backward(s->d_q, s->d_k, s->d_v, s->d_att, s->att, s->lse, s->q, s->k, s->v, B, T,
                       c->heads, c->kv_heads, hd, s->doc_start);
    rope_backward(s->d_q, s->inv_freq, B, T, c->heads, hd, s->doc_start);
    rope_backward(s->d_k, s->inv_freq, B, T, c->kv_heads, hd, s->doc_start);
    if (w->q_norm) qk_norm_backward(c, w, dw, s, n);
    for (int t0 = 0; t0 < n; t0 += chunk)
        qkv_backward(c, w, dw, s, x, dx, t0, mt_chunk_rows(n, t0, chunk));
}
