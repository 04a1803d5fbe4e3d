// Multi-head latent attention's part of a decoder layer on the CPU backend (the kind ATTN_MLA),
// as transformers' DeepseekV3Attention computes it: the first norm; the queries from q_proj, or
// through q_a_proj -> RMSNorm -> q_b_proj; kv_a_proj_with_mqa's output split into the latent
// (mla_kv_rank) and one rotated key part (mla_rope_dim) that every head shares; the latent's
// RMSNorm and kv_b_proj, per head k's nope part then v; RoPE on each query's last mla_rope_dim
// and on the shared part; causal attention (packed documents) with q and k of nope + rope, v of
// mla_v_dim, and the softmax scale of model_mla_softmax_scale; o_proj is the skeleton's
// (mla_out). Forward and backward side by side. The token-wise work runs by chunks (mt_chunk_of),
// on full-size buffers: q, k, v and their gradients are the layer's ([n, H, nope + rope] and
// [n, H, v_dim], packed), the rest MT_CPU_MLA's (buffers.h).
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer_parts.h"
#include <string.h>

// The widths: heads, k's nope and rope parts, q's and k's head (dqk), v's head, the latent, the
// query rank (0: q_proj), kv_a_proj's output (KA) and kv_b_proj's (KB).
typedef struct {
    int H, dn, dr, dqk, dv, R, QR, KA, KB;
} mla_dims;

static mla_dims dims_of(const mt_model *m) {
    int dn = m->mla_nope_dim, dr = m->mla_rope_dim, dv = m->mla_v_dim;
    return (mla_dims){.H = m->heads,
                      .dn = dn,
                      .dr = dr,
                      .dqk = dn + dr,
                      .dv = dv,
                      .R = m->mla_kv_rank,
                      .QR = m->mla_q_rank > 0 ? m->mla_q_rank : 0,
                      .KA = m->mla_kv_rank + dr,
                      .KB = m->heads * (dn + dv)};
}

// Every head is its own key head (the keys are expanded from the latent per head).
static attn_args attention_args(const layer_call *k) {
    const mla_dims m = dims_of(&k->c->model);
    return (attn_args){.B = k->s->B,
                       .T = k->s->T,
                       .H = m.H,
                       .KV = m.H,
                       .hd = m.dqk,
                       .dv = m.dv,
                       .scale = model_mla_softmax_scale(&k->c->model),
                       .doc_start = k->s->doc_start,
                       .window = k->kind->window};
}

// RoPE on the last dr of each query head (heads of dqk), or (shared) on the rotated key part
// alone (rows of dr).
static rope_args rope_of(const layer_call *k, int shared) {
    const layer_scratch *s = k->s;
    const mla_dims m = dims_of(&k->c->model);
    return (rope_args){.inv_freq = s->inv_freq,
                       .scale = s->rope_scale,
                       .B = s->B,
                       .T = s->T,
                       .hd = shared ? m.dr : m.dqk,
                       .rot = m.dr,
                       .off = shared ? 0 : m.dn,
                       .interleave = k->c->model.rope_interleave,
                       .doc_start = s->doc_start};
}

// The columns [c0, c0 + w) of the n rows of x [n, C] to out [n, w], or (join) back.
static void columns_split(float *out, const float *x, long n, int C, int c0, int w) {
    for (long r = 0; r < n; r++) memcpy(out + r * w, x + r * C + c0, sizeof(float) * w);
}
static void columns_join(float *x, const float *in, long n, int C, int c0, int w) {
    for (long r = 0; r < n; r++) memcpy(x + r * C + c0, in + r * w, sizeof(float) * w);
}

// One chunk's projections: the first norm, the queries, kv_a_proj split into the latent and
// the rotated key part, the latent's norm and kv_b_proj.
static void project_forward(const layer_call *k, int t0, int rows) {
    const mt_model *model = &k->c->model;
    const layer_params *w = k->w;
    layer_scratch *s = k->s;
    mla_scratch *a = &s->mla;
    const mla_dims m = dims_of(model);
    int D = model->dim, HQ = m.H * m.dqk;
    float off = mt_norm_offset(model);
    float *n1 = s->n1 + (size_t)t0 * D, *q = s->q + (size_t)t0 * HQ;
    rmsnorm_offset_forward(n1, s->rstd1 + t0, k->x + (size_t)t0 * D, w->attn_norm, off, rows, D,
                           (float)model->norm_eps);
    if (m.QR) {
        float *qa = a->qa + (size_t)t0 * m.QR, *qan = a->qan + (size_t)t0 * m.QR;
        linear_forward(qa, n1, w->mla_q_a, NULL, rows, D, m.QR);
        rmsnorm_offset_forward(qan, a->rstd_qa + t0, qa, w->mla_q_a_norm, off, rows, m.QR,
                               MT_MLA_LATENT_NORM_EPS);
        linear_forward(q, qan, w->mla_q_b, NULL, rows, m.QR, HQ);
    } else {
        linear_forward(q, n1, w->mla_q, NULL, rows, D, HQ);
    }
    float *kva = a->kva + (size_t)t0 * m.KA, *lat = a->lat + (size_t)t0 * m.R;
    float *kvn = a->kvn + (size_t)t0 * m.R;
    linear_forward(kva, n1, w->mla_kv_a, NULL, rows, D, m.KA);
    columns_split(lat, kva, rows, m.KA, 0, m.R);
    columns_split(a->krot + (size_t)t0 * m.dr, kva, rows, m.KA, m.R, m.dr);
    rmsnorm_offset_forward(kvn, a->rstd_kv + t0, lat, w->mla_kv_a_norm, off, rows, m.R,
                           MT_MLA_LATENT_NORM_EPS);
    linear_forward(a->kvb + (size_t)t0 * m.KB, kvn, w->mla_kv_b, NULL, rows, m.R, m.KB);
}

// Per token and head, k = (kv_b's nope part, the shared rotated part) and v = kv_b's v part.
static void keys_values(const mla_dims *m, layer_scratch *s, long n) {
#pragma omp parallel for schedule(static)
    for (long t = 0; t < n; t++)
        for (int h = 0; h < m->H; h++) {
            const float *kvb = s->mla.kvb + t * m->KB + (long)h * (m->dn + m->dv);
            float *kh = s->k + (t * m->H + h) * m->dqk;
            memcpy(kh, kvb, sizeof(float) * m->dn);
            memcpy(kh + m->dn, s->mla.krot + t * m->dr, sizeof(float) * m->dr);
            memcpy(s->v + (t * m->H + h) * m->dv, kvb + m->dn, sizeof(float) * m->dv);
        }
}

static void mla_forward(const layer_call *k, int have_att) {
    layer_scratch *s = k->s;
    const mla_dims m = dims_of(&k->c->model);
    int n = s->B * s->T;
    for (int t0 = 0; t0 < n; t0 += k->chunk) project_forward(k, t0, mt_chunk_rows(n, t0, k->chunk));
    const rope_args rq = rope_of(k, 0), rk = rope_of(k, 1);
    rope_forward(s->q, m.H, &rq);
    rope_forward(s->mla.krot, 1, &rk);
    keys_values(&m, s, n);
    if (!have_att) {
        const attn_args a = attention_args(k);
        const attn_tensors t = layer_attn_tensors(k);
        attention_forward(&a, &t);
    }
}

// The gradients of k and v back into kv_b_proj's output (written over kvb, read for the last
// time in the forward) and the shared rotated part's, summed over the heads in head order.
static void keys_values_backward(const mla_dims *m, layer_scratch *s, long n) {
#pragma omp parallel for schedule(static)
    for (long t = 0; t < n; t++) {
        float *dkr = s->mla.d_krot + t * m->dr;
        memset(dkr, 0, sizeof(float) * m->dr);
        for (int h = 0; h < m->H; h++) {
            float *dkvb = s->mla.kvb + t * m->KB + (long)h * (m->dn + m->dv);
            const float *dkh = s->d_k + (t * m->H + h) * m->dqk;
            memcpy(dkvb, dkh, sizeof(float) * m->dn);
            memcpy(dkvb + m->dn, s->d_v + (t * m->H + h) * m->dv, sizeof(float) * m->dv);
            for (int i = 0; i < m->dr; i++) dkr[i] += dkh[m->dn + i];
        }
    }
}

// The queries' projections backward for one chunk: d_n1 += their input gradient.
static void query_backward(const layer_call *k, const mla_dims *m, int t0, int rows) {
    const mt_model *model = &k->c->model;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    mla_scratch *a = &s->mla;
    int D = model->dim, HQ = m->H * m->dqk;
    const float *n1 = s->n1 + (size_t)t0 * D, *dq = s->d_q + (size_t)t0 * HQ;
    float *dn1 = s->d_n1 + (size_t)t0 * D;
    if (!m->QR) {
        linear_backward(dn1, dw->mla_q, NULL, dq, n1, w->mla_q, rows, D, HQ);
        return;
    }
    size_t r = (size_t)t0 * m->QR, len = sizeof(float) * rows * m->QR;
    memset(a->d_qan + r, 0, len);
    linear_backward(a->d_qan + r, dw->mla_q_b, NULL, dq, a->qan + r, w->mla_q_b, rows, m->QR, HQ);
    memset(a->d_qa + r, 0, len);
    rmsnorm_offset_backward(a->d_qa + r, dw->mla_q_a_norm, a->d_qan + r, a->qa + r, w->mla_q_a_norm,
                            mt_norm_offset(model), a->rstd_qa + t0, rows, m->QR);
    linear_backward(dn1, dw->mla_q_a, NULL, a->d_qa + r, n1, w->mla_q_a, rows, D, m->QR);
}

// kv_b_proj, the latent's norm and kv_a_proj backward for one chunk (kv_a's output gradient
// joined in kva, free in the backward): d_n1 += their input gradient.
static void latent_backward(const layer_call *k, const mla_dims *m, int t0, int rows) {
    const mt_model *model = &k->c->model;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    mla_scratch *a = &s->mla;
    int D = model->dim;
    size_t r = (size_t)t0 * m->R, len = sizeof(float) * rows * m->R;
    float *dkva = a->kva + (size_t)t0 * m->KA;
    memset(a->d_kvn + r, 0, len);
    linear_backward(a->d_kvn + r, dw->mla_kv_b, NULL, a->kvb + (size_t)t0 * m->KB, a->kvn + r,
                    w->mla_kv_b, rows, m->R, m->KB);
    memset(a->d_lat + r, 0, len);
    rmsnorm_offset_backward(a->d_lat + r, dw->mla_kv_a_norm, a->d_kvn + r, a->lat + r,
                            w->mla_kv_a_norm, mt_norm_offset(model), a->rstd_kv + t0, rows, m->R);
    columns_join(dkva, a->d_lat + r, rows, m->KA, 0, m->R);
    columns_join(dkva, a->d_krot + (size_t)t0 * m->dr, rows, m->KA, m->R, m->dr);
    linear_backward(s->d_n1 + (size_t)t0 * D, dw->mla_kv_a, NULL, dkva, s->n1 + (size_t)t0 * D,
                    w->mla_kv_a, rows, D, m->KA);
}

// One chunk's projections backward and the first norm's: dx = d_h + the block's gradient.
static void project_backward(const layer_call *k, const mla_dims *m, float *dx, int t0, int rows) {
    const mt_model *model = &k->c->model;
    layer_scratch *s = k->s;
    int D = model->dim;
    size_t d = (size_t)t0 * D;
    memset(s->d_n1 + d, 0, sizeof(float) * rows * D);
    query_backward(k, m, t0, rows);
    latent_backward(k, m, t0, rows);
    memcpy(dx + d, s->d_h + d, sizeof(float) * rows * D);
    rmsnorm_offset_backward(dx + d, k->dw->attn_norm, s->d_n1 + d, k->x + d, k->w->attn_norm,
                            mt_norm_offset(model), s->rstd1 + t0, rows, D);
}

static void mla_backward(const layer_call *k, float *dx) {
    layer_scratch *s = k->s;
    const mla_dims m = dims_of(&k->c->model);
    int n = s->B * s->T;
    memset(s->d_q, 0, sizeof(float) * n * m.H * m.dqk);
    memset(s->d_k, 0, sizeof(float) * n * m.H * m.dqk);
    memset(s->d_v, 0, sizeof(float) * n * m.H * m.dv);
    const attn_args a = attention_args(k);
    const attn_tensors t = layer_attn_tensors(k);
    attention_backward(&a, &t);
    keys_values_backward(&m, s, n);
    const rope_args rq = rope_of(k, 0), rk = rope_of(k, 1);
    rope_backward(s->d_q, m.H, &rq);
    rope_backward(s->mla.d_krot, 1, &rk);
    for (int t0 = 0; t0 < n; t0 += k->chunk)
        project_backward(k, &m, dx, t0, mt_chunk_rows(n, t0, k->chunk));
}

// o_proj on the heads' outputs, heads x mla_v_dim wide.
static attn_out mla_out(const layer_call *k) {
    layer_scratch *s = k->s;
    return (attn_out){.in = s->att,
                      .d_in = s->d_att,
                      .w = k->w->mla_o,
                      .dw = k->dw ? k->dw->mla_o : NULL,
                      .width = k->c->model.heads * k->c->model.mla_v_dim};
}

const attn_part attn_mla_cpu = {mla_forward, mla_backward, mla_out};
