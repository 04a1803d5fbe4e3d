// Softmax attention's part of a decoder layer on the CPU backend (the kind ATTN_SOFTMAX): the
// first norm, the q, k and v projections (with biases: Qwen2), qk_norm (Qwen3, OLMoE), RoPE and
// grouped-query attention over the micro-batch, with the layer's sliding window and sinks
// (gpt-oss), and the output gate (Qwen3.5's attn_output_gate); forward and backward side by
// side. The token-wise work runs by chunks (mt_chunk_of, as on the GPU), on full-size buffers.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer_parts.h"
#include <math.h>
#include <string.h>

// qk_norm: RMSNorm of q and k (from q_raw, k_raw) before RoPE, over each head ("head": rows of
// head_dim) or the whole projection ("all").
static int qk_norm_width(const mt_model *m, int heads) {
    return mt_qk_norm(m) == QK_ALL ? heads * mt_head_dim(m) : mt_head_dim(m);
}

static void qk_norm_forward(const mt_model *m, const layer_params *w, layer_scratch *s, int n) {
    int wq = qk_norm_width(m, m->heads), wk = qk_norm_width(m, m->kv_heads);
    long nq = (long)n * m->heads * mt_head_dim(m) / wq,
         nk = (long)n * m->kv_heads * mt_head_dim(m) / wk;
    float eps = (float)m->norm_eps, off = mt_norm_offset(m);
    rmsnorm_offset_forward(s->q, s->rstd_q, s->q_raw, w->q_norm, off, (int)nq, wq, eps);
    rmsnorm_offset_forward(s->k, s->rstd_k, s->k_raw, w->k_norm, off, (int)nk, wk, eps);
}

// d_q, d_k: the gradients of the normalized q and k, replaced by those of q_raw and k_raw.
static void qk_norm_backward(const mt_model *m, const layer_params *w, const layer_params *dw,
                             layer_scratch *s, int n) {
    int hd = mt_head_dim(m), wq = qk_norm_width(m, m->heads), wk = qk_norm_width(m, m->kv_heads);
    size_t Q = (size_t)n * m->heads * hd, KV = (size_t)n * m->kv_heads * hd;
    float off = mt_norm_offset(m);
    float *dq = s->d_att; // free once attention's backward is done, and as large
    memset(dq, 0, sizeof(float) * Q);
    rmsnorm_offset_backward(dq, dw->q_norm, s->d_q, s->q_raw, w->q_norm, off, s->rstd_q,
                            (int)(Q / wq), wq);
    memcpy(s->d_q, dq, sizeof(float) * Q);
    float *dk = s->q_raw; // read for the last time above; KV <= Q
    memset(dk, 0, sizeof(float) * KV);
    rmsnorm_offset_backward(dk, dw->k_norm, s->d_k, s->k_raw, w->k_norm, off, s->rstd_k,
                            (int)(KV / wk), wk);
    memcpy(s->d_k, dk, sizeof(float) * KV);
}

// The micro-batch's attention: its shape, packed documents and the layer's sliding window, and
// its tensors, forward's and backward's.
static attn_args attention_args(const layer_call *k) {
    const mt_model *m = &k->c->model;
    return (attn_args){.B = k->s->B,
                       .T = k->s->T,
                       .H = m->heads,
                       .KV = m->kv_heads,
                       .hd = mt_head_dim(m),
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
                       .hd = mt_head_dim(&k->c->model),
                       .rot = mt_rope_dim(&k->c->model),
                       .doc_start = s->doc_start};
}

// The sinks (gpt-oss) are the layer's weights: their gradient accumulates into its gradients.
// The output gate (attn_output_gate): q_proj's rows are, per head, the query's hd then the
// gate's hd (transformers' view(..., heads, 2 hd) then chunk). The chunk's [rows, 2Q] split into
// q [rows, Q] and the gate's logits [rows, Q] (join: the gradients back into [rows, 2Q]).
static void gate_split(float *q, float *gate, const float *qg, int rows, int heads, int hd) {
    size_t per = (size_t)hd * sizeof(float);
    for (long r = 0; r < (long)rows * heads; r++) {
        memcpy(q + r * hd, qg + 2 * r * hd, per);
        memcpy(gate + r * hd, qg + (2 * r + 1) * hd, per);
    }
}
static void gate_join(float *qg, const float *q, const float *gate, long rows, int heads, int hd) {
    size_t per = (size_t)hd * sizeof(float);
    for (long r = 0; r < rows * heads; r++) {
        memcpy(qg + 2 * r * hd, q + r * hd, per);
        memcpy(qg + (2 * r + 1) * hd, gate + r * hd, per);
    }
}

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// att_g = att * sigmoid(gate) over the micro-batch's n x Q values.
static void gate_forward(layer_scratch *s, size_t count) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) s->att_g[i] = s->att[i] * sigmoidf(s->gate_q[i]);
}

// From d_att_g: d_att (attention's dout) and the gate logits' gradient, written into gate_q
// (whose logits are read for the last time here).
static void gate_backward(layer_scratch *s, size_t count) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) {
        float sg = sigmoidf(s->gate_q[i]), d = s->d_att_g[i];
        s->d_att[i] = d * sg;
        s->gate_q[i] = d * s->att[i] * sg * (1.0f - sg);
    }
}

// The chunk's q projection: straight into q (or q_raw before qk_norm), or with the output gate
// through qg, split into the query and the gate's logits.
static void q_forward(const layer_call *k, float *q, int t0, int rows) {
    const mt_model *m = &k->c->model;
    layer_scratch *s = k->s;
    int D = m->dim, hd = mt_head_dim(m), Q = m->heads * hd;
    const float *n1 = s->n1 + (size_t)t0 * D;
    if (!m->attn_output_gate) {
        linear_forward(q + (size_t)t0 * Q, n1, k->w->wq, k->w->bq, rows, D, Q);
        return;
    }
    float *qg = s->qg + (size_t)t0 * 2 * Q;
    linear_forward(qg, n1, k->w->wq, NULL, rows, D, 2 * Q); // config.c: no bias with the gate
    gate_split(q + (size_t)t0 * Q, s->gate_q + (size_t)t0 * Q, qg, rows, m->heads, hd);
}

// q, k and v for the whole micro-batch (the first norm and projections by chunk), RoPE, and
// attention over all of it; with the output gate, att_g.
static void softmax_forward(const layer_call *k, int have_att) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w;
    layer_scratch *s = k->s;
    int B = s->B, T = s->T, n = B * T, D = m->dim, hd = mt_head_dim(m);
    int Q = m->heads * hd, KV = m->kv_heads * hd;
    for (int t0 = 0; t0 < n; t0 += k->chunk) {
        int rows = mt_chunk_rows(n, t0, k->chunk);
        size_t d = (size_t)t0 * D;
        rmsnorm_offset_forward(s->n1 + d, s->rstd1 + t0, k->x + d, w->attn_norm, mt_norm_offset(m),
                               rows, D, (float)m->norm_eps);
        // biases (Qwen2) before RoPE, or NULL
        float *q = w->q_norm ? s->q_raw : s->q, *kk = w->q_norm ? s->k_raw : s->k;
        q_forward(k, q, t0, rows);
        linear_forward(kk + (size_t)t0 * KV, s->n1 + d, w->wk, w->bk, rows, D, KV);
        linear_forward(s->v + (size_t)t0 * KV, s->n1 + d, w->wv, w->bv, rows, D, KV);
    }
    if (w->q_norm) qk_norm_forward(m, w, s, n);
    const rope_args r = rope_of(k);
    rope_forward(s->q, m->heads, &r);
    rope_forward(s->k, m->kv_heads, &r);
    if (!have_att) {
        const attn_args a = attention_args(k);
        const attn_tensors t = layer_attn_tensors(k);
        attention_forward(&a, &t);
    }
    if (m->attn_output_gate) gate_forward(s, (size_t)n * Q);
}

// One chunk of the q, k, v projections' backward (d_q, d_k with RoPE undone, and d_v are their
// outputs' gradients; the bias gradients their column sums, in token order) and the first
// norm's: dx = d_h + the attention block's gradient.
static void qkv_backward(const layer_call *k, float *dx, int t0, int rows) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    int D = m->dim, hd = mt_head_dim(m), Q = m->heads * hd, KV = m->kv_heads * hd;
    size_t d = (size_t)t0 * D, q = (size_t)t0 * Q, kv = (size_t)t0 * KV;
    memset(s->d_n1 + d, 0, sizeof(float) * rows * D);
    if (m->attn_output_gate) { // qg, free in the backward, takes the projection's gradient
        float *dqg = s->qg + 2 * q;
        gate_join(dqg, s->d_q + q, s->gate_q + q, rows, m->heads, hd);
        linear_backward(s->d_n1 + d, dw->wq, NULL, dqg, s->n1 + d, w->wq, rows, D, 2 * Q);
    } else {
        linear_backward(s->d_n1 + d, dw->wq, dw->bq, s->d_q + q, s->n1 + d, w->wq, rows, D, Q);
    }
    linear_backward(s->d_n1 + d, dw->wk, dw->bk, s->d_k + kv, s->n1 + d, w->wk, rows, D, KV);
    linear_backward(s->d_n1 + d, dw->wv, dw->bv, s->d_v + kv, s->n1 + d, w->wv, rows, D, KV);
    memcpy(dx + d, s->d_h + d, sizeof(float) * rows * D);
    rmsnorm_offset_backward(dx + d, dw->attn_norm, s->d_n1 + d, k->x + d, w->attn_norm,
                            mt_norm_offset(m), s->rstd1 + t0, rows, D);
}

static void softmax_backward(const layer_call *k, float *dx) {
    const mt_model *m = &k->c->model;
    layer_scratch *s = k->s;
    int B = s->B, T = s->T, n = B * T, hd = mt_head_dim(m);
    int Q = m->heads * hd, KV = m->kv_heads * hd;
    memset(s->d_q, 0, sizeof(float) * n * Q);
    memset(s->d_k, 0, sizeof(float) * n * KV);
    memset(s->d_v, 0, sizeof(float) * n * KV);
    if (m->attn_output_gate) gate_backward(s, (size_t)n * Q);
    const attn_args a = attention_args(k);
    const attn_tensors t = layer_attn_tensors(k);
    attention_backward(&a, &t);
    const rope_args r = rope_of(k);
    rope_backward(s->d_q, m->heads, &r);
    rope_backward(s->d_k, m->kv_heads, &r);
    if (k->w->q_norm) qk_norm_backward(m, k->w, k->dw, s, n);
    for (int t0 = 0; t0 < n; t0 += k->chunk)
        qkv_backward(k, dx, t0, mt_chunk_rows(n, t0, k->chunk));
}

// o_proj, on attention's output or, with the output gate, on att_g.
static attn_out softmax_out(const layer_call *k) {
    layer_scratch *s = k->s;
    int gated = k->c->model.attn_output_gate;
    return (attn_out){.in = gated ? s->att_g : s->att,
                      .d_in = gated ? s->d_att_g : s->d_att,
                      .w = k->w->wo,
                      .b = k->w->bo,
                      .dw = k->dw ? k->dw->wo : NULL,
                      .db = k->dw ? k->dw->bo : NULL,
                      .width = k->c->model.heads * mt_head_dim(&k->c->model)};
}

const attn_part attn_softmax_cpu = {softmax_forward, softmax_backward, softmax_out};
