// The CPU kernels of Gated DeltaNet (kernels/cpu/kernels_gdn.h).
//
// For every kernel, L = sum(out * R) with a fixed random R; the backward (run with dout = R on
// top of random prior values, so that it must accumulate) must match central finite differences
// of L, summed in double, on random coordinates of every input. The forwards are checked against
// naive double-precision references written out here; the chunked delta rule against the
// recurrent one (forward and backward) over chunk and document boundaries; a packed document
// against the same document alone; and every kernel gives bitwise identical results on 1 and 3
// OpenMP threads.
#include "kernels/cpu/kernels_gdn.h"
#include "tests/check.h"
#define KERNEL_CHECK_SEED 0x3243F6A8885A308Dull
#include "tests/kernel_check.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { FD_COORDS = 30 };
static const float FD_EPS = 1e-3f;
static const double FD_TOL = 1e-2, FWD_TOL = 1e-5;

// ---- helpers -----------------------------------------------------------------------------

static float *rand_vec(long n, float lo, float hi) {
    return rand_in(n, lo, hi);
}
// max |x - y| / max(max |y|, 1e-6); infinite where x is not finite (fmax drops NaNs).
static double rel_err(const float *x, const float *y, long n) {
    double err = 0.0, ref = 1e-6;
    for (long i = 0; i < n; i++)
        if (!isfinite(x[i])) return INFINITY;
    for (long i = 0; i < n; i++)
        err = fmax(err, fabs((double)x[i] - y[i])), ref = fmax(ref, fabs(y[i]));
    return err / ref;
}
static double rel_err_d(const float *x, const double *y, long n) {
    double err = 0.0, ref = 1e-6;
    for (long i = 0; i < n; i++)
        if (!isfinite(x[i])) return INFINITY;
    for (long i = 0; i < n; i++) err = fmax(err, fabs(x[i] - y[i])), ref = fmax(ref, fabs(y[i]));
    return err / ref;
}
// The backward's grad against central differences of loss on FD_COORDS coordinates of p.
static void fd_check(const char *name, float *p, long n, const float *grad, loss_fn loss,
                     void *ctx) {
    double rel = fd_rel_err(p, n, grad, loss, ctx, FD_EPS, FD_COORDS);
    check(rel < FD_TOL, "%s against finite differences (rel err %.3g)", name, rel);
}

static void det_check(const char *name, run_fn fn, void *ctx, long nout) {
    check(same_on_1_and_3_threads(fn, ctx, nout), "%s bitwise the same on 1 and 3 threads", name);
}

static double silu_d(double x) {
    return x / (1.0 + exp(-x));
}

// ---- causal conv1d + SiLU ----------------------------------------------------------------

typedef struct {
    conv1d_args a;
    float *x, *w, *R, *out;
} conv_case;

static double conv_loss(void *p) {
    conv_case *c = p;
    causal_conv1d_silu_forward(c->out, c->x, c->w, &c->a);
    return dot_d(c->out, c->R, (long)c->a.B * c->a.T * c->a.C);
}

static void conv_run(void *p, float *o) {
    conv_case *c = p;
    long nx = (long)c->a.B * c->a.T * c->a.C;
    causal_conv1d_silu_forward(o, c->x, c->w, &c->a);
    causal_conv1d_silu_backward(o + nx, o + 2 * nx, c->R, c->x, c->w, &c->a);
}

static void conv_reference(const conv_case *c, double *ref) {
    const conv1d_args *a = &c->a;
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->T; t++) {
            int first = a->doc_start ? a->doc_start[b * a->T + t] : 0;
            for (int ch = 0; ch < a->C; ch++) {
                double s = 0.0;
                for (int j = 0; j < a->K; j++) {
                    int src = t - (a->K - 1) + j;
                    if (src >= first)
                        s += (double)c->w[ch * a->K + j] * c->x[((long)b * a->T + src) * a->C + ch];
                }
                ref[((long)b * a->T + t) * a->C + ch] = silu_d(s);
            }
        }
}

// Row 0 one document; row 1 two, the second from token 4. 70 channels: two backward blocks.
static void test_conv(void) {
    enum { B = 2, T = 9, CH = 70, K = 4 };
    static int32_t doc_start[B * T];
    for (int t = 0; t < T; t++) doc_start[t] = 0, doc_start[T + t] = t < 4 ? 0 : 4;
    conv_case c = {.a = {B, T, CH, K, doc_start}};
    long nx = (long)B * T * CH, nw = CH * K;
    c.x = rand_vec(nx, -2, 2), c.w = rand_vec(nw, -1, 1), c.R = rand_vec(nx, -1, 1);
    c.out = malloc(sizeof(float) * nx);
    double *ref = malloc(sizeof(double) * nx);
    conv_reference(&c, ref);
    conv_loss(&c);
    double err = rel_err_d(c.out, ref, nx);
    check(err < FWD_TOL, "conv1d+silu forward against the double reference (rel err %.3g)", err);

    float *before = copy_vec(c.out, nx); // the second document does not see the first
    for (int ch = 0; ch < CH; ch++) c.x[((long)T + 3) * CH + ch] += 1.0f;
    conv_loss(&c);
    int blind = !memcmp(before + (T + 4L) * CH, c.out + (T + 4L) * CH, sizeof(float) * 5 * CH);
    int sees = memcmp(before + (T + 3L) * CH, c.out + (T + 3L) * CH, sizeof(float) * CH) != 0;
    check(blind && sees, "conv1d: the last token of a document changes only its own document");
    for (int ch = 0; ch < CH; ch++) c.x[((long)T + 3) * CH + ch] -= 1.0f;

    float *px = rand_vec(nx, -1, 1), *pw = rand_vec(nw, -1, 1);
    float *dx = copy_vec(px, nx), *dw = copy_vec(pw, nw);
    causal_conv1d_silu_backward(dx, dw, c.R, c.x, c.w, &c.a);
    float *gx = grad_delta(dx, px, nx), *gw = grad_delta(dw, pw, nw);
    fd_check("conv1d+silu dx", c.x, nx, gx, conv_loss, &c);
    fd_check("conv1d+silu dw", c.w, nw, gw, conv_loss, &c);
    det_check("conv1d+silu fwd+bwd", conv_run, &c, 2 * nx + nw);
    free(ref), free(before), free(px), free(pw), free(dx), free(dw), free(gx), free(gw);
    free(c.x), free(c.w), free(c.R), free(c.out);
}

// ---- l2norm ------------------------------------------------------------------------------

typedef struct {
    long rows;
    int dim;
    float *x, *R, *out, *rnorm;
} l2_case;

static double l2_loss(void *p) {
    l2_case *c = p;
    l2norm_forward(c->out, c->rnorm, c->x, c->rows, c->dim, 1e-6f);
    return dot_d(c->out, c->R, c->rows * c->dim);
}

static void l2_run(void *p, float *o) {
    l2_case *c = p;
    long n = c->rows * c->dim;
    l2norm_forward(o, o + n, c->x, c->rows, c->dim, 1e-6f);
    l2norm_backward(o + n + c->rows, c->R, c->x, o + n, c->rows, c->dim);
}

static void test_l2norm(void) {
    l2_case c = {.rows = 11, .dim = 24};
    long n = c.rows * c.dim;
    c.x = rand_vec(n, -1, 1), c.R = rand_vec(n, -1, 1);
    c.out = malloc(sizeof(float) * n), c.rnorm = malloc(sizeof(float) * c.rows);
    for (int i = 0; i < c.dim; i++) c.x[i] *= 1e-3f; // a short row: eps matters (forward)
    double *ref = malloc(sizeof(double) * n);
    for (long r = 0; r < c.rows; r++) {
        const float *xr = c.x + r * c.dim;
        double inv = 1.0 / sqrt(dot_d(xr, xr, c.dim) + 1e-6);
        for (int i = 0; i < c.dim; i++) ref[r * c.dim + i] = xr[i] * inv;
    }
    l2_loss(&c);
    double err = rel_err_d(c.out, ref, n);
    check(err < FWD_TOL, "l2norm forward against the double reference (rel err %.3g)", err);
    for (int i = 0; i < c.dim; i++) c.x[i] *= 1e3f; // finite differences need steps << |x|
    l2_loss(&c);
    float *px = rand_vec(n, -1, 1), *dx = copy_vec(px, n);
    l2norm_backward(dx, c.R, c.x, c.rnorm, c.rows, c.dim);
    float *gx = grad_delta(dx, px, n);
    fd_check("l2norm dx", c.x, n, gx, l2_loss, &c);
    det_check("l2norm fwd+bwd", l2_run, &c, 2 * n + c.rows);
    free(ref), free(px), free(dx), free(gx), free(c.x), free(c.R), free(c.out), free(c.rnorm);
}

// ---- gates -------------------------------------------------------------------------------

typedef struct {
    long n;
    int H;
    float *a, *b, *A_log, *dt_bias, *Rg, *Rb, *g, *beta;
} gate_case;

static double gate_loss(void *p) {
    gate_case *c = p;
    gdn_gate_tensors t = {
        .a = c->a, .b = c->b, .A_log = c->A_log, .dt_bias = c->dt_bias, .g = c->g, .beta = c->beta};
    gdn_gates_forward(&t, c->n, c->H);
    return dot_d(c->g, c->Rg, c->n * c->H) + dot_d(c->beta, c->Rb, c->n * c->H);
}

static void gate_run(void *p, float *o) {
    gate_case *c = p;
    long n = c->n * c->H;
    gdn_gate_tensors t = {c->a,  c->b,  c->A_log,  c->dt_bias, o,         o + n,
                          c->Rg, c->Rb, o + 2 * n, o + 3 * n,  o + 4 * n, o + 4 * n + c->H};
    gdn_gates_forward(&t, c->n, c->H);
    gdn_gates_backward(&t, c->n, c->H);
}

// a + dt_bias over [-30, 30]: both sides of softplus's threshold 20 (kept away from the kink).
static void test_gates(void) {
    gate_case c = {.n = 40, .H = 3};
    long n = c.n * c.H;
    c.a = rand_vec(n, -30, 30), c.b = rand_vec(n, -6, 6), c.A_log = rand_vec(c.H, -4, 2.7f);
    c.dt_bias = rand_vec(c.H, -1, 1), c.Rg = rand_vec(n, -1, 1), c.Rb = rand_vec(n, -1, 1);
    c.g = malloc(sizeof(float) * n), c.beta = malloc(sizeof(float) * n);
    int above = 0;
    for (long i = 0; i < n; i++) {
        float x = c.a[i] + c.dt_bias[i % c.H];
        if (fabsf(x - 20) < 4 * FD_EPS) c.a[i] += 0.1f;
        above += c.a[i] + c.dt_bias[i % c.H] > 20;
    }
    gate_loss(&c);
    double err = 0.0, ref = 1e-6;
    int linear = 1;
    for (long i = 0; i < n; i++) {
        double x = (double)c.a[i] + c.dt_bias[i % c.H], sp = x > 20 ? x : log1p(exp(x));
        double g = -exp(c.A_log[i % c.H]) * sp, beta = 1 / (1 + exp(-(double)c.b[i]));
        err = fmax(err, fmax(fabs(c.g[i] - g), fabs(c.beta[i] - beta)));
        ref = fmax(ref, fmax(fabs(g), beta));
        if (x > 20) linear &= c.g[i] == -expf(c.A_log[i % c.H]) * (c.a[i] + c.dt_bias[i % c.H]);
    }
    check(err / ref < FWD_TOL && above > 5 && linear,
          "gates forward against the double reference (rel err %.3g), softplus linear above 20 "
          "(%d inputs there)",
          err / ref, above);

    float *pa = rand_vec(n, -1, 1), *pb = rand_vec(n, -1, 1), *pA = rand_vec(c.H, -1, 1),
          *pd = rand_vec(c.H, -1, 1);
    float *da = copy_vec(pa, n), *db = copy_vec(pb, n), *dA = copy_vec(pA, c.H),
          *dd = copy_vec(pd, c.H);
    gdn_gate_tensors t = {c.a, c.b, c.A_log, c.dt_bias, c.g, c.beta, c.Rg, c.Rb, da, db, dA, dd};
    gdn_gates_backward(&t, c.n, c.H);
    float *ga = grad_delta(da, pa, n), *gb = grad_delta(db, pb, n), *gA = grad_delta(dA, pA, c.H),
          *gd = grad_delta(dd, pd, c.H);
    fd_check("gates da", c.a, n, ga, gate_loss, &c);
    fd_check("gates db", c.b, n, gb, gate_loss, &c);
    fd_check("gates dA_log", c.A_log, c.H, gA, gate_loss, &c);
    fd_check("gates ddt_bias", c.dt_bias, c.H, gd, gate_loss, &c);
    det_check("gates fwd+bwd", gate_run, &c, 4 * n + 2 * c.H);
    free(pa), free(pb), free(pA), free(pd), free(da), free(db), free(dA), free(dd);
    free(ga), free(gb), free(gA), free(gd);
    free(c.a), free(c.b), free(c.A_log), free(c.dt_bias), free(c.Rg), free(c.Rb), free(c.g),
        free(c.beta);
}

// ---- gated RMSNorm -----------------------------------------------------------------------

typedef struct {
    int n, dim;
    float *x, *z, *w, *R, *out, *rstd;
} gnorm_case;

static const float GNORM_EPS = 1e-6f;

static double gnorm_loss(void *p) {
    gnorm_case *c = p;
    rmsnorm_gated_forward(c->out, c->rstd, c->x, c->z, c->w, c->n, c->dim, GNORM_EPS);
    return dot_d(c->out, c->R, (long)c->n * c->dim);
}

static void gnorm_run(void *p, float *o) {
    gnorm_case *c = p;
    long n = (long)c->n * c->dim;
    rmsnorm_gated_forward(o, o + n, c->x, c->z, c->w, c->n, c->dim, GNORM_EPS);
    float *dx = o + n + c->n;
    rmsnorm_gated_backward(dx, dx + n, dx + 2 * n, c->R, c->x, c->z, c->w, o + n, c->n, c->dim);
}

static void test_gated_norm(void) {
    gnorm_case c = {.n = 12, .dim = 70};
    long n = (long)c.n * c.dim;
    c.x = rand_vec(n, -2, 2), c.z = rand_vec(n, -4, 4), c.w = rand_vec(c.dim, 0.5f, 1.5f);
    c.R = rand_vec(n, -1, 1), c.out = malloc(sizeof(float) * n),
    c.rstd = malloc(sizeof(float) * c.n);
    double *ref = malloc(sizeof(double) * n);
    for (int r = 0; r < c.n; r++) {
        const float *xr = c.x + (long)r * c.dim;
        double inv = 1.0 / sqrt(dot_d(xr, xr, c.dim) / c.dim + GNORM_EPS);
        for (int i = 0; i < c.dim; i++) {
            long e = (long)r * c.dim + i;
            ref[e] = xr[i] * inv * c.w[i] * silu_d(c.z[e]);
        }
    }
    gnorm_loss(&c);
    double err = rel_err_d(c.out, ref, n);
    check(err < FWD_TOL, "gated rmsnorm forward against the double reference (rel err %.3g)", err);
    float *px = rand_vec(n, -1, 1), *pz = rand_vec(n, -1, 1), *pw = rand_vec(c.dim, -1, 1);
    float *dx = copy_vec(px, n), *dz = copy_vec(pz, n), *dw = copy_vec(pw, c.dim);
    rmsnorm_gated_backward(dx, dz, dw, c.R, c.x, c.z, c.w, c.rstd, c.n, c.dim);
    float *gx = grad_delta(dx, px, n), *gz = grad_delta(dz, pz, n), *gw = grad_delta(dw, pw, c.dim);
    fd_check("gated rmsnorm dx", c.x, n, gx, gnorm_loss, &c);
    fd_check("gated rmsnorm dz", c.z, n, gz, gnorm_loss, &c);
    fd_check("gated rmsnorm dweight", c.w, c.dim, gw, gnorm_loss, &c);
    det_check("gated rmsnorm fwd+bwd", gnorm_run, &c, 4 * n + c.n + c.dim);
    free(ref), free(px), free(pz), free(pw), free(dx), free(dz), free(dw), free(gx), free(gz),
        free(gw);
    free(c.x), free(c.z), free(c.w), free(c.R), free(c.out), free(c.rstd);
}

// ---- the gated delta rule ----------------------------------------------------------------

typedef struct {
    gdn_args a;
    float *q, *k, *v, *g, *beta, *R, *out;
    int chunked;
} delta_case;

typedef struct {
    long qk, v, g, all; // element counts of q (and k), v (and out), g (and beta), all 5 grads
} delta_sizes;

static delta_sizes delta_sizes_of(const gdn_args *a) {
    delta_sizes s = {.qk = (long)a->B * a->T * a->HK * a->dk,
                     .v = (long)a->B * a->T * a->H * a->dv,
                     .g = (long)a->B * a->T * a->H};
    s.all = 2 * s.qk + s.v + 2 * s.g;
    return s;
}

static void delta_forward(const delta_case *c, float *out) {
    gdn_tensors t = {.q = c->q, .k = c->k, .v = c->v, .g = c->g, .beta = c->beta, .out = out};
    (c->chunked ? gated_delta_chunked_forward : gated_delta_recurrent_forward)(&c->a, &t);
}

// grads: dq, dk, dv, dg, dbeta one after the other (delta_sizes.all), accumulated into.
static void delta_backward(const delta_case *c, float *grads) {
    delta_sizes s = delta_sizes_of(&c->a);
    gdn_tensors t = {c->q,
                     c->k,
                     c->v,
                     c->g,
                     c->beta,
                     NULL,
                     c->R,
                     grads,
                     grads + s.qk,
                     grads + 2 * s.qk,
                     grads + 2 * s.qk + s.v,
                     grads + 2 * s.qk + s.v + s.g};
    (c->chunked ? gated_delta_chunked_backward : gated_delta_recurrent_backward)(&c->a, &t);
}

static double delta_loss(void *p) {
    delta_case *c = p;
    delta_forward(c, c->out);
    return dot_d(c->out, c->R, delta_sizes_of(&c->a).v);
}

static void delta_run(void *p, float *o) {
    delta_case *c = p;
    delta_forward(c, o);
    delta_backward(c, o + delta_sizes_of(&c->a).v);
}

// The recurrence of gated_delta_args.h in double, naively.
static void delta_reference(const delta_case *c, double *ref) {
    const gdn_args *a = &c->a;
    double *S = malloc(sizeof(double) * a->dk * a->dv), *delta = malloc(sizeof(double) * a->dv);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->H; h++)
            for (int t = 0; t < a->T; t++) {
                int hk = h / (a->H / a->HK);
                const float *q = c->q + gdn_qk_off(a, b, t, hk),
                            *k = c->k + gdn_qk_off(a, b, t, hk);
                const float *v = c->v + gdn_v_off(a, b, t, h);
                long go = gdn_gate_off(a, b, t, h);
                if (gdn_starts_document(a, b, t)) memset(S, 0, sizeof(double) * a->dk * a->dv);
                for (int e = 0; e < a->dk * a->dv; e++) S[e] *= exp(c->g[go]);
                for (int n = 0; n < a->dv; n++) {
                    double kv = 0.0;
                    for (int m = 0; m < a->dk; m++) kv += S[m * a->dv + n] * k[m];
                    delta[n] = c->beta[go] * (v[n] - kv);
                }
                for (int m = 0; m < a->dk; m++)
                    for (int n = 0; n < a->dv; n++) S[m * a->dv + n] += k[m] * delta[n];
                double *o = ref + gdn_v_off(a, b, t, h);
                for (int n = 0; n < a->dv; n++) {
                    o[n] = 0.0;
                    for (int m = 0; m < a->dk; m++) o[n] += S[m * a->dv + n] * q[m] * a->scale;
                }
            }
    free(S), free(delta);
}

// Inputs as the model feeds the rule: unit keys (l2norm), beta in (0, 1), g < 0.
static delta_case delta_case_new(gdn_args a) {
    delta_case c = {.a = a};
    delta_sizes s = delta_sizes_of(&a);
    c.q = rand_vec(s.qk, -1, 1), c.k = rand_vec(s.qk, -1, 1), c.v = rand_vec(s.v, -1, 1);
    c.g = rand_vec(s.g, -0.7f, -0.01f), c.beta = rand_vec(s.g, 0.05f, 0.95f);
    c.R = rand_vec(s.v, -1, 1), c.out = malloc(sizeof(float) * s.v);
    for (long r = 0; r < s.qk / a.dk; r++) {
        float *k = c.k + r * a.dk;
        double norm = sqrt(dot_d(k, k, a.dk));
        for (int i = 0; i < a.dk; i++) k[i] /= (float)norm;
    }
    return c;
}

static void delta_case_free(delta_case *c) {
    free(c->q), free(c->k), free(c->v), free(c->g), free(c->beta), free(c->R), free(c->out);
}

static const char *const GRAD_NAMES[5] = {"dq", "dk", "dv", "dg", "dbeta"};

// The backward's five gradients on top of random priors, against finite differences.
static void delta_gradcheck(delta_case *c, const char *form) {
    delta_sizes s = delta_sizes_of(&c->a);
    float *prior = rand_vec(s.all, -1, 1), *grads = copy_vec(prior, s.all);
    delta_backward(c, grads);
    float *g = grad_delta(grads, prior, s.all);
    float *inputs[5] = {c->q, c->k, c->v, c->g, c->beta};
    long counts[5] = {s.qk, s.qk, s.v, s.g, s.g}, off = 0;
    char name[64];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "delta rule %s %s", form, GRAD_NAMES[i]);
        fd_check(name, inputs[i], counts[i], g + off, delta_loss, c);
        off += counts[i];
    }
    free(prior), free(grads), free(g);
}

// Each gradient of the chunked form against the recurrent one.
static void delta_compare_backward(delta_case *c, const char *what) {
    delta_sizes s = delta_sizes_of(&c->a);
    float *rec = calloc(s.all, sizeof(float)), *chk = calloc(s.all, sizeof(float));
    c->chunked = 0, delta_backward(c, rec);
    c->chunked = 1, delta_backward(c, chk);
    long counts[5] = {s.qk, s.qk, s.v, s.g, s.g}, off = 0;
    for (int i = 0; i < 5; i++) {
        double err = rel_err(chk + off, rec + off, counts[i]);
        check(err < 1e-5, "delta rule%s chunked %s against the recurrent one (rel err %.3g)", what,
              GRAD_NAMES[i], err);
        off += counts[i];
    }
    free(rec), free(chk);
}

// Rows [t0, t0 + len) of row b of c as a case of its own (one row, one document).
static delta_case delta_slice(const delta_case *c, int b, int t0, int len) {
    delta_case d = {.a = c->a, .chunked = c->chunked};
    d.a.B = 1, d.a.T = len, d.a.doc_start = NULL;
    delta_sizes s = delta_sizes_of(&d.a);
    d.q = copy_vec(c->q + gdn_qk_off(&c->a, b, t0, 0), s.qk);
    d.k = copy_vec(c->k + gdn_qk_off(&c->a, b, t0, 0), s.qk);
    d.v = copy_vec(c->v + gdn_v_off(&c->a, b, t0, 0), s.v);
    d.R = copy_vec(c->R + gdn_v_off(&c->a, b, t0, 0), s.v);
    d.g = copy_vec(c->g + gdn_gate_off(&c->a, b, t0, 0), s.g);
    d.beta = copy_vec(c->beta + gdn_gate_off(&c->a, b, t0, 0), s.g);
    d.out = malloc(sizeof(float) * s.v);
    return d;
}

// Each document of row b alone gives the packed row's outputs and gradients, bit for bit.
static void delta_packed_vs_alone(delta_case *c, int b, const int *starts, int docs,
                                  const char *form) {
    delta_sizes s = delta_sizes_of(&c->a);
    float *grads = calloc(s.all, sizeof(float));
    delta_forward(c, c->out);
    delta_backward(c, grads);
    int same = 1;
    for (int i = 0; i < docs; i++) {
        int t0 = starts[i], len = (i + 1 < docs ? starts[i + 1] : c->a.T) - t0;
        delta_case d = delta_slice(c, b, t0, len);
        delta_sizes ds = delta_sizes_of(&d.a);
        float *dg = calloc(ds.all, sizeof(float));
        delta_forward(&d, d.out);
        delta_backward(&d, dg);
        same &= !memcmp(d.out, c->out + gdn_v_off(&c->a, b, t0, 0), sizeof(float) * ds.v);
        long offs[5] = {gdn_qk_off(&c->a, b, t0, 0), gdn_qk_off(&c->a, b, t0, 0),
                        gdn_v_off(&c->a, b, t0, 0), gdn_gate_off(&c->a, b, t0, 0),
                        gdn_gate_off(&c->a, b, t0, 0)};
        long big[5] = {0, s.qk, 2 * s.qk, 2 * s.qk + s.v, 2 * s.qk + s.v + s.g};
        long small[5] = {0, ds.qk, 2 * ds.qk, 2 * ds.qk + ds.v, 2 * ds.qk + ds.v + ds.g};
        long counts[5] = {ds.qk, ds.qk, ds.v, ds.g, ds.g};
        for (int j = 0; j < 5; j++)
            same &= !memcmp(dg + small[j], grads + big[j] + offs[j], sizeof(float) * counts[j]);
        free(dg), delta_case_free(&d);
    }
    check(same,
          "delta rule %s: each of %d packed documents alone gives the same outputs and "
          "gradients, bitwise",
          form, docs);
    free(grads);
}

// Row 0 one document of 150 tokens (chunks from 0, 64, 128); row 1 three documents from 0, 30
// (80 tokens: two chunks) and 110, each starting mid-chunk of row 0's grid. GVA: 4 value heads
// over 2 query/key heads.
static void test_delta_rule(void) {
    enum { B = 2, T = 150, DOCS = 3 };
    static const int starts[DOCS] = {0, 30, 110};
    static int32_t doc_start[B * T];
    for (int t = 0; t < T; t++)
        doc_start[t] = 0, doc_start[T + t] = t < 30 ? 0 : t < 110 ? 30 : 110;
    gdn_args a = {B, T, 4, 2, 8, 6, doc_start, 1.0f / sqrtf(8.0f)};
    delta_case c = delta_case_new(a);
    delta_sizes s = delta_sizes_of(&a);
    double *ref = malloc(sizeof(double) * s.v);
    float *rec = malloc(sizeof(float) * s.v);
    delta_reference(&c, ref);
    c.chunked = 0, delta_forward(&c, rec);
    c.chunked = 1, delta_forward(&c, c.out);
    double e_rec = rel_err_d(rec, ref, s.v), e_chk = rel_err_d(c.out, ref, s.v);
    double e_both = rel_err(c.out, rec, s.v);
    check(e_rec < FWD_TOL,
          "delta rule recurrent forward against the double reference (rel err %.3g)", e_rec);
    check(e_chk < FWD_TOL && e_both < 1e-5,
          "delta rule chunked forward against the double reference (rel err %.3g) and the "
          "recurrent one (%.3g)",
          e_chk, e_both);

    c.a.doc_start = NULL; // row 0 is one document either way
    delta_forward(&c, rec);
    check(!memcmp(rec, c.out, sizeof(float) * s.v / B),
          "delta rule without doc_start: row 0 unchanged");
    c.a.doc_start = doc_start;

    delta_compare_backward(&c, "");
    for (int chunked = 0; chunked < 2; chunked++) {
        const char *form = chunked ? "chunked" : "recurrent";
        c.chunked = chunked;
        delta_gradcheck(&c, form);
        delta_packed_vs_alone(&c, 1, starts, DOCS, form);
        det_check(chunked ? "delta rule chunked fwd+bwd" : "delta rule recurrent fwd+bwd",
                  delta_run, &c, s.v + s.all);
    }
    free(ref), free(rec), delta_case_free(&c);
}

// The edges: one-token documents, a chunk of one token, decays so strong (g down to -40) that
// exp(gamma) underflows to 0 within a chunk, no grouped heads (H == HK).
static void test_delta_rule_edges(void) {
    enum { T = 70, DOCS = 4 };
    static const int starts[DOCS] = {0, 5, 6, 40};
    static int32_t doc_start[T];
    for (int t = 0; t < T; t++)
        for (int d = 0; d < DOCS; d++)
            if (t >= starts[d]) doc_start[t] = starts[d];
    gdn_args a = {1, T, 2, 2, 5, 3, doc_start, 1.0f / sqrtf(5.0f)};
    delta_case c = delta_case_new(a);
    delta_sizes s = delta_sizes_of(&a);
    for (long i = 0; i < s.g; i++) c.g[i] = i % 3 ? c.g[i] : rng_range(-40, -1);
    float *rec = malloc(sizeof(float) * s.v);
    c.chunked = 0, delta_forward(&c, rec);
    c.chunked = 1, delta_forward(&c, c.out);
    double err = rel_err(c.out, rec, s.v);
    check(err < 1e-5, "delta rule edges: chunked forward against the recurrent one (rel err %.3g)",
          err);
    delta_compare_backward(&c, " edges:");
    delta_gradcheck(&c, "edges: chunked");
    delta_packed_vs_alone(&c, 0, starts, DOCS, "edges: chunked");
    free(rec), delta_case_free(&c);
}

int main(void) {
    test_conv();
    test_l2norm();
    test_gates();
    test_gated_norm();
    test_delta_rule();
    test_delta_rule_edges();
    return tests_summary();
}
