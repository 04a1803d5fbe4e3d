// Softmax attention's part of a decoder layer on the CPU backend (the kind ATTN_SOFTMAX): the
// first norm, the q, k and v projections (with biases: Qwen2), qk_norm (Qwen3, OLMoE), RoPE and
// grouped-query attention over the micro-batch, with the layer's sliding window and sinks
// (gpt-oss); forward and backward side by side. The
// token-wise work runs by chunks (mt_chunk_of, as on the GPU), on full-size buffers.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer_parts.h"
#include <string.h>

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

// The micro-batch's attention: its shape, packed documents and the layer's sliding window, and
// its tensors, forward's and backward's.
static attn_args attention_args(const layer_call *k) {
    const mt_config *c = k->c;
    return (attn_args){.B = k->s->B,
                       .T = k->s->T,
                       .H = c->heads,
                       .KV = c->kv_heads,
                       .hd = mt_head_dim(c),
                       .doc_start = k->s->doc_start,
                       .window = k->kind->window};
}
// The rotation of q and k: the micro-batch's positions (packed documents restart them).
static rope_args rope_of(const layer_call *k) {
    const layer_scratch *s = k->s;
    return (rope_args){.inv_freq = s->inv_freq,
                       .scale = s->rope_scale,
                       .B = s->B,
                       .T = s->T,
                       .hd = mt_head_dim(k->c),
                       .rot = mt_rope_dim(k->c),
                       .doc_start = s->doc_start};
}

// The sinks (gpt-oss) are the layer's weights: their gradient accumulates into its gradients.
static attn_tensors attention_tensors(const layer_call *k) {
    const layer_scratch *s = k->s;
    return (attn_tensors){.q = s->q,
                          .k = s->k,
                          .v = s->v,
                          .out = s->att,
                          .lse = s->lse,
                          .dout = s->d_att,
                          .dq = s->d_q,
                          .dk = s->d_k,
                          .dv = s->d_v,
                          .sinks = k->w->sinks,
                          .dsinks = k->dw ? k->dw->sinks : NULL};
}

// q, k and v for the whole micro-batch (the first norm and projections by chunk), RoPE, and
// attention over all of it.
static void softmax_forward(const layer_call *k, int have_att) {
    const mt_config *c = k->c;
    const layer_params *w = k->w;
    layer_scratch *s = k->s;
    int B = s->B, T = s->T, n = B * T, D = c->dim, hd = mt_head_dim(c);
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    for (int t0 = 0; t0 < n; t0 += k->chunk) {
        int rows = mt_chunk_rows(n, t0, k->chunk);
        size_t d = (size_t)t0 * D;
        rmsnorm_forward(s->n1 + d, s->rstd1 + t0, k->x + d, w->attn_norm, rows, D,
                        (float)c->norm_eps);
        // biases (Qwen2) before RoPE, or NULL
        float *q = w->q_norm ? s->q_raw : s->q, *kk = w->q_norm ? s->k_raw : s->k;
        linear_forward(q + (size_t)t0 * Q, s->n1 + d, w->wq, w->bq, rows, D, Q);
        linear_forward(kk + (size_t)t0 * KV, s->n1 + d, w->wk, w->bk, rows, D, KV);
        linear_forward(s->v + (size_t)t0 * KV, s->n1 + d, w->wv, w->bv, rows, D, KV);
    }
    if (w->q_norm) qk_norm_forward(c, w, s, n);
    const rope_args r = rope_of(k);
    rope_forward(s->q, c->heads, &r);
    rope_forward(s->k, c->kv_heads, &r);
    if (!have_att) {
        const attn_args a = attention_args(k);
        const attn_tensors t = attention_tensors(k);
        attention_forward(&a, &t);
    }
}

// One chunk of the q, k, v projections' backward (d_q, d_k with RoPE undone, and d_v are their
// outputs' gradients; the bias gradients their column sums, in token order) and the first
// norm's: dx = d_h + the attention block's gradient.
static void qkv_backward(const layer_call *k, float *dx, int t0, int rows) {
    const mt_config *c = k->c;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    int D = c->dim, hd = mt_head_dim(c), Q = c->heads * hd, KV = c->kv_heads * hd;
    size_t d = (size_t)t0 * D, q = (size_t)t0 * Q, kv = (size_t)t0 * KV;
    memset(s->d_n1 + d, 0, sizeof(float) * rows * D);
    linear_backward(s->d_n1 + d, dw->wq, dw->bq, s->d_q + q, s->n1 + d, w->wq, rows, D, Q);
    linear_backward(s->d_n1 + d, dw->wk, dw->bk, s->d_k + kv, s->n1 + d, w->wk, rows, D, KV);
    linear_backward(s->d_n1 + d, dw->wv, dw->bv, s->d_v + kv, s->n1 + d, w->wv, rows, D, KV);
    memcpy(dx + d, s->d_h + d, sizeof(float) * rows * D);
    rmsnorm_backward(dx + d, dw->attn_norm, s->d_n1 + d, k->x + d, w->attn_norm, s->rstd1 + t0,
                     rows, D);
}

static void softmax_backward(const layer_call *k, float *dx) {
    const mt_config *c = k->c;
    layer_scratch *s = k->s;
    int B = s->B, T = s->T, n = B * T, hd = mt_head_dim(c);
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    memset(s->d_q, 0, sizeof(float) * n * Q);
    memset(s->d_k, 0, sizeof(float) * n * KV);
    memset(s->d_v, 0, sizeof(float) * n * KV);
    const attn_args a = attention_args(k);
    const attn_tensors t = attention_tensors(k);
    attention_backward(&a, &t);
    const rope_args r = rope_of(k);
    rope_backward(s->d_q, c->heads, &r);
    rope_backward(s->d_k, c->kv_heads, &r);
    if (k->w->q_norm) qk_norm_backward(c, k->w, k->dw, s, n);
    for (int t0 = 0; t0 < n; t0 += k->chunk)
        qkv_backward(k, dx, t0, mt_chunk_rows(n, t0, k->chunk));
}

const attn_part attn_softmax_cpu = {softmax_forward, softmax_backward};
