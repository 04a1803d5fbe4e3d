// The CUDA MoE kernels (kernels/cuda/moe.cu, moe_gemm.cu) against the fp32 CPU reference
// (kernels/cpu/moe.c, linear.c), on the same values.
//
// Each case draws router logits (with some experts never chosen where asked, and exact ties),
// routes on the CPU, and feeds the CPU's routing to both sides, so each kernel is judged on its
// own. bf16 inputs reach the CPU rounded through bf16. Checks: dispatch and gather exactly equal;
// route's experts exactly equal, probabilities and weights within 1e-6 (absolute, values <= 1);
// fp32 outputs within 1e-4 relative L2 (summation order only), bf16 outputs within 1e-2;
// prob_sums and the aux loss within 1e-5 relative. Every line prints its max abs error. Then the
// whole GPU pass runs again and must give the same bits. Written outputs start as NaN bytes, so
// an unwritten element fails. Run under MT_EXPERT_GEMM=grouped to test the grouped GEMM path.
// DeepSeek-V3's sigmoid router and the ungated shared experts' add: test_sigmoid_route.
// Exit 77 (skip) without a CUDA device.
#include "kernels/bf16.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double TOL_F32 = 1e-4, TOL_BF16 = 1e-2, TOL_ROUTE = 1e-6, TOL_STATS = 1e-5;
static int passed, failed;
static cuda_gemm *gemm;

#define TEST_RNG_SEED 0x13198A2E03707344ull
#include "tests/cuda_test_util.h"

static void *dev_copy(const void *h, size_t bytes) {
    void *d = dmalloc(bytes);
    CUDA_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static float *dev_f32(const float *h, long n) {
    return dev_copy(h, sizeof(float) * n);
}
static int32_t *dev_i32(const int32_t *h, long n) {
    return dev_copy(h, sizeof(int32_t) * n);
}
static bf16 *dev_bf16(const float *h, long n) {
    bf16 *tmp = hmalloc(sizeof(bf16) * n);
    for (long i = 0; i < n; i++) tmp[i] = bf16_from_float(h[i]);
    return dev_copy(tmp, sizeof(bf16) * n);
}
static void *dev_poisoned(size_t bytes) { // NaN in fp32 and bf16, -1 in int32
    void *d = dmalloc(bytes);
    CUDA_CHECK(cudaMemset(d, 0xFF, bytes));
    return d;
}
static void *host_copy(const void *d, size_t bytes) {
    CUDA_CHECK(cudaDeviceSynchronize()); // surfaces asynchronous kernel faults here
    void *h = hmalloc(bytes);
    CUDA_CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}
static float *host_f32(const float *d, long n) {
    return host_copy(d, sizeof(float) * n);
}
static int32_t *host_i32(const int32_t *d, long n) {
    return host_copy(d, sizeof(int32_t) * n);
}
static float *host_bf16(const bf16 *d, long n) {
    bf16 *tmp = host_copy(d, sizeof(bf16) * n);
    float *h = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) h[i] = bf16_to_float(tmp[i]);
    return h;
}

// ---- checks -------------------------------------------------------------------------------

static void report(int ok, const char *name, const char *detail) {
    printf("%s %-60s %s\n", ok ? "PASS" : "FAIL", name, detail);
    if (ok)
        passed++;
    else
        failed++;
}

__attribute__((format(printf, 1, 2))) static char *label(const char *fmt, ...) {
    static char buf[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

static double max_abs(const float *out, const float *ref, long n) {
    double m = 0.0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)out[i] - ref[i]);
        if (!(d <= m)) m = d; // NaN sticks
    }
    return m;
}

// ||out - ref|| / ||ref|| (relative L2), with the max abs error beside it.
static void check_close(const char *name, const float *out, const float *ref, long n, double tol) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    double err = sqrt(num) / (den > 0.0 ? sqrt(den) : 1.0);
    char detail[128];
    snprintf(detail, sizeof detail, "rel_err %.3g max_abs %.3g (tol %.0e)", err,
             max_abs(out, ref, n), tol);
    report(err <= tol, name, detail);
}

// Each element within tol relative to max(|ref|, 1e-30): the statistics are few and all matter.
static void check_each_rel(const char *name, const float *out, const float *ref, long n,
                           double tol) {
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        double r = fabs((double)out[i] - ref[i]) / fmax(fabs((double)ref[i]), 1e-30);
        if (!(r <= worst)) worst = r;
    }
    char detail[128];
    snprintf(detail, sizeof detail, "max_rel %.3g max_abs %.3g (tol %.0e)", worst,
             max_abs(out, ref, n), tol);
    report(worst <= tol, name, detail);
}

static void check_abs(const char *name, const float *out, const float *ref, long n, double tol) {
    double m = max_abs(out, ref, n);
    char detail[96];
    snprintf(detail, sizeof detail, "max_abs %.3g (tol %.0e)", m, tol);
    report(m <= tol, name, detail);
}

static void check_delta(const char *name, const float *out, const float *ref, const float *prior,
                        long n, double tol) {
    float *d_out = hmalloc(sizeof(float) * n), *d_ref = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) d_out[i] = out[i] - prior[i], d_ref[i] = ref[i] - prior[i];
    check_close(name, d_out, d_ref, n, tol);
}

static void check_equal_i32(const char *name, const int32_t *out, const int32_t *ref, long n) {
    long diff = 0, first = -1;
    for (long i = 0; i < n; i++)
        if (out[i] != ref[i]) diff++, first = first < 0 ? i : first;
    char detail[128];
    if (diff)
        snprintf(detail, sizeof detail, "%ld of %ld differ (first [%ld]: %d, want %d)", diff, n,
                 first, out[first], ref[first]);
    else
        snprintf(detail, sizeof detail, "all %ld equal", n);
    report(diff == 0, name, detail);
}

static void check_bytes(const char *name, const void *a, const void *b, size_t bytes) {
    report(memcmp(a, b, bytes) == 0, name, memcmp(a, b, bytes) ? "bits differ" : "bitwise equal");
}

// ---- one routing case -----------------------------------------------------------------------

typedef struct {
    int n, E, k, D;
    int weights;    // MOE_WEIGHTS_*
    int gate, idle; // idle: every 4th expert never chosen
} moe_case;

// What a GPU pass produces, on the host: checked against the CPU, then against a rerun.
enum {
    OUT_PROBS,
    OUT_EXPERT,
    OUT_WEIGHT,
    OUT_COUNTS,
    OUT_OFFSETS,
    OUT_ROW_OF,
    OUT_TOKEN_OF,
    OUT_XP,
    OUT_COMBINE,
    OUT_DYP,
    OUT_DWEIGHT,
    OUT_DX,
    OUT_DLOGITS,
    OUT_DLOGITS_NOAUX,
    OUT_PSUM,
    OUT_PSUM_ACC,
    OUT_LOSS,
    OUT_AUXG,
    OUT_GATE,
    OUT_GATE_DY,
    OUT_GATE_DG,
    OUTS
};
typedef struct {
    void *p[OUTS];
    size_t bytes[OUTS];
} gpu_outputs;
static const char *out_names[OUTS] = {"route probs",
                                      "route expert",
                                      "route weight",
                                      "dispatch counts",
                                      "dispatch offsets",
                                      "dispatch row_of",
                                      "dispatch token_of",
                                      "gather",
                                      "combine",
                                      "combine bwd d_yp",
                                      "combine bwd d_weight",
                                      "scatter_add",
                                      "route bwd",
                                      "route bwd (no aux)",
                                      "prob_sums",
                                      "prob_sums accumulate",
                                      "aux loss",
                                      "aux_g",
                                      "gate fwd",
                                      "gate bwd dy",
                                      "gate bwd d_logit"};

// The inputs both sides share (host, fp32; bf16 ones already rounded).
typedef struct {
    moe_case c;
    float *logits, *x, *yp, *out0, *dout, *d_xp, *dx0, *d_weight, *aux_g, *psum0, *gate_logit,
        *y_shared;
    int32_t *expert, *offsets, *row_of, *counts3; // the CPU's routing; counts3: [3, E]
    float *weight, *probs, *psum3;                // psum3: [3, E]
} moe_inputs;

static void keep(gpu_outputs *o, int i, const void *dev, size_t bytes) {
    o->p[i] = host_copy(dev, bytes);
    o->bytes[i] = bytes;
}

static void gpu_pass(const moe_inputs *in, gpu_outputs *o) {
    const moe_case *c = &in->c;
    const int n = c->n, E = c->E, k = c->k, D = c->D;
    const long nk = (long)n * k, nE = (long)n * E, nD = (long)n * D, rD = nk * D;
    float *probs = dev_poisoned(sizeof(float) * nE), *weight = dev_poisoned(sizeof(float) * nk);
    int32_t *expert = dev_poisoned(sizeof(int32_t) * nk);
    cuda_moe_route_forward(probs, expert, weight, dev_f32(in->logits, nE), n, E, k, c->weights, 0);
    keep(o, OUT_PROBS, probs, sizeof(float) * nE);
    keep(o, OUT_EXPERT, expert, sizeof(int32_t) * nk);
    keep(o, OUT_WEIGHT, weight, sizeof(float) * nk);

    // Downstream kernels get the CPU's routing, so each is judged on the same inputs.
    int32_t *cexpert = dev_i32(in->expert, nk), *crow = dev_i32(in->row_of, nk);
    float *cweight = dev_f32(in->weight, nk), *cprobs = dev_f32(in->probs, nE);
    int32_t *counts = dev_poisoned(sizeof(int32_t) * E), *offsets = dev_poisoned(4 * (E + 1));
    int32_t *row_of = dev_poisoned(sizeof(int32_t) * nk), *token_of = dev_poisoned(4 * nk);
    void *scratch = dev_poisoned(cuda_moe_dispatch_scratch_bytes(n, E, k));
    cuda_moe_dispatch(counts, offsets, row_of, token_of, cexpert, n, E, k, scratch, 0);
    keep(o, OUT_COUNTS, counts, sizeof(int32_t) * E);
    keep(o, OUT_OFFSETS, offsets, sizeof(int32_t) * (E + 1));
    keep(o, OUT_ROW_OF, row_of, sizeof(int32_t) * nk);
    keep(o, OUT_TOKEN_OF, token_of, sizeof(int32_t) * nk);

    bf16 *xp = dev_poisoned(sizeof(bf16) * rD);
    cuda_moe_gather(xp, dev_bf16(in->x, nD), token_of, (int)nk, D, 0);
    keep(o, OUT_XP, xp, sizeof(bf16) * rD);

    bf16 *yp = dev_bf16(in->yp, rD);
    float *out = dev_f32(in->out0, nD), *dout = dev_f32(in->dout, nD);
    cuda_moe_combine(out, yp, crow, cweight, n, k, D, 0);
    keep(o, OUT_COMBINE, out, sizeof(float) * nD);

    bf16 *d_yp = dev_poisoned(sizeof(bf16) * rD);
    float *d_w = dev_poisoned(sizeof(float) * nk);
    cuda_moe_combine_backward(d_yp, d_w, dout, yp, crow, cweight, n, k, D, 0);
    keep(o, OUT_DYP, d_yp, sizeof(bf16) * rD);
    keep(o, OUT_DWEIGHT, d_w, sizeof(float) * nk);

    float *dx = dev_f32(in->dx0, nD);
    cuda_moe_scatter_add(dx, dev_bf16(in->d_xp, rD), crow, n, k, D, 0);
    keep(o, OUT_DX, dx, sizeof(float) * nD);

    bf16 *dlog = dev_poisoned(sizeof(bf16) * nE);
    float *dweight_in = dev_f32(in->d_weight, nk), *auxg_in = dev_f32(in->aux_g, E);
    cuda_moe_route_backward(dlog, dweight_in, cprobs, cexpert, cweight, auxg_in, n, E, k,
                            c->weights, 0);
    keep(o, OUT_DLOGITS, dlog, sizeof(bf16) * nE);
    cuda_moe_route_backward(dlog, dweight_in, cprobs, cexpert, cweight, NULL, n, E, k, c->weights,
                            0);
    keep(o, OUT_DLOGITS_NOAUX, dlog, sizeof(bf16) * nE);

    float *psum = dev_poisoned(sizeof(float) * E);
    cuda_moe_prob_sums(psum, cprobs, n, E, 0, 0);
    keep(o, OUT_PSUM, psum, sizeof(float) * E);
    float *psum_acc = dev_f32(in->psum0, E);
    cuda_moe_prob_sums(psum_acc, cprobs, n, E, 1, 0);
    keep(o, OUT_PSUM_ACC, psum_acc, sizeof(float) * E);

    float *loss = dev_poisoned(sizeof(float)), *auxg = dev_poisoned(sizeof(float) * E);
    int32_t *counts3 = dev_i32(in->counts3, 3L * E);
    float *psum3 = dev_f32(in->psum3, 3L * E);
    cuda_moe_aux_loss(auxg, loss, counts3, psum3, 3, n, E, 0.01f, 0);
    keep(o, OUT_AUXG, auxg, sizeof(float) * E);
    cuda_moe_aux_loss(NULL, loss, counts3, psum3, 3, n, E, 0.01f, 0); // the loss alone
    keep(o, OUT_LOSS, loss, sizeof(float));

    if (c->gate) {
        float *gl = dev_f32(in->gate_logit, n), *gout = dev_f32(in->out0, nD);
        bf16 *ys = dev_bf16(in->y_shared, nD);
        cuda_moe_gate_scale_forward(gout, ys, gl, n, D, 0);
        keep(o, OUT_GATE, gout, sizeof(float) * nD);
        bf16 *dy = dev_poisoned(sizeof(bf16) * nD), *dg = dev_poisoned(sizeof(bf16) * n);
        cuda_moe_gate_scale_backward(dy, dg, dout, ys, gl, n, D, 0);
        keep(o, OUT_GATE_DY, dy, sizeof(bf16) * nD);
        keep(o, OUT_GATE_DG, dg, sizeof(bf16) * n);
    }
}

static float *as_f32_from_bf16(const void *p, long n) {
    const bf16 *b = p;
    float *h = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) h[i] = bf16_to_float(b[i]);
    return h;
}

static void test_case(moe_case c) {
    const int n = c.n, E = c.E, k = c.k, D = c.D;
    const long nk = (long)n * k, nE = (long)n * E, nD = (long)n * D, rD = nk * D;
    char tag[96];
    snprintf(tag, sizeof tag, "n=%d E=%d k=%d D=%d%s%s%s", n, E, k, D,
             c.weights == MOE_WEIGHTS_RENORM  ? " renorm"
             : c.weights == MOE_WEIGHTS_TOP_K ? " top-k softmax"
                                              : "",
             c.gate ? " gate" : "", c.idle ? " idle" : "");
    moe_inputs in = {.c = c};

    // Logits: random; idle experts far below; every 7th token a tie at the top (experts 1 and
    // E - 2, neither idle) that must go to the lower index.
    in.logits = rand_vec(nE, 3.0f);
    for (int t = 0; t < n; t++) {
        float *z = in.logits + (long)t * E;
        if (c.idle)
            for (int e = 3; e < E; e += 4) z[e] = -40.0f;
        if (t % 7 == 0) z[1] = z[E - 2] = 4.0f;
    }
    in.probs = hmalloc(sizeof(float) * nE);
    in.weight = hmalloc(sizeof(float) * nk);
    in.expert = hmalloc(sizeof(int32_t) * nk);
    moe_route_forward(in.probs, in.expert, in.weight, in.logits, n, E, k, c.weights);
    int32_t *counts = hmalloc(4 * E), *offsets = hmalloc(4 * (E + 1));
    int32_t *token_of = hmalloc(4 * nk);
    in.row_of = hmalloc(4 * nk);
    moe_dispatch(counts, offsets, in.row_of, token_of, in.expert, n, E, k);
    in.offsets = offsets;

    in.x = rand_bf16_vec(nD, 1.0f);
    in.yp = rand_bf16_vec(rD, 1.0f);
    in.d_xp = rand_bf16_vec(rD, 1.0f);
    in.out0 = rand_vec(nD, 1.0f);
    in.dx0 = rand_vec(nD, 1.0f);
    in.dout = rand_vec(nD, 1.0f);
    in.d_weight = rand_vec(nk, 1.0f);
    in.aux_g = rand_vec(E, 0.05f);
    in.psum0 = rand_vec(E, 10.0f);
    in.gate_logit = rand_vec(n, 3.0f);
    in.y_shared = rand_bf16_vec(nD, 1.0f);
    // Three layers' statistics: this one's, and two others made by shifting it.
    in.counts3 = hmalloc(4 * 3L * E);
    in.psum3 = hmalloc(sizeof(float) * 3L * E);
    float *psum = hmalloc(sizeof(float) * E);
    moe_prob_sums(psum, in.probs, n, E);
    for (int l = 0; l < 3; l++)
        for (int e = 0; e < E; e++) {
            in.counts3[l * E + e] = counts[(e + l) % E];
            in.psum3[l * E + e] = psum[(e + 2 * l) % E];
        }

    gpu_outputs g1 = {0}, g2 = {0};
    gpu_pass(&in, &g1);

    // Route.
    float *probs = g1.p[OUT_PROBS], *weight = g1.p[OUT_WEIGHT];
    check_equal_i32(label("route expert %s", tag), g1.p[OUT_EXPERT], in.expert, nk);
    check_abs(label("route probs %s", tag), probs, in.probs, nE, TOL_ROUTE);
    check_abs(label("route weight %s", tag), weight, in.weight, nk, TOL_ROUTE);

    // Dispatch.
    int idle = 0;
    for (int e = 0; e < E; e++) idle += counts[e] == 0;
    check_equal_i32(label("dispatch counts %s (%d idle)", tag, idle), g1.p[OUT_COUNTS], counts, E);
    check_equal_i32(label("dispatch offsets %s", tag), g1.p[OUT_OFFSETS], offsets, E + 1);
    check_equal_i32(label("dispatch row_of %s", tag), g1.p[OUT_ROW_OF], in.row_of, nk);
    check_equal_i32(label("dispatch token_of %s", tag), g1.p[OUT_TOKEN_OF], token_of, nk);
    if (c.idle && idle == 0) report(0, label("idle experts present %s", tag), "none idle");

    // Gather (a copy: exact), combine, its backward, scatter-add.
    float *xp_ref = hmalloc(sizeof(float) * rD);
    moe_gather(xp_ref, in.x, token_of, (int)nk, D);
    check_close(label("gather %s", tag), as_f32_from_bf16(g1.p[OUT_XP], rD), xp_ref, rD, 0.0);
    float *out_ref = copy_vec(in.out0, nD);
    moe_combine(out_ref, in.yp, in.row_of, in.weight, n, k, D);
    check_delta(label("combine %s", tag), g1.p[OUT_COMBINE], out_ref, in.out0, nD, TOL_F32);
    float *dyp_ref = zero_vec(rD), *dw_ref = zero_vec(nk);
    moe_combine_backward(dyp_ref, dw_ref, in.dout, in.yp, in.row_of, in.weight, n, k, D);
    check_close(label("combine bwd d_yp %s", tag), as_f32_from_bf16(g1.p[OUT_DYP], rD), dyp_ref, rD,
                TOL_BF16);
    check_close(label("combine bwd d_weight %s", tag), g1.p[OUT_DWEIGHT], dw_ref, nk, TOL_F32);
    float *dx_ref = copy_vec(in.dx0, nD);
    moe_scatter_add(dx_ref, in.d_xp, in.row_of, n, k, D);
    check_delta(label("scatter_add %s", tag), g1.p[OUT_DX], dx_ref, in.dx0, nD, TOL_F32);

    // Router backward, with and without the aux loss's gradient.
    float *dl_ref = zero_vec(nE);
    moe_route_backward(dl_ref, in.d_weight, in.probs, in.expert, in.weight, in.aux_g, n, E, k,
                       c.weights);
    check_close(label("route bwd %s", tag), as_f32_from_bf16(g1.p[OUT_DLOGITS], nE), dl_ref, nE,
                TOL_BF16);
    float *dl0_ref = zero_vec(nE);
    moe_route_backward(dl0_ref, in.d_weight, in.probs, in.expert, in.weight, NULL, n, E, k,
                       c.weights);
    check_close(label("route bwd no aux %s", tag), as_f32_from_bf16(g1.p[OUT_DLOGITS_NOAUX], nE),
                dl0_ref, nE, TOL_BF16);

    // Load-balancing statistics.
    check_each_rel(label("prob_sums %s", tag), g1.p[OUT_PSUM], psum, E, TOL_STATS);
    float *pacc_ref = hmalloc(sizeof(float) * E);
    for (int e = 0; e < E; e++) pacc_ref[e] = in.psum0[e] + psum[e];
    check_each_rel(label("prob_sums accumulate %s", tag), g1.p[OUT_PSUM_ACC], pacc_ref, E,
                   TOL_STATS);
    float *auxg_ref = hmalloc(sizeof(float) * E);
    float loss_ref = (float)moe_aux_loss(auxg_ref, in.counts3, in.psum3, 3, n, E, 0.01f);
    check_each_rel(label("aux loss (3 layers) %s", tag), g1.p[OUT_LOSS], &loss_ref, 1, TOL_STATS);
    check_each_rel(label("aux_g (3 layers) %s", tag), g1.p[OUT_AUXG], auxg_ref, E, TOL_STATS);

    if (c.gate) {
        float *gout_ref = copy_vec(in.out0, nD), *gdy_ref = zero_vec(nD), *gdg_ref = zero_vec(n);
        moe_gate_scale_forward(gout_ref, in.y_shared, in.gate_logit, n, D);
        check_delta(label("gate fwd %s", tag), g1.p[OUT_GATE], gout_ref, in.out0, nD, TOL_F32);
        moe_gate_scale_backward(gdy_ref, gdg_ref, in.dout, in.y_shared, in.gate_logit, n, D);
        check_close(label("gate bwd dy %s", tag), as_f32_from_bf16(g1.p[OUT_GATE_DY], nD), gdy_ref,
                    nD, TOL_BF16);
        check_close(label("gate bwd d_logit %s", tag), as_f32_from_bf16(g1.p[OUT_GATE_DG], n),
                    gdg_ref, n, TOL_BF16);
    }

    // Determinism: the whole pass again, the same bits.
    gpu_pass(&in, &g2);
    int same = 1;
    for (int i = 0; i < OUTS; i++)
        if (g1.p[i] && (g1.bytes[i] != g2.bytes[i] || memcmp(g1.p[i], g2.p[i], g1.bytes[i]))) {
            check_bytes(label("rerun %s %s", out_names[i], tag), g2.p[i], g1.p[i], g1.bytes[i]);
            same = 0;
        }
    if (same) report(1, label("rerun bitwise (all outputs) %s", tag), "bitwise equal");
    release_all();
}

// ---- the experts' GEMMs ---------------------------------------------------------------------

// Rows routed to E experts (every 4th idle where asked); each expert's products against the CPU's
// linear_* on its rows. Idle experts' dw must keep its prior bits.
static void test_experts_gemm(int n, int E, int k, int ic, int oc, int idle) {
    const long rows = (long)n * k, nw = (long)E * oc * ic;
    char tag[96];
    snprintf(tag, sizeof tag, "rows=%ld E=%d ic=%d oc=%d%s", rows, E, ic, oc, idle ? " idle" : "");
    int32_t *expert = hmalloc(4 * rows), *counts = hmalloc(4 * E), *offsets = hmalloc(4 * (E + 1));
    int32_t *row_of = hmalloc(4 * rows), *token_of = hmalloc(4 * rows);
    float *logits = rand_vec((long)n * E, 3.0f), *probs = hmalloc(sizeof(float) * n * E);
    if (idle)
        for (long i = 0; i < (long)n * E; i++)
            if (i % E % 4 == 3) logits[i] = -40.0f;
    moe_route_forward(probs, expert, hmalloc(sizeof(float) * rows), logits, n, E, k, 1);
    moe_dispatch(counts, offsets, row_of, token_of, expert, n, E, k);

    float *in = rand_bf16_vec(rows * ic, 1.0f), *w = rand_bf16_vec(nw, 0.5f);
    float *g = rand_bf16_vec(rows * oc, 1.0f), *dw0 = rand_vec(nw, 1.0f);
    float *out_ref = zero_vec(rows * oc), *din_ref = zero_vec(rows * ic),
          *dw_ref = copy_vec(dw0, nw);
    for (int e = 0; e < E; e++) {
        if (!counts[e]) continue;
        long r0 = offsets[e];
        const float *we = w + (long)e * oc * ic;
        linear_forward(out_ref + r0 * oc, in + r0 * ic, we, NULL, counts[e], ic, oc);
        linear_backward(din_ref + r0 * ic, dw_ref + (long)e * oc * ic, NULL, g + r0 * oc,
                        in + r0 * ic, we, counts[e], ic, oc);
    }
    bf16 *d_in = dev_bf16(in, rows * ic), *d_w = dev_bf16(w, nw), *d_g = dev_bf16(g, rows * oc);
    void *first[4];
    for (int pass = 0; pass < 2; pass++) {
        float *o32 = dev_poisoned(sizeof(float) * rows * oc);
        bf16 *o16 = dev_poisoned(sizeof(bf16) * rows * oc), *din = dev_poisoned(2 * rows * ic);
        float *dw = dev_f32(dw0, nw);
        cuda_experts_forward(gemm, o32, 1, 0.0f, d_in, d_w, E, counts, offsets, ic, oc, 0);
        cuda_experts_forward(gemm, o16, 0, 0.0f, d_in, d_w, E, counts, offsets, ic, oc, 0);
        cuda_experts_backward_input(gemm, din, 0, 0.0f, d_g, d_w, E, counts, offsets, ic, oc, 0);
        cuda_experts_backward_weight(gemm, dw, d_g, d_in, E, counts, offsets, ic, oc, 0);
        void *res[4] = {host_f32(o32, rows * oc), host_copy(o16, 2 * rows * oc),
                        host_copy(din, 2 * rows * ic), host_f32(dw, nw)};
        if (pass == 1) {
            int same = !memcmp(res[0], first[0], 4 * rows * oc) &&
                       !memcmp(res[1], first[1], 2 * rows * oc) &&
                       !memcmp(res[2], first[2], 2 * rows * ic) &&
                       !memcmp(res[3], first[3], 4 * nw);
            report(same, label("experts rerun bitwise %s", tag),
                   same ? "bitwise equal" : "bits differ");
            break;
        }
        memcpy(first, res, sizeof res);
        check_close(label("experts fwd fp32 %s", tag), res[0], out_ref, rows * oc, TOL_F32);
        check_close(label("experts fwd bf16 %s", tag), as_f32_from_bf16(res[1], rows * oc), out_ref,
                    rows * oc, TOL_BF16);
        check_close(label("experts bwd-input bf16 %s", tag), as_f32_from_bf16(res[2], rows * ic),
                    din_ref, rows * ic, TOL_BF16);
        check_delta(label("experts bwd-weight fp32 += %s", tag), res[3], dw_ref, dw0, nw, TOL_F32);
        int idle_n = 0;
        long touched = 0;
        for (int e = 0; e < E; e++)
            if (!counts[e]) {
                idle_n++;
                touched += memcmp((float *)res[3] + (long)e * oc * ic, dw0 + (long)e * oc * ic,
                                  sizeof(float) * oc * ic) != 0;
            }
        char detail[96];
        snprintf(detail, sizeof detail, "%d idle experts, %ld changed", idle_n, touched);
        report(touched == 0 && (!idle || idle_n > 0), label("experts idle dw untouched %s", tag),
               detail);
    }
    release_all();
}

// DeepSeek-V3's sigmoid router (kernels/moe_router.h) on both sides from the same logits and
// correction bias (negative enough to turn scores negative, and exact ties between experts):
// experts exactly equal, scores and weights within 1e-6 of the weight's scale, d_logits (bf16)
// within 1e-2; then the ungated shared experts' add (gate_scale without a gate): out += y and
// dy = dout exactly. A rerun gives the same bits.
static void test_sigmoid_route(int n, int E, int k, int groups, int topk_groups, int renorm,
                               float scale) {
    long nE = (long)n * E, nk = (long)n * k;
    float *logits = hmalloc(sizeof(float) * nE), *bias = hmalloc(sizeof(float) * E);
    float *dw = hmalloc(sizeof(float) * nk);
    for (long i = 0; i < nE; i++) logits[i] = 4.0f * rng_uniform();
    for (long t = 0; t < n; t += 7) logits[t * E + 1] = logits[t * E]; // exact ties
    for (int e = 0; e < E; e++) bias[e] = 0.5f * rng_uniform() - 0.3f;
    for (long i = 0; i < nk; i++) dw[i] = rng_uniform();
    moe_sigmoid_route r = {.correction = bias,
                           .groups = groups,
                           .topk_groups = topk_groups,
                           .renorm = renorm,
                           .scale = scale};
    float *score = hmalloc(sizeof(float) * nE), *w = hmalloc(sizeof(float) * nk);
    float *dz = hmalloc(sizeof(float) * nE);
    int32_t *ex = hmalloc(sizeof(int32_t) * nk);
    memset(dz, 0, sizeof(float) * nE);
    moe_route_sigmoid_forward(score, ex, w, logits, n, E, k, &r);
    moe_route_sigmoid_backward(dz, dw, score, ex, n, E, k, &r);
    const char *tag = label("n %d E %d k %d groups %d/%d renorm %d scale %g", n, E, k, topk_groups,
                            groups, renorm, scale);
    char name[160];
    snprintf(name, sizeof name, "%s", tag);
    void *first[4] = {0};
    for (int pass = 0; pass < 2; pass++) {
        moe_sigmoid_route rd = r;
        rd.correction = dev_f32(bias, E);
        float *d_score = dev_poisoned(sizeof(float) * nE), *d_w = dev_poisoned(sizeof(float) * nk);
        int32_t *d_ex = dev_poisoned(sizeof(int32_t) * nk);
        bf16 *d_dz = dev_poisoned(sizeof(bf16) * nE);
        cuda_moe_route_sigmoid_forward(d_score, d_ex, d_w, dev_f32(logits, nE), n, E, k, &rd, 0);
        cuda_moe_route_sigmoid_backward(d_dz, dev_f32(dw, nk), d_score, d_ex, n, E, k, &rd, 0);
        void *got[4] = {host_f32(d_score, nE), host_i32(d_ex, nk), host_f32(d_w, nk),
                        host_copy(d_dz, sizeof(bf16) * nE)};
        size_t bytes[4] = {sizeof(float) * nE, sizeof(int32_t) * nk, sizeof(float) * nk,
                           sizeof(bf16) * nE};
        if (pass == 1) {
            for (int i = 0; i < 4; i++)
                check_bytes(label("sigmoid route rerun bitwise [%d] %s", i, name), got[i], first[i],
                            bytes[i]);
            break;
        }
        memcpy(first, got, sizeof got);
        check_abs(label("sigmoid route scores %s", name), got[0], score, nE, TOL_ROUTE);
        check_equal_i32(label("sigmoid route expert %s", name), got[1], ex, nk);
        check_abs(label("sigmoid route weight %s", name), got[2], w, nk, TOL_ROUTE * scale);
        float *dzf = hmalloc(sizeof(float) * nE);
        for (long i = 0; i < nE; i++) dzf[i] = bf16_to_float(((bf16 *)got[3])[i]);
        check_close(label("sigmoid route d_logits bf16 %s", name), dzf, dz, nE, TOL_BF16);
    }
    int D = 64; // the ungated shared experts: out += y, dy = dout, bitwise
    float *y = hmalloc(sizeof(float) * n * D), *out = hmalloc(sizeof(float) * n * D);
    for (long i = 0; i < (long)n * D; i++)
        y[i] = bf16_to_float(bf16_from_float(rng_uniform())), out[i] = rng_uniform();
    float *ref = hmalloc(sizeof(float) * n * D), *d_out = dev_f32(out, (long)n * D);
    for (long i = 0; i < (long)n * D; i++) ref[i] = out[i] + y[i];
    bf16 *d_y = dev_bf16(y, (long)n * D), *d_dy = dev_poisoned(sizeof(bf16) * n * D);
    cuda_moe_gate_scale_forward(d_out, d_y, NULL, n, D, 0);
    cuda_moe_gate_scale_backward(d_dy, NULL, dev_f32(out, (long)n * D), d_y, NULL, n, D, 0);
    check_abs(label("ungated shared add %s", name), host_f32(d_out, (long)n * D), ref, (long)n * D,
              0.0);
    float *dy = host_bf16(d_dy, (long)n * D), *dy_ref = hmalloc(sizeof(float) * n * D);
    for (long i = 0; i < (long)n * D; i++) dy_ref[i] = bf16_to_float(bf16_from_float(out[i]));
    check_abs(label("ungated shared dy %s", name), dy, dy_ref, (long)n * D, 0.0);
    release_all();
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); // lines reach a log even if a check crashes
    const char *mode = getenv("MT_EXPERT_GEMM");
    printf("expert GEMMs: %s\n",
           mode && strcmp(mode, "grouped") == 0 ? "grouped" : "per-expert loop");
    gemm = cuda_gemm_new(32u << 20);

    // n not a multiple of the dispatch tile (2048 pairs) nor of 8 tokens; D = 64 and 2048; D = 100
    // and 37 take the scalar paths.
    test_case((moe_case){.n = 1001, .E = 8, .k = 2, .D = 64, .weights = 1});
    test_case((moe_case){.n = 1001, .E = 8, .k = 2, .D = 2048, .weights = 1, .idle = 1});
    test_case((moe_case){.n = 777, .E = 128, .k = 8, .D = 2048, .weights = 1, .idle = 1});
    test_case((moe_case){.n = 3000, .E = 128, .k = 8, .D = 64, .weights = 0});
    test_case((moe_case){.n = 517, .E = 60, .k = 4, .D = 2048, .weights = 0, .gate = 1, .idle = 1});
    test_case((moe_case){.n = 300, .E = 60, .k = 4, .D = 100, .weights = 1, .gate = 1});
    test_case((moe_case){.n = 33, .E = 256, .k = 16, .D = 37, .weights = 1, .gate = 1});
    test_case((moe_case){.n = 5, .E = 3, .k = 3, .D = 64, .weights = 1}); // k = E
    // gpt-oss's router: the softmax over the k largest logits (120b: 128 experts, top 4)
    test_case((moe_case){.n = 1001, .E = 128, .k = 4, .D = 64, .weights = MOE_WEIGHTS_TOP_K});
    test_case(
        (moe_case){.n = 300, .E = 32, .k = 4, .D = 100, .weights = MOE_WEIGHTS_TOP_K, .idle = 1});
    test_case((moe_case){.n = 20000, .E = 128, .k = 8, .D = 64, .weights = 1, .idle = 1});

    // DeepSeek-V3's router: 256 experts in 8 groups of which 4 are kept, top 8, scale 2.5;
    // GLM-4.5's one group; not renormalised; 64 experts, top 6 of 2 groups of 8
    test_sigmoid_route(1001, 256, 8, 8, 4, 1, 2.5f);
    test_sigmoid_route(300, 160, 8, 1, 1, 1, 2.5f);
    test_sigmoid_route(517, 64, 6, 8, 2, 0, 1.8f);

    test_experts_gemm(300, 8, 2, 256, 384, 0);
    test_experts_gemm(257, 128, 8, 128, 96, 1);
    test_experts_gemm(100, 60, 4, 72, 40, 1);

    cuda_gemm_free(gemm);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
