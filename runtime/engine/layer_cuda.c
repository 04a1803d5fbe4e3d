// A decoder layer and the head on the GPU: stateless templates of bf16 tensor-core GEMMs and
// fused kernels, their weight pointers bound per call to whichever streaming buffer holds the
// layer. A layer's token-wise work runs a chunk of the micro-batch at a time (batch.seq_chunk),
// attention and RoPE over all of it.
#include "runtime/engine/layer_cuda.h"
#include "runtime/engine/moe_cuda.h"
#include "shm/syscheck.h"

// Layer l's tensors by role in a fetched buffer (weights) or its gradients: each pointer is the
// base plus the role's offset in the layer's kind, dense or MoE, NULL where it has none.
#define BIND_ROLES(X)                                                                              \
    X(attn_norm, T_ATTN_NORM)                                                                      \
    X(wq, T_WQ) X(wk, T_WK) X(wv, T_WV) X(wo, T_WO) X(ffn_norm, T_FFN_NORM) X(w_gate, T_W_GATE)    \
        X(w_up, T_W_UP) X(w_down, T_W_DOWN) X(bq, T_BQ) X(bk, T_BK) X(bv, T_BV)                    \
            X(q_norm, T_Q_NORM) X(k_norm, T_K_NORM) X(router, T_ROUTER) X(exp_gate, T_EXP_GATE)    \
                X(exp_up, T_EXP_UP) X(exp_down, T_EXP_DOWN) X(sh_gate, T_SH_GATE)                  \
                    X(sh_up, T_SH_UP) X(sh_down, T_SH_DOWN) X(sh_route, T_SH_ROUTE)

static layer_w bind_w(const backend *b, int l, const void *w) {
    const bf16 *base = w;
    const uint64_t *o = b->offsets[mt_layer_is_moe(b->c, l)];
    layer_w r;
#define BIND(field, role) r.field = o[role] == UINT64_MAX ? NULL : base + o[role];
    BIND_ROLES(BIND)
    return r;
}

static layer_g bind_g(const backend *b, int l, float *g) {
    float *base = g;
    const uint64_t *o = b->offsets[mt_layer_is_moe(b->c, l)];
    layer_g r;
    BIND_ROLES(BIND)
#undef BIND
    return r;
}

// out = in . w^T (+ bias) over `rows` tokens: the q, k and v projections.
static void projection(backend *b, bf16 *out, const bf16 *in, const bf16 *w, const bf16 *bias,
                       int rows, int ic, int oc) {
    cuda_linear_forward(b->gemm, out, 0, 0, in, w, rows, ic, oc, b->s);
    if (bias) cuda_bias_forward(out, bias, rows, oc, b->s);
}

// The chunks of a micro-batch: [t0, t0 + rows) for t0 = 0, seq_chunk, ...
#define FOR_CHUNKS(b, t0, rows)                                                                    \
    for (int t0 = 0, rows = mt_chunk_rows(tokens(b), 0, (b)->seq_chunk); t0 < tokens(b);           \
         t0 += (b)->seq_chunk, rows = mt_chunk_rows(tokens(b), t0, (b)->seq_chunk))

// A kept pass's own internals; else the working set, whose attention output and statistics
// are an attention slot's when the pass has one (`with` then holds the mix).
static layer_saved *internals(backend *b, int keep, att_ref att, layer_saved *with) {
    if (keep >= 0) return &b->kept[keep];
    if (att.slot < 0) return &b->work;
    *with = b->work;
    with->att = b->att[att.slot], with->lse = b->lse[att.slot];
    return with;
}
static int att_ready(int keep, att_ref att) {
    return keep < 0 && att.slot >= 0 && att.ready;
}

// Micro-batch m's document starts (data.pack "documents"), or NULL: one document a row, also
// where packing found no second document in any row of it (all starts 0: the same bits).
static const int32_t *doc_starts(const backend *b, int m) {
    return b->doc_start && b->has_docs[m] ? b->doc_start + (size_t)m * tokens(b) : NULL;
}

// Micro-batch m's attention: its shape and packed documents (no sliding window: the model
// description has none yet).
static attn_args attention_args(const backend *b, int m) {
    const mt_config *c = b->c;
    return (attn_args){.B = b->B,
                       .T = b->T,
                       .H = c->heads,
                       .KV = c->kv_heads,
                       .hd = mt_head_dim(c),
                       .doc_start = doc_starts(b, m)};
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

// Attention's inputs and output for micro-batch m: q, k, v from the first norm chunk by chunk,
// then RoPE and (unless its output is at hand) attention over every token.
static void attention_part(backend *b, int m, const layer_w *w, const float *x, layer_saved *a,
                           int run_attention) {
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
    cuda_rope_forward(a->q, b->inv_freq, b->B, b->T, c->heads, hd, ds, s);
    cuda_rope_forward(a->k, b->inv_freq, b->B, b->T, c->kv_heads, hd, ds, s);
    if (run_attention) {
        const attn_args args = attention_args(b, m);
        const cuda_attn_tensors t = {.q = a->q, .k = a->k, .v = a->v, .out = a->att, .lse = a->lse};
        cuda_attention_forward(&args, &t, b->attn_scratch, s);
    }
}

// One chunk's h = x + att . wo^T (the residual add rides on the GEMM's beta), the second norm
// and the MLP's gate, up and act; h, gate and up go to a's chunk-sized (or kept) buffers.
static void residual_and_norm(backend *b, const layer_w *w, const float *x, const layer_saved *a,
                              float *h, int t0, int rows) {
    const mt_config *c = b->c;
    int D = c->dim, Q = c->heads * mt_head_dim(c);
    cu_copy(b, h, x + (size_t)t0 * D, sizeof(float) * rows * D);
    cuda_linear_forward(b->gemm, h, 1, 1.0f, a->att + (size_t)t0 * Q, w->wo, rows, Q, D, b->s);
    cuda_rmsnorm_forward(b->n2, b->rstd2, h, w->ffn_norm, rows, D, (float)c->norm_eps, b->s);
}

static void mlp_inputs(backend *b, const layer_w *w, const float *x, const layer_saved *a, float *h,
                       bf16 *gate, bf16 *up, int t0, int rows) {
    const mt_config *c = b->c;
    int D = c->dim, F = c->ffn_dim;
    residual_and_norm(b, w, x, a, h, t0, rows);
    cuda_linear_forward(b->gemm, gate, 0, 0, b->n2, w->w_gate, rows, D, F, b->s);
    cuda_linear_forward(b->gemm, up, 0, 0, b->n2, w->w_up, rows, D, F, b->s);
    cuda_swiglu_forward(b->act, gate, up, (long)rows * F, b->s);
}

// With its attention output at hand a pass needs no q, k or v: only the MLP block is run.
void cu_layer_forward(backend *b, int l, int m, const void *wbuf, const float *x, float *out,
                      int keep, att_ref att) {
    const mt_config *c = b->c;
    layer_w w = bind_w(b, l, wbuf);
    layer_saved with, *a = internals(b, keep, att, &with);
    int D = c->dim, F = c->ffn_dim;
    if (!att_ready(keep, att)) attention_part(b, m, &w, x, a, 1);
    FOR_CHUNKS(b, t0, rows) { // a kept slot is whole: then the only chunk is the micro-batch
        if (w.router) {       // out = h + MoE(norm(h))
            residual_and_norm(b, &w, x, a, a->h, t0, rows);
            cu_copy(b, out + (size_t)t0 * D, a->h, sizeof(float) * rows * D);
            cu_moe_forward(b, l, m, &w, out + (size_t)t0 * D, t0, rows);
            continue;
        }
        mlp_inputs(b, &w, x, a, a->h, a->gate, a->up, t0, rows);
        float *o = out + (size_t)t0 * D;
        cu_copy(b, o, a->h, sizeof(float) * rows * D);
        cuda_linear_forward(b->gemm, o, 1, 1.0f, b->act, w.w_down, rows, F, D, b->s);
    }
}

// The MLP block's backward for one chunk and the attention output projection's: dh (the
// residual stream's gradient below the MLP) goes to dx's chunk, d_att to the whole-micro-batch
// buffer the attention backward reads.
static void mlp_tail_backward(backend *b, const layer_w *w, const layer_g *g, const float *dout,
                              float *dx, layer_saved *a, int t0, int rows);

// A MoE MLP's backward for one chunk: n2 again (from the kept h, or h itself recomputed), then
// the experts' and router's backward into d_n2, then what lies below the MLP.
static void moe_backward(backend *b, int l, int m, const layer_w *w, const layer_g *g,
                         const float *x, const float *dout, float *dx, layer_saved *a, int kept,
                         int t0, int rows) {
    const mt_config *c = b->c;
    if (kept)
        cuda_rmsnorm_forward(b->n2, b->rstd2, a->h, w->ffn_norm, rows, c->dim, (float)c->norm_eps,
                             b->s);
    else
        residual_and_norm(b, w, x, a, a->h, t0, rows);
    cu_moe_backward(b, l, m, w, g, dout + (size_t)t0 * c->dim, b->d_n2, t0, rows);
    mlp_tail_backward(b, w, g, dout, dx, a, t0, rows);
}

static void mlp_backward(backend *b, const layer_w *w, const layer_g *g, const float *x,
                         const float *dout, float *dx, layer_saved *a, int kept, int t0, int rows) {
    const mt_config *c = b->c;
    int D = c->dim, F = c->ffn_dim;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    if (kept) { // h, gate and up are kept: only the norm and SwiGLU product are redone
        cuda_rmsnorm_forward(b->n2, b->rstd2, a->h, w->ffn_norm, rows, D, (float)c->norm_eps, s);
        cuda_swiglu_forward(b->act, a->gate, a->up, (long)rows * F, s);
    } else {
        mlp_inputs(b, w, x, a, a->h, a->gate, a->up, t0, rows);
    }
    const float *dy = dout + (size_t)t0 * D;
    cuda_float_to_bf16(b->dout_b, dy, (long)rows * D, s);
    cuda_linear_backward_input(gm, b->d_act, 1, 0, b->dout_b, w->w_down, rows, F, D, s);
    cuda_linear_backward_weight(gm, g->w_down, b->dout_b, b->act, rows, F, D, s);
    cuda_swiglu_backward(b->d_gate, b->d_up, b->d_act, a->gate, a->up, (long)rows * F, s);
    cuda_linear_backward_input(gm, b->d_n2, 1, 0, b->d_gate, w->w_gate, rows, D, F, s);
    cuda_linear_backward_input(gm, b->d_n2, 1, 1.0f, b->d_up, w->w_up, rows, D, F, s);
    cuda_linear_backward_weight(gm, g->w_gate, b->d_gate, b->n2, rows, D, F, s);
    cuda_linear_backward_weight(gm, g->w_up, b->d_up, b->n2, rows, D, F, s);
    mlp_tail_backward(b, w, g, dout, dx, a, t0, rows);
}

// Below the MLP of one chunk, d_n2 at hand: the second norm's backward and the residual path
// into dh (dx's chunk), and the output projection's into d_att.
static void mlp_tail_backward(backend *b, const layer_w *w, const layer_g *g, const float *dout,
                              float *dx, layer_saved *a, int t0, int rows) {
    const mt_config *c = b->c;
    int D = c->dim, Q = c->heads * mt_head_dim(c);
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    const float *dy = dout + (size_t)t0 * D;
    float *dh = dx + (size_t)t0 * D;
    if (dh != dy) cu_copy(b, dh, dy, sizeof(float) * rows * D); // the engine passes dx = dout
    cuda_rmsnorm_backward(dh, g->ffn_norm, b->d_n2, a->h, w->ffn_norm, b->rstd2, rows, D,
                          b->norm_scratch, s);
    cuda_float_to_bf16(b->dh_b, dh, (long)rows * D, s);
    cuda_linear_backward_input(gm, b->d_att + (size_t)t0 * Q, 0, 0, b->dh_b, w->wo, rows, Q, D, s);
    cuda_linear_backward_weight(gm, g->wo, b->dh_b, a->att + (size_t)t0 * Q, rows, Q, D, s);
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

// dx = dout + d(attention block) + d(MLP block); weight gradients accumulate in fp32. The
// internals come from slot `keep`, or are recomputed from x: attention's for the whole
// micro-batch, the rest chunk by chunk as the backward reaches it (the same kernels on the
// same inputs: the same bits as the forward's).
void cu_layer_backward(backend *b, int l, int m, const void *wbuf, float *dwbuf, const float *x,
                       const float *dout, float *dx, int keep, att_ref att) {
    const mt_config *c = b->c;
    layer_w w = bind_w(b, l, wbuf);
    layer_g g = bind_g(b, l, dwbuf);
    layer_saved with, *a = internals(b, keep, att, &with);
    int hd = mt_head_dim(c), Q = c->heads * hd, KV = c->kv_heads * hd;
    cudaStream_t s = b->s;
    if (keep < 0)
        attention_part(b, m, &w, x, a, !att_ready(keep, att));
    else // n1 is not kept: the projections' weight gradients need it
        cuda_rmsnorm_forward(b->n1, b->rstd1, x, w.attn_norm, tokens(b), c->dim, (float)c->norm_eps,
                             s);
    FOR_CHUNKS(b, t0, rows) {
        if (w.router)
            moe_backward(b, l, m, &w, &g, x, dout, dx, a, keep >= 0, t0, rows);
        else
            mlp_backward(b, &w, &g, x, dout, dx, a, keep >= 0, t0, rows);
    }
    bf16 *dq = a->q; // in place: q is not read again (at 512k tokens, 4 GiB on a 7B)
    const int32_t *ds = doc_starts(b, m);
    const attn_args args = attention_args(b, m);
    const cuda_attn_tensors t = {.q = a->q,
                                 .k = a->k,
                                 .v = a->v,
                                 .out = a->att,
                                 .lse = a->lse,
                                 .dout = b->d_att,
                                 .dq = dq,
                                 .dk = b->dk,
                                 .dv = b->dv};
    cuda_attention_backward(&args, &t, b->attn_scratch, s);
    cuda_rope_backward(dq, b->inv_freq, b->B, b->T, c->heads, hd, ds, s);
    cuda_rope_backward(b->dk, b->inv_freq, b->B, b->T, c->kv_heads, hd, ds, s);
    if (w.q_norm) qk_norm_backward(b, &w, &g, dq, b->dk);
    if (g.bq) {
        cuda_bias_backward(g.bq, dq, tokens(b), Q, b->bias_scratch, s);
        cuda_bias_backward(g.bk, b->dk, tokens(b), KV, b->bias_scratch, s);
        cuda_bias_backward(g.bv, b->dv, tokens(b), KV, b->bias_scratch, s);
    }
    FOR_CHUNKS(b, t0, rows) qkv_backward(b, &w, &g, dq, x, dx, t0, rows);
}

// Final norm, classifier and loss chunk by chunk; with dloss != 0 also their backward, into
// dx's chunk (the head's share of the residual stream's gradient).
void cu_head(backend *b, const void *head_w, const void *cls_w, float *head_g, float *cls_g,
             const float *x, float *dx, int m, float dloss) {
    const mt_config *c = b->c;
    int n = tokens(b), D = c->dim;
    const bf16 *final_norm = head_w;
    float *losses = b->losses + (size_t)m * n;
    const int32_t *targets = b->targets + (size_t)m * n;
    if (m + 1 > b->loss_micro) b->loss_micro = m + 1;
    FOR_CHUNKS(b, t0, rows) {
        const float *xc = x + (size_t)t0 * D;
        int logit_rows = b->chunk < rows ? b->chunk : rows;
        cuda_rmsnorm_forward(b->xf, b->rstd_f, xc, final_norm, rows, D, (float)c->norm_eps, b->s);
        if (dloss == 0) {
            cuda_classifier(b->gemm, losses + t0, NULL, NULL, b->xf, cls_w, targets + t0, rows, D,
                            c->vocab, 0, b->cls_scratch, logit_rows, b->s);
            continue;
        }
        float *dxc = dx + (size_t)t0 * D;
        cu_zero(b, b->dxf, sizeof(float) * rows * D);
        cuda_classifier(b->gemm, losses + t0, b->dxf, cls_g, b->xf, cls_w, targets + t0, rows, D,
                        c->vocab, dloss, b->cls_scratch, logit_rows, b->s);
        cu_zero(b, dxc, sizeof(float) * rows * D);
        cuda_rmsnorm_backward(dxc, head_g, b->dxf, xc, final_norm, b->rstd_f, rows, D,
                              b->norm_scratch, b->s);
    }
}
