// The CUDA kernels of Gated DeltaNet (kernels/cuda/kernels_gdn_cuda.h) against the fp32 CPU
// reference ops (kernels/cpu/kernels_gdn.h): the chunked gated delta rule forward and backward
// (the tensor-core path "gdn", and the CUDA-core _ref path "gdn ref"; the first also against the
// second, and "gdn passes": the tensor-core state passes with the CUDA-core per-chunk gradients,
// which tells a fault of the passes from one of the gradients' kernels), the causal conv1d +
// SiLU, l2norm, the gates and the gated RMSNorm.
//
// The bf16 inputs are rounded first, so both sides see the same values; the GPU's bf16 outputs
// are compared at bf16's precision, its fp32 outputs (the delta rule's gradients, the norms'
// statistics, the weight gradients) more tightly. Every GPU output is poisoned (0xFF: NaN)
// before a call, so an element no kernel writes fails; weight gradients (accumulated) start from
// random priors. Every call runs twice and must give the same bits (no atomics). Shapes: T not a
// multiple of 64, grouped value heads (H = 2 HK, 3 HK), head dims 16, 32 and 128, dk != dv,
// several rows, packed documents that start mid-chunk (1- and 2-token documents among them),
// and rows of more chunks than one backward segment holds.
//
//   test_gdn_cuda            the checks; exit 0 all passed, 1 a check failed, 77 no CUDA device
//   test_gdn_cuda --bench [--B 1 --H 48 --HK 16 --dk 128 --dv 128 --T 4096,32768]
//                            forward and backward ms and tokens/s of the delta rule, tensor
//                            cores (gdn) and the CUDA-core reference (gdn ref), with each
//                            tensor-core kernel's share; by default at Qwen3.5-27B's linear
//                            attention heads (16 key, 48 value, 128)
#define TEST_RNG_SEED 0x6A09E667F3BCC908ull
#include "kernels/bf16.h"
#include "kernels/cpu/kernels_gdn.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_gdn_cuda.h"
#include "tests/cuda_test_util.h"
#include "tests/cuda_timer.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

// bf16 outputs carry ~3 significant digits; fp32 outputs differ only by the order of sums.
static const double TOL_BF16 = 1e-2, TOL_F32 = 1e-3;
static int passed, failed;

// ---- helpers -------------------------------------------------------------------------------

// ||a - b|| / ||b||; infinite if a holds a NaN or Inf (an unwritten, poisoned element).
static double rel_err(const float *a, const float *b, long n) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void report(int ok, const char *what, const char *shape, double err) {
    printf("%s %-22s %s  rel_err %.3g\n", ok ? "PASS" : "FAIL", what, shape, err);
    if (ok)
        passed++;
    else
        failed++;
}

static void check_close(const char *what, const char *shape, const float *got, const float *ref,
                        long n, double tol) {
    double err = rel_err(got, ref, n);
    report(err < tol, what, shape, err);
}

static bf16 *to_dev_bf16(const float *f, long n) {
    bf16 *h = hmalloc(sizeof(bf16) * n), *d = dmalloc(sizeof(bf16) * n);
    for (long i = 0; i < n; i++) h[i] = bf16_from_float(f[i]);
    CUDA_CHECK(cudaMemcpy(d, h, sizeof(bf16) * n, cudaMemcpyHostToDevice));
    return d;
}
static float *to_dev(const float *f, long n) {
    float *d = dmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(d, f, sizeof(float) * n, cudaMemcpyHostToDevice));
    return d;
}
static void poison(void *d, size_t bytes) { // NaNs where a kernel reads what it did not write
    CUDA_CHECK(cudaMemset(d, 0xFF, bytes));
}
static void *dev_poisoned(size_t bytes) {
    void *d = dmalloc(bytes);
    poison(d, bytes);
    return d;
}
static float *from_dev(const float *d, long n) {
    float *h = hmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost));
    return h;
}
static float *from_dev_bf16(const bf16 *d, long n) {
    bf16 *b = hmalloc(sizeof(bf16) * n);
    CUDA_CHECK(cudaMemcpy(b, d, sizeof(bf16) * n, cudaMemcpyDeviceToHost));
    float *h = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) h[i] = bf16_to_float(b[i]);
    return h;
}
// Whether two device buffers hold the same bits.
static int same_bits(const void *a, const void *b, size_t bytes) {
    void *ha = hmalloc(bytes), *hb = hmalloc(bytes);
    CUDA_CHECK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    return memcmp(ha, hb, bytes) == 0;
}

// Document starts [B, T] from lengths (0-terminated), cycled, row b starting b documents in.
static int32_t *doc_starts(const int *docs, int B, int T) {
    if (!docs) return NULL;
    int n = 0;
    while (docs[n]) n++;
    int32_t *ds = hmalloc(sizeof(int32_t) * B * T);
    for (int b = 0; b < B; b++) {
        int i = b % n, start = 0, left = docs[i];
        for (int t = 0; t < T; t++, left--) {
            if (left == 0) i = (i + 1) % n, left = docs[i], start = t;
            ds[(long)b * T + t] = start;
        }
    }
    return ds;
}

// Rows of dim scaled to unit norm, then rounded to bf16 (the delta rule's q and k come out of
// an l2norm; unnormalized keys let the state grow without bound).
static float *unit_rows_bf16(long rows, int dim) {
    float *x = rand_vec(rows * dim, 1.0f);
    for (long r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        for (int i = 0; i < dim; i++)
            x[r * dim + i] = bf16_to_float(bf16_from_float(x[r * dim + i] / (float)sqrt(ss)));
    }
    return x;
}

// ---- the gated delta rule ------------------------------------------------------------------

typedef struct {
    int B, T, H, HK, dk, dv;
    const int *docs; // document lengths, 0-terminated; NULL: one document a row
} gdn_shape;

static const int MID[] = {100, 37, 1, 2, 130, 0}; // starts mid-chunk, tiny documents
static const int EDGE[] = {64, 63, 65, 200, 0};
static const gdn_shape GDN_SHAPES[] = {
    {1, 150, 2, 1, 16, 16, NULL},
    {2, 150, 4, 2, 32, 32, MID},
    {1, 64, 2, 2, 16, 32, NULL},
    {3, 200, 6, 3, 32, 16, MID},
    {1, 1000, 2, 1, 128, 128, NULL},
    // Head dims the kernels' 128 instances do not take: uneven 16-warp tiles (dk 96), the
    // output kernel's S0 halves at 96, the generic instance at dk 128 with a smaller dv.
    {1, 700, 2, 1, 96, 96, MID},
    {1, 500, 4, 2, 128, 64, EDGE},
    {2, 1000, 4, 2, 128, 128, EDGE},
    {2, 1000, 6, 2, 128, 128, MID},
    // Over 32 chunks a row: the backward's segments, its checkpoints and the state gradient
    // carried from one segment to the one before, within a document and across documents.
    {1, 2200, 2, 1, 128, 128, NULL},
    {2, 2500, 4, 2, 32, 32, MID},
    {1, 4500, 3, 1, 16, 16, EDGE},
    // Enough (head, 32 state columns) blocks for two a multiprocessor: the passes take 32
    // columns a block here (pass_cols), 16 in the shapes above.
    {2, 300, 72, 8, 128, 128, MID},
};

// The CPU reference's inputs and outputs for one shape, and their device copies.
typedef struct {
    gdn_args a;       // doc_start: the host copy
    int32_t *ds_dev;  // the device copy, or NULL
    long nqk, nv, ng; // elements of q (and k), v (and out), g (and beta)
    float *q, *k, *v, *g, *beta, *dout, *out, *dq, *dk, *dv, *dg, *dbeta;
    int max_chunks;
} gdn_case;

static void gdn_case_init(gdn_case *c, const gdn_shape *s) {
    int32_t *ds = doc_starts(s->docs, s->B, s->T);
    c->a = (gdn_args){s->B, s->T, s->H, s->HK, s->dk, s->dv, ds, 1.0f / sqrtf((float)s->dk)};
    c->ds_dev = ds ? dmalloc(sizeof(int32_t) * s->B * s->T) : NULL;
    if (ds)
        CUDA_CHECK(
            cudaMemcpy(c->ds_dev, ds, sizeof(int32_t) * s->B * s->T, cudaMemcpyHostToDevice));
    c->nqk = (long)s->B * s->T * s->HK * s->dk;
    c->nv = (long)s->B * s->T * s->H * s->dv;
    c->ng = (long)s->B * s->T * s->H;
    c->q = unit_rows_bf16(c->nqk / s->dk, s->dk);
    c->k = unit_rows_bf16(c->nqk / s->dk, s->dk);
    c->v = rand_bf16_vec(c->nv, 1.0f);
    c->g = rand_vec(c->ng, 1.0f), c->beta = rand_vec(c->ng, 1.0f);
    for (long i = 0; i < c->ng; i++) { // decays from 0.3 to 1, write strengths 0.12 to 0.88
        c->g[i] = -0.6f * (c->g[i] + 1.0f);
        c->beta[i] = 1.0f / (1.0f + expf(-2.0f * c->beta[i]));
    }
    c->dout = rand_vec(c->nv, 1.0f);
    c->out = zero_vec(c->nv), c->dq = zero_vec(c->nqk), c->dk = zero_vec(c->nqk);
    c->dv = zero_vec(c->nv), c->dg = zero_vec(c->ng), c->dbeta = zero_vec(c->ng);
    gdn_tensors t = {c->q,    c->k,  c->v,  c->g,  c->beta, c->out,
                     c->dout, c->dq, c->dk, c->dv, c->dg,   c->dbeta};
    gated_delta_chunked_forward(&c->a, &t);
    gated_delta_chunked_backward(&c->a, &t); // accumulates onto the zeros
    c->max_chunks = gdn_max_chunks(ds, s->B, s->T);
}

typedef struct {
    bf16 *out;
    float *dq, *dk, *dv, *dg, *dbeta;
} gdn_run;

// A path through the delta rule: the tensor-core kernels at bf16 operands (the default) or in
// the exact mode (cuda_gated_delta_exact), or the CUDA-core reference.
typedef struct {
    const char *name;
    void (*forward)(const gdn_args *, int, const cuda_gdn_tensors *, void *, cudaStream_t);
    void (*backward)(const gdn_args *, int, const cuda_gdn_tensors *, void *, cudaStream_t);
    int exact;
} gdn_path;
static const gdn_path TC = {"gdn", cuda_gated_delta_forward, cuda_gated_delta_backward, 0};
static const gdn_path TC_EXACT = {"gdn exact", cuda_gated_delta_forward, cuda_gated_delta_backward,
                                  1};
static const gdn_path REF = {"gdn ref", cuda_gated_delta_forward_ref, cuda_gated_delta_backward_ref,
                             0};

// Scratch bytes that serve both paths in the current mode (the exact one's are the larger).
static size_t gdn_scratch_bytes(const gdn_args *a, int max_chunks) {
    size_t tc = cuda_gated_delta_scratch_bytes(a, max_chunks, 1);
    size_t ref = cuda_gated_delta_scratch_bytes_ref(a, max_chunks, 1);
    return tc > ref ? tc : ref;
}

// The backward after the forward's checkpoints (as a layer's, after recomputing its forward), or
// after its own sweep over the chunks (ckpt_ready 0).
static int ckpt_ready = 1;

// One forward and one backward of path p on the device into fresh poisoned outputs.
static gdn_run gdn_device_run(const gdn_case *c, const cuda_gdn_tensors *in, const gdn_path *p) {
    gdn_run r = {dev_poisoned(sizeof(bf16) * c->nv),   dev_poisoned(sizeof(float) * c->nqk),
                 dev_poisoned(sizeof(float) * c->nqk), dev_poisoned(sizeof(float) * c->nv),
                 dev_poisoned(sizeof(float) * c->ng),  dev_poisoned(sizeof(float) * c->ng)};
    gdn_args a = c->a;
    a.doc_start = c->ds_dev;
    cuda_gated_delta_exact(p->exact);
    void *scratch = dev_poisoned(gdn_scratch_bytes(&a, c->max_chunks));
    cuda_gdn_tensors t = *in;
    t.out = r.out, t.dq = r.dq, t.dk = r.dk, t.dv = r.dv, t.dg = r.dg, t.dbeta = r.dbeta;
    size_t ckpt = cuda_gated_delta_ckpt_bytes(&a, c->max_chunks);
    t.ckpt = ckpt ? dev_poisoned(ckpt) : NULL, t.ckpt_ready = ckpt_ready;
    p->forward(&a, c->max_chunks, &t, scratch, 0);
    if (!ckpt_ready && ckpt) poison(t.ckpt, ckpt); // what the sweep does not write would show
    p->backward(&a, c->max_chunks, &t, scratch, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    return r;
}

// A run's outputs on the host (fp32).
typedef struct {
    float *out, *dq, *dk, *dv, *dg, *dbeta;
} gdn_outputs;

static gdn_outputs gdn_outputs_of(const gdn_case *c, const gdn_run *r) {
    return (gdn_outputs){from_dev_bf16(r->out, c->nv), from_dev(r->dq, c->nqk),
                         from_dev(r->dk, c->nqk),      from_dev(r->dv, c->nv),
                         from_dev(r->dg, c->ng),       from_dev(r->dbeta, c->ng)};
}

// A device run against expected outputs: out at bf16's precision, the gradients at grad_tol
// (fp32's where every product keeps it, bf16's where its operands are rounded to bf16).
static void check_outputs(const char *path, const char *shape, const gdn_case *c, const gdn_run *r,
                          const gdn_outputs *want, double grad_tol) {
    gdn_outputs got = gdn_outputs_of(c, r);
    const struct {
        const char *what;
        const float *got, *want;
        long n;
        double tol;
    } rows[] = {{"out", got.out, want->out, c->nv, TOL_BF16},
                {"dq", got.dq, want->dq, c->nqk, grad_tol},
                {"dk", got.dk, want->dk, c->nqk, grad_tol},
                {"dv", got.dv, want->dv, c->nv, grad_tol},
                {"dg", got.dg, want->dg, c->ng, grad_tol},
                {"dbeta", got.dbeta, want->dbeta, c->ng, grad_tol}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char what[48];
        snprintf(what, sizeof what, "%s %s", path, rows[i].what);
        check_close(what, shape, rows[i].got, rows[i].want, rows[i].n, rows[i].tol);
    }
}

// Whether two runs gave the same bits.
static int same_run(const gdn_case *c, const gdn_run *x, const gdn_run *y) {
    return same_bits(x->out, y->out, sizeof(bf16) * c->nv) &&
           same_bits(x->dq, y->dq, sizeof(float) * c->nqk) &&
           same_bits(x->dk, y->dk, sizeof(float) * c->nqk) &&
           same_bits(x->dv, y->dv, sizeof(float) * c->nv) &&
           same_bits(x->dg, y->dg, sizeof(float) * c->ng) &&
           same_bits(x->dbeta, y->dbeta, sizeof(float) * c->ng);
}

static void check_gated_delta(const gdn_shape *s) {
    gdn_case c;
    gdn_case_init(&c, s);
    char name[96];
    snprintf(name, sizeof name, "B=%d T=%d H=%d HK=%d dk=%d dv=%d%s", s->B, s->T, s->H, s->HK,
             s->dk, s->dv, s->docs ? " docs" : "");
    cuda_gdn_tensors in = {.q = to_dev_bf16(c.q, c.nqk),
                           .k = to_dev_bf16(c.k, c.nqk),
                           .v = to_dev_bf16(c.v, c.nv),
                           .g = to_dev(c.g, c.ng),
                           .beta = to_dev(c.beta, c.ng),
                           .dout = to_dev(c.dout, c.nv)};
    gdn_run ref = gdn_device_run(&c, &in, &REF);
    gdn_outputs want = {c.out, c.dq, c.dk, c.dv, c.dg, c.dbeta}, old = gdn_outputs_of(&c, &ref);
    check_outputs("gdn ref", name, &c, &ref, &want, TOL_F32);
    // the exact mode: fp32's precision, against the CPU and the CUDA-core path
    gdn_run r[2] = {gdn_device_run(&c, &in, &TC_EXACT), gdn_device_run(&c, &in, &TC_EXACT)};
    check_outputs("gdn exact", name, &c, &r[0], &want, TOL_F32);
    check_outputs("gdn exact vs ref", name, &c, &r[0], &old, TOL_F32);
    cuda_gated_delta_ref_grads(1); // the tensor-core state passes with the CUDA-core gradients
    gdn_run mixed = gdn_device_run(&c, &in, &TC_EXACT);
    cuda_gated_delta_ref_grads(0);
    check_outputs("gdn passes", name, &c, &mixed, &want, TOL_F32);
    int same = same_run(&c, &r[0], &r[1]);
    report(same, "gdn exact rerun", name, same ? 0.0 : 1.0);
    // the default: bf16 operands, within bf16's precision of the same reference
    gdn_run d[2] = {gdn_device_run(&c, &in, &TC), gdn_device_run(&c, &in, &TC)};
    check_outputs("gdn", name, &c, &d[0], &want, TOL_BF16);
    same = same_run(&c, &d[0], &d[1]);
    report(same, "gdn rerun", name, same ? 0.0 : 1.0);
    // every block size of the state pass: the same bits (a warp's arithmetic is its own)
    for (int w = 1; w <= 4; w *= 2) {
        if (s->dv % (16 * w)) continue;
        cuda_gated_delta_pass_warps(w);
        gdn_run x = gdn_device_run(&c, &in, &TC);
        cuda_gated_delta_pass_warps(0);
        char what[48];
        snprintf(what, sizeof what, "gdn pass of %d-warp blocks", w);
        same = same_run(&c, &d[0], &x);
        report(same, what, name, same ? 0.0 : 1.0);
    }
    // the rows kernel's blocks of 8 warps, not 16: the same bits (a tile's arithmetic is its own)
    cuda_gated_delta_rows_warps(8);
    gdn_run r8 = gdn_device_run(&c, &in, &TC);
    cuda_gated_delta_rows_warps(0);
    same = same_run(&c, &d[0], &r8);
    report(same, "gdn rows of 8-warp blocks", name, same ? 0.0 : 1.0);
    // the backward after its own sweep for the checkpoints, not the forward's; the passes on the
    // caller's stream in turn, not beside the per-chunk kernels: the same bits
    static const char *const VARIANT[4] = {"gdn, checkpoints swept", "gdn exact, checkpoints swept",
                                           "gdn on one stream", "gdn exact on one stream"};
    for (int v = 0; v < 4; v++) {
        ckpt_ready = v / 2, cuda_gated_delta_lanes(v < 2);
        gdn_run x = gdn_device_run(&c, &in, v % 2 ? &TC_EXACT : &TC);
        ckpt_ready = 1, cuda_gated_delta_lanes(1);
        same = same_run(&c, v % 2 ? &r[0] : &d[0], &x);
        report(same, VARIANT[v], name, same ? 0.0 : 1.0);
    }
    // the split pass (blocks of 8 warps, each pair's dk in halves): its own order of the sums
    for (int exact = 0; s->dk == 128 && s->dv % 64 == 0 && exact < 2; exact++) {
        cuda_gated_delta_pass_warps(8);
        gdn_run x = gdn_device_run(&c, &in, exact ? &TC_EXACT : &TC);
        cuda_gated_delta_pass_warps(0);
        check_outputs(exact ? "gdn exact, split pass" : "gdn, split pass", name, &c, &x, &want,
                      exact ? TOL_F32 : TOL_BF16);
    }
    release_all();
}

// ---- the small ops ---------------------------------------------------------------------------

// A weight gradient's prior (the backward accumulates), on the host and the device.
typedef struct {
    float *host, *dev;
} prior;
static prior prior_new(long n) {
    prior p = {rand_vec(n, 1.0f), NULL};
    p.dev = to_dev(p.host, n);
    return p;
}

static void check_conv(int B, int T, int C, const int *docs) {
    char name[64];
    snprintf(name, sizeof name, "B=%d T=%d C=%d K=4%s", B, T, C, docs ? " docs" : "");
    int32_t *ds = doc_starts(docs, B, T);
    conv1d_args a = {B, T, C, 4, ds};
    long n = (long)B * T * C;
    float *x = rand_bf16_vec(n, 1.0f), *w = rand_bf16_vec((long)C * 4, 0.7f);
    float *dout = rand_vec(n, 1.0f), *out = zero_vec(n), *dx = zero_vec(n);
    prior dw = prior_new((long)C * 4);
    float *dw_ref = copy_vec(dw.host, (long)C * 4);
    causal_conv1d_silu_forward(out, x, w, &a);
    causal_conv1d_silu_backward(dx, dw_ref, dout, x, w, &a);
    conv1d_args ad = a;
    ad.doc_start = ds ? dmalloc(sizeof(int32_t) * B * T) : NULL;
    if (ds)
        CUDA_CHECK(
            cudaMemcpy((void *)ad.doc_start, ds, sizeof(int32_t) * B * T, cudaMemcpyHostToDevice));
    bf16 *xd = to_dev_bf16(x, n), *wd = to_dev_bf16(w, (long)C * 4);
    float *doutd = to_dev(dout, n),
          *scratch = dmalloc(sizeof(float) * cuda_conv1d_scratch_floats(&a));
    bf16 *o[2], *g[2];
    float *dw_dev[2] = {dw.dev, to_dev(dw.host, (long)C * 4)};
    for (int r = 0; r < 2; r++) {
        o[r] = dev_poisoned(sizeof(bf16) * n), g[r] = dev_poisoned(sizeof(bf16) * n);
        cuda_causal_conv1d_silu_forward(o[r], xd, wd, &ad, 0);
        cuda_causal_conv1d_silu_backward(g[r], dw_dev[r], doutd, xd, wd, &ad, scratch, 0);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    check_close("conv out", name, from_dev_bf16(o[0], n), out, n, TOL_BF16);
    check_close("conv dx", name, from_dev_bf16(g[0], n), dx, n, TOL_BF16);
    check_close("conv dw", name, from_dev(dw_dev[0], (long)C * 4), dw_ref, (long)C * 4, TOL_F32);
    int same = same_bits(o[0], o[1], sizeof(bf16) * n) && same_bits(g[0], g[1], sizeof(bf16) * n) &&
               same_bits(dw_dev[0], dw_dev[1], sizeof(float) * C * 4);
    report(same, "conv rerun", name, same ? 0.0 : 1.0);
    release_all();
}

static void check_l2norm(long rows, int dim) {
    char name[64];
    snprintf(name, sizeof name, "rows=%ld dim=%d", rows, dim);
    long n = rows * dim;
    float *x = rand_bf16_vec(n, 1.0f), *dout = rand_vec(n, 1.0f);
    float *out = zero_vec(n), *rnorm = zero_vec(rows), *dx = zero_vec(n);
    l2norm_forward(out, rnorm, x, rows, dim, 1e-6f);
    l2norm_backward(dx, dout, x, rnorm, rows, dim);
    bf16 *xd = to_dev_bf16(x, n);
    float *doutd = to_dev(dout, n);
    bf16 *o[2];
    float *rn[2], *g[2];
    for (int r = 0; r < 2; r++) {
        o[r] = dev_poisoned(sizeof(bf16) * n), rn[r] = dev_poisoned(sizeof(float) * rows);
        g[r] = dev_poisoned(sizeof(float) * n);
        cuda_l2norm_forward(o[r], rn[r], xd, rows, dim, 1e-6f, 0);
        cuda_l2norm_backward(g[r], doutd, xd, rn[r], rows, dim, 0);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    check_close("l2norm out", name, from_dev_bf16(o[0], n), out, n, TOL_BF16);
    check_close("l2norm rnorm", name, from_dev(rn[0], rows), rnorm, rows, TOL_F32);
    check_close("l2norm dx", name, from_dev(g[0], n), dx, n, TOL_F32);
    int same = same_bits(o[0], o[1], sizeof(bf16) * n) && same_bits(g[0], g[1], sizeof(float) * n);
    report(same, "l2norm rerun", name, same ? 0.0 : 1.0);
    release_all();
}

static void check_gates(long n, int H) {
    char name[64];
    snprintf(name, sizeof name, "n=%ld H=%d", n, H);
    long e = n * H;
    // a spans the softplus threshold (a + dt_bias > 20 on some tokens).
    float *a = rand_bf16_vec(e, 12.0f), *b = rand_bf16_vec(e, 4.0f);
    float *A_log = rand_bf16_vec(H, 1.0f), *dt_bias = rand_bf16_vec(H, 10.0f);
    float *dg = rand_vec(e, 1.0f), *dbeta = rand_vec(e, 1.0f), *g = zero_vec(e),
          *beta = zero_vec(e);
    float *da = zero_vec(e), *db = zero_vec(e);
    prior dA = prior_new(H), ddt = prior_new(H);
    float *dA_ref = copy_vec(dA.host, H), *ddt_ref = copy_vec(ddt.host, H);
    gdn_gate_tensors ref = {a, b, A_log, dt_bias, g, beta, dg, dbeta, da, db, dA_ref, ddt_ref};
    gdn_gates_forward(&ref, n, H);
    gdn_gates_backward(&ref, n, H);
    cuda_gdn_gate_tensors t = {.a = to_dev_bf16(a, e),
                               .b = to_dev_bf16(b, e),
                               .A_log = to_dev_bf16(A_log, H),
                               .dt_bias = to_dev_bf16(dt_bias, H),
                               .dg = to_dev(dg, e),
                               .dbeta = to_dev(dbeta, e)};
    float *scratch = dmalloc(sizeof(float) * cuda_gdn_gates_scratch_floats(n, H));
    cuda_gdn_gate_tensors run[2];
    float *dAd[2] = {dA.dev, to_dev(dA.host, H)}, *ddtd[2] = {ddt.dev, to_dev(ddt.host, H)};
    for (int r = 0; r < 2; r++) {
        run[r] = t;
        run[r].g = dev_poisoned(sizeof(float) * e), run[r].beta = dev_poisoned(sizeof(float) * e);
        run[r].da = dev_poisoned(sizeof(bf16) * e), run[r].db = dev_poisoned(sizeof(bf16) * e);
        run[r].dA_log = dAd[r], run[r].ddt_bias = ddtd[r];
        cuda_gdn_gates_forward(&run[r], n, H, 0);
        cuda_gdn_gates_backward(&run[r], n, H, scratch, 0);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    check_close("gates g", name, from_dev(run[0].g, e), g, e, TOL_F32);
    check_close("gates beta", name, from_dev(run[0].beta, e), beta, e, TOL_F32);
    check_close("gates da", name, from_dev_bf16(run[0].da, e), da, e, TOL_BF16);
    check_close("gates db", name, from_dev_bf16(run[0].db, e), db, e, TOL_BF16);
    check_close("gates dA_log", name, from_dev(dAd[0], H), dA_ref, H, TOL_F32);
    check_close("gates ddt_bias", name, from_dev(ddtd[0], H), ddt_ref, H, TOL_F32);
    int same = same_bits(run[0].g, run[1].g, sizeof(float) * e) &&
               same_bits(run[0].da, run[1].da, sizeof(bf16) * e) &&
               same_bits(dAd[0], dAd[1], sizeof(float) * H) &&
               same_bits(ddtd[0], ddtd[1], sizeof(float) * H);
    report(same, "gates rerun", name, same ? 0.0 : 1.0);
    release_all();
}

static void check_rmsnorm_gated(int n, int dim) {
    char name[64];
    snprintf(name, sizeof name, "n=%d dim=%d", n, dim);
    long e = (long)n * dim;
    float *x = rand_bf16_vec(e, 1.0f), *z = rand_bf16_vec(e, 3.0f), *w = rand_bf16_vec(dim, 1.0f);
    float *dout = rand_vec(e, 1.0f), *out = zero_vec(e), *rstd = zero_vec(n);
    float *dx = zero_vec(e), *dz = zero_vec(e);
    prior dw = prior_new(dim);
    float *dw_ref = copy_vec(dw.host, dim);
    rmsnorm_gated_forward(out, rstd, x, z, w, n, dim, 1e-6f);
    rmsnorm_gated_backward(dx, dz, dw_ref, dout, x, z, w, rstd, n, dim);
    bf16 *xd = to_dev_bf16(x, e), *zd = to_dev_bf16(z, e), *wd = to_dev_bf16(w, dim);
    float *doutd = to_dev(dout, e);
    float *scratch = dmalloc(sizeof(float) * cuda_rmsnorm_gated_scratch_floats(n, dim));
    bf16 *o[2], *gz[2];
    float *rs[2], *gx[2], *dwd[2] = {dw.dev, to_dev(dw.host, dim)};
    for (int r = 0; r < 2; r++) {
        o[r] = dev_poisoned(sizeof(bf16) * e), gz[r] = dev_poisoned(sizeof(bf16) * e);
        rs[r] = dev_poisoned(sizeof(float) * n), gx[r] = dev_poisoned(sizeof(float) * e);
        cuda_rmsnorm_gated_forward(o[r], rs[r], xd, zd, wd, n, dim, 1e-6f, 0);
        cuda_rmsnorm_gated_backward(gx[r], gz[r], dwd[r], doutd, xd, zd, wd, rs[r], n, dim, scratch,
                                    0);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    check_close("gated norm out", name, from_dev_bf16(o[0], e), out, e, TOL_BF16);
    check_close("gated norm rstd", name, from_dev(rs[0], n), rstd, n, TOL_F32);
    check_close("gated norm dx", name, from_dev(gx[0], e), dx, e, TOL_F32);
    check_close("gated norm dz", name, from_dev_bf16(gz[0], e), dz, e, TOL_BF16);
    check_close("gated norm dweight", name, from_dev(dwd[0], dim), dw_ref, dim, TOL_F32);
    int same =
        same_bits(o[0], o[1], sizeof(bf16) * e) && same_bits(gx[0], gx[1], sizeof(float) * e) &&
        same_bits(gz[0], gz[1], sizeof(bf16) * e) && same_bits(dwd[0], dwd[1], sizeof(float) * dim);
    report(same, "gated norm rerun", name, same ? 0.0 : 1.0);
    release_all();
}

// ---- timing ----------------------------------------------------------------------------------

// Best of 3 forward and backward ms of path p after a warm-up.
static void bench_path(const gdn_path *p, const gdn_args *a, int chunks, const cuda_gdn_tensors *t,
                       void *scratch, float *fwd, float *bwd) {
    *fwd = *bwd = INFINITY;
    for (int rep = 0; rep < 4; rep++) {
        cudaEvent_t t0 = timer_start();
        p->forward(a, chunks, t, scratch, 0);
        float f = timer_stop_ms(t0);
        t0 = timer_start();
        p->backward(a, chunks, t, scratch, 0);
        float b = timer_stop_ms(t0);
        if (rep > 0) *fwd = f < *fwd ? f : *fwd, *bwd = b < *bwd ? b : *bwd;
    }
}

// The tensor-core path's kernels' shares of one forward and one backward (timed apart: the
// events around each launch slow the whole a little).
static void bench_shares(const gdn_args *a, int chunks, const cuda_gdn_tensors *t, void *scratch) {
    static const char *names[GDN_PHASES] = {"prep",        "state pass", "out",
                                            "dstate pass", "grad pairs", "grad rows"};
    float fwd[GDN_PHASES], bwd[GDN_PHASES], fsum = 0.0f, bsum = 0.0f;
    cuda_gated_delta_profile(1);
    cuda_gated_delta_forward(a, chunks, t, scratch, 0);
    cuda_gated_delta_profile_ms(fwd);
    cuda_gated_delta_backward(a, chunks, t, scratch, 0);
    cuda_gated_delta_profile_ms(bwd);
    cuda_gated_delta_profile(0);
    for (int p = 0; p < GDN_PHASES; p++) fsum += fwd[p], bsum += bwd[p];
    for (int p = 0; p < GDN_PHASES; p++)
        printf("  %-12s forward %8.3f ms (%4.1f%%)  backward %8.3f ms (%4.1f%%)\n", names[p],
               fwd[p], 100.0f * fwd[p] / fsum, bwd[p], 100.0f * bwd[p] / bsum);
}

// A digest of the outputs and gradients of the last run (with `first` parts alone: 1, the
// forward's output), to compare two builds' kernels: the fixed seed gives both the same
// inputs, so kernels that claim the same bits must print the same digest.
static unsigned long long outputs_digest(const cuda_gdn_tensors *t, long nqk, long nv, long ng,
                                         size_t first) {
    const struct {
        const void *p;
        size_t bytes;
    } parts[] = {{t->out, sizeof(bf16) * nv},  {t->dq, sizeof(float) * nqk},
                 {t->dk, sizeof(float) * nqk}, {t->dv, sizeof(float) * nv},
                 {t->dg, sizeof(float) * ng},  {t->dbeta, sizeof(float) * ng}};
    size_t n = sizeof(parts) / sizeof(parts[0]);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (size_t i = 0; i < (first && first < n ? first : n); i++) {
        void *h = hmalloc(parts[i].bytes);
        CUDA_CHECK(cudaMemcpy(h, parts[i].p, parts[i].bytes, cudaMemcpyDeviceToHost));
        XXH64_update(st, h, parts[i].bytes);
    }
    unsigned long long d = XXH64_digest(st);
    XXH64_freeState(st);
    return d;
}

// Forward and backward of the delta rule at one shape on both paths, and the tensor-core
// path's kernels' shares.
static void bench_one(int B, int T, int H, int HK, int dk, int dv) {
    gdn_args a = {B, T, H, HK, dk, dv, NULL, 1.0f / sqrtf((float)dk)};
    long nqk = (long)B * T * HK * dk, nv = (long)B * T * H * dv, ng = (long)B * T * H;
    int chunks = gdn_max_chunks(NULL, B, T);
    float *g = rand_vec(ng, 1.0f), *beta = rand_vec(ng, 1.0f);
    for (long i = 0; i < ng; i++) g[i] = -0.05f * (g[i] + 1.0f), beta[i] = 0.5f + 0.4f * beta[i];
    cuda_gdn_tensors t = {.q = to_dev_bf16(unit_rows_bf16(nqk / dk, dk), nqk),
                          .k = to_dev_bf16(unit_rows_bf16(nqk / dk, dk), nqk),
                          .v = to_dev_bf16(rand_vec(nv, 1.0f), nv),
                          .g = to_dev(g, ng),
                          .beta = to_dev(beta, ng),
                          .out = dmalloc(sizeof(bf16) * nv),
                          .dout = to_dev(rand_vec(nv, 1.0f), nv),
                          .dq = dmalloc(sizeof(float) * nqk),
                          .dk = dmalloc(sizeof(float) * nqk),
                          .dv = dmalloc(sizeof(float) * nv),
                          .dg = dmalloc(sizeof(float) * ng),
                          .dbeta = dmalloc(sizeof(float) * ng),
                          .ckpt_ready = 1}; // each backward follows its forward
    size_t ckpt = cuda_gated_delta_ckpt_bytes(&a, chunks);
    t.ckpt = ckpt ? dmalloc(ckpt) : NULL;
    cuda_gated_delta_exact(1); // the larger scratch serves every path
    size_t bytes = gdn_scratch_bytes(&a, chunks);
    void *scratch = dmalloc(bytes);
    const gdn_path *paths[] = {&TC, &TC_EXACT, &REF};
    for (int p = 0; p < 3; p++) {
        float f, b;
        cuda_gated_delta_exact(paths[p]->exact);
        bench_path(paths[p], &a, chunks, &t, scratch, &f, &b);
        printf("%-7s B=%d T=%d H=%d HK=%d dk=%d dv=%d: forward %.3f ms, backward %.3f ms, "
               "fwd+bwd %.0f tokens/s (scratch %.2f GiB)\n",
               paths[p]->name, B, T, H, HK, dk, dv, f, b, (double)B * T / ((f + b) * 1e-3),
               bytes / (double)(1ull << 30));
        if (p < 2) // both tensor-core modes: what two builds' kernels give, compared
            printf("  bits of the outputs and gradients (%s): %016llx (the output's %016llx)\n",
                   paths[p]->name, outputs_digest(&t, nqk, nv, ng, 0),
                   outputs_digest(&t, nqk, nv, ng, 1));
        if (p > 0) continue;
        bench_shares(&a, chunks, &t, scratch);
        for (int w = 1; w <= 8; w *= 2) { // the state passes' block sizes (8: the split pass)
            cuda_gated_delta_pass_warps(w);
            bench_path(&TC, &a, chunks, &t, scratch, &f, &b);
            printf("  pass blocks of %d warps: forward %.3f ms, backward %.3f ms\n", w, f, b);
        }
        cuda_gated_delta_pass_warps(0);
        cuda_gated_delta_rows_warps(8);
        bench_path(&TC, &a, chunks, &t, scratch, &f, &b);
        cuda_gated_delta_rows_warps(0);
        printf("  rows blocks of 8 warps: forward %.3f ms, backward %.3f ms\n", f, b);
        cuda_gated_delta_lanes(0);
        bench_path(&TC, &a, chunks, &t, scratch, &f, &b);
        cuda_gated_delta_lanes(1);
        printf("  on one stream (no lanes): forward %.3f ms, backward %.3f ms\n", f, b);
        t.ckpt_ready = 0;
        bench_path(&TC, &a, chunks, &t, scratch, &f, &b);
        t.ckpt_ready = 1;
        printf("  backward sweeping the chunks for its checkpoints: %.3f ms\n", b);
    }
    release_all();
}

static int bench(int argc, char **argv) {
    int B = 1, H = 48, HK = 16, dk = 128, dv = 128;
    const char *Ts = "4096,32768";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--B"))
            B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--H"))
            H = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--HK"))
            HK = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dk"))
            dk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dv"))
            dv = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--T"))
            Ts = argv[i + 1];
        else {
            fprintf(stderr, "test_gdn_cuda: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    for (const char *p = Ts; *p;) {
        bench_one(B, atoi(p), H, HK, dk, dv);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return 0;
}

int main(int argc, char **argv) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(argc, argv);
    for (size_t i = 0; i < sizeof GDN_SHAPES / sizeof *GDN_SHAPES; i++)
        check_gated_delta(&GDN_SHAPES[i]);
    check_conv(2, 150, 96, NULL);
    check_conv(3, 200, 70, MID);
    check_l2norm(300, 128);
    check_l2norm(301, 16);
    check_gates(1000, 6);
    check_gates(700, 48);
    check_rmsnorm_gated(500, 128);
    check_rmsnorm_gated(333, 16);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
