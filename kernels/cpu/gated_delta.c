// The gated delta rule token by token (transformers' torch_recurrent_gated_delta_rule): the
// oracle that the chunked form (gated_delta_chunked.c) is checked against. Per (b, h) the state
// S [dk, dv] is decayed, corrected toward v_t along k_t, and read by q_t:
//   S' = exp(g_t) S;  delta = beta_t (v_t - S'^T k_t);  S = S' + k_t delta^T;  o_t = scale S^T q_t.
// The backward walks the tokens in reverse; it recomputes the states a chunk of GDN_CHUNK
// tokens at a time from a checkpoint kept at each chunk's start, so memory stays
// O(T / GDN_CHUNK + GDN_CHUNK) states per head.
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) abort();
    return p;
}

// One token's pointers for value head h.
typedef struct {
    const float *q, *k, *v;
    float g, beta;
} gdn_token;

static gdn_token token_at(const gdn_args *a, const gdn_tensors *t, int b, int tt, int h) {
    int hk = h / (a->H / a->HK);
    long go = gdn_gate_off(a, b, tt, h);
    return (gdn_token){t->q + gdn_qk_off(a, b, tt, hk), t->k + gdn_qk_off(a, b, tt, hk),
                       t->v + gdn_v_off(a, b, tt, h), t->g[go], t->beta[go]};
}

// S: decay, write the correction, and (out != NULL) read.
static void step_forward(const gdn_args *a, float *S, const gdn_token *x, float *out,
                         float *delta) {
    int dk = a->dk, dv = a->dv;
    float decay = expf(x->g);
    for (long i = 0; i < (long)dk * dv; i++) S[i] *= decay;
    for (int n = 0; n < dv; n++) delta[n] = 0.0f;
    for (int m = 0; m < dk; m++)
        for (int n = 0; n < dv; n++) delta[n] += S[(long)m * dv + n] * x->k[m];
    for (int n = 0; n < dv; n++) delta[n] = x->beta * (x->v[n] - delta[n]);
    for (int m = 0; m < dk; m++)
        for (int n = 0; n < dv; n++) S[(long)m * dv + n] += x->k[m] * delta[n];
    if (!out) return;
    for (int n = 0; n < dv; n++) out[n] = 0.0f;
    for (int m = 0; m < dk; m++)
        for (int n = 0; n < dv; n++) out[n] += S[(long)m * dv + n] * x->q[m];
    for (int n = 0; n < dv; n++) out[n] *= a->scale;
}

void gated_delta_recurrent_forward(const gdn_args *a, const gdn_tensors *t) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < a->B * a->H; bh++) {
        int b = bh / a->H, h = bh % a->H;
        float *S = xcalloc((size_t)a->dk * a->dv + a->dv, sizeof(float)),
              *delta = S + (size_t)a->dk * a->dv;
        for (int tt = 0; tt < a->T; tt++) {
            if (gdn_starts_document(a, b, tt)) memset(S, 0, sizeof(float) * a->dk * a->dv);
            gdn_token x = token_at(a, t, b, tt, h);
            step_forward(a, S, &x, t->out + gdn_v_off(a, b, tt, h), delta);
        }
        free(S);
    }
}

// ---- backward ----------------------------------------------------------------------------

// One worker's buffers: the checkpoints (the state before each chunk), the states after each
// token of the chunk being walked back, the state gradient and a token's vectors.
typedef struct {
    float *ckpt, *states, *dS, *prev_zero, *kv, *delta, *ddelta;
} recurrent_scratch;

static recurrent_scratch scratch_new(const gdn_args *a) {
    size_t SS = (size_t)a->dk * a->dv, chunks = (a->T + GDN_CHUNK - 1) / GDN_CHUNK;
    float *p = xcalloc(SS * (chunks + GDN_CHUNK + 2) + 3 * (size_t)a->dv, sizeof(float));
    recurrent_scratch s = {.ckpt = p, .states = p + SS * chunks};
    s.dS = s.states + SS * GDN_CHUNK, s.prev_zero = s.dS + SS;
    s.kv = s.prev_zero + SS, s.delta = s.kv + a->dv, s.ddelta = s.delta + a->dv;
    return s;
}

// The whole row forward, keeping only the state before each chunk of GDN_CHUNK tokens.
static void checkpoint_states(const gdn_args *a, const gdn_tensors *t, int b, int h,
                              recurrent_scratch *s) {
    size_t SS = (size_t)a->dk * a->dv;
    float *S = s->states; // a work state, overwritten by the walk back
    memset(S, 0, sizeof(float) * SS);
    for (int tt = 0; tt < a->T; tt++) {
        if (gdn_starts_document(a, b, tt)) memset(S, 0, sizeof(float) * SS);
        if (tt % GDN_CHUNK == 0) memcpy(s->ckpt + SS * (tt / GDN_CHUNK), S, sizeof(float) * SS);
        gdn_token x = token_at(a, t, b, tt, h);
        step_forward(a, S, &x, NULL, s->delta);
    }
}

// The gradients of one value head's token in q, k, v, g, beta.
typedef struct {
    float *dq, *dk, *dv, *dg, *dbeta;
} token_grads;

// Back through o = scale S^T q: dq += scale S do, dS += scale q do^T.
static void read_backward(const gdn_args *a, const float *S, float *dS, const gdn_token *x,
                          const float *dout, float *dq) {
    int dk = a->dk, dv = a->dv;
    for (int m = 0; m < dk; m++) {
        float acc = 0.0f;
        for (int n = 0; n < dv; n++) {
            acc += S[(long)m * dv + n] * dout[n];
            dS[(long)m * dv + n] += a->scale * x->q[m] * dout[n];
        }
        dq[m] += a->scale * acc;
    }
}

// Back through S = exp(g) prev + k delta^T, delta = beta (v - exp(g) prev^T k); dS holds the
// gradient of S on entry and of prev on return. prev is the zero state at a document's start.
static void write_backward(const gdn_args *a, const float *prev, float *dS, const gdn_token *x,
                           const token_grads *d, recurrent_scratch *s) {
    int dk = a->dk, dv = a->dv;
    float decay = expf(x->g), *kv = s->kv, *ddelta = s->ddelta;
    for (int n = 0; n < dv; n++) kv[n] = ddelta[n] = 0.0f;
    for (int m = 0; m < dk; m++)
        for (int n = 0; n < dv; n++) {
            kv[n] += decay * prev[(long)m * dv + n] * x->k[m];
            ddelta[n] += dS[(long)m * dv + n] * x->k[m];
        }
    float dbeta = 0.0f;
    for (int n = 0; n < dv; n++) {
        float delta = x->beta * (x->v[n] - kv[n]);
        dbeta += ddelta[n] * (x->v[n] - kv[n]);
        d->dv[n] += x->beta * ddelta[n];
        s->delta[n] = delta;
        ddelta[n] *= -x->beta; // now the gradient of kv = S'^T k
    }
    *d->dbeta += dbeta;
    float dg = 0.0f;
    for (int m = 0; m < dk; m++) {
        float dkm = 0.0f;
        for (int n = 0; n < dv; n++) {
            long e = (long)m * dv + n;
            dkm += dS[e] * s->delta[n] + decay * prev[e] * ddelta[n];
            dS[e] += x->k[m] * ddelta[n]; // now the gradient of S' = exp(g) prev
            dg += dS[e] * prev[e];
            dS[e] *= decay;
        }
        d->dk[m] += dkm;
    }
    *d->dg += decay * dg;
}

// Walks the chunk [c0, c1) of value head h back: recomputes its states from the checkpoint,
// then back through each token's read and write.
static void chunk_backward(const gdn_args *a, const gdn_tensors *t, int b, int h, int c0, int c1,
                           recurrent_scratch *s) {
    size_t SS = (size_t)a->dk * a->dv;
    const float *ck = s->ckpt + SS * (c0 / GDN_CHUNK);
    for (int tt = c0; tt < c1; tt++) {
        float *S = s->states + SS * (tt - c0);
        if (gdn_starts_document(a, b, tt))
            memset(S, 0, sizeof(float) * SS);
        else
            memcpy(S, tt == c0 ? ck : S - SS, sizeof(float) * SS);
        gdn_token x = token_at(a, t, b, tt, h);
        step_forward(a, S, &x, NULL, s->delta);
    }
    int hk = h / (a->H / a->HK);
    for (int tt = c1 - 1; tt >= c0; tt--) {
        gdn_token x = token_at(a, t, b, tt, h);
        int fresh = gdn_starts_document(a, b, tt);
        const float *prev = fresh ? s->prev_zero : tt == c0 ? ck : s->states + SS * (tt - c0 - 1);
        long go = gdn_gate_off(a, b, tt, h);
        token_grads d = {t->dq + gdn_qk_off(a, b, tt, hk), t->dk + gdn_qk_off(a, b, tt, hk),
                         t->dv + gdn_v_off(a, b, tt, h), t->dg + go, t->dbeta + go};
        read_backward(a, s->states + SS * (tt - c0), s->dS, &x, t->dout + gdn_v_off(a, b, tt, h),
                      d.dq);
        write_backward(a, prev, s->dS, &x, &d, s);
        if (fresh) memset(s->dS, 0, sizeof(float) * SS); // nothing flows into the last document
    }
}

// One worker per (b, query/key head): the value heads that share its q and k run one after the
// other, so that dq and dk add up in a fixed order.
void gated_delta_recurrent_backward(const gdn_args *a, const gdn_tensors *t) {
    int group = a->H / a->HK;
#pragma omp parallel for schedule(dynamic, 1)
    for (int bk = 0; bk < a->B * a->HK; bk++) {
        int b = bk / a->HK, hk = bk % a->HK;
        recurrent_scratch s = scratch_new(a);
        for (int h = hk * group; h < (hk + 1) * group; h++) {
            checkpoint_states(a, t, b, h, &s);
            memset(s.dS, 0, sizeof(float) * a->dk * a->dv);
            for (int c0 = (a->T - 1) / GDN_CHUNK * GDN_CHUNK; c0 >= 0; c0 -= GDN_CHUNK)
                chunk_backward(a, t, b, h, c0, c0 + GDN_CHUNK < a->T ? c0 + GDN_CHUNK : a->T, &s);
        }
        free(s.ckpt);
    }
}
