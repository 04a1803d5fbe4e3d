// Softmax attention's part of a decoder layer on the GPU (the kind ATTN_SOFTMAX): the first
// norm, the q, k and v projections (with biases: Qwen2), qk_norm (Qwen3, OLMoE), RoPE and flash
// attention over the micro-batch (with gpt-oss's sinks: a learned logit per head in each
// softmax, its gradient into the layer's fp32 gradients); forward and backward side by side. The
// projections run a chunk of the micro-batch at a time (batch.seq_chunk), RoPE and attention over
// all of it.
#include "runtime/engine/layer_parts_cuda.h"

// out = in . w^T (+ bias) over `rows` tokens: the q, k and v projections.
static void projection(backend *b, bf16 *out, const bf16 *in, const bf16 *w, const bf16 *bias,
                       int rows, int ic, int oc) {
    cuda_linear_forward(b->gemm, out, 0, 0, in, w, rows, ic, oc, b->s);
    if (bias) cuda_bias_forward(out, bias, rows, oc, b->s);
}

// Micro-batch m's document starts (data.pack "documents"), or NULL: one document a row, also
// where packing found no second document in any row of it (all starts 0: the same bits).
static const int32_t *doc_starts(const backend *b, int m) {
    return b->doc_start && b->has_docs[m] ? b->doc_start + (size_t)m * tokens(b) : NULL;
}

// Micro-batch m's attention: its shape, packed documents and the layer's sliding window.
static attn_args attention_args(const backend *b, int l, int m) {
    const mt_config *c = b->c;
    return (attn_args){.B = b->B,
                       .T = b->T,
                       .H = c->heads,
                       .KV = c->kv_heads,
                       .hd = mt_head_dim(c),
                       .doc_start = doc_starts(b, m),
                       .window = mt_layer_kind_of(c, l)->window};
}

// qk_norm's rows: a head's head_dim ("head"), or a token's whole projection ("all").
static int qk_width(const mt_config *c, int heads) {
    return mt_qk_norm(c) == QK_ALL ? heads * mt_head_dim(c) : mt_head_dim(c);
}

static void qk_norm_forward(backend *b, const layer_w *w, layer_saved *a) {
    const mt_config *c = b->c;
    long nq = (long)tokens(b) * c->heads * mt_head_dim(c), nk = nq / c->heads * c->kv_heads;
    int wq = qk_width(c, c->heads), wk = qk_width(c, c->kv_heads);
    float eps = (float)c->norm_eps;
    cuda_rmsnorm_forward(a->q, b->rstd_q, b->q_raw, w->q_norm, (int)(nq / wq), wq, eps, b->s);
    cuda_rmsnorm_forward(a->k, b->rstd_k, b->k_raw, w->k_norm, (int)(nk / wk), wk, eps, b->s);
}

// dq, dk (bf16, in place): the normalized q's and k's gradients become q_raw's and k_raw's.
static void qk_norm_backward(backend *b, const layer_w *w, const layer_g *g, bf16 *dq, bf16 *dk) {
    const mt_config *c = b->c;
    long nq = (long)tokens(b) * c->heads * mt_head_dim(c), nk = nq / c->heads * c->kv_heads;
    struct {
        bf16 *d;
        long n;
        int width;
        const float *raw, *rstd;
        const bf16 *w;
        float *dw;
    } parts[] = {{dq, nq, qk_width(c, c->heads), b->q_raw, b->rstd_q, w->q_norm, g->q_norm},
                 {dk, nk, qk_width(c, c->kv_heads), b->k_raw, b->rstd_k, w->k_norm, g->k_norm}};
    for (int i = 0; i < 2; i++) {
        float *dout = (float *)b->qk_scratch, *dx = dout + nq; // two [tokens, Q] fp32 halves
        cuda_bf16_to_float(dout, parts[i].d, parts[i].n, b->s);
        cu_zero(b, dx, sizeof(float) * parts[i].n);
        cuda_rmsnorm_backward(dx, parts[i].dw, dout, parts[i].raw, parts[i].w, parts[i].rstd,
                              (int)(parts[i].n / parts[i].width), parts[i].width, b->norm_qk, b->s);
        cuda_float_to_bf16(parts[i].d, dx, parts[i].n, b->s);
    }
}

// The rotation of q and k, positions restarting at the documents' starts ds (or NULL).
static rope_args rope_of(const backend *b, const int32_t *ds) {
    return (rope_args){.inv_freq = b->inv_freq,
                       .scale = b->rope_scale,
                       .B = b->B,
                       .T = b->T,
                       .hd = mt_head_dim(b->c),
                       .rot = mt_rope_dim(b->c),
                       .doc_start = ds};
}

// Attention's inputs and output for micro-batch m: q, k, v from the first norm chunk by chunk,
// then RoPE and (unless its output is at hand) attention over every token.
static void attention_part(backend *b, int l, int m, const layer_w *w, const float *x,
                           layer_saved *a, int run_attention) {
    const mt_config *c = b->c;
    int D = c->dim, hd = mt_head_dim(c), Q = c->heads * hd, KV = c->kv_heads * hd;
    cudaStream_t s = b->s;
    FOR_CHUNKS(b, t0, rows) {
        cuda_rmsnorm_forward(b->n1, b->rstd1, x + (size_t)t0 * D, w->attn_norm, rows, D,
                             (float)c->norm_eps, s);
        if (w->q_norm) { // fp32 into the norms (config.c refuses biases with qk_norm on CUDA)
            cuda_linear_forward(b->gemm, b->q_raw + (size_t)t0 * Q, 1, 0, b->n1, w->wq, rows, D, Q,
                                s);
            cuda_linear_forward(b->gemm, b->k_raw + (size_t)t0 * KV, 1, 0, b->n1, w->wk, rows, D,
                                KV, s);
        } else {
            projection(b, a->q + (size_t)t0 * Q, b->n1, w->wq, w->bq, rows, D, Q);
            projection(b, a->k + (size_t)t0 * KV, b->n1, w->wk, w->bk, rows, D, KV);
        }
        projection(b, a->v + (size_t)t0 * KV, b->n1, w->wv, w->bv, rows, D, KV);
    }
    if (w->q_norm) qk_norm_forward(b, w, a);
    const int32_t *ds = doc_starts(b, m);
    const rope_args r = rope_of(b, ds);
    cuda_rope_forward(a->q, c->heads, &r, s);
    cuda_rope_forward(a->k, c->kv_heads, &r, s);
    if (run_attention) {
        const attn_args args = attention_args(b, l, m);
        const cuda_attn_tensors t = {
            .q = a->q, .k = a->k, .v = a->v, .out = a->att, .lse = a->lse, .sinks = w->sinks};
        cuda_attention_forward(&args, &t, b->attn_scratch, s);
    }
}

static void softmax_forward(const cu_layer_call *k, int run_attention) {
    attention_part(k->b, k->l, k->m, k->w, k->x, k->a, run_attention);
}

// What the backward needs again: q, k, v (and attention's output, unless an attention slot holds
// it) recomputed from x, or for a kept pass the first norm alone (n1 is not kept: the
// projections' weight gradients need it).
static void softmax_prepare(const cu_layer_call *k) {
    backend *b = k->b;
    const mt_config *c = b->c;
    if (k->keep < 0)
        attention_part(b, k->l, k->m, k->w, k->x, k->a, !att_ready(k->keep, k->att));
    else
        cuda_rmsnorm_forward(b->n1, b->rstd1, k->x, k->w->attn_norm, tokens(b), c->dim,
                             (float)c->norm_eps, b->s);
}

// q, k and v's projections backward for one chunk, and the first norm's: dx (holding dh)
// gains the attention block's gradient. dq_all: the whole micro-batch's dq (q's buffer).
static void qkv_backward(backend *b, const layer_w *w, const layer_g *g, const bf16 *dq_all,
                         const float *x, float *dx, int t0, int rows) {
    const mt_config *c = b->c;
    int D = c->dim, hd = mt_head_dim(c), Q = c->heads * hd, KV = c->kv_heads * hd;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    const bf16 *dq = dq_all + (size_t)t0 * Q, *dk = b->dk + (size_t)t0 * KV,
               *dv = b->dv + (size_t)t0 * KV;
    const float *xc = x + (size_t)t0 * D;
    if (rows != tokens(b)) // the first norm of this chunk again (one chunk: still in n1)
        cuda_rmsnorm_forward(b->n1, b->rstd1, xc, w->attn_norm, rows, D, (float)c->norm_eps, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 0, dq, w->wq, rows, D, Q, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, dk, w->wk, rows, D, KV, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, dv, w->wv, rows, D, KV, s);
    cuda_linear_backward_weight(gm, g->wq, dq, b->n1, rows, D, Q, s);
    cuda_linear_backward_weight(gm, g->wk, dk, b->n1, rows, D, KV, s);
    cuda_linear_backward_weight(gm, g->wv, dv, b->n1, rows, D, KV, s);
    cuda_rmsnorm_backward(dx + (size_t)t0 * D, g->attn_norm, b->d_n1, xc, w->attn_norm, b->rstd1,
                          rows, D, b->norm_scratch, s);
}

// From d_att: attention's backward, RoPE's, qk_norm's and the biases', then the projections'
// chunk by chunk into dx.
static void softmax_backward(const cu_layer_call *k, float *dx) {
    backend *b = k->b;
    const mt_config *c = b->c;
    const layer_w *w = k->w;
    const layer_g *g = k->g;
    layer_saved *a = k->a;
    int hd = mt_head_dim(c), Q = c->heads * hd, KV = c->kv_heads * hd;
    cudaStream_t s = b->s;
    bf16 *dq = a->q; // in place: q is not read again (at 512k tokens, 4 GiB on a 7B)
    const int32_t *ds = doc_starts(b, k->m);
    const attn_args args = attention_args(b, k->l, k->m);
    const cuda_attn_tensors t = {.q = a->q,
                                 .k = a->k,
                                 .v = a->v,
                                 .out = a->att,
                                 .lse = a->lse,
                                 .dout = b->d_att,
                                 .dq = dq,
                                 .dk = b->dk,
                                 .dv = b->dv,
                                 .sinks = w->sinks,
                                 .dsinks = g->sinks};
    cuda_attention_backward(&args, &t, b->attn_scratch, s);
    const rope_args r = rope_of(b, ds);
    cuda_rope_backward(dq, c->heads, &r, s);
    cuda_rope_backward(b->dk, c->kv_heads, &r, s);
    if (w->q_norm) qk_norm_backward(b, w, g, dq, b->dk);
    if (g->bq) {
        cuda_bias_backward(g->bq, dq, tokens(b), Q, b->bias_scratch, s);
        cuda_bias_backward(g->bk, b->dk, tokens(b), KV, b->bias_scratch, s);
        cuda_bias_backward(g->bv, b->dv, tokens(b), KV, b->bias_scratch, s);
    }
    FOR_CHUNKS(b, t0, rows) qkv_backward(b, w, g, dq, k->x, dx, t0, rows);
}

const cu_attn_part attn_softmax_cuda = {softmax_forward, softmax_prepare, softmax_backward};
