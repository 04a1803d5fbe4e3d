// Gated DeltaNet's part of a decoder layer on the GPU (the kind ATTN_GDN): attn_gdn_cpu.c's
// steps on the kernels of kernels_gdn_cuda.h. The first norm, the in projections (qkv, z, b, a)
// chunk by chunk, the causal conv1d + SiLU over the qkv channels (restarting at each packed
// document), q, k and v split from it, q and k l2-normalised, the gates g and beta, the chunked
// gated delta rule (value head h reads key head h / (Hv / Hk)), the gated RMSNorm with z per
// value head; out_proj is the skeleton's (gdn_out). Forward and backward side by side.
//
// Activations: the internals span the micro-batch in the working set (buffers.h's
// MT_CUDA_GDN) and are never kept (backend_cuda.c keeps no layer pass of a model with such
// layers): prepare recomputes all of them from x before the backward, the delta rule's output
// too unless an attention slot holds it (att_ref, as for softmax attention; a->att is the
// rule's output, LV wide).
#include "kernels/cuda/kernels_gdn_cuda.h"
#include "runtime/engine/layer_parts_cuda.h"
#include <math.h>

// transformers' l2norm(x, eps=1e-6), as the rule's use_qk_l2norm_in_kernel calls it.
#define GDN_L2NORM_EPS 1e-6f

static conv1d_args conv_of(const cu_layer_call *k) {
    const backend *b = k->b;
    const mt_model *model = &b->c->model;
    return (conv1d_args){.B = b->B,
                         .T = b->T,
                         .C = 2 * mt_gdn_key_width(model) + mt_gdn_value_width(model),
                         .K = model->linear_conv,
                         .doc_start = cu_doc_starts(b, k->m)};
}

static gdn_args rule_of(const cu_layer_call *k) {
    const backend *b = k->b;
    const mt_model *model = &b->c->model;
    return (gdn_args){.B = b->B,
                      .T = b->T,
                      .H = model->linear_v_heads,
                      .HK = model->linear_k_heads,
                      .dk = model->linear_k_dim,
                      .dv = model->linear_v_dim,
                      .doc_start = cu_doc_starts(b, k->m),
                      .scale = 1.0f / sqrtf((float)model->linear_k_dim)};
}

// The most chunks of a row of micro-batch m: counted on the host as its tokens came in
// (cu_load_tokens) where it holds packed documents, else one every GDN_CHUNK tokens.
static int rule_chunks(const cu_layer_call *k) {
    const backend *b = k->b;
    if (cu_doc_starts(b, k->m)) return b->gdn_chunks[k->m];
    return gdn_max_chunks(NULL, b->B, b->T);
}

// The columns [c0, c0 + w) of the n rows of x [n, C] to out [n, w] (elements of `size` bytes),
// or (join) back: the conv's channels hold q, k and v side by side.
static void columns_split(backend *b, void *out, const void *x, long n, int C, int c0, int w,
                          size_t size) {
    cuda_ktime_enter(b->s, KT_COPY);
    CUDA_CHECK(cudaMemcpy2DAsync(out, w * size, (const char *)x + c0 * size, C * size, w * size,
                                 (size_t)n, cudaMemcpyDeviceToDevice, b->s));
    cuda_ktime_leave(b->s);
}
static void columns_join(backend *b, void *x, const void *in, long n, int C, int c0, int w,
                         size_t size) {
    cuda_ktime_enter(b->s, KT_COPY);
    CUDA_CHECK(cudaMemcpy2DAsync((char *)x + c0 * size, C * size, in, w * size, w * size, (size_t)n,
                                 cudaMemcpyDeviceToDevice, b->s));
    cuda_ktime_leave(b->s);
}

// One chunk of the first norm and the four in projections.
static void in_forward(const cu_layer_call *k, int t0, int rows) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    const layer_w *w = k->w;
    gdn_set *la = &b->la;
    int D = m->dim, LV = mt_gdn_value_width(m), H = m->linear_v_heads;
    int LC = 2 * mt_gdn_key_width(m) + LV;
    cu_norm_forward(b, b->n1, b->rstd1, k->x + (size_t)t0 * D, w->attn_norm, rows, D);
    cuda_linear_forward(b->gemm, la->mixed + (size_t)t0 * LC, 0, 0, b->n1, w->la_qkv, rows, D, LC,
                        b->s);
    cuda_linear_forward(b->gemm, la->z + (size_t)t0 * LV, 0, 0, b->n1, w->la_z, rows, D, LV, b->s);
    cuda_linear_forward(b->gemm, la->b + (size_t)t0 * H, 0, 0, b->n1, w->la_b, rows, D, H, b->s);
    cuda_linear_forward(b->gemm, la->a + (size_t)t0 * H, 0, 0, b->n1, w->la_a, rows, D, H, b->s);
}

// The rule's inputs and outputs.
static cuda_gdn_tensors rule_tensors(const cu_layer_call *k) {
    gdn_set *la = &k->b->la;
    return (cuda_gdn_tensors){.q = la->qn,
                              .k = la->kn,
                              .v = la->v,
                              .g = la->g,
                              .beta = la->beta,
                              .out = k->a->att,
                              .dout = la->d_o,
                              .dq = la->d_qn,
                              .dk = la->d_kn,
                              .dv = la->d_v,
                              .dg = la->d_g,
                              .dbeta = la->d_beta,
                              .ckpt = (float *)la->ckpt,
                              .ckpt_ready = la->ckpt_ready};
}

static cuda_gdn_gate_tensors gate_tensors(const cu_layer_call *k) {
    gdn_set *la = &k->b->la;
    return (cuda_gdn_gate_tensors){.a = la->a,
                                   .b = la->b,
                                   .A_log = k->w->la_a_log,
                                   .dt_bias = k->w->la_dt_bias,
                                   .g = la->g,
                                   .beta = la->beta,
                                   .dg = la->d_g,
                                   .dbeta = la->d_beta,
                                   .da = la->d_a,
                                   .db = la->d_b,
                                   .dA_log = k->g ? k->g->la_a_log : NULL,
                                   .ddt_bias = k->g ? k->g->la_dt_bias : NULL};
}

// a->att: the rule's output [n, Hv x dv]; la.y: the gated norm's, out_proj's input. With
// run_attention 0 the rule's output is at hand (an attention slot): the rest is redone.
static void gdn_forward(const cu_layer_call *k, int run_attention) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    gdn_set *la = &b->la;
    long n = tokens(b);
    int LK = mt_gdn_key_width(m), LV = mt_gdn_value_width(m), LC = 2 * LK + LV;
    int HK = m->linear_k_heads, H = m->linear_v_heads;
    FOR_CHUNKS(b, t0, rows) in_forward(k, t0, rows);
    const conv1d_args ca = conv_of(k);
    cuda_causal_conv1d_silu_forward(la->conv, la->mixed, k->w->la_conv, &ca, b->s);
    columns_split(b, la->q, la->conv, n, LC, 0, LK, sizeof(bf16));
    columns_split(b, la->k, la->conv, n, LC, LK, LK, sizeof(bf16));
    columns_split(b, la->v, la->conv, n, LC, 2 * LK, LV, sizeof(bf16));
    cuda_l2norm_forward(la->qn, la->rq, la->q, n * HK, m->linear_k_dim, GDN_L2NORM_EPS, b->s);
    cuda_l2norm_forward(la->kn, la->rk, la->k, n * HK, m->linear_k_dim, GDN_L2NORM_EPS, b->s);
    const cuda_gdn_gate_tensors gt = gate_tensors(k);
    cuda_gdn_gates_forward(&gt, n, H, b->s);
    if (run_attention) {
        const gdn_args a = rule_of(k);
        const cuda_gdn_tensors t = rule_tensors(k);
        cuda_gated_delta_forward(&a, rule_chunks(k), &t, la->scratch, b->s);
    }
    // the backward after prepare reads the checkpoints this forward wrote, where it ran
    la->ckpt_ready = run_attention;
    cuda_rmsnorm_gated_forward(la->y, la->rstd, k->a->att, la->z, k->w->la_norm, (int)(n * H),
                               m->linear_v_dim, (float)m->norm_eps, b->s);
}

// Everything the backward reads, from x again (the rule's output from its slot when ready).
static void gdn_prepare(const cu_layer_call *k) {
    gdn_forward(k, !att_ready(k->keep, k->att));
}

// out_proj, on the gated norm's output; its input's gradient in fp32 (the gated norm's dout).
static cu_attn_out gdn_out(const cu_layer_call *k, int t0, int rows) {
    backend *b = k->b;
    int LV = mt_gdn_value_width(&b->c->model);
    return (cu_attn_out){.in = b->la.y + (size_t)t0 * LV,
                         .w = k->w->la_out,
                         .dw = k->g ? k->g->la_out : NULL,
                         .d_in = b->la.d_y,
                         .d_f32 = 1,
                         .width = LV};
}

// One chunk of the in projections' backward and the first norm's: dx (holding the residual
// path) gains their gradient.
static void in_backward(const cu_layer_call *k, float *dx, int t0, int rows) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    const layer_w *w = k->w;
    const layer_g *g = k->g;
    gdn_set *la = &b->la;
    cuda_gemm *gm = b->gemm;
    cudaStream_t s = b->s;
    int D = m->dim, LV = mt_gdn_value_width(m), H = m->linear_v_heads;
    int LC = 2 * mt_gdn_key_width(m) + LV;
    const float *xc = k->x + (size_t)t0 * D;
    const bf16 *d_mixed = la->d_mixed + (size_t)t0 * LC, *d_z = la->d_z + (size_t)t0 * LV;
    const bf16 *d_b = la->d_b + (size_t)t0 * H, *d_a = la->d_a + (size_t)t0 * H;
    if (rows != tokens(b)) // the first norm of this chunk again (one chunk: still in n1)
        cu_norm_forward(b, b->n1, b->rstd1, xc, w->attn_norm, rows, D);
    cuda_linear_backward_input(gm, b->d_n1, 1, 0, d_mixed, w->la_qkv, rows, D, LC, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, d_z, w->la_z, rows, D, LV, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, d_b, w->la_b, rows, D, H, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, d_a, w->la_a, rows, D, H, s);
    cuda_linear_backward_weight(gm, g->la_qkv, d_mixed, b->n1, rows, D, LC, s);
    cuda_linear_backward_weight(gm, g->la_z, d_z, b->n1, rows, D, LV, s);
    cuda_linear_backward_weight(gm, g->la_b, d_b, b->n1, rows, D, H, s);
    cuda_linear_backward_weight(gm, g->la_a, d_a, b->n1, rows, D, H, s);
    cu_norm_backward(b, dx + (size_t)t0 * D, g->attn_norm, b->d_n1, xc, w->attn_norm, b->rstd1,
                     rows, D, b->norm_scratch);
}

// From la.d_y (out_proj's input gradient) back to dx, in the forward's steps reversed. The
// kernels write their activation gradients (no zeroing) and add into the weight gradients.
static void gdn_backward(const cu_layer_call *k, float *dx) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    gdn_set *la = &b->la;
    float *scratch = (float *)la->scratch; // the kernels take it in turn
    long n = tokens(b);
    int LK = mt_gdn_key_width(m), LV = mt_gdn_value_width(m), LC = 2 * LK + LV;
    int HK = m->linear_k_heads, H = m->linear_v_heads, dk = m->linear_k_dim;
    cuda_rmsnorm_gated_backward(la->d_o, la->d_z, k->g->la_norm, la->d_y, k->a->att, la->z,
                                k->w->la_norm, la->rstd, (int)(n * H), m->linear_v_dim, scratch,
                                b->s);
    const gdn_args a = rule_of(k);
    const cuda_gdn_tensors t = rule_tensors(k);
    cuda_gated_delta_backward(&a, rule_chunks(k), &t, la->scratch, b->s);
    la->ckpt_ready = 0;
    cuda_l2norm_backward(la->d_q, la->d_qn, la->q, la->rq, n * HK, dk, b->s);
    cuda_l2norm_backward(la->d_k, la->d_kn, la->k, la->rk, n * HK, dk, b->s);
    const cuda_gdn_gate_tensors gt = gate_tensors(k);
    cuda_gdn_gates_backward(&gt, n, H, scratch, b->s);
    columns_join(b, la->d_conv, la->d_q, n, LC, 0, LK, sizeof(float));
    columns_join(b, la->d_conv, la->d_k, n, LC, LK, LK, sizeof(float));
    columns_join(b, la->d_conv, la->d_v, n, LC, 2 * LK, LV, sizeof(float));
    const conv1d_args ca = conv_of(k);
    cuda_causal_conv1d_silu_backward(la->d_mixed, k->g->la_conv, la->d_conv, la->mixed,
                                     k->w->la_conv, &ca, scratch, b->s);
    FOR_CHUNKS(b, t0, rows) in_backward(k, dx, t0, rows);
}

const cu_attn_part attn_gdn_cuda = {gdn_forward, gdn_prepare, gdn_backward, gdn_out};
