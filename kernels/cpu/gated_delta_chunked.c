// The gated delta rule a chunk at a time (transformers' torch_chunk_gated_delta_rule, the WY/UT
// form): within a chunk of L <= GDN_CHUNK tokens entered with state S0, with gamma_i the
// cumulative sum of g over the chunk's tokens 0..i and D_ij = exp(gamma_i - gamma_j),
//   the corrections Delta (L x dv) solve (I + A) Delta = R, a unit lower triangular system:
//     A_ij = beta_i (k_i . k_j) D_ij (j < i),  R_i = beta_i (v_i - exp(gamma_i) S0^T k_i);
//   o_i = scale (exp(gamma_i) S0^T q_i + sum_{j <= i} (q_i . k_j) D_ij Delta_j);
//   S_end = exp(gamma_last) S0 + sum_j exp(gamma_last - gamma_j) k_j Delta_j^T,
// which is the recurrence of gated_delta.c unrolled (Delta_i is its delta at token i).
// The backward keeps each chunk's S0 from a forward pass, then walks the chunks back,
// recomputing A and Delta.
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { C = GDN_CHUNK };

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) abort();
    return p;
}

// One chunk of value head h: its L tokens' rows from t0 on, each tensor with its token stride.
typedef struct {
    const float *q, *k, *v, *g, *beta;
    long qk_stride, v_stride, g_stride;
    int L;
} chunk_view;

static chunk_view chunk_at(const gdn_args *a, const gdn_tensors *t, int b, int h, int t0, int t1) {
    int hk = h / (a->H / a->HK);
    long go = gdn_gate_off(a, b, t0, h);
    return (chunk_view){t->q + gdn_qk_off(a, b, t0, hk),
                        t->k + gdn_qk_off(a, b, t0, hk),
                        t->v + gdn_v_off(a, b, t0, h),
                        t->g + go,
                        t->beta + go,
                        (long)a->HK * a->dk,
                        (long)a->H * a->dv,
                        a->H,
                        t1 - t0};
}

static float dot(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

// out[n] = sum_m S[m, n] x[m]
static void state_read(float *out, const float *S, const float *x, int dk, int dv) {
    for (int n = 0; n < dv; n++) out[n] = 0.0f;
    for (int m = 0; m < dk; m++)
        for (int n = 0; n < dv; n++) out[n] += S[(long)m * dv + n] * x[m];
}

// One worker's buffers.
typedef struct {
    float *gamma, *dgamma, *A, *Delta, *dDelta, *dR, *vec, *vec2, *S, *dS, *dS0, *ckpt;
} chunk_scratch;

static chunk_scratch scratch_new(const gdn_args *a, long chunks) {
    size_t SS = (size_t)a->dk * a->dv, LV = (size_t)C * a->dv;
    float *p = xcalloc(2 * C + C * C + 3 * LV + 2 * a->dv + SS * (3 + chunks), sizeof(float));
    chunk_scratch s = {.gamma = p, .dgamma = p + C, .A = p + 2 * C};
    s.Delta = s.A + C * C, s.dDelta = s.Delta + LV, s.dR = s.dDelta + LV, s.vec = s.dR + LV;
    s.vec2 = s.vec + a->dv, s.S = s.vec2 + a->dv;
    s.dS = s.S + SS, s.dS0 = s.dS + SS, s.ckpt = s.dS0 + SS;
    return s;
}

// gamma, A and Delta of the chunk entered with state S0.
static void chunk_solve(const gdn_args *a, const chunk_view *c, const float *S0, chunk_scratch *s) {
    int dk = a->dk, dv = a->dv, L = c->L;
    float acc = 0.0f;
    for (int i = 0; i < L; i++) s->gamma[i] = acc += c->g[i * c->g_stride];
    for (int i = 0; i < L; i++) {
        const float *ki = c->k + i * c->qk_stride;
        float beta = c->beta[i * c->g_stride], decay = expf(s->gamma[i]),
              *Di = s->Delta + (long)i * dv;
        for (int j = 0; j < i; j++)
            s->A[i * C + j] =
                beta * dot(ki, c->k + j * c->qk_stride, dk) * expf(s->gamma[i] - s->gamma[j]);
        state_read(s->vec, S0, ki, dk, dv);
        for (int n = 0; n < dv; n++) Di[n] = beta * (c->v[i * c->v_stride + n] - decay * s->vec[n]);
        for (int j = 0; j < i; j++) // forward substitution, in fp32
            for (int n = 0; n < dv; n++) Di[n] -= s->A[i * C + j] * s->Delta[(long)j * dv + n];
    }
}

// The chunk's outputs from its S0 (s->S) and Delta.
static void chunk_outputs(const gdn_args *a, const chunk_view *c, float *out, long out_stride,
                          chunk_scratch *s) {
    int dk = a->dk, dv = a->dv;
    for (int i = 0; i < c->L; i++) {
        const float *qi = c->q + i * c->qk_stride;
        float *oi = out + i * out_stride, decay = expf(s->gamma[i]);
        state_read(oi, s->S, qi, dk, dv);
        for (int n = 0; n < dv; n++) oi[n] *= decay;
        for (int j = 0; j <= i; j++) {
            float p = dot(qi, c->k + j * c->qk_stride, dk) * expf(s->gamma[i] - s->gamma[j]);
            for (int n = 0; n < dv; n++) oi[n] += p * s->Delta[(long)j * dv + n];
        }
        for (int n = 0; n < dv; n++) oi[n] *= a->scale;
    }
}

// s->S from the chunk's S0 to its S_end, in place.
static void chunk_advance(const gdn_args *a, const chunk_view *c, chunk_scratch *s) {
    int dk = a->dk, dv = a->dv;
    float last = s->gamma[c->L - 1], decay = expf(last);
    for (long e = 0; e < (long)dk * dv; e++) s->S[e] *= decay;
    for (int j = 0; j < c->L; j++) {
        const float *kj = c->k + j * c->qk_stride;
        float w = expf(last - s->gamma[j]);
        for (int m = 0; m < dk; m++)
            for (int n = 0; n < dv; n++)
                s->S[(long)m * dv + n] += w * kj[m] * s->Delta[(long)j * dv + n];
    }
}

// Walks row b of value head h chunk by chunk; keep_ckpt: store each chunk's S0 in s->ckpt.
// out NULL: no outputs (the backward's state pass).
static void walk_chunks(const gdn_args *a, const gdn_tensors *t, int b, int h, float *out,
                        int keep_ckpt, chunk_scratch *s) {
    size_t SS = (size_t)a->dk * a->dv;
    long n = 0;
    for (int t0 = 0, t1; t0 < a->T; t0 = t1, n++) {
        t1 = gdn_chunk_end(a, b, t0);
        if (gdn_starts_document(a, b, t0)) memset(s->S, 0, sizeof(float) * SS);
        if (keep_ckpt) memcpy(s->ckpt + SS * n, s->S, sizeof(float) * SS);
        chunk_view c = chunk_at(a, t, b, h, t0, t1);
        chunk_solve(a, &c, s->S, s);
        if (out) chunk_outputs(a, &c, out + gdn_v_off(a, b, t0, h), (long)a->H * a->dv, s);
        chunk_advance(a, &c, s);
    }
}

static long count_chunks(const gdn_args *a) {
    long most = 0;
    for (int b = 0; b < a->B; b++) {
        long n = 0;
        for (int t0 = 0; t0 < a->T; t0 = gdn_chunk_end(a, b, t0)) n++;
        most = n > most ? n : most;
    }
    return most;
}

void gated_delta_chunked_forward(const gdn_args *a, const gdn_tensors *t) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < a->B * a->H; bh++) {
        chunk_scratch s = scratch_new(a, 0);
        walk_chunks(a, t, bh / a->H, bh % a->H, t->out, 0, &s);
        free(s.gamma);
    }
}

// ---- backward ----------------------------------------------------------------------------

// The gradients of one chunk's tokens, with the strides of chunk_view.
typedef struct {
    float *dq, *dk, *dv, *dg, *dbeta;
    const float *dout;
} chunk_grads;

static chunk_grads chunk_grads_at(const gdn_args *a, const gdn_tensors *t, int b, int h, int t0) {
    int hk = h / (a->H / a->HK);
    long go = gdn_gate_off(a, b, t0, h);
    return (chunk_grads){t->dq + gdn_qk_off(a, b, t0, hk),
                         t->dk + gdn_qk_off(a, b, t0, hk),
                         t->dv + gdn_v_off(a, b, t0, h),
                         t->dg + go,
                         t->dbeta + go,
                         t->dout + gdn_v_off(a, b, t0, h)};
}

// Back through S_end = exp(gamma_last) S0 + sum_j exp(gamma_last - gamma_j) k_j Delta_j^T with
// s->dS its gradient: starts s->dS0, dDelta and dgamma.
static void state_backward(const gdn_args *a, const chunk_view *c, const chunk_grads *d,
                           const float *S0, chunk_scratch *s) {
    int dk = a->dk, dv = a->dv, L = c->L;
    float last = s->gamma[L - 1], decay = expf(last), dlast = 0.0f;
    for (long e = 0; e < (long)dk * dv; e++) {
        s->dS0[e] = decay * s->dS[e];
        dlast += decay * S0[e] * s->dS[e];
    }
    for (int j = 0; j < L; j++) {
        const float *kj = c->k + j * c->qk_stride, *Dj = s->Delta + (long)j * dv;
        float w = expf(last - s->gamma[j]), *dDj = s->dDelta + (long)j * dv;
        for (int n = 0; n < dv; n++) dDj[n] = 0.0f;
        float dw = 0.0f;
        for (int m = 0; m < dk; m++) {
            const float *dSm = s->dS + (long)m * dv;
            float u = dot(dSm, Dj, dv);
            d->dk[j * c->qk_stride + m] += w * u;
            dw += kj[m] * u;
            for (int n = 0; n < dv; n++) dDj[n] += w * kj[m] * dSm[n];
        }
        s->dgamma[j] = -w * dw;
        dlast += w * dw;
    }
    s->dgamma[L - 1] += dlast;
}

// Back through o_i = scale (exp(gamma_i) S0^T q_i + sum_{j <= i} (q_i . k_j) D_ij Delta_j).
static void output_backward(const gdn_args *a, const chunk_view *c, const chunk_grads *d,
                            const float *S0, chunk_scratch *s) {
    int dk = a->dk, dv = a->dv, L = c->L;
    float *dO = s->vec, *sq = s->vec2;
    for (int i = 0; i < L; i++) {
        const float *qi = c->q + i * c->qk_stride;
        float *dqi = d->dq + i * c->qk_stride, decay = expf(s->gamma[i]);
        for (int n = 0; n < dv; n++) dO[n] = a->scale * d->dout[i * c->v_stride + n];
        state_read(sq, S0, qi, dk, dv);
        s->dgamma[i] += decay * dot(dO, sq, dv);
        for (int m = 0; m < dk; m++) {
            dqi[m] += decay * dot(S0 + (long)m * dv, dO, dv);
            for (int n = 0; n < dv; n++) s->dS0[(long)m * dv + n] += decay * qi[m] * dO[n];
        }
        for (int j = 0; j <= i; j++) {
            const float *kj = c->k + j * c->qk_stride;
            float D = expf(s->gamma[i] - s->gamma[j]), P = dot(qi, kj, dk) * D;
            float dP = dot(dO, s->Delta + (long)j * dv, dv);
            for (int n = 0; n < dv; n++) s->dDelta[(long)j * dv + n] += P * dO[n];
            for (int m = 0; m < dk; m++) {
                dqi[m] += dP * D * kj[m];
                d->dk[j * c->qk_stride + m] += dP * D * qi[m];
            }
            s->dgamma[i] += dP * P, s->dgamma[j] -= dP * P;
        }
    }
}

// Back through R_i = beta_i (v_i - exp(gamma_i) S0^T k_i), with dR_i in s->dR.
static void rhs_backward(const gdn_args *a, const chunk_view *c, const chunk_grads *d,
                         const float *S0, chunk_scratch *s) {
    int dk = a->dk, dv = a->dv;
    float *sk = s->vec;
    for (int i = 0; i < c->L; i++) {
        const float *ki = c->k + i * c->qk_stride, *vi = c->v + i * c->v_stride;
        const float *dRi = s->dR + (long)i * dv;
        float beta = c->beta[i * c->g_stride], decay = expf(s->gamma[i]), dbeta = 0.0f;
        state_read(sk, S0, ki, dk, dv);
        for (int n = 0; n < dv; n++) {
            d->dv[i * c->v_stride + n] += beta * dRi[n];
            dbeta += dRi[n] * (vi[n] - decay * sk[n]);
        }
        d->dbeta[i * c->g_stride] += dbeta;
        s->dgamma[i] -= beta * decay * dot(dRi, sk, dv);
        for (int m = 0; m < dk; m++) {
            d->dk[i * c->qk_stride + m] -= beta * decay * dot(S0 + (long)m * dv, dRi, dv);
            for (int n = 0; n < dv; n++) s->dS0[(long)m * dv + n] -= beta * decay * ki[m] * dRi[n];
        }
    }
}

// Back through (I + A) Delta = R: dR = (I + A)^-T dDelta by back substitution, then
// dA_ij = -dR_i . Delta_j into A_ij = beta_i (k_i . k_j) D_ij.
static void solve_backward(const gdn_args *a, const chunk_view *c, const chunk_grads *d,
                           chunk_scratch *s) {
    int dk = a->dk, dv = a->dv, L = c->L;
    for (int i = L - 1; i >= 0; i--) {
        float *dRi = s->dR + (long)i * dv;
        memcpy(dRi, s->dDelta + (long)i * dv, sizeof(float) * dv);
        for (int j = i + 1; j < L; j++)
            for (int n = 0; n < dv; n++) dRi[n] -= s->A[j * C + i] * s->dR[(long)j * dv + n];
    }
    for (int i = 0; i < L; i++) {
        const float *ki = c->k + i * c->qk_stride;
        float beta = c->beta[i * c->g_stride];
        for (int j = 0; j < i; j++) {
            const float *kj = c->k + j * c->qk_stride;
            float dA = -dot(s->dR + (long)i * dv, s->Delta + (long)j * dv, dv);
            float D = expf(s->gamma[i] - s->gamma[j]), w = dA * beta * D;
            d->dbeta[i * c->g_stride] += dA * dot(ki, kj, dk) * D;
            for (int m = 0; m < dk; m++) {
                d->dk[i * c->qk_stride + m] += w * kj[m];
                d->dk[j * c->qk_stride + m] += w * ki[m];
            }
            float dgam = dA * s->A[i * C + j];
            s->dgamma[i] += dgam, s->dgamma[j] -= dgam;
        }
    }
}

// One chunk back: s->dS holds the gradient of its S_end on entry and of its S0 on return.
static void chunk_backward(const gdn_args *a, const chunk_view *c, const chunk_grads *d,
                           const float *S0, chunk_scratch *s) {
    chunk_solve(a, c, S0, s);
    state_backward(a, c, d, S0, s);
    output_backward(a, c, d, S0, s);
    solve_backward(a, c, d, s);
    rhs_backward(a, c, d, S0, s);
    float acc = 0.0f; // gamma_i sums g_0..g_i: dg_m is the sum of dgamma_i over i >= m
    for (int i = c->L - 1; i >= 0; i--) d->dg[i * c->g_stride] += acc += s->dgamma[i];
    float *swap = s->dS;
    s->dS = s->dS0, s->dS0 = swap;
}

// The chunk starts of row b, in order, into starts[]; returns how many.
static long chunk_starts(const gdn_args *a, int b, int *starts) {
    long n = 0;
    for (int t0 = 0; t0 < a->T; t0 = gdn_chunk_end(a, b, t0)) starts[n++] = t0;
    return n;
}

// One worker per (b, query/key head), its value heads one after the other (dq and dk add up in
// a fixed order).
void gated_delta_chunked_backward(const gdn_args *a, const gdn_tensors *t) {
    int group = a->H / a->HK;
    long most = count_chunks(a);
    size_t SS = (size_t)a->dk * a->dv;
#pragma omp parallel for schedule(dynamic, 1)
    for (int bk = 0; bk < a->B * a->HK; bk++) {
        int b = bk / a->HK, hk = bk % a->HK;
        chunk_scratch s = scratch_new(a, most);
        float *base = s.gamma;
        int *starts = xcalloc(most + 1, sizeof(int));
        long n = chunk_starts(a, b, starts);
        starts[n] = a->T;
        for (int h = hk * group; h < (hk + 1) * group; h++) {
            walk_chunks(a, t, b, h, NULL, 1, &s);
            memset(s.dS, 0, sizeof(float) * SS);
            for (long i = n - 1; i >= 0; i--) {
                chunk_view c = chunk_at(a, t, b, h, starts[i], starts[i + 1]);
                chunk_grads d = chunk_grads_at(a, t, b, h, starts[i]);
                chunk_backward(a, &c, &d, s.ckpt + SS * i, &s);
                if (gdn_starts_document(a, b, starts[i])) memset(s.dS, 0, sizeof(float) * SS);
            }
        }
        free(starts);
        free(base);
    }
}
