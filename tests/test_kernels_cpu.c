// Gradient checks of the fp32 CPU reference kernels.
//
// For every kernel, L = sum(out * R) with a fixed random R; the backward (run with dout = R,
// on top of random prior values to check that it accumulates) must match central finite
// differences of L on a random subset of coordinates of every input and weight. The forwards
// are checked against naive double-precision references, and every kernel must give bitwise
// identical results with 1 and 3 OpenMP threads.
#include "kernels/cpu/kernels_cpu.h"
#include "tests/check.h"
#include "tests/kernel_check.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FD_COORDS = 30 };
static const float FD_EPS = 1e-3f;
static const double FD_TOL = 1e-2, FWD_TOL = 1e-5;

// ---- helpers -----------------------------------------------------------------------------

static float *rand_vec(long n) {
    return rand_in(n, -1.0f, 1.0f);
}

static void report(int ok, const char *what, const char *name, double err) {
    printf("%-4s %-11s %-32s %.3g\n", ok ? "ok" : "FAIL", what, name, err);
    if (ok)
        passed++;
    else
        failed++;
}

// The backward's grad against central differences of loss on FD_COORDS coordinates of p.
static void fd_check(const char *name, float *p, long n, const float *grad, loss_fn loss,
                     void *ctx) {
    double rel = fd_rel_err(p, n, grad, loss, ctx, FD_EPS, FD_COORDS);
    report(rel < FD_TOL, "gradcheck", name, rel);
}

static void fwd_check(const char *name, const float *got, const double *ref, long n) {
    double max_err = 0.0, max_ref = 1e-6;
    for (long i = 0; i < n; i++) {
        max_err = fmax(max_err, fabs(got[i] - ref[i]));
        max_ref = fmax(max_ref, fabs(ref[i]));
    }
    double rel = max_err / max_ref;
    report(rel < FWD_TOL, "forward", name, rel);
}

static void det_check(const char *name, run_fn fn, void *ctx, long nout) {
    report(same_on_1_and_3_threads(fn, ctx, nout), "determinism", name, 0.0);
}

// ---- embedding ---------------------------------------------------------------------------

typedef struct {
    int n, dim, vocab;
    int32_t *tokens;
    float *table, *R, *out;
} emb_case;

static double emb_loss(void *p) {
    emb_case *c = p;
    embedding_forward(c->out, c->tokens, c->table, c->n, c->dim);
    return dot_d(c->out, c->R, (long)c->n * c->dim);
}

static void emb_run(void *p, float *o) {
    emb_case *c = p;
    embedding_backward(o, c->R, c->tokens, c->n, c->dim);
}

static void test_embedding(void) {
    emb_case c = {.n = 40, .dim = 70, .vocab = 5}; // 40 tokens over 5 ids: many repeats
    long nt = (long)c.vocab * c.dim, no = (long)c.n * c.dim;
    c.tokens = malloc(sizeof(int32_t) * c.n);
    for (int t = 0; t < c.n; t++) c.tokens[t] = rng_int(c.vocab);
    c.table = rand_vec(nt), c.R = rand_vec(no), c.out = malloc(sizeof(float) * no);

    double *ref = malloc(sizeof(double) * no);
    for (long i = 0; i < no; i++) ref[i] = c.table[(long)c.tokens[i / c.dim] * c.dim + i % c.dim];
    emb_loss(&c);
    fwd_check("embedding", c.out, ref, no);

    float *prior = rand_vec(nt), *dtable = copy_vec(prior, nt);
    embedding_backward(dtable, c.R, c.tokens, c.n, c.dim);
    float *g = grad_delta(dtable, prior, nt);
    fd_check("embedding dtable", c.table, nt, g, emb_loss, &c);
    det_check("embedding backward", emb_run, &c, nt);
    free(ref), free(prior), free(dtable), free(g);
    free(c.tokens), free(c.table), free(c.R), free(c.out);
}

// ---- rmsnorm -----------------------------------------------------------------------------

// offset: the weight applied as (offset + w), 1 for zero-centred weights (rmsnorm_offset_*).
typedef struct {
    int n, dim;
    float eps, offset;
    float *x, *w, *R, *out, *rstd;
} rms_case;

static double rms_loss(void *p) {
    rms_case *c = p;
    rmsnorm_offset_forward(c->out, c->rstd, c->x, c->w, c->offset, c->n, c->dim, c->eps);
    return dot_d(c->out, c->R, (long)c->n * c->dim);
}

static void rms_run(void *p, float *o) {
    rms_case *c = p;
    rmsnorm_offset_forward(o, o + (long)c->n * c->dim, c->x, c->w, c->offset, c->n, c->dim, c->eps);
    float *dx = o + (long)c->n * (c->dim + 1), *dw = dx + (long)c->n * c->dim;
    rmsnorm_offset_backward(dx, dw, c->R, c->x, c->w, c->offset, o + (long)c->n * c->dim, c->n,
                            c->dim);
}

// name: "rmsnorm", or the zero-centred form's.
static void test_rmsnorm(const char *name, float offset) {
    rms_case c = {.n = 9, .dim = 70, .eps = 1e-5f, .offset = offset};
    long nx = (long)c.n * c.dim;
    char what[64];
    c.x = rand_vec(nx), c.w = rand_vec(c.dim), c.R = rand_vec(nx);
    c.out = malloc(sizeof(float) * nx), c.rstd = malloc(sizeof(float) * c.n);

    double *ref = malloc(sizeof(double) * nx);
    for (int t = 0; t < c.n; t++) {
        const float *xt = c.x + (long)t * c.dim;
        double r = 1.0 / sqrt(dot_d(xt, xt, c.dim) / c.dim + c.eps);
        for (int i = 0; i < c.dim; i++)
            ref[(long)t * c.dim + i] = xt[i] * r * ((double)offset + c.w[i]);
    }
    rms_loss(&c);
    fwd_check(name, c.out, ref, nx);

    float *px = rand_vec(nx), *pw = rand_vec(c.dim);
    float *dx = copy_vec(px, nx), *dw = copy_vec(pw, c.dim);
    rmsnorm_offset_backward(dx, dw, c.R, c.x, c.w, offset, c.rstd, c.n, c.dim);
    float *gx = grad_delta(dx, px, nx), *gw = grad_delta(dw, pw, c.dim);
    snprintf(what, sizeof what, "%s dx", name);
    fd_check(what, c.x, nx, gx, rms_loss, &c);
    snprintf(what, sizeof what, "%s dweight", name);
    fd_check(what, c.w, c.dim, gw, rms_loss, &c);
    snprintf(what, sizeof what, "%s fwd+bwd", name);
    det_check(what, rms_run, &c, nx * 3 + c.n + c.dim);
    free(ref), free(px), free(pw), free(dx), free(dw), free(gx), free(gw);
    free(c.x), free(c.w), free(c.R), free(c.out), free(c.rstd);
}

// ---- rope --------------------------------------------------------------------------------

typedef struct {
    int B, T, heads, hd, rot; // rot: the elements of a head that turn (partial rotary)
    int off, interleave;      // the first that turns (MLA: the last rot); pairs (2i, 2i + 1)
    float *x, *R, *out, *inv_freq;
    float scale; // YaRN's attention factor on cos and sin
} rope_case;

static rope_args rope_of_case(const rope_case *c, const int32_t *doc_start) {
    return (rope_args){.inv_freq = c->inv_freq,
                       .scale = c->scale,
                       .B = c->B,
                       .T = c->T,
                       .hd = c->hd,
                       .rot = c->rot,
                       .off = c->off,
                       .interleave = c->interleave,
                       .doc_start = doc_start};
}

static double rope_loss(void *p) {
    rope_case *c = p;
    long n = (long)c->B * c->T * c->heads * c->hd;
    memcpy(c->out, c->x, sizeof(float) * n);
    const rope_args r = rope_of_case(c, NULL);
    rope_forward(c->out, c->heads, &r);
    return dot_d(c->out, c->R, n);
}

static void rope_run(void *p, float *o) {
    rope_case *c = p;
    long n = (long)c->B * c->T * c->heads * c->hd;
    memcpy(o, c->x, sizeof(float) * n);
    const rope_args r = rope_of_case(c, NULL);
    rope_forward(o, c->heads, &r);
    memcpy(o + n, c->R, sizeof(float) * n);
    rope_backward(o + n, c->heads, &r);
}

// The whole head turned, or rot elements of it from off (partial rotary, or MLA's last rot: the
// rest pass unchanged), pairs (i, i + rot/2) or interleaved (2i, 2i + 1).
static void test_rope_at(int hd, int rot, int off, int interleave, float scale) {
    rope_case c = {.B = 2,
                   .T = 9,
                   .heads = 3,
                   .hd = hd,
                   .rot = rot,
                   .off = off,
                   .interleave = interleave,
                   .scale = scale};
    long n = (long)c.B * c.T * c.heads * c.hd;
    int half = c.rot / 2;
    c.x = rand_vec(n), c.R = rand_vec(n), c.out = malloc(sizeof(float) * n);
    c.inv_freq = malloc(sizeof(float) * half);
    rope_inv_freq(c.inv_freq, c.rot, 10000.0f);

    double *ref = malloc(sizeof(double) * n), inv_err = 0.0;
    for (int i = 0; i < half; i++)
        inv_err = fmax(inv_err, fabs(c.inv_freq[i] * pow(10000.0, 2.0 * i / c.rot) - 1.0));
    report(inv_err < 1e-6, "forward", "rope inv_freq", inv_err);
    for (long row = 0; row < (long)c.B * c.T * c.heads; row++) {
        int t = (int)(row / c.heads % c.T);
        const float *x = c.x + row * c.hd;
        for (int i = 0; i < c.hd; i++) ref[row * c.hd + i] = x[i]; // not turned
        for (int i = 0; i < half; i++) {
            int e1 = off + (interleave ? 2 * i : i), e2 = e1 + (interleave ? 1 : half);
            double a = (float)t * c.inv_freq[i], co = c.scale * cos(a), si = c.scale * sin(a);
            ref[row * c.hd + e1] = x[e1] * co - x[e2] * si;
            ref[row * c.hd + e2] = x[e2] * co + x[e1] * si;
        }
    }
    rope_loss(&c);
    char what[64];
    snprintf(what, sizeof what, "rope hd %d rot %d from %d%s scale %g", hd, rot, off,
             interleave ? " interleaved" : "", scale);
    fwd_check(what, c.out, ref, n);

    float *dx = copy_vec(c.R, n); // in place, so no accumulation to check
    const rope_args r = rope_of_case(&c, NULL);
    rope_backward(dx, c.heads, &r);
    fd_check(what, c.x, n, dx, rope_loss, &c);
    det_check(what, rope_run, &c, 2 * n);
    free(ref), free(dx), free(c.x), free(c.R), free(c.out), free(c.inv_freq);
}
static void test_rope(int hd, int rot, float scale) {
    test_rope_at(hd, rot, 0, 0, scale);
}

// Packed documents: RoPE with document starts gives each token, bit for bit, what the plain
// kernel gives it at its position in its document (the document moved to a row of its own).
static void test_rope_documents(void) {
    enum { T = 9, heads = 2, hd = 8 };
    static const int32_t doc[T] = {0, 0, 0, 3, 4, 4, 4, 4, 8}; // lengths 3, 1, 4 and 1
    long n = (long)T * heads * hd;
    float *x = rand_vec(n), *got = copy_vec(x, n), *alone = calloc((size_t)T * n, sizeof(float));
    float inv_freq[hd / 2];
    rope_inv_freq(inv_freq, hd, 10000.0f);
    const rope_args packed = {.inv_freq = inv_freq,
                              .scale = 1,
                              .B = 1,
                              .T = T,
                              .hd = hd,
                              .rot = hd,
                              .doc_start = doc},
                    rows = {.inv_freq = inv_freq, .scale = 1, .B = T, .T = T, .hd = hd, .rot = hd};
    rope_forward(got, heads, &packed);
    // row t of `alone` holds token t's document at positions 0.., then zeros
    for (int t = 0; t < T; t++)
        for (int u = doc[t]; u <= t; u++)
            memcpy(alone + ((long)t * T + u - doc[t]) * heads * hd, x + (long)u * heads * hd,
                   sizeof(float) * heads * hd);
    rope_forward(alone, heads, &rows);
    double err = 0.0;
    for (int t = 0; t < T; t++)
        for (long i = 0; i < heads * hd; i++)
            err = fmax(err, fabs(got[(long)t * heads * hd + i] -
                                 alone[((long)t * T + t - doc[t]) * heads * hd + i]));
    report(err == 0.0, "forward", "rope documents = each alone", err);
    rope_backward(got, heads, &packed); // and back: the rotation undone
    err = 0.0;
    for (long i = 0; i < n; i++) err = fmax(err, fabs(got[i] - x[i]));
    report(err < 1e-5, "backward", "rope documents undone", err);
    free(x), free(got), free(alone);
}

// Llama 3.1 8B's rope_scaling on its table (head dim 128, theta 500000): against the formula in
// double, and bitwise the plain value (short wavelengths) or the plain value / factor (long
// ones) outside the blended band. The float rounding order itself is checked against
// transformers by tests/hf_family_parity.py.
static void test_rope_llama3(void) {
    enum { HD = 128, HALF = HD / 2 };
    const double factor = 8, low = 1, high = 4, orig = 8192;
    float plain[HALF], scaled[HALF];
    rope_inv_freq(plain, HD, 500000.0f);
    memcpy(scaled, plain, sizeof plain);
    rope_llama3_scale(scaled, HD, factor, low, high, orig);
    double err = 0.0;
    int bands[3] = {0}, exact = 1;
    for (int i = 0; i < HALF; i++) {
        double inv = plain[i], wavelen = 2 * M_PI / inv, want;
        if (wavelen < orig / high) {
            want = inv, bands[0]++;
            exact &= scaled[i] == plain[i];
        } else if (wavelen > orig / low) {
            want = inv / factor, bands[2]++;
            exact &= scaled[i] == plain[i] / (float)factor;
        } else {
            double smooth = (orig / wavelen - low) / (high - low);
            want = (1 - smooth) * inv / factor + smooth * inv, bands[1]++;
        }
        err = fmax(err, fabs(scaled[i] / want - 1.0));
    }
    report(err < 1e-6, "forward", "rope llama3 inv_freq", err);
    report(exact && bands[0] && bands[1] && bands[2], "forward", "rope llama3 bands exact",
           bands[1]);
}

// ---- attention ---------------------------------------------------------------------------

typedef struct {
    attn_args a; // doc_start: packed documents' starts [B, T], or NULL
    float *q, *k, *v, *R, *out, *lse;
    float *sinks; // [H], or NULL
} attn_case;

static long attn_nq(const attn_args *a) {
    return (long)a->B * a->T * a->H * a->hd;
}
static long attn_nkv(const attn_args *a) {
    return (long)a->B * a->T * a->KV * a->hd;
}
// v's and out's elements: dv wide (multi-head latent attention's values), or hd
static int attn_dv(const attn_args *a) {
    return a->dv ? a->dv : a->hd;
}
static long attn_nv(const attn_args *a) {
    return (long)a->B * a->T * a->KV * attn_dv(a);
}
static long attn_no(const attn_args *a) {
    return (long)a->B * a->T * a->H * attn_dv(a);
}

static double attn_loss(void *p) {
    attn_case *c = p;
    attention_forward(
        &c->a,
        &(attn_tensors){
            .q = c->q, .k = c->k, .v = c->v, .out = c->out, .lse = c->lse, .sinks = c->sinks});
    return dot_d(c->out, c->R, attn_no(&c->a));
}

// o: out, lse, dq, dk, dv (and dsinks, H more, with sinks).
static void attn_run(void *p, float *o) {
    attn_case *c = p;
    long nq = attn_nq(&c->a), nkv = attn_nkv(&c->a), nv = attn_nv(&c->a);
    attn_tensors t = {.q = c->q,
                      .k = c->k,
                      .v = c->v,
                      .out = o,
                      .lse = o + attn_no(&c->a),
                      .dout = c->R,
                      .sinks = c->sinks};
    t.dq = t.lse + (long)c->a.B * c->a.H * c->a.T, t.dk = t.dq + nq, t.dv = t.dk + nkv;
    t.dsinks = c->sinks ? t.dv + nv : NULL;
    attention_forward(&c->a, &t);
    attention_backward(&c->a, &t);
}

// Naive reference: the full T x T score matrix per (b, h), in double; keys before the query's
// document, and outside its sliding window (transformers' kv_idx > q_idx - sliding_window), are
// masked like those after it; a sink joins the sum with no value.
static void attn_reference(const attn_case *c, double *ref) {
    int T = c->a.T, H = c->a.H, KV = c->a.KV, hd = c->a.hd, dv = attn_dv(&c->a);
    double scale = c->a.scale ? c->a.scale : 1.0 / sqrt(hd);
    const int32_t *doc = c->a.doc_start;
    double *s = malloc(sizeof(double) * T);
    for (int b = 0; b < c->a.B; b++) {
        for (int h = 0; h < H; h++) {
            int kvh = h / (H / KV);
            for (int t = 0; t < T; t++) {
                const float *qt = c->q + (((long)b * T + t) * H + h) * hd;
                double m = c->sinks ? c->sinks[h] : -INFINITY, l = 0.0;
                for (int j = 0; j < T; j++) {
                    s[j] = dot_d(qt, c->k + (((long)b * T + j) * KV + kvh) * hd, hd) * scale;
                    if (j > t) s[j] = -INFINITY; // causal mask
                    if (doc && j < doc[(long)b * T + t]) s[j] = -INFINITY;
                    if (c->a.window > 0 && !(j > t - c->a.window)) s[j] = -INFINITY;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < T; j++) l += s[j] = exp(s[j] - m);
                if (c->sinks) l += exp(c->sinks[h] - m); // a score with no value
                double *o = ref + (((long)b * T + t) * H + h) * dv;
                for (int i = 0; i < dv; i++) {
                    o[i] = 0.0;
                    for (int j = 0; j < T; j++)
                        o[i] += s[j] / l * c->v[(((long)b * T + j) * KV + kvh) * dv + i];
                }
            }
        }
    }
    free(s);
}

// doc: the rows' document starts, or NULL (one causal document a row); window: the sliding
// window (0: none); sinks: with gpt-oss's sinks (their gradient checked too); dv, scale: the
// values' head dim and the scores' scale (0: hd's, multi-head latent attention's others); what
// names the checks.
static void test_attention_dv(const int32_t *doc, int window, int sinks, int vd, float scale,
                              const char *what) {
    attn_case c = {.a = {.B = 2,
                         .T = 7,
                         .H = 4,
                         .KV = 2,
                         .hd = 8,
                         .doc_start = doc,
                         .window = window,
                         .dv = vd,
                         .scale = scale}};
    char name[96];
    long nq = attn_nq(&c.a), nkv = attn_nkv(&c.a), nv = attn_nv(&c.a), no = attn_no(&c.a);
    c.q = rand_vec(nq), c.k = rand_vec(nkv), c.v = rand_vec(nv), c.R = rand_vec(no);
    c.sinks = sinks ? rand_vec(c.a.H) : NULL;
    float *psink = rand_vec(c.a.H), *dsinks = copy_vec(psink, c.a.H);
    c.out = malloc(sizeof(float) * no), c.lse = malloc(sizeof(float) * c.a.B * c.a.H * c.a.T);
    for (long i = 0; i < nq; i++) c.q[i] *= 2.0f; // peakier softmax rows

    double *ref = malloc(sizeof(double) * no);
    attn_reference(&c, ref);
    attn_loss(&c);
    snprintf(name, sizeof name, "attention%s (naive T x T)", what);
    fwd_check(name, c.out, ref, no);

    float *pq = rand_vec(nq), *pk = rand_vec(nkv), *pv = rand_vec(nv);
    float *dq = copy_vec(pq, nq), *dk = copy_vec(pk, nkv), *dv = copy_vec(pv, nv);
    attention_backward(&c.a, &(attn_tensors){.q = c.q,
                                             .k = c.k,
                                             .v = c.v,
                                             .out = c.out,
                                             .lse = c.lse,
                                             .dout = c.R,
                                             .dq = dq,
                                             .dk = dk,
                                             .dv = dv,
                                             .sinks = c.sinks,
                                             .dsinks = dsinks});
    float *gq = grad_delta(dq, pq, nq), *gk = grad_delta(dk, pk, nkv);
    if (sinks) {
        float *gs = grad_delta(dsinks, psink, c.a.H);
        snprintf(name, sizeof name, "attention%s dsinks", what);
        fd_check(name, c.sinks, c.a.H, gs, attn_loss, &c);
        free(gs);
    }
    float *gv = grad_delta(dv, pv, nv);
    snprintf(name, sizeof name, "attention%s dq", what);
    fd_check(name, c.q, nq, gq, attn_loss, &c);
    snprintf(name, sizeof name, "attention%s dk", what);
    fd_check(name, c.k, nkv, gk, attn_loss, &c);
    snprintf(name, sizeof name, "attention%s dv", what);
    fd_check(name, c.v, nv, gv, attn_loss, &c);
    snprintf(name, sizeof name, "attention%s fwd+bwd", what);
    det_check(name, attn_run, &c, no + nq + nkv + nv + c.a.B * c.a.H * c.a.T + (sinks ? c.a.H : 0));
    free(psink), free(dsinks), free(c.sinks), free(ref), free(pq), free(pk), free(pv), free(dq),
        free(dk), free(dv);
    free(gq), free(gk), free(gv), free(c.q), free(c.k), free(c.v), free(c.R), free(c.out),
        free(c.lse);
}

static void test_attention(const int32_t *doc, int window, int sinks, const char *what) {
    test_attention_dv(doc, window, sinks, 0, 0.0f, what);
}

// A window of T keys or more hides nothing: forward and backward give the bits of no window.
static void test_attention_wide_window(const int32_t *doc, const char *what) {
    attn_case c = {.a = {.B = 2, .T = 7, .H = 4, .KV = 2, .hd = 8, .doc_start = doc}};
    long nq = attn_nq(&c.a), nkv = attn_nkv(&c.a), nout = 2 * nq + 2 * nkv + c.a.B * c.a.H * c.a.T;
    c.q = rand_vec(nq), c.k = rand_vec(nkv), c.v = rand_vec(nkv), c.R = rand_vec(nq);
    float *none = calloc(nout, sizeof(float)), *wide = calloc(nout, sizeof(float));
    attn_run(&c, none);
    int same = 1;
    for (int window = c.a.T; window <= c.a.T + 5; window += 5) {
        c.a.window = window;
        memset(wide, 0, sizeof(float) * nout);
        attn_run(&c, wide);
        same &= memcmp(none, wide, sizeof(float) * nout) == 0;
    }
    char name[96];
    snprintf(name, sizeof name, "attention window >= T%s", what);
    report(same, "bitwise", name, 0.0);
    free(none), free(wide), free(c.q), free(c.k), free(c.v), free(c.R);
}

// ---- swiglu ------------------------------------------------------------------------------

typedef struct {
    long n;
    float *gate, *up, *R, *out;
} swiglu_case;

static double swiglu_loss(void *p) {
    swiglu_case *c = p;
    swiglu_forward(c->out, c->gate, c->up, c->n);
    return dot_d(c->out, c->R, c->n);
}

static void swiglu_run(void *p, float *o) {
    swiglu_case *c = p;
    swiglu_forward(o, c->gate, c->up, c->n);
    swiglu_backward(o + c->n, o + 2 * c->n, c->R, c->gate, c->up, c->n);
}

static void test_swiglu(void) {
    swiglu_case c = {.n = 301};
    c.gate = rand_vec(c.n), c.up = rand_vec(c.n), c.R = rand_vec(c.n);
    c.out = malloc(sizeof(float) * c.n);
    for (long i = 0; i < c.n; i++) c.gate[i] *= 4.0f; // reach the saturated parts of silu

    double *ref = malloc(sizeof(double) * c.n);
    for (long i = 0; i < c.n; i++) ref[i] = c.gate[i] / (1.0 + exp(-c.gate[i])) * c.up[i];
    swiglu_loss(&c);
    fwd_check("swiglu", c.out, ref, c.n);

    float *pg = rand_vec(c.n), *pu = rand_vec(c.n);
    float *dg = copy_vec(pg, c.n), *du = copy_vec(pu, c.n);
    swiglu_backward(dg, du, c.R, c.gate, c.up, c.n);
    float *gg = grad_delta(dg, pg, c.n), *gu = grad_delta(du, pu, c.n);
    fd_check("swiglu dgate", c.gate, c.n, gg, swiglu_loss, &c);
    fd_check("swiglu dup", c.up, c.n, gu, swiglu_loss, &c);
    det_check("swiglu fwd+bwd", swiglu_run, &c, 3 * c.n);
    free(ref), free(pg), free(pu), free(dg), free(du), free(gg), free(gu);
    free(c.gate), free(c.up), free(c.R), free(c.out);
}

// ---- linear ------------------------------------------------------------------------------

typedef struct {
    int n, ic, oc;
    float *in, *w, *bias, *R, *out; // bias may be NULL
} linear_case;

static double linear_loss(void *p) {
    linear_case *c = p;
    linear_forward(c->out, c->in, c->w, c->bias, c->n, c->ic, c->oc);
    return dot_d(c->out, c->R, (long)c->n * c->oc);
}

static void linear_run(void *p, float *o) {
    linear_case *c = p;
    float *din = o + (long)c->n * c->oc, *dw = din + (long)c->n * c->ic;
    linear_forward(o, c->in, c->w, c->bias, c->n, c->ic, c->oc);
    linear_backward(din, dw, c->bias ? dw + (long)c->oc * c->ic : NULL, c->R, c->in, c->w, c->n,
                    c->ic, c->oc);
}

// Sizes that are not multiples of the tiles, and n > 256 so that the dw reduction over tokens
// spans several cache blocks.
static void test_linear(int with_bias) {
    linear_case c = {.n = 301, .ic = 37, .oc = 29};
    long ni = (long)c.n * c.ic, nw = (long)c.oc * c.ic, no = (long)c.n * c.oc;
    c.in = rand_vec(ni), c.w = rand_vec(nw), c.R = rand_vec(no);
    c.bias = with_bias ? rand_vec(c.oc) : NULL, c.out = malloc(sizeof(float) * no);
    char name[64];

    double *ref = malloc(sizeof(double) * no);
    for (long i = 0; i < no; i++) {
        long t = i / c.oc, o = i % c.oc;
        ref[i] = dot_d(c.in + t * c.ic, c.w + o * c.ic, c.ic) + (c.bias ? c.bias[o] : 0.0);
    }
    linear_loss(&c);
    snprintf(name, sizeof name, "linear%s", with_bias ? " +bias" : "");
    fwd_check(name, c.out, ref, no);

    float *pi = rand_vec(ni), *pw = rand_vec(nw), *pb = rand_vec(c.oc);
    float *din = copy_vec(pi, ni), *dw = copy_vec(pw, nw), *db = copy_vec(pb, c.oc);
    linear_backward(din, dw, with_bias ? db : NULL, c.R, c.in, c.w, c.n, c.ic, c.oc);
    float *gi = grad_delta(din, pi, ni), *gw = grad_delta(dw, pw, nw);
    float *gb = grad_delta(db, pb, c.oc);
    snprintf(name, sizeof name, "linear%s din", with_bias ? " +bias" : "");
    fd_check(name, c.in, ni, gi, linear_loss, &c);
    snprintf(name, sizeof name, "linear%s dw", with_bias ? " +bias" : "");
    fd_check(name, c.w, nw, gw, linear_loss, &c);
    if (with_bias) fd_check("linear +bias dbias", c.bias, c.oc, gb, linear_loss, &c);

    // din == NULL must leave dw exactly as the full call computes it.
    float *dw2 = copy_vec(pw, nw);
    linear_backward(NULL, dw2, NULL, c.R, c.in, c.w, c.n, c.ic, c.oc);
    snprintf(name, sizeof name, "linear%s dw (din NULL)", with_bias ? " +bias" : "");
    report(memcmp(dw, dw2, sizeof(float) * nw) == 0, "bitwise", name, 0.0);

    snprintf(name, sizeof name, "linear%s fwd+bwd", with_bias ? " +bias" : "");
    det_check(name, linear_run, &c, no + ni + nw + c.oc);
    free(ref), free(pi), free(pw), free(pb), free(din), free(dw), free(db), free(dw2);
    free(gi), free(gw), free(gb), free(c.in), free(c.w), free(c.bias), free(c.R), free(c.out);
}

// ---- classifier --------------------------------------------------------------------------

typedef struct {
    int n, dim, vocab;
    float dloss;
    float *x, *w;
    int32_t *targets;
} cls_case;

static double cls_loss(void *p) {
    cls_case *c = p;
    return c->dloss * classifier_forward(c->x, c->w, c->targets, c->n, c->dim, c->vocab);
}

static void cls_run(void *p, float *o) {
    cls_case *c = p;
    o[0] = (float)classifier_forward(c->x, c->w, c->targets, c->n, c->dim, c->vocab);
    classifier_backward(o + 1, o + 1 + (long)c->n * c->dim, c->x, c->w, c->targets, c->n, c->dim,
                        c->vocab, c->dloss);
}

static double cls_reference(const cls_case *c) {
    double sum = 0.0, *z = malloc(sizeof(double) * c->vocab);
    for (int t = 0; t < c->n; t++) {
        if (c->targets[t] < 0) continue;
        double m = -INFINITY, s = 0.0;
        for (int v = 0; v < c->vocab; v++) {
            z[v] = dot_d(c->x + (long)t * c->dim, c->w + (long)v * c->dim, c->dim);
            m = fmax(m, z[v]);
        }
        for (int v = 0; v < c->vocab; v++) s += exp(z[v] - m);
        sum += m + log(s) - z[c->targets[t]];
    }
    free(z);
    return sum;
}

// n = 150 spans three chunks of 64 tokens; two targets use the ignore index.
static void test_classifier(void) {
    cls_case c = {.n = 150, .dim = 24, .vocab = 37, .dloss = 0.7f};
    long nx = (long)c.n * c.dim, nw = (long)c.vocab * c.dim;
    c.x = rand_vec(nx), c.w = rand_vec(nw), c.targets = malloc(sizeof(int32_t) * c.n);
    for (int t = 0; t < c.n; t++) c.targets[t] = rng_int(c.vocab);
    c.targets[3] = c.targets[100] = -100;

    double ref = cls_reference(&c),
           got = classifier_forward(c.x, c.w, c.targets, c.n, c.dim, c.vocab);
    fwd_check("classifier loss", &(float){(float)got}, &ref, 1);

    float *px = rand_vec(nx), *pw = rand_vec(nw);
    float *dx = copy_vec(px, nx), *dw = copy_vec(pw, nw);
    classifier_backward(dx, dw, c.x, c.w, c.targets, c.n, c.dim, c.vocab, c.dloss);
    float *gx = grad_delta(dx, px, nx), *gw = grad_delta(dw, pw, nw);
    fd_check("classifier dx", c.x, nx, gx, cls_loss, &c);
    fd_check("classifier dw", c.w, nw, gw, cls_loss, &c);
    double ign = 0.0;
    for (int i = 0; i < c.dim; i++) ign = fmax(ign, fabs(gx[3 * c.dim + i]));
    report(ign == 0.0, "gradcheck", "classifier ignored token dx == 0", ign);
    det_check("classifier fwd+bwd", cls_run, &c, 1 + nx + nw);
    free(px), free(pw), free(dx), free(dw), free(gx), free(gw);
    free(c.x), free(c.w), free(c.targets);
}

int main(void) {
    // The finite differences run thousands of tiny parallel regions, which crawl when a busy
    // machine deschedules spinning threads; so they run on one thread. det_check then shows
    // that 3 threads give the same bits, hence the same gradients.
    omp_set_num_threads(1);
    test_embedding();
    test_rmsnorm("rmsnorm", 0.0f);
    test_rmsnorm("rmsnorm zero-centred (1 + w)", 1.0f);
    test_rope(8, 8, 1.0f);
    test_rope(8, 8, 1.25f); // YaRN's attention factor
    test_rope(12, 4, 1.0f); // partial rotary: a third of each head turns
    test_rope(10, 6, 1.25f);
    test_rope_llama3();
    test_rope_documents();
    test_rope_at(10, 4, 6, 0, 1.0f);  // MLA: the last 4 of q's and k's heads of 10
    test_rope_at(10, 4, 6, 1, 1.25f); // the same, interleaved pairs (DeepSeek's rope_interleave)
    test_rope_at(8, 8, 0, 1, 1.0f);   // a whole head interleaved
    test_attention(NULL, 0, 0, "");
    // two rows of packed documents: lengths 3, 1, 3, then 1, 6 (a length-1 document first)
    static const int32_t doc[2 * 7] = {0, 0, 0, 3, 4, 4, 4, 0, 1, 1, 1, 1, 1, 1};
    test_attention(doc, 0, 0, " documents");
    // Sliding windows: alone, across documents (the second row's 6-token one is longer than the
    // window), and of 1 key (each query sees itself only).
    test_attention(NULL, 3, 0, " window 3");
    test_attention(doc, 3, 0, " window 3 documents");
    test_attention(NULL, 1, 0, " window 1");
    // gpt-oss: sinks alone, and with its sliding window
    test_attention(NULL, 0, 1, " sinks");
    test_attention(doc, 3, 1, " sinks window 3 documents");
    test_attention_dv(NULL, 0, 0, 5, 0.0f, " dv 5"); // MLA: values narrower than q and k
    test_attention_dv(doc, 0, 0, 12, 0.41f, " dv 12 scale 0.41 documents"); // and wider
    test_attention_wide_window(NULL, "");
    test_attention_wide_window(doc, " documents");
    test_swiglu();
    test_linear(0);
    test_linear(1);
    test_classifier();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
