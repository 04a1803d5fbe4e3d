// Gated DeltaNet's part of a decoder layer on the CPU backend (the kind ATTN_GDN), as
// transformers' Qwen3_5GatedDeltaNet computes it: the first norm, the in projections (qkv, z, b,
// a), the causal conv1d + SiLU over the qkv channels (restarting at each packed document, as
// FLA's kernels do with cu_seqlens), q, k and v split from it, q and k l2-normalised, the gates
// g and beta, the chunked gated delta rule (value head h reads key head h / (Hv / Hk)), then the
// gated RMSNorm with z per value head; out_proj is the skeleton's (gdn_out). Forward and
// backward side by side; the kernels are kernels_gdn.h's.
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/kernels_gdn.h"
#include "runtime/engine/layer_parts.h"
#include <math.h>
#include <string.h>

// transformers' l2norm(x, eps=1e-6), as the rule's use_qk_l2norm_in_kernel calls it.
#define GDN_L2NORM_EPS 1e-6f

static conv1d_args conv_of(const layer_call *k) {
    const mt_model *m = &k->c->model;
    return (conv1d_args){.B = k->s->B,
                         .T = k->s->T,
                         .C = 2 * mt_gdn_key_width(m) + mt_gdn_value_width(m),
                         .K = m->linear_conv,
                         .doc_start = k->s->doc_start};
}

static gdn_args rule_of(const layer_call *k) {
    const mt_model *m = &k->c->model;
    return (gdn_args){.B = k->s->B,
                      .T = k->s->T,
                      .H = m->linear_v_heads,
                      .HK = m->linear_k_heads,
                      .dk = m->linear_k_dim,
                      .dv = m->linear_v_dim,
                      .doc_start = k->s->doc_start,
                      .scale = 1.0f / sqrtf((float)m->linear_k_dim)};
}

// The columns [c0, c0 + w) of the n rows of x [n, C] to out [n, w], or (join) back.
static void columns_split(float *out, const float *x, long n, int C, int c0, int w) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < n; r++) memcpy(out + r * w, x + r * C + c0, sizeof(float) * w);
}
static void columns_join(float *x, const float *in, long n, int C, int c0, int w) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < n; r++) memcpy(x + r * C + c0, in + r * w, sizeof(float) * w);
}

// One chunk of the first norm and the four in projections.
static void in_forward(const layer_call *k, int t0, int rows) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w;
    layer_scratch *s = k->s;
    gdn_scratch *g = &s->la;
    int D = m->dim, LV = mt_gdn_value_width(m), H = m->linear_v_heads;
    int LC = 2 * mt_gdn_key_width(m) + LV;
    size_t d = (size_t)t0 * D;
    rmsnorm_offset_forward(s->n1 + d, s->rstd1 + t0, k->x + d, w->attn_norm, mt_norm_offset(m),
                           rows, D, (float)m->norm_eps);
    linear_forward(g->mixed + (size_t)t0 * LC, s->n1 + d, w->la_qkv, NULL, rows, D, LC);
    linear_forward(g->z + (size_t)t0 * LV, s->n1 + d, w->la_z, NULL, rows, D, LV);
    linear_forward(g->b + (size_t)t0 * H, s->n1 + d, w->la_b, NULL, rows, D, H);
    linear_forward(g->a + (size_t)t0 * H, s->n1 + d, w->la_a, NULL, rows, D, H);
}

// The rule's inputs and outputs (gradients NULL outside the backward).
static gdn_tensors rule_tensors(const layer_call *k) {
    layer_scratch *s = k->s;
    gdn_scratch *g = &s->la;
    return (gdn_tensors){.q = g->qn,
                         .k = g->kn,
                         .v = g->v,
                         .g = g->g,
                         .beta = g->beta,
                         .out = s->att,
                         .dout = s->d_att,
                         .dq = g->d_qn,
                         .dk = g->d_kn,
                         .dv = g->d_v,
                         .dg = g->d_g,
                         .dbeta = g->d_beta};
}

static gdn_gate_tensors gate_tensors(const layer_call *k) {
    gdn_scratch *g = &k->s->la;
    return (gdn_gate_tensors){.a = g->a,
                              .b = g->b,
                              .A_log = k->w->la_a_log,
                              .dt_bias = k->w->la_dt_bias,
                              .g = g->g,
                              .beta = g->beta,
                              .dg = g->d_g,
                              .dbeta = g->d_beta,
                              .da = g->d_a,
                              .db = g->d_b,
                              .dA_log = k->dw ? k->dw->la_a_log : NULL,
                              .ddt_bias = k->dw ? k->dw->la_dt_bias : NULL};
}

// s->att: the rule's output [n, Hv x dv]; la.y: the gated norm's, out_proj's input. have_att:
// the rule's output is at hand (a kept attention output), only what the backward reads is redone.
static void gdn_forward(const layer_call *k, int have_att) {
    const mt_model *m = &k->c->model;
    layer_scratch *s = k->s;
    gdn_scratch *g = &s->la;
    long n = (long)s->B * s->T;
    int LK = mt_gdn_key_width(m), LV = mt_gdn_value_width(m), LC = 2 * LK + LV;
    int HK = m->linear_k_heads, H = m->linear_v_heads;
    for (int t0 = 0; t0 < n; t0 += k->chunk) in_forward(k, t0, mt_chunk_rows((int)n, t0, k->chunk));
    const conv1d_args ca = conv_of(k);
    causal_conv1d_silu_forward(g->conv, g->mixed, k->w->la_conv, &ca);
    columns_split(g->q, g->conv, n, LC, 0, LK);
    columns_split(g->k, g->conv, n, LC, LK, LK);
    columns_split(g->v, g->conv, n, LC, 2 * LK, LV);
    l2norm_forward(g->qn, g->rq, g->q, n * HK, m->linear_k_dim, GDN_L2NORM_EPS);
    l2norm_forward(g->kn, g->rk, g->k, n * HK, m->linear_k_dim, GDN_L2NORM_EPS);
    const gdn_gate_tensors gt = gate_tensors(k);
    gdn_gates_forward(&gt, n, H);
    if (!have_att) {
        const gdn_args a = rule_of(k);
        const gdn_tensors t = rule_tensors(k);
        gated_delta_chunked_forward(&a, &t);
    }
    rmsnorm_gated_forward(g->y, g->rstd, s->att, g->z, k->w->la_norm, (int)(n * H), m->linear_v_dim,
                          (float)m->norm_eps);
}

// One chunk of the in projections' backward and the first norm's: dx = d_h + their gradient.
static void in_backward(const layer_call *k, float *dx, int t0, int rows) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    gdn_scratch *g = &s->la;
    int D = m->dim, LV = mt_gdn_value_width(m), H = m->linear_v_heads;
    int LC = 2 * mt_gdn_key_width(m) + LV;
    size_t d = (size_t)t0 * D;
    const float *n1 = s->n1 + d;
    float *dn1 = s->d_n1 + d;
    memset(dn1, 0, sizeof(float) * rows * D);
    linear_backward(dn1, dw->la_qkv, NULL, g->d_mixed + (size_t)t0 * LC, n1, w->la_qkv, rows, D,
                    LC);
    linear_backward(dn1, dw->la_z, NULL, g->d_z + (size_t)t0 * LV, n1, w->la_z, rows, D, LV);
    linear_backward(dn1, dw->la_b, NULL, g->d_b + (size_t)t0 * H, n1, w->la_b, rows, D, H);
    linear_backward(dn1, dw->la_a, NULL, g->d_a + (size_t)t0 * H, n1, w->la_a, rows, D, H);
    memcpy(dx + d, s->d_h + d, sizeof(float) * rows * D);
    rmsnorm_offset_backward(dx + d, dw->attn_norm, dn1, k->x + d, w->attn_norm, mt_norm_offset(m),
                            s->rstd1 + t0, rows, D);
}

static void zero(float *p, long count) {
    memset(p, 0, sizeof(float) * (size_t)count);
}

// From la.d_y (out_proj's input gradient) back to dx, in the forward's steps reversed.
static void gdn_backward(const layer_call *k, float *dx) {
    const mt_model *m = &k->c->model;
    layer_scratch *s = k->s;
    gdn_scratch *g = &s->la;
    long n = (long)s->B * s->T;
    int LK = mt_gdn_key_width(m), LV = mt_gdn_value_width(m), LC = 2 * LK + LV;
    int HK = m->linear_k_heads, H = m->linear_v_heads, dk = m->linear_k_dim;
    zero(s->d_att, n * LV), zero(g->d_z, n * LV);
    rmsnorm_gated_backward(s->d_att, g->d_z, k->dw->la_norm, g->d_y, s->att, g->z, k->w->la_norm,
                           g->rstd, (int)(n * H), m->linear_v_dim);
    zero(g->d_qn, n * LK), zero(g->d_kn, n * LK), zero(g->d_v, n * LV);
    zero(g->d_g, n * H), zero(g->d_beta, n * H);
    const gdn_args a = rule_of(k);
    const gdn_tensors t = rule_tensors(k);
    gated_delta_chunked_backward(&a, &t);
    zero(g->d_q, n * LK), zero(g->d_k, n * LK);
    l2norm_backward(g->d_q, g->d_qn, g->q, g->rq, n * HK, dk);
    l2norm_backward(g->d_k, g->d_kn, g->k, g->rk, n * HK, dk);
    zero(g->d_a, n * H), zero(g->d_b, n * H);
    const gdn_gate_tensors gt = gate_tensors(k);
    gdn_gates_backward(&gt, n, H);
    columns_join(g->d_conv, g->d_q, n, LC, 0, LK);
    columns_join(g->d_conv, g->d_k, n, LC, LK, LK);
    columns_join(g->d_conv, g->d_v, n, LC, 2 * LK, LV);
    zero(g->d_mixed, n * LC);
    const conv1d_args ca = conv_of(k);
    causal_conv1d_silu_backward(g->d_mixed, k->dw->la_conv, g->d_conv, g->mixed, k->w->la_conv,
                                &ca);
    for (int t0 = 0; t0 < n; t0 += k->chunk)
        in_backward(k, dx, t0, mt_chunk_rows((int)n, t0, k->chunk));
}

// out_proj, on the gated norm's output.
static attn_out gdn_out(const layer_call *k) {
    return (attn_out){.in = k->s->la.y,
                      .d_in = k->s->la.d_y,
                      .w = k->w->la_out,
                      .dw = k->dw ? k->dw->la_out : NULL,
                      .width = mt_gdn_value_width(&k->c->model)};
}

const attn_part attn_gdn_cpu = {gdn_forward, gdn_backward, gdn_out};
