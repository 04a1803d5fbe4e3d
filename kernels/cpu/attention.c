// Causal grouped-query attention, flash-attention style: each query row keeps O(T) scratch,
// the softmax is summarized by its log-sum-exp, and the backward recomputes probabilities
// from it instead of storing a T x T matrix.
//
// Layouts: q, dq: [B, T, H, hd]; k, dk: [B, T, KV, hd]; v, dv: [B, T, KV, dv]; out, dout:
// [B, T, H, dv] (dv = hd but in multi-head latent attention); lse: [B, H, T].
// Query head h reads kv head h / (H / KV).
//
// Which keys query t sees: attn_args (kernels/attention_args.h), keys first_key .. t. Packed
// documents (data.pack): doc_start[b * T + t] is the position in row b where token t's document
// starts; NULL: every row is one document from position 0 (plain causal attention, the same
// arithmetic). A sliding window of W keys starts them no earlier than t - W + 1. Every loop runs
// over the visible keys (or, for a key, the queries that see it) only, so that a window of W
// costs O(T W), not O(T^2).
//
// Sinks (gpt-oss): query head h's learned logit sinks[h] joins each of its rows' softmax as one
// more score with no value, as transformers' eager gpt-oss attention concatenates it to the
// scores: the row's max and sum include it, the output does not. Its gradient is
// -sum over rows of p_sink * D, D = dout . out (the softmax's gradient with a zero value).
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int B, T, H, KV, hd, dv;
    float scale;
    const int32_t *doc_start; // [B, T] or NULL
    int window;               // 0: none
} attn_dims;

// The first key query t of row b attends to: its document's start, or its window's if later.
static int first_key(const attn_dims *d, int b, int t) {
    const int doc = d->doc_start ? d->doc_start[(long)b * d->T + t] : 0;
    const int win = attn_window_first(t, d->window);
    return doc > win ? doc : win;
}

// Whether query t of row b attends to key j <= t (in its document and its window).
static int attends(const attn_dims *d, int b, int t, int j) {
    return first_key(d, b, t) <= j;
}

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float a, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static long qoff(const attn_dims *d, int b, int t, int h) {
    return (((long)b * d->T + t) * d->H + h) * d->hd;
}
static long kvoff(const attn_dims *d, int b, int t, int kvh) {
    return (((long)b * d->T + t) * d->KV + kvh) * d->hd;
}
// v's and out's rows, dv wide
static long voff(const attn_dims *d, int b, int t, int kvh) {
    return (((long)b * d->T + t) * d->KV + kvh) * d->dv;
}
static long ooff(const attn_dims *d, int b, int t, int h) {
    return (((long)b * d->T + t) * d->H + h) * d->dv;
}
static long lseoff(const attn_dims *d, int b, int h, int t) {
    return ((long)b * d->H + h) * d->T + t;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) abort();
    return p;
}

// One query row: scores into s[0..t], then a two-pass softmax (max, then exp and sum).
static void attn_row_forward(const attn_dims *d, float *out, float *lse, const float *q,
                             const float *k, const float *v, const float *sinks, int b, int h,
                             int t, float *s, float *acc) {
    int kvh = h / (d->H / d->KV), hd = d->hd, dv = d->dv;
    const float *qt = q + qoff(d, b, t, h);
    float m = -INFINITY;
    int j0 = first_key(d, b, t);
    for (int j = j0; j <= t; j++) {
        s[j] = dot(qt, k + kvoff(d, b, j, kvh), hd) * d->scale;
        if (s[j] > m) m = s[j];
    }
    if (sinks && sinks[h] > m) m = sinks[h];
    float l = 0.0f;
    for (int i = 0; i < dv; i++) acc[i] = 0.0f;
    for (int j = j0; j <= t; j++) {
        float p = expf(s[j] - m);
        l += p;
        axpy(acc, p, v + voff(d, b, j, kvh), dv);
    }
    if (sinks) l += expf(sinks[h] - m);
    float *ot = out + ooff(d, b, t, h);
    for (int i = 0; i < dv; i++) ot[i] = acc[i] / l;
    lse[lseoff(d, b, h, t)] = m + logf(l);
}

static attn_dims dims_of(const attn_args *a) {
    const float scale = a->scale ? a->scale : 1.0f / sqrtf((float)a->hd);
    const int dv = a->dv ? a->dv : a->hd;
    return (attn_dims){a->B, a->T, a->H, a->KV, a->hd, dv, scale, a->doc_start, a->window};
}

void attention_forward(const attn_args *args, const attn_tensors *ts) {
    const attn_dims d = dims_of(args);
    const int T = d.T, H = d.H;
    long rows = (long)d.B * H * T;
#pragma omp parallel
    {
        float *s = xmalloc(sizeof(float) * (T + d.dv)), *acc = s + T;
        // Row cost grows with t, so hand out rows dynamically; each row is still computed by
        // exactly one thread, so the schedule does not change any bits.
#pragma omp for schedule(dynamic, 16)
        for (long r = 0; r < rows; r++) {
            int t = (int)(r % T), h = (int)(r / T % H), b = (int)(r / ((long)T * H));
            attn_row_forward(&d, ts->out, ts->lse, ts->q, ts->k, ts->v, ts->sinks, b, h, t, s, acc);
        }
        free(s);
    }
}

// p(t, j) recomputed from the stored log-sum-exp, bit for bit the same in both passes.
static float attn_prob(const attn_dims *d, const float *qt, const float *kj, float lse) {
    return expf(dot(qt, kj, d->hd) * d->scale - lse);
}

// Pass 1, per query row (b, h, t): Dt = dout_t . out_t (saved for pass 2) and
// dq_t += scale * sum_j p_tj * (dout_t . v_j - Dt) * k_j.
static void attn_row_dq(const attn_dims *d, float *dq, float *D, const float *dout,
                        const float *out, const float *lse, const float *q, const float *k,
                        const float *v, int b, int h, int t, float *acc) {
    int kvh = h / (d->H / d->KV), hd = d->hd, dv = d->dv;
    long qo = qoff(d, b, t, h), oo = ooff(d, b, t, h), lo = lseoff(d, b, h, t);
    const float *qt = q + qo, *gt = dout + oo;
    float Dt = dot(gt, out + oo, dv);
    D[lo] = Dt;
    for (int i = 0; i < hd; i++) acc[i] = 0.0f;
    for (int j = first_key(d, b, t); j <= t; j++) {
        const float *kj = k + kvoff(d, b, j, kvh), *vj = v + voff(d, b, j, kvh);
        float p = attn_prob(d, qt, kj, lse[lo]);
        axpy(acc, p * (dot(gt, vj, dv) - Dt), kj, hd);
    }
    axpy(dq + qo, d->scale, acc, hd);
}

// Pass 2, per key row (b, kvh, j): the sums over the group's query heads (in head order) and
// over the queries t >= j of key j's document and window (in position order), which attend to
// it (first_key is non-decreasing in t, so they run from j to the first that does not):
// dv_j += sum p_tj * dout_t and dk_j += scale * sum p_tj * (dout_t . v_j - Dt) * q_t.
static void attn_row_dkv(const attn_dims *d, float *dk, float *dv, const float *dout,
                         const float *lse, const float *D, const float *q, const float *k,
                         const float *v, int b, int kvh, int j, float *acck, float *accv) {
    int group = d->H / d->KV, hd = d->hd, vd = d->dv;
    long ko = kvoff(d, b, j, kvh), vo = voff(d, b, j, kvh);
    const float *kj = k + ko, *vj = v + vo;
    for (int i = 0; i < hd; i++) acck[i] = 0.0f;
    for (int i = 0; i < vd; i++) accv[i] = 0.0f;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        for (int t = j; t < d->T && attends(d, b, t, j); t++) {
            long qo = qoff(d, b, t, h), lo = lseoff(d, b, h, t);
            const float *qt = q + qo, *gt = dout + ooff(d, b, t, h);
            float p = attn_prob(d, qt, kj, lse[lo]);
            axpy(accv, p, gt, vd);
            axpy(acck, p * (dot(gt, vj, vd) - D[lo]), qt, hd);
        }
    }
    axpy(dk + ko, d->scale, acck, hd);
    axpy(dv + vo, 1.0f, accv, vd);
}

// The sinks' gradient: per query head, -sum of p_sink * D over its rows, in row order (one
// owner a head: the same bits for any thread count).
static void sinks_backward(const attn_dims *d, float *dsinks, const float *sinks, const float *lse,
                           const float *D) {
#pragma omp parallel for schedule(static)
    for (int h = 0; h < d->H; h++) {
        double sum = 0.0;
        for (int b = 0; b < d->B; b++)
            for (int t = 0; t < d->T; t++) {
                long lo = lseoff(d, b, h, t);
                sum += (double)expf(sinks[h] - lse[lo]) * D[lo];
            }
        dsinks[h] -= (float)sum;
    }
}

// Two passes so that every output row has one owner: dq by query row, then dk and dv by key
// row. This recomputes the probabilities twice but needs no atomics and no T x T storage.
void attention_backward(const attn_args *args, const attn_tensors *ts) {
    const attn_dims d = dims_of(args);
    const int T = d.T, H = d.H, KV = d.KV, hd = d.hd;
    long qrows = (long)d.B * H * T, kvrows = (long)d.B * KV * T;
    float *D = xmalloc(sizeof(float) * qrows);
#pragma omp parallel
    {
        float *acc = xmalloc(sizeof(float) * (hd + d.dv)); // dq's (or dk's), then dv's
#pragma omp for schedule(dynamic, 16)
        for (long r = 0; r < qrows; r++) {
            int t = (int)(r % T), h = (int)(r / T % H), b = (int)(r / ((long)T * H));
            attn_row_dq(&d, ts->dq, D, ts->dout, ts->out, ts->lse, ts->q, ts->k, ts->v, b, h, t,
                        acc);
        }
        // The implicit barrier above publishes D to every thread.
#pragma omp for schedule(dynamic, 16)
        for (long r = 0; r < kvrows; r++) {
            int j = (int)(r % T), kvh = (int)(r / T % KV), b = (int)(r / ((long)T * KV));
            attn_row_dkv(&d, ts->dk, ts->dv, ts->dout, ts->lse, D, ts->q, ts->k, ts->v, b, kvh, j,
                         acc, acc + hd);
        }
        free(acc);
    }
    if (ts->sinks) sinks_backward(&d, ts->dsinks, ts->sinks, ts->lse, D);
    free(D);
}
