// CUDA kernels against the fp32 CPU reference (kernels/cpu), on the same values.
//
// Inputs are random; where a CUDA kernel takes bf16, the CPU reference gets the same values
// rounded through bf16 first, so the only differences left are summation order and the final
// rounding of bf16 outputs. Each check compares ||out - ref|| / ||ref|| with a tolerance:
// ~1e-4 where the CUDA output is fp32 (order only), 1e-2 where it is rounded to bf16 (~4e-3).
// Written outputs are poisoned with NaN bytes first, so an unwritten element fails the check;
// accumulated outputs start from known random values. Sizes that are not multiples of 8 or 32
// exercise the tail and unaligned paths. Exit 77 (skip) when there is no CUDA device.
#include "kernels/adamw.h"
#include "kernels/bf16.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "tests/cuda_timer.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double TOL_F32 = 1e-4, TOL_BF16 = 1e-2;
static int passed, failed;
static cuda_gemm *gemm;

#define TEST_RNG_SEED 0x243F6A8885A308D3ull
#include "tests/cuda_test_util.h"

static float *dev_f32(const float *h, long n) {
    float *d = dmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(d, h, sizeof(float) * n, cudaMemcpyHostToDevice));
    return d;
}
static bf16 *dev_bf16(const float *h, long n) {
    bf16 *tmp = hmalloc(sizeof(bf16) * n), *d = dmalloc(sizeof(bf16) * n);
    for (long i = 0; i < n; i++) tmp[i] = bf16_from_float(h[i]);
    CUDA_CHECK(cudaMemcpy(d, tmp, sizeof(bf16) * n, cudaMemcpyHostToDevice));
    return d;
}
static void *dev_poisoned(size_t bytes) { // NaN in both fp32 and bf16
    void *d = dmalloc(bytes);
    CUDA_CHECK(cudaMemset(d, 0xFF, bytes));
    return d;
}
static float *host_f32(const float *d, long n) {
    CUDA_CHECK(cudaDeviceSynchronize()); // surfaces asynchronous kernel faults here
    float *h = hmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost));
    return h;
}
static float *host_bf16(const bf16 *d, long n) {
    CUDA_CHECK(cudaDeviceSynchronize());
    bf16 *tmp = hmalloc(sizeof(bf16) * n);
    float *h = hmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(tmp, d, sizeof(bf16) * n, cudaMemcpyDeviceToHost));
    for (long i = 0; i < n; i++) h[i] = bf16_to_float(tmp[i]);
    return h;
}

// ---- checks -------------------------------------------------------------------------------

// ||out - ref|| / ||ref||, in double; NaN anywhere in out makes it NaN, which fails.
static double rel_err(const float *out, const float *ref, long n) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0.0 ? sqrt(den) : 1.0);
}

static void report(int ok, const char *name, const char *detail) {
    printf("%s %-52s %s\n", ok ? "PASS" : "FAIL", name, detail);
    if (ok)
        passed++;
    else
        failed++;
}

static void check_close(const char *name, const float *out, const float *ref, long n, double tol) {
    char detail[96];
    double err = rel_err(out, ref, n);
    snprintf(detail, sizeof detail, "rel_err %.3g (tol %.0e)", err, tol);
    report(err <= tol, name, detail); // NaN compares false
}

static void check_bitwise(const char *name, const float *a, const float *b, long n) {
    char detail[96];
    long diff = 0;
    for (long i = 0; i < n; i++) diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    snprintf(detail, sizeof detail, "%ld of %ld elements differ", diff, n);
    report(diff == 0, name, detail);
}

// Accumulated outputs: compare what was added, (out - prior) against (ref - prior), so that a
// small gradient is not hidden under a large prior (and an overwrite shows as -prior).
static void check_delta(const char *name, const float *out, const float *ref, const float *prior,
                        long n, double tol) {
    float *d_out = hmalloc(sizeof(float) * n), *d_ref = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) d_out[i] = out[i] - prior[i], d_ref[i] = ref[i] - prior[i];
    check_close(name, d_out, d_ref, n, tol);
}

// A check's name, in a static buffer: valid until the next call.
__attribute__((format(printf, 1, 2))) static char *label(const char *fmt, ...) {
    static char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

// ---- conversion ---------------------------------------------------------------------------

// Bit-exact against bf16_from_float; the second run starts one element in, so the pointers
// are unaligned and the scalar path runs.
static void test_convert(long n) {
    float *x = rand_vec(n, 3.0f);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-40f, x[3] = 3.0e38f, x[4] = 1.00390625f; // a tie
    float *dx = dev_f32(x, n);
    bf16 *dout = dev_poisoned(sizeof(bf16) * n);
    for (int off = 0; off < 2; off++) {
        CUDA_CHECK(cudaMemset(dout, 0xFF, sizeof(bf16) * n));
        cuda_float_to_bf16(dout + off, dx + off, n - off, 0);
        bf16 *h = hmalloc(sizeof(bf16) * n);
        CUDA_CHECK(cudaMemcpy(h, dout, sizeof(bf16) * n, cudaMemcpyDeviceToHost));
        long bad = 0;
        for (long i = off; i < n; i++) bad += h[i] != bf16_from_float(x[i]);
        char detail[64];
        snprintf(detail, sizeof detail, "%ld of %ld differ", bad, n - off);
        report(bad == 0, label("float_to_bf16 n=%ld offset=%d", n - off, off), detail);
    }
    release_all();
}

// ---- embedding ----------------------------------------------------------------------------

static void test_embedding(int n, int dim, int vocab) {
    int32_t *tok = hmalloc(sizeof(int32_t) * n);
    for (int t = 0; t < n; t++) tok[t] = rng_int(vocab);
    tok[n - 1] = tok[0]; // at least one repeat
    float *table = rand_bf16_vec((long)vocab * dim, 1.0f);
    int32_t *dtok = dmalloc(sizeof(int32_t) * n);
    CUDA_CHECK(cudaMemcpy(dtok, tok, sizeof(int32_t) * n, cudaMemcpyHostToDevice));

    float *ref = hmalloc(sizeof(float) * n * dim);
    embedding_forward(ref, tok, table, n, dim);
    float *dout = dev_poisoned(sizeof(float) * n * dim);
    cuda_embedding_forward(dout, dtok, dev_bf16(table, (long)vocab * dim), n, dim, 0);
    check_close(label("embedding fwd n=%d dim=%d", n, dim), host_f32(dout, (long)n * dim), ref,
                (long)n * dim, TOL_F32);

    // Backward: accumulate onto a random prior; rerun from the same prior for determinism.
    long nt = (long)vocab * dim;
    float *prior = rand_vec(nt, 1.0f), *g = rand_vec((long)n * dim, 1.0f);
    float *dref = copy_vec(prior, nt);
    embedding_backward(dref, g, tok, n, dim);
    float *dg = dev_f32(g, (long)n * dim), *dtab = dev_f32(prior, nt);
    cuda_embedding_backward(dtab, dg, dtok, n, dim, 0);
    float *first = host_f32(dtab, nt);
    check_delta(label("embedding bwd n=%d dim=%d vocab=%d", n, dim, vocab), first, dref, prior, nt,
                TOL_F32);
    CUDA_CHECK(cudaMemcpy(dtab, prior, sizeof(float) * nt, cudaMemcpyHostToDevice));
    cuda_embedding_backward(dtab, dg, dtok, n, dim, 0);
    check_bitwise(label("embedding bwd rerun bitwise n=%d", n), host_f32(dtab, nt), first, nt);
    release_all();
}

// ---- rmsnorm ------------------------------------------------------------------------------

// off: the weight applied as (off + w) (1: zero-centred weights, the _offset pair), else the
// plain calls.
static void norm_forward(bf16 *out, float *rstd, const float *x, const bf16 *w, float off, int n,
                         int dim, float eps) {
    if (off != 0.0f)
        cuda_rmsnorm_offset_forward(out, rstd, x, w, off, n, dim, eps, 0);
    else
        cuda_rmsnorm_forward(out, rstd, x, w, n, dim, eps, 0);
}
static void norm_backward(float *dx, float *dw, const float *g, const float *x, const bf16 *w,
                          float off, const float *rstd, int n, int dim, float *scratch) {
    if (off != 0.0f)
        cuda_rmsnorm_offset_backward(dx, dw, g, x, w, off, rstd, n, dim, scratch, 0);
    else
        cuda_rmsnorm_backward(dx, dw, g, x, w, rstd, n, dim, scratch, 0);
}

static void test_rmsnorm(int n, int dim, float off) {
    long nd = (long)n * dim;
    const float eps = 1e-5f;
    float *x = rand_vec(nd, 2.0f), *w = rand_vec(dim, 0.5f);
    for (int i = 0; i < dim; i++) w[i] = bf16_to_float(bf16_from_float(1.0f - off + w[i]));
    float *ref = hmalloc(sizeof(float) * nd), *rstd_ref = hmalloc(sizeof(float) * n);
    rmsnorm_offset_forward(ref, rstd_ref, x, w, off, n, dim, eps);

    float *dx_in = dev_f32(x, nd), *drstd = dev_poisoned(sizeof(float) * n);
    bf16 *dw_b = dev_bf16(w, dim), *dout_b = dev_poisoned(sizeof(bf16) * nd);
    norm_forward(dout_b, drstd, dx_in, dw_b, off, n, dim, eps);
    check_close(label("rmsnorm fwd out n=%d dim=%d off=%g", n, dim, off), host_bf16(dout_b, nd),
                ref, nd, TOL_BF16);
    check_close(label("rmsnorm fwd rstd n=%d dim=%d", n, dim), host_f32(drstd, n), rstd_ref, n,
                TOL_F32);

    float *g = rand_vec(nd, 1.0f), *dx_prior = rand_vec(nd, 1.0f), *dw_prior = rand_vec(dim, 1.0f);
    float *dx_ref = copy_vec(dx_prior, nd), *dw_ref = copy_vec(dw_prior, dim);
    rmsnorm_offset_backward(dx_ref, dw_ref, g, x, w, off, rstd_ref, n, dim);
    float *d_g = dev_f32(g, nd), *d_dx = dev_f32(dx_prior, nd), *d_dw = dev_f32(dw_prior, dim);
    float *scratch = dev_poisoned(sizeof(float) * cuda_rmsnorm_scratch_floats(n, dim));
    norm_backward(d_dx, d_dw, d_g, dx_in, dw_b, off, drstd, n, dim, scratch);
    check_delta(label("rmsnorm bwd dx n=%d dim=%d off=%g", n, dim, off), host_f32(d_dx, nd), dx_ref,
                dx_prior, nd, TOL_F32);
    float *dw_first = host_f32(d_dw, dim);
    check_delta(label("rmsnorm bwd dw n=%d dim=%d", n, dim), dw_first, dw_ref, dw_prior, dim,
                TOL_F32);
    CUDA_CHECK(cudaMemcpy(d_dw, dw_prior, sizeof(float) * dim, cudaMemcpyHostToDevice));
    norm_backward(d_dx, d_dw, d_g, dx_in, dw_b, off, drstd, n, dim, scratch);
    check_bitwise(label("rmsnorm bwd dw rerun bitwise n=%d", n), host_f32(d_dw, dim), dw_first,
                  dim);
    release_all();
}

// ---- rope ---------------------------------------------------------------------------------

// docs > 0: packed documents of docs tokens (positions restart at each), against the CPU's
// per-token positions. off, interleave: the rotated part from element off of a head, in pairs
// (2i, 2i + 1) (multi-head latent attention's last rot, DeepSeek's rope_interleave).
static void test_rope_at(int B, int T, int heads, int hd, int rot, int docs, int off,
                         int interleave) {
    long ne = (long)B * T * heads * hd;
    float *inv_freq = hmalloc(sizeof(float) * (hd / 2));
    rope_inv_freq(inv_freq, rot, 10000.0f);
    float *d_freq = dev_f32(inv_freq, hd / 2);
    int32_t *ds = NULL, *d_ds = NULL;
    if (docs > 0) {
        ds = hmalloc(sizeof(int32_t) * B * T);
        for (long i = 0; i < (long)B * T; i++) ds[i] = (int32_t)(i % T / docs * docs);
        CUDA_CHECK(cudaMalloc((void **)&d_ds, sizeof(int32_t) * B * T));
        CUDA_CHECK(cudaMemcpy(d_ds, ds, sizeof(int32_t) * B * T, cudaMemcpyHostToDevice));
    }
    // scale: YaRN's attention factor on cos and sin, where the documents are not tested
    const float scale = docs > 0 ? 1.0f : 1.25f;
    const rope_args host = {inv_freq, scale, B, T, hd, rot, ds, off, interleave},
                    dev = {d_freq, scale, B, T, hd, rot, d_ds, off, interleave};
    for (int dir = 0; dir < 2; dir++) {
        float *x = rand_bf16_vec(ne, 2.0f), *ref = copy_vec(x, ne);
        bf16 *dx = dev_bf16(x, ne);
        if (dir == 0) {
            rope_forward(ref, heads, &host);
            cuda_rope_forward(dx, heads, &dev, 0);
        } else {
            rope_backward(ref, heads, &host);
            cuda_rope_backward(dx, heads, &dev, 0);
        }
        check_close(label("rope %s B=%d T=%d heads=%d hd=%d rot=%d docs=%d off=%d%s",
                          dir ? "bwd" : "fwd", B, T, heads, hd, rot, docs, off,
                          interleave ? " interleaved" : ""),
                    host_bf16(dx, ne), ref, ne, TOL_BF16);
    }
    CUDA_CHECK(cudaFree(d_ds));
    release_all();
}
static void test_rope(int B, int T, int heads, int hd, int rot, int docs) {
    test_rope_at(B, T, heads, hd, rot, docs, 0, 0);
}

// ---- swiglu -------------------------------------------------------------------------------

// off = 1 starts every array one element in: unaligned, so the scalar path runs.
static void test_swiglu(long n, int off) {
    long na = n + off;
    float *gate = rand_bf16_vec(na, 4.0f), *up = rand_bf16_vec(na, 2.0f), *g = rand_vec(na, 1.0f);
    float *ref = hmalloc(sizeof(float) * na);
    swiglu_forward(ref, gate, up, na);
    bf16 *d_gate = dev_bf16(gate, na), *d_up = dev_bf16(up, na);
    bf16 *d_out = dev_poisoned(sizeof(bf16) * na);
    cuda_swiglu_forward(d_out + off, d_gate + off, d_up + off, n, 0);
    check_close(label("swiglu fwd n=%ld offset=%d", n, off), host_bf16(d_out, na) + off, ref + off,
                n, TOL_BF16);

    float *dg_ref = zero_vec(na), *du_ref = zero_vec(na); // the CPU backward accumulates
    swiglu_backward(dg_ref, du_ref, g, gate, up, na);
    float *d_g = dev_f32(g, na);
    bf16 *d_dg = dev_poisoned(sizeof(bf16) * na), *d_du = dev_poisoned(sizeof(bf16) * na);
    cuda_swiglu_backward(d_dg + off, d_du + off, d_g + off, d_gate + off, d_up + off, n, 0);
    check_close(label("swiglu bwd dgate n=%ld offset=%d", n, off), host_bf16(d_dg, na) + off,
                dg_ref + off, n, TOL_BF16);
    check_close(label("swiglu bwd dup n=%ld offset=%d", n, off), host_bf16(d_du, na) + off,
                du_ref + off, n, TOL_BF16);
    release_all();
}

// gpt-oss's clamped SwiGLU against kernels/cpu/swiglu_clamped.c on bf16 inputs over [-10, 10]
// (both clamps and the gate's unclamped negative side), some exactly at +-7 (the gradient
// passes there) and some just beyond (it does not).
static void test_swiglu_clamped(long n) {
    const swiglu_clamp c = {.alpha = 1.702f, .limit = 7.0f};
    float *gate = rand_bf16_vec(n, 10.0f), *up = rand_bf16_vec(n, 10.0f), *g = rand_vec(n, 1.0f);
    for (long i = 0; i + 3 < n; i += 97)
        gate[i] = 7.0f, up[i + 1] = -7.0f, up[i + 2] = 7.0f, gate[i + 3] = 7.0625f;
    float *ref = hmalloc(sizeof(float) * n), *dg_ref = zero_vec(n), *du_ref = zero_vec(n);
    swiglu_clamped_forward(ref, gate, up, n, c);
    swiglu_clamped_backward(dg_ref, du_ref, g, gate, up, n, c);
    bf16 *d_gate = dev_bf16(gate, n), *d_up = dev_bf16(up, n), *d_out = dev_poisoned(2 * n);
    cuda_swiglu_clamped_forward(d_out, d_gate, d_up, n, c, 0);
    check_close(label("swiglu clamped fwd n=%ld", n), host_bf16(d_out, n), ref, n, TOL_BF16);
    bf16 *d_dg = dev_poisoned(2 * n), *d_du = dev_poisoned(2 * n);
    cuda_swiglu_clamped_backward(d_dg, d_du, dev_f32(g, n), d_gate, d_up, n, c, 0);
    float *dg = host_bf16(d_dg, n), *du = host_bf16(d_du, n);
    check_close(label("swiglu clamped bwd dgate n=%ld", n), dg, dg_ref, n, TOL_BF16);
    check_close(label("swiglu clamped bwd dup n=%ld", n), du, du_ref, n, TOL_BF16);
    int zero_beyond = 1, passes_at = 1;
    for (long i = 0; i < n; i++) {
        if (gate[i] > 7.0f) zero_beyond &= dg[i] == 0.0f;
        if (fabsf(up[i]) > 7.0f) zero_beyond &= du[i] == 0.0f;
        if (gate[i] == 7.0f) passes_at &= dg[i] != 0.0f;
        if (fabsf(up[i]) == 7.0f) passes_at &= du[i] != 0.0f;
    }
    report(zero_beyond, "swiglu clamped: no gradient beyond the clamps", "");
    report(passes_at, "swiglu clamped: the gradient passes exactly at +-7", "");
    release_all();
}

// ---- bias ----------------------------------------------------------------------------------

// The router's: a bf16 bias on fp32 logits.
static void test_bias_f32(long rows, int cols) {
    long n = rows * cols;
    float *x = rand_vec(n, 2.0f), *b = rand_bf16_vec(cols, 1.0f), *ref = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) ref[i] = x[i] + b[i % cols];
    float *d_x = dev_f32(x, n);
    cuda_bias_forward_f32(d_x, dev_bf16(b, cols), rows, cols, 0);
    check_bitwise(label("bias fwd fp32 rows=%ld cols=%d", rows, cols), host_f32(d_x, n), ref, n);
    release_all();
}

// Against a plain double sum; the backward accumulates onto a prior and runs twice with the
// same bits (its order of summation is fixed). Both the bf16 and the fp32 pair.
static void test_bias(long rows, int cols) {
    long n = rows * cols;
    float *x = rand_bf16_vec(n, 2.0f), *b = rand_bf16_vec(cols, 1.0f),
          *ref = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) ref[i] = x[i] + b[i % cols];
    bf16 *d_x = dev_bf16(x, n), *d_b = dev_bf16(b, cols);
    cuda_bias_forward(d_x, d_b, rows, cols, 0);
    check_close(label("bias fwd rows=%ld cols=%d", rows, cols), host_bf16(d_x, n), ref, n,
                TOL_BF16);

    float *prior = rand_vec(cols, 1.0f), *dref = hmalloc(sizeof(float) * cols);
    for (int c = 0; c < cols; c++) {
        double sum = 0;
        for (long r = 0; r < rows; r++) sum += x[r * cols + c];
        dref[c] = (float)(prior[c] + sum);
    }
    bf16 *d_dx = dev_bf16(x, n);
    float *scratch = dmalloc(sizeof(float) * cuda_bias_scratch_floats(cols));
    float *d_db = dev_f32(prior, cols), *d_db2 = dev_f32(prior, cols);
    cuda_bias_backward(d_db, d_dx, rows, cols, scratch, 0);
    cuda_bias_backward(d_db2, d_dx, rows, cols, scratch, 0);
    float *db = host_f32(d_db, cols);
    check_delta(label("bias bwd rows=%ld cols=%d", rows, cols), db, dref, prior, cols, TOL_F32);
    check_bitwise(label("bias bwd deterministic rows=%ld cols=%d", rows, cols), db,
                  host_f32(d_db2, cols), cols);

    // The fp32 pair (o_proj's bias on the residual stream): fp32 x and dx, not bf16-rounded.
    float *xf = rand_vec(n, 2.0f);
    for (long i = 0; i < n; i++) ref[i] = xf[i] + b[i % cols];
    for (int c = 0; c < cols; c++) {
        double sum = 0;
        for (long r = 0; r < rows; r++) sum += xf[r * cols + c];
        dref[c] = (float)(prior[c] + sum);
    }
    float *d_xf = dev_f32(xf, n), *d_dxf = dev_f32(xf, n);
    cuda_bias_forward_f32(d_xf, d_b, rows, cols, 0);
    check_close(label("bias fwd f32 rows=%ld cols=%d", rows, cols), host_f32(d_xf, n), ref, n,
                TOL_F32);
    float *d_dbf = dev_f32(prior, cols), *d_dbf2 = dev_f32(prior, cols);
    cuda_bias_backward_f32(d_dbf, d_dxf, rows, cols, scratch, 0);
    cuda_bias_backward_f32(d_dbf2, d_dxf, rows, cols, scratch, 0);
    float *dbf = host_f32(d_dbf, cols);
    check_delta(label("bias bwd f32 rows=%ld cols=%d", rows, cols), dbf, dref, prior, cols,
                TOL_F32);
    check_bitwise(label("bias bwd f32 deterministic rows=%ld cols=%d", rows, cols), dbf,
                  host_f32(d_dbf2, cols), cols);
    release_all();
}

// ---- linear (cuBLASLt) --------------------------------------------------------------------

// One output of a linear product on the GPU: from poison (beta = 0) or from prior (beta = 1),
// fp32 or bf16; returns the result as floats.
typedef enum { FWD, BWD_IN } linear_op;
static float *run_linear(linear_op op, int f32, float beta, const float *prior, const bf16 *a,
                         const bf16 *w, int n, int ic, int oc) {
    long len = (long)n * (op == FWD ? oc : ic);
    void *d = beta == 0.0f ? dev_poisoned(len * (f32 ? 4 : 2))
              : f32        ? (void *)dev_f32(prior, len)
                           : (void *)dev_bf16(prior, len);
    if (op == FWD)
        cuda_linear_forward(gemm, d, f32, beta, a, w, n, ic, oc, 0);
    else
        cuda_linear_backward_input(gemm, d, f32, beta, a, w, n, ic, oc, 0);
    return f32 ? host_f32(d, len) : host_bf16(d, len);
}

static void add_into(float *dst, const float *a, const float *b, long n) {
    for (long i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

static void test_linear(int n, int ic, int oc) {
    long nin = (long)n * ic, nout = (long)n * oc, nw = (long)oc * ic;
    float *in = rand_bf16_vec(nin, 1.0f), *w = rand_bf16_vec(nw, 1.0f);
    float *g = rand_bf16_vec(nout, 1.0f);
    bf16 *d_in = dev_bf16(in, nin), *d_w = dev_bf16(w, nw), *d_g = dev_bf16(g, nout);

    float *out_ref = hmalloc(sizeof(float) * nout), *din_ref = zero_vec(nin), *dw0 = zero_vec(nw);
    linear_forward(out_ref, in, w, NULL, n, ic, oc);
    linear_backward(din_ref, dw0, NULL, g, in, w, n, ic, oc);

    float *p_out = rand_bf16_vec(nout, 1.0f), *p_in = rand_bf16_vec(nin, 1.0f);
    float *out_acc = hmalloc(sizeof(float) * nout), *din_acc = hmalloc(sizeof(float) * nin);
    add_into(out_acc, p_out, out_ref, nout);
    add_into(din_acc, p_in, din_ref, nin);
    for (int f32 = 1; f32 >= 0; f32--) {
        double tol = f32 ? TOL_F32 : TOL_BF16;
        const char *ty = f32 ? "fp32" : "bf16";
        check_close(label("linear fwd %s beta=0 %dx%dx%d", ty, n, ic, oc),
                    run_linear(FWD, f32, 0.0f, NULL, d_in, d_w, n, ic, oc), out_ref, nout, tol);
        float *o = run_linear(FWD, f32, 1.0f, p_out, d_in, d_w, n, ic, oc);
        if (f32) // fp32: check the added part; bf16: the sum is rounded as a whole
            check_delta(label("linear fwd fp32 beta=1 %dx%dx%d", n, ic, oc), o, out_acc, p_out,
                        nout, tol);
        else
            check_close(label("linear fwd bf16 beta=1 %dx%dx%d", n, ic, oc), o, out_acc, nout, tol);
        check_close(label("linear bwd-input %s beta=0 %dx%dx%d", ty, n, ic, oc),
                    run_linear(BWD_IN, f32, 0.0f, NULL, d_g, d_w, n, ic, oc), din_ref, nin, tol);
        o = run_linear(BWD_IN, f32, 1.0f, p_in, d_g, d_w, n, ic, oc);
        if (f32)
            check_delta(label("linear bwd-input fp32 beta=1 %dx%dx%d", n, ic, oc), o, din_acc, p_in,
                        nin, tol);
        else
            check_close(label("linear bwd-input bf16 beta=1 %dx%dx%d", n, ic, oc), o, din_acc, nin,
                        tol);
    }

    float *p_w = rand_vec(nw, 1.0f), *dw_ref = copy_vec(p_w, nw);
    linear_backward(NULL, dw_ref, NULL, g, in, w, n, ic, oc);
    float *d_dw = dev_f32(p_w, nw);
    cuda_linear_backward_weight(gemm, d_dw, d_g, d_in, n, ic, oc, 0);
    check_delta(label("linear bwd-weight fp32 += %dx%dx%d", n, ic, oc), host_f32(d_dw, nw), dw_ref,
                p_w, nw, TOL_F32);
    release_all();
}

// ---- classifier ---------------------------------------------------------------------------

// Per-token reference losses from the CPU linear kernel and a double log-sum-exp.
static float *ref_losses(const float *x, const float *w, const int32_t *y, int n, int dim,
                         int vocab) {
    float *logits = hmalloc(sizeof(float) * n * vocab), *loss = hmalloc(sizeof(float) * n);
    linear_forward(logits, x, w, NULL, n, dim, vocab);
    for (int t = 0; t < n; t++) {
        const float *z = logits + (long)t * vocab;
        double m = -INFINITY, s = 0.0;
        for (int v = 0; v < vocab; v++) m = z[v] > m ? z[v] : m;
        for (int v = 0; v < vocab; v++) s += exp(z[v] - m);
        loss[t] = y[t] < 0 ? 0.0f : (float)(m + log(s) - z[y[t]]);
    }
    return loss;
}

static void test_classifier(int n, int dim, int vocab, int chunk) {
    long nx = (long)n * dim, nw = (long)vocab * dim;
    const float dloss = 0.37f;
    float *x = rand_bf16_vec(nx, 1.0f), *w = rand_bf16_vec(nw, 0.5f);
    int32_t *y = hmalloc(sizeof(int32_t) * n);
    for (int t = 0; t < n; t++) y[t] = rng_int(vocab);
    y[1] = -100, y[n - 1] = -100; // ignored tokens
    y[2] = vocab - 1;             // the last class
    float *loss_ref = ref_losses(x, w, y, n, dim, vocab);

    bf16 *d_x = dev_bf16(x, nx), *d_w = dev_bf16(w, nw);
    int32_t *d_y = dmalloc(sizeof(int32_t) * n);
    CUDA_CHECK(cudaMemcpy(d_y, y, sizeof(int32_t) * n, cudaMemcpyHostToDevice));
    void *scratch = dev_poisoned(cuda_classifier_scratch_bytes(chunk, dim, vocab));
    float *d_loss = dev_poisoned(sizeof(float) * n);
    cuda_classifier(gemm, d_loss, NULL, NULL, d_x, d_w, d_y, n, dim, vocab, dloss, scratch, chunk,
                    0);
    check_close(label("classifier losses fwd n=%d dim=%d V=%d chunk=%d", n, dim, vocab, chunk),
                host_f32(d_loss, n), loss_ref, n, TOL_F32);

    float *px = rand_vec(nx, 1.0f), *pw = rand_vec(nw, 1.0f);
    float *dx_ref = copy_vec(px, nx), *dw_ref = copy_vec(pw, nw);
    classifier_backward(dx_ref, dw_ref, x, w, y, n, dim, vocab, dloss);
    float *d_dx = dev_f32(px, nx), *d_dw = dev_f32(pw, nw);
    CUDA_CHECK(cudaMemset(d_loss, 0xFF, sizeof(float) * n));
    cuda_classifier(gemm, d_loss, d_dx, d_dw, d_x, d_w, d_y, n, dim, vocab, dloss, scratch, chunk,
                    0);
    check_close(label("classifier losses bwd n=%d V=%d chunk=%d", n, vocab, chunk),
                host_f32(d_loss, n), loss_ref, n, TOL_F32);
    // dlogits are rounded to bf16 (GEMM operands), hence the bf16 tolerance on dx and dw.
    check_delta(label("classifier dx n=%d V=%d chunk=%d", n, vocab, chunk), host_f32(d_dx, nx),
                dx_ref, px, nx, TOL_BF16);
    float *dw_first = host_f32(d_dw, nw);
    check_delta(label("classifier dw n=%d V=%d chunk=%d", n, vocab, chunk), dw_first, dw_ref, pw,
                nw, TOL_BF16);
    CUDA_CHECK(cudaMemcpy(d_dw, pw, sizeof(float) * nw, cudaMemcpyHostToDevice));
    cuda_classifier(gemm, d_loss, d_dx, d_dw, d_x, d_w, d_y, n, dim, vocab, dloss, scratch, chunk,
                    0);
    check_bitwise(label("classifier dw rerun bitwise n=%d V=%d", n, vocab), host_f32(d_dw, nw),
                  dw_first, nw);
    release_all();
}

// ---- adamw --------------------------------------------------------------------------------

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Bitwise against adamw_kernel_scalar, the optimizer processes' bits, NaN included: the same
// inputs, with zero and huge gradients, v = 0, NaN and infinite parameters (quiet, signaling,
// negative; and inf / inf inside the step), subnormals, and parameters whose result is a bf16
// tie. No operation meets two different NaNs (the CPU's payload is then the C compiler's pick).
static void test_adamw(long n) {
    const adamw_params hp = {.lr = 3e-4f,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .eps = 1e-8f,
                             .weight_decay = 0.1f,
                             .step = 7,
                             .grad_scale = 0.37f};
    adamw_consts k;
    adamw_consts_init(&k, &hp);
    float *p = rand_vec(n, 1.0f), *m = rand_vec(n, 0.1f), *v = rand_vec(n, 0.01f);
    float *g = rand_vec(n, 1.0f);
    for (long i = 0; i < n; i++) v[i] = fabsf(v[i]);
    g[0] = 0.0f, g[1] = 3.0e38f, g[2] = -3.0e38f, g[3] = INFINITY, v[4] = 0.0f;
    g[5] = 0.0f, m[5] = 0.0f, v[5] = 0.0f; // the step is 0 / eps
    p[6] = from_bits(0x7fc12345u), p[7] = from_bits(0x7f800001u), p[8] = from_bits(0xffc00001u);
    g[9] = from_bits(0x7fa00001u); // signaling
    p[10] = INFINITY, p[11] = -INFINITY;
    p[12] = from_bits(1), p[13] = 1e-40f, m[13] = -1e-41f, v[14] = 1e-42f;
    p[15] = 1e-40f, g[15] = 0.0f, m[15] = 0.0f, v[15] = 0.0f; // a subnormal result
    // With g = m = v = 0 the result is p * decay exactly: pick p so that it is a bf16 tie.
    long at = 16;
    for (uint32_t hi = 0x3f80; hi < 0x3fa0 && at < 32; hi++) {
        float tie = from_bits(hi << 16 | 0x8000u), q = tie / k.decay;
        for (int s = 0; s < 8 && q * k.decay != tie; s++)
            q = nextafterf(q, q * k.decay < tie ? 2 : 0);
        if (q * k.decay != tie) continue;
        p[at] = q, g[at] = 0.0f, m[at] = 0.0f, v[at] = 0.0f;
        at++;
    }

    float *d_p = dev_f32(p, n), *d_m = dev_f32(m, n), *d_v = dev_f32(v, n), *d_g = dev_f32(g, n);
    bf16 *d_out = dev_poisoned(sizeof(bf16) * n), *out = hmalloc(sizeof(bf16) * n);
    cuda_adamw(d_p, d_m, d_v, d_out, d_g, n, &k, 0);
    float *gp = host_f32(d_p, n), *gm = host_f32(d_m, n), *gv = host_f32(d_v, n);
    CUDA_CHECK(cudaMemcpy(out, d_out, sizeof(bf16) * n, cudaMemcpyDeviceToHost));

    bf16 *ref_out = hmalloc(sizeof(bf16) * n);
    adamw_kernel_scalar(ADAMW_NT_NONE, p, m, v, ref_out, g, (size_t)n, &k);
    long diff = 0;
    for (long i = 0; i < n; i++)
        diff += memcmp(&gp[i], &p[i], 4) || memcmp(&gm[i], &m[i], 4) || memcmp(&gv[i], &v[i], 4) ||
                out[i] != ref_out[i];
    char detail[96];
    snprintf(detail, sizeof detail, "%ld of %ld differ (p, m, v, bf16; %ld ties)", diff, n,
             at - 16);
    report(diff == 0 && at > 16, label("adamw bitwise vs adamw_kernel_scalar n=%ld", n), detail);
    release_all();
}

// ---- GEMM timing --------------------------------------------------------------------------

// The linear product `which`: 0 forward, 1 input grad, 2 weight grad.
static void linear_call(int which, void *out, const bf16 *a, const bf16 *b, int n, int ic, int oc) {
    if (which == 0) cuda_linear_forward(gemm, out, 0, 0.0f, a, b, n, ic, oc, 0);
    if (which == 1) cuda_linear_backward_input(gemm, out, 0, 0.0f, a, b, n, ic, oc, 0);
    if (which == 2) cuda_linear_backward_weight(gemm, out, a, b, n, ic, oc, 0);
}

// Milliseconds per call, after 3 warm-up calls (plan build, clocks).
static double time_ms(int which, void *out, const bf16 *a, const bf16 *b, int n, int ic, int oc,
                      int iters) {
    for (int i = 0; i < 3; i++) linear_call(which, out, a, b, n, ic, oc);
    cudaEvent_t t0 = timer_start();
    for (int i = 0; i < iters; i++) linear_call(which, out, a, b, n, ic, oc);
    return timer_stop_ms(t0) / iters;
}

static void bench_linear(int n, int ic, int oc) {
    long big = (long)n * ic > (long)n * oc ? (long)n * ic : (long)n * oc;
    if ((long)oc * ic > big) big = (long)oc * ic;
    // Zeros: timing only (tensor-core speed does not depend on the values).
    bf16 *x = dmalloc(sizeof(bf16) * big), *y = dmalloc(sizeof(bf16) * big);
    float *out = dmalloc(sizeof(float) * big);
    CUDA_CHECK(cudaMemset(x, 0, sizeof(bf16) * big));
    CUDA_CHECK(cudaMemset(y, 0, sizeof(bf16) * big));
    CUDA_CHECK(cudaMemset(out, 0, sizeof(float) * big));
    static const char *names[] = {"fwd (bf16 out)", "bwd-input (bf16 out)", "bwd-weight (fp32 +=)"};
    double flop = 2.0 * n * ic * oc;
    for (int which = 0; which < 3; which++) {
        double ms = time_ms(which, out, x, y, n, ic, oc, 20);
        printf("  %5d x %5d x %5d  %-22s %8.3f ms %8.1f TFLOP/s\n", n, ic, oc, names[which], ms,
               flop / (ms * 1e-3) / 1e12);
    }
    release_all();
}

// --no-bench skips the timing table (for runs under compute-sanitizer).
int main(int argc, char **argv) {
    int bench = !(argc > 1 && strcmp(argv[1], "--no-bench") == 0);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    gemm = cuda_gemm_new(32u << 20);

    test_convert(1027);
    test_embedding(74, 96, 103);
    test_embedding(600, 77, 20); // many repeats across the 256-token scan steps; scalar path
    test_rmsnorm(74, 96, 0.0f);
    test_rmsnorm(600, 77, 0.0f); // three dw slabs, the last partial; scalar path
    test_rmsnorm(37, 4096, 0.0f);
    // Register kernels: rows filling their layout in part (3200: 800 chunks of 1024 held; 520:
    // 130 of 256), one row, a last slab of 4 rows, and the widest of each direction.
    test_rmsnorm(600, 3200, 0.0f);
    test_rmsnorm(1, 3200, 0.0f);
    test_rmsnorm(300, 520, 0.0f);
    test_rmsnorm(260, 8192, 0.0f); // backward's widest register layout
    test_rmsnorm(3, 16384, 0.0f);  // forward's widest; backward two-pass
    test_rmsnorm(5, 16400, 0.0f);  // both two-pass (vector)
    // zero-centred weights (model.norm_zero_centered): each path once
    test_rmsnorm(74, 96, 1.0f);
    test_rmsnorm(600, 77, 1.0f);
    test_rmsnorm(5, 16400, 1.0f);
    test_rope(2, 37, 4, 24, 24, 0);
    test_rope(2, 37, 2, 32, 32, 0);
    test_rope(1, 3000, 2, 64, 64, 0); // large angles
    test_rope(2, 17, 4, 100, 100, 0); // the 3.4B's heads: word pairs across an odd half (50)
    test_rope(1, 9, 3, 128, 128, 0);
    test_rope(1, 5, 3, 6, 6, 0);       // rot % 4 == 2: the one-pair-per-thread kernel
    test_rope(2, 300, 4, 128, 128, 7); // packed documents: positions from each document's start
    test_rope(2, 41, 3, 6, 6, 5);
    test_rope(2, 37, 4, 256, 64, 0);            // partial rotary (Qwen3.5: 64 of 256)
    test_rope(2, 19, 3, 24, 6, 0);              // partial, an odd half-rotation
    test_rope(1, 33, 2, 256, 64, 5);            // partial, with packed documents
    test_rope_at(2, 37, 4, 192, 64, 0, 128, 0); // DeepSeek-V3's queries: the last 64 of 192
    test_rope_at(2, 37, 4, 192, 64, 5, 128, 1); // interleaved, packed documents
    test_rope_at(2, 21, 1, 64, 64, 0, 0, 1);    // the shared rotated key part, interleaved
    test_bias(300, 96);
    test_bias(1037, 200);
    test_swiglu(74L * 160 + 3, 0);
    test_swiglu(74L * 160 + 3, 1);
    test_swiglu_clamped(74L * 160 + 3);
    test_bias_f32(1037, 32);
    test_linear(74, 96, 160);
    test_linear(37, 72, 103); // odd output width: unaligned rows
    test_linear(512, 1024, 768);
    test_classifier(74, 96, 103, 32); // chunks 32, 32, 10
    test_classifier(37, 72, 1000, 16);
    test_classifier(74, 96, 103, 128); // one partial chunk
    test_adamw(100003);

    if (bench) {
        printf("\nGEMM timing (cudaEvent, mean of 20 calls):\n");
        bench_linear(512, 1024, 768);
        bench_linear(4096, 4096, 4096);
    }
    cuda_gemm_free(gemm);

    printf("\n%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
