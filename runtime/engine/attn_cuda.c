// Softmax attention's part of a decoder layer on the GPU (the kind ATTN_SOFTMAX): the first
// norm, the q, k and v projections (with biases: Qwen2), qk_norm (Qwen3, OLMoE), RoPE and flash
// attention over the micro-batch (with gpt-oss's sinks: a learned logit per head in each
// softmax, its gradient into the layer's fp32 gradients), the output gate (Qwen3.5's
// attn_output_gate: q_proj emits each head's query and gate, attention's output is scaled by
// sigmoid(gate) before o_proj); forward and backward side by side. The
// projections run a chunk of the micro-batch at a time (batch.seq_chunk), RoPE and attention over
// all of it.
#include "runtime/engine/layer_parts_cuda.h"

// out = in . w^T (+ bias) over `rows` tokens: the q, k and v projections.
static void projection(backend *b, bf16 *out, const bf16 *in, const bf16 *w, const bf16 *bias,
                       int rows, int ic, int oc) {
    cuda_linear_forward(b->gemm, out, 0, 0, in, w, rows, ic, oc, b->s);
    if (bias) cuda_bias_forward(out, bias, rows, oc, b->s);
}

// Micro-batch m's attention: its shape, packed documents and the layer's sliding window.
static attn_args attention_args(const backend *b, int l, int m) {
    const mt_model *model = &b->c->model;
    return (attn_args){.B = b->B,
                       .T = b->T,
                       .H = model->heads,
                       .KV = model->kv_heads,
                       .hd = mt_head_dim(model),
                       .doc_start = cu_doc_starts(b, m),
                       .window = mt_layer_kind_of(model, l)->window};
}

// qk_norm's rows: a head's head_dim ("head"), or a token's whole projection ("all").
static int qk_width(const mt_model *m, int heads) {
    return mt_qk_norm(m) == QK_ALL ? heads * mt_head_dim(m) : mt_head_dim(m);
}

static void qk_norm_forward(backend *b, const layer_w *w, layer_saved *a) {
    const mt_model *m = &b->c->model;
    long nq = (long)tokens(b) * m->heads * mt_head_dim(m), nk = nq / m->heads * m->kv_heads;
    int wq = qk_width(m, m->heads), wk = qk_width(m, m->kv_heads);
    cu_norm_forward(b, a->q, b->rstd_q, b->q_raw, w->q_norm, (int)(nq / wq), wq);
    cu_norm_forward(b, a->k, b->rstd_k, b->k_raw, w->k_norm, (int)(nk / wk), wk);
}

// dq, dk (bf16, in place): the normalized q's and k's gradients become q_raw's and k_raw's.
static void qk_norm_backward(backend *b, const layer_w *w, const layer_g *g, bf16 *dq, bf16 *dk) {
    const mt_model *m = &b->c->model;
    long nq = (long)tokens(b) * m->heads * mt_head_dim(m), nk = nq / m->heads * m->kv_heads;
    struct {
        bf16 *d;
        long n;
        int width;
        const float *raw, *rstd;
        const bf16 *w;
        float *dw;
    } parts[] = {{dq, nq, qk_width(m, m->heads), b->q_raw, b->rstd_q, w->q_norm, g->q_norm},
                 {dk, nk, qk_width(m, m->kv_heads), b->k_raw, b->rstd_k, w->k_norm, g->k_norm}};
    for (int i = 0; i < 2; i++) {
        float *dout = (float *)b->qk_scratch, *dx = dout + nq; // two [tokens, Q] fp32 halves
        cuda_bf16_to_float(dout, parts[i].d, parts[i].n, b->s);
        cu_zero(b, dx, sizeof(float) * parts[i].n);
        cu_norm_backward(b, dx, parts[i].dw, dout, parts[i].raw, parts[i].w, parts[i].rstd,
                         (int)(parts[i].n / parts[i].width), parts[i].width, b->norm_qk);
        cuda_float_to_bf16(parts[i].d, dx, parts[i].n, b->s);
    }
}

// The rotation of q and k, positions restarting at the documents' starts ds (or NULL).
static rope_args rope_of(const backend *b, const int32_t *ds) {
    return (rope_args){.inv_freq = b->inv_freq,
                       .scale = b->rope_scale,
                       .B = b->B,
                       .T = b->T,
                       .hd = mt_head_dim(&b->c->model),
                       .rot = mt_rope_dim(&b->c->model),
                       .doc_start = ds};
}

// The chunk's q projection: into q_raw (fp32, before qk_norm) or q (bf16, with q_proj's bias:
// Qwen2), or with the output gate through qg, split into the query and the gates' logits
// (config.c refuses a bias with the gate, and with qk_norm on CUDA).
static void q_forward(backend *b, const layer_w *w, layer_saved *a, int t0, int rows) {
    const mt_model *m = &b->c->model;
    int D = m->dim, hd = mt_head_dim(m), Q = m->heads * hd;
    size_t at = (size_t)t0 * Q;
    if (m->attn_output_gate) {
        cuda_linear_forward(b->gemm, b->qg, 1, 0, b->n1, w->wq, rows, D, 2 * Q, b->s);
        void *q = w->q_norm ? (void *)(b->q_raw + at) : (void *)(a->q + at);
        cuda_output_gate_split(q, w->q_norm != NULL, b->gate_q + at, b->qg, rows, m->heads, hd,
                               b->s);
    } else if (w->q_norm) {
        cuda_linear_forward(b->gemm, b->q_raw + at, 1, 0, b->n1, w->wq, rows, D, Q, b->s);
    } else {
        projection(b, a->q + at, b->n1, w->wq, w->bq, rows, D, Q);
    }
}

// Attention's inputs and output for micro-batch m: q, k, v from the first norm chunk by chunk,
// then RoPE and (unless its output is at hand) attention over every token.
static void attention_part(backend *b, int l, int m, const layer_w *w, const float *x,
                           layer_saved *a, int run_attention) {
    const mt_model *model = &b->c->model;
    int D = model->dim, KV = model->kv_heads * mt_head_dim(model);
    cudaStream_t s = b->s;
    FOR_CHUNKS(b, t0, rows) {
        cu_norm_forward(b, b->n1, b->rstd1, x + (size_t)t0 * D, w->attn_norm, rows, D);
        q_forward(b, w, a, t0, rows);
        if (w->q_norm) // fp32 into the norms (config.c refuses biases with qk_norm on CUDA)
            cuda_linear_forward(b->gemm, b->k_raw + (size_t)t0 * KV, 1, 0, b->n1, w->wk, rows, D,
                                KV, s);
        else
            projection(b, a->k + (size_t)t0 * KV, b->n1, w->wk, w->bk, rows, D, KV);
        projection(b, a->v + (size_t)t0 * KV, b->n1, w->wv, w->bv, rows, D, KV);
    }
    if (w->q_norm) qk_norm_forward(b, w, a);
    const int32_t *ds = cu_doc_starts(b, m);
    const rope_args r = rope_of(b, ds);
    cuda_rope_forward(a->q, model->heads, &r, s);
    cuda_rope_forward(a->k, model->kv_heads, &r, s);
    if (run_attention) {
        const attn_args args = attention_args(b, l, m);
        const cuda_attn_tensors t = {
            .q = a->q, .k = a->k, .v = a->v, .out = a->att, .lse = a->lse, .sinks = w->sinks};
        cuda_attention_forward(&args, &t, b->attn_scratch, s);
    }
}

// With attention's output at hand, only the output gate's logits are needed again (o_proj's
// input): without the gate, nothing.
static void softmax_forward(const cu_layer_call *k, int run_attention) {
    if (!run_attention && !k->b->c->model.attn_output_gate) return;
    attention_part(k->b, k->l, k->m, k->w, k->x, k->a, run_attention);
}

// o_proj on attention's output, or with the output gate on the chunk's gated output (att_g,
// from the output and the gates' logits, in the forward and again in the backward).
static cu_attn_out softmax_out(const cu_layer_call *k, int t0, int rows) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    int Q = m->heads * mt_head_dim(m);
    const bf16 *in = k->a->att + (size_t)t0 * Q;
    if (m->attn_output_gate) {
        cuda_output_gate_forward(b->att_g, in, b->gate_q + (size_t)t0 * Q, (long)rows * Q, b->s);
        in = b->att_g;
    }
    return (cu_attn_out){.in = in,
                         .w = k->w->wo,
                         .bias = k->w->bo,
                         .dw = k->g ? k->g->wo : NULL,
                         .dbias = k->g ? k->g->bo : NULL,
                         .d_in = b->d_att,
                         .width = Q};
}

// What the backward needs again: q, k, v (and attention's output, unless an attention slot holds
// it) recomputed from x, or for a kept pass the first norm alone (n1 is not kept: the
// projections' weight gradients need it).
static void softmax_prepare(const cu_layer_call *k) {
    backend *b = k->b;
    const mt_model *model = &b->c->model;
    if (k->keep < 0)
        attention_part(b, k->l, k->m, k->w, k->x, k->a, !att_ready(k->keep, k->att));
    else
        cu_norm_forward(b, b->n1, b->rstd1, k->x, k->w->attn_norm, tokens(b), model->dim);
}

// q, k and v's projections backward for one chunk, and the first norm's: dx (holding dh)
// gains the attention block's gradient. dq_all: the whole micro-batch's dq (q's buffer).
static void qkv_backward(backend *b, const layer_w *w, const layer_g *g, const bf16 *dq_all,
                         const float *x, float *dx, int t0, int rows) {
    const mt_model *m = &b->c->model;
    int D = m->dim, hd = mt_head_dim(m), Q = m->heads * hd, KV = m->kv_heads * hd;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    const bf16 *dq = dq_all + (size_t)t0 * Q, *dk = b->dk + (size_t)t0 * KV,
               *dv = b->dv + (size_t)t0 * KV;
    const float *xc = x + (size_t)t0 * D;
    if (rows != tokens(b)) // the first norm of this chunk again (one chunk: still in n1)
        cu_norm_forward(b, b->n1, b->rstd1, xc, w->attn_norm, rows, D);
    int QP = Q;                // q_proj's width: with the output gate, the query's and the gate's
    if (m->attn_output_gate) { // qg, free in the backward, takes q_proj's gradient (bf16)
        bf16 *dqg = (bf16 *)b->qg;
        cuda_output_gate_join(dqg, dq, b->gate_q + (size_t)t0 * Q, rows, m->heads, hd, s);
        dq = dqg, QP = 2 * Q;
    }
    cuda_linear_backward_input(gm, b->d_n1, 1, 0, dq, w->wq, rows, D, QP, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, dk, w->wk, rows, D, KV, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, dv, w->wv, rows, D, KV, s);
    cuda_linear_backward_weight(gm, g->wq, dq, b->n1, rows, D, QP, s);
    cuda_linear_backward_weight(gm, g->wk, dk, b->n1, rows, D, KV, s);
    cuda_linear_backward_weight(gm, g->wv, dv, b->n1, rows, D, KV, s);
    cu_norm_backward(b, dx + (size_t)t0 * D, g->attn_norm, b->d_n1, xc, w->attn_norm, b->rstd1,
                     rows, D, b->norm_scratch);
}

// From d_att: the output gate's backward (d_att becomes attention's output gradient, gate_q
// the logits'), attention's, RoPE's, qk_norm's and the biases', then the projections' chunk by
// chunk into dx.
static void softmax_backward(const cu_layer_call *k, float *dx) {
    backend *b = k->b;
    const mt_model *model = &b->c->model;
    const layer_w *w = k->w;
    const layer_g *g = k->g;
    layer_saved *a = k->a;
    int hd = mt_head_dim(model), Q = model->heads * hd, KV = model->kv_heads * hd;
    cudaStream_t s = b->s;
    bf16 *dq = a->q; // in place: q is not read again (at 512k tokens, 4 GiB on a 7B)
    if (model->attn_output_gate)
        cuda_output_gate_backward(b->d_att, b->gate_q, b->d_att, a->att, b->gate_q,
                                  (long)tokens(b) * Q, s);
    const int32_t *ds = cu_doc_starts(b, k->m);
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
    cuda_rope_backward(dq, model->heads, &r, s);
    cuda_rope_backward(b->dk, model->kv_heads, &r, s);
    if (w->q_norm) qk_norm_backward(b, w, g, dq, b->dk);
    if (g->bq) {
        cuda_bias_backward(g->bq, dq, tokens(b), Q, b->bias_scratch, s);
        cuda_bias_backward(g->bk, b->dk, tokens(b), KV, b->bias_scratch, s);
        cuda_bias_backward(g->bv, b->dv, tokens(b), KV, b->bias_scratch, s);
    }
    FOR_CHUNKS(b, t0, rows) qkv_backward(b, w, g, dq, k->x, dx, t0, rows);
}

const cu_attn_part attn_softmax_cuda = {softmax_forward, softmax_prepare, softmax_backward,
                                        softmax_out};
