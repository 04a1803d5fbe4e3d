// The CPU kernels gpt-oss adds: its experts' clamped SwiGLU (forward against a double
// reference, backward against finite differences, the clamp's edges against torch's convention)
// and YaRN's RoPE table (against its formula written out here in double, and hand-checked
// entries of gpt-oss-120b's table).
#include "kernels/cpu/kernels_cpu.h"
#include "tests/check.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const swiglu_clamp GPT_OSS = {.alpha = 1.702f, .limit = 7.0f};
static const float FD_EPS = 1e-3f;

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float rng_uniform(float lo, float hi) { // splitmix64, 24 bits
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)((z >> 40) * 0x1.0p-24);
}

// ---- clamped SwiGLU ----------------------------------------------------------------------

// The formula in double: d(out)/d(gate) and d(out)/d(up) of the unclamped expression at the
// clamped point, so that a test can tell "passes" from "blocked" at each input.
typedef struct {
    double out, d_gate, d_up;
} swiglu_ref;

static swiglu_ref swiglu_reference(float gate, float up) {
    double a = GPT_OSS.alpha, lim = GPT_OSS.limit;
    double g = gate > lim ? lim : gate, u = up > lim ? lim : up < -lim ? -lim : up;
    double s = 1.0 / (1.0 + exp(-a * g));
    return (swiglu_ref){(u + 1) * g * s, (u + 1) * (s + g * a * s * (1 - s)), g * s};
}

// Values spread over [-10, 10], so that both clamps and the gate's unclamped negative side are
// reached, kept FD_EPS away from +-limit (central differences across the kink are meaningless;
// the bounds themselves are test_swiglu_clamped_edges' job).
static void fill_away_from_bounds(float *x, long n) {
    for (long i = 0; i < n; i++) {
        do x[i] = rng_uniform(-10.0f, 10.0f);
        while (fabsf(fabsf(x[i]) - GPT_OSS.limit) < 4 * FD_EPS);
    }
}

static double swiglu_loss(const float *gate, const float *up, const float *R, long n) {
    float *out = malloc(sizeof(float) * n);
    swiglu_clamped_forward(out, gate, up, n, GPT_OSS);
    double l = 0.0;
    for (long i = 0; i < n; i++) l += (double)out[i] * R[i];
    free(out);
    return l;
}

// Central differences of the loss in every coordinate of x (gate or up), against the
// backward's gradient: max |grad - fd| / max(max |fd|, 1e-3) < 1e-2.
static void fd_check(const char *name, float *x, const float *grad, float *gate, float *up,
                     const float *R, long n) {
    double max_err = 0.0, max_ref = 1e-3;
    for (long i = 0; i < n; i++) {
        float saved = x[i], hi = saved + FD_EPS, lo = saved - FD_EPS;
        x[i] = hi;
        double lhi = swiglu_loss(gate, up, R, n);
        x[i] = lo;
        double llo = swiglu_loss(gate, up, R, n);
        x[i] = saved;
        double fd = (lhi - llo) / ((double)hi - lo);
        max_err = fmax(max_err, fabs(grad[i] - fd));
        max_ref = fmax(max_ref, fabs(fd));
    }
    check(max_err / max_ref < 1e-2, "%s against finite differences (rel err %.3g)", name,
          max_err / max_ref);
}

static void test_swiglu_clamped(void) {
    enum { N = 257 };
    float gate[N], up[N], R[N], out[N], prior_g[N], prior_u[N], dg[N], du[N], gg[N], gu[N];
    fill_away_from_bounds(gate, N), fill_away_from_bounds(up, N);
    int clamped_gate = 0, clamped_up = 0, low_gate = 0;
    for (long i = 0; i < N; i++) {
        R[i] = rng_uniform(-1, 1), prior_g[i] = rng_uniform(-1, 1), prior_u[i] = rng_uniform(-1, 1);
        clamped_gate += gate[i] > 7, clamped_up += fabsf(up[i]) > 7, low_gate += gate[i] < -7;
    }
    check(clamped_gate > 10 && clamped_up > 20 && low_gate > 10,
          "the inputs reach both clamps and the gate's unclamped side (%d, %d, %d)", clamped_gate,
          clamped_up, low_gate);

    swiglu_clamped_forward(out, gate, up, N, GPT_OSS);
    double err = 0.0, ref_max = 1e-6;
    for (long i = 0; i < N; i++) {
        double want = swiglu_reference(gate[i], up[i]).out;
        err = fmax(err, fabs(out[i] - want)), ref_max = fmax(ref_max, fabs(want));
    }
    check(err / ref_max < 1e-6, "forward against the double formula (rel err %.3g)", err / ref_max);

    memcpy(dg, prior_g, sizeof dg), memcpy(du, prior_u, sizeof du);
    swiglu_clamped_backward(dg, du, R, gate, up, N, GPT_OSS);
    int blocked = 1;
    for (long i = 0; i < N; i++) {
        gg[i] = dg[i] - prior_g[i], gu[i] = du[i] - prior_u[i]; // it must accumulate
        if (gate[i] > 7) blocked &= dg[i] == prior_g[i];
        if (fabsf(up[i]) > 7) blocked &= du[i] == prior_u[i];
    }
    check(blocked, "no gradient at all through a clamped gate or up");
    fd_check("dgate", gate, gg, gate, up, R, N);
    fd_check("dup", up, gu, gate, up, R, N);

    // bitwise the same on 1 and 3 threads
    float out3[N], dg3[N], du3[N], dg1[N], du1[N];
    memcpy(dg1, prior_g, sizeof dg1), memcpy(du1, prior_u, sizeof du1);
    memcpy(dg3, prior_g, sizeof dg3), memcpy(du3, prior_u, sizeof du3);
    omp_set_num_threads(3);
    swiglu_clamped_forward(out3, gate, up, N, GPT_OSS);
    swiglu_clamped_backward(dg3, du3, R, gate, up, N, GPT_OSS);
    omp_set_num_threads(1);
    swiglu_clamped_backward(dg1, du1, R, gate, up, N, GPT_OSS);
    check(!memcmp(out, out3, sizeof out) && !memcmp(dg1, dg3, sizeof dg1) &&
              !memcmp(du1, du3, sizeof du1),
          "forward and backward bitwise the same on 1 and 3 threads");
}

// One element through forward and backward with dout = 1.
static void swiglu_one(float gate, float up, float *out, float *dgate, float *dup) {
    *dgate = *dup = 0.0f;
    swiglu_clamped_forward(out, &gate, &up, 1, GPT_OSS);
    swiglu_clamped_backward(dgate, dup, &(float){1.0f}, &gate, &up, 1, GPT_OSS);
}

// torch's clamp_backward passes the gradient where min <= x <= max: exactly at a bound the
// gradient is the unclamped one (the one-sided difference from inside the range), one float
// beyond it is 0. The gate has no lower bound, and a NaN stays NaN with no gradient.
static void test_swiglu_clamped_edges(void) {
    float out, dg, du, out2, dg2, du2;
    const float h = 0.015625f, beyond = nextafterf(7.0f, INFINITY);
    swiglu_ref at = swiglu_reference(7.0f, 0.5f);
    swiglu_one(7.0f, 0.5f, &out, &dg, &du);
    swiglu_one(7.0f - h, 0.5f, &out2, &dg2, &du2);
    double inside = ((double)out - out2) / h;
    check(fabs(dg - at.d_gate) < 1e-5 * fabs(at.d_gate) && fabs(dg - inside) < 2e-3 * fabs(dg),
          "gate exactly at +7 passes the gradient: %.7g (formula %.7g, from inside %.7g)", dg,
          at.d_gate, inside);
    swiglu_one(beyond, 0.5f, &out2, &dg2, &du2);
    check(dg2 == 0.0f && out2 == out, "gate one float above 7: gradient 0, output as at 7");
    swiglu_one(1000.0f, 0.5f, &out2, &dg2, &du2);
    check(dg2 == 0.0f && out2 == out, "gate 1000: gradient 0, output as at 7");

    for (int sign = -1; sign <= 1; sign += 2) {
        float bound = 7.0f * sign;
        at = swiglu_reference(1.5f, bound);
        swiglu_one(1.5f, bound, &out, &dg, &du);
        swiglu_one(1.5f, bound - sign * h, &out2, &dg2, &du2);
        inside = ((double)out - out2) / (sign * h);
        check(fabs(du - at.d_up) < 1e-6 * fabs(at.d_up) && fabs(du - inside) < 1e-3 * fabs(du),
              "up exactly at %+g passes the gradient: %.7g (formula %.7g, from inside %.7g)", bound,
              du, at.d_up, inside);
        swiglu_one(1.5f, nextafterf(bound, sign * INFINITY), &out2, &dg2, &du2);
        check(du2 == 0.0f && out2 == out, "up one float beyond %+g: gradient 0, output as at it",
              bound);
        swiglu_one(1.5f, 9.0f * sign, &out2, &dg2, &du2);
        check(du2 == 0.0f && out2 == out, "up %+g: gradient 0, output as at %+g", 9.0 * sign,
              bound);
    }

    // gate -9 is not clamped to -7: its own output and a (tiny) nonzero gradient
    swiglu_one(-9.0f, 0.5f, &out, &dg, &du);
    swiglu_one(-7.0f, 0.5f, &out2, &dg2, &du2);
    at = swiglu_reference(-9.0f, 0.5f);
    check(out != out2 && fabs(out - at.out) < 1e-6 * fabs(at.out) &&
              fabs(dg - at.d_gate) < 1e-5 * fabs(at.d_gate) && dg != 0.0f,
          "gate -9 unclamped: out %.7g (formula %.7g), dgate %.7g (formula %.7g)", out, at.out, dg,
          at.d_gate);

    swiglu_one(NAN, 0.5f, &out, &dg, &du);
    check(isnan(out) && dg == 0.0f, "a NaN gate gives NaN and no gate gradient, as torch.clamp");
    swiglu_one(0.5f, NAN, &out, &dg, &du);
    check(isnan(out) && du == 0.0f, "a NaN up gives NaN and no up gradient, as torch.clamp");
}

// ---- YaRN --------------------------------------------------------------------------------

enum { HD = 64, HALF = HD / 2 };
static const float THETA = 150000.0f;

// transformers' _compute_yarn_parameters written out from its description in double: the
// correction range from the dimension at beta rotations over orig_ctx, a linear ramp between
// (clipped to [0, 1]), and frequencies blended from the plain one (below) to plain / factor.
static void yarn_reference(double *inv, const rope_yarn *y) {
    double dims[2], rot[2] = {y->beta_fast, y->beta_slow};
    for (int b = 0; b < 2; b++)
        dims[b] = HD * log(y->orig_ctx / (rot[b] * 2 * M_PI)) / (2 * log(THETA));
    if (y->truncate) dims[0] = floor(dims[0]), dims[1] = ceil(dims[1]);
    double low = fmax(dims[0], 0), high = fmin(dims[1], HD - 1);
    for (int i = 0; i < HALF; i++) {
        double plain = pow(THETA, -2.0 * i / HD);
        double ramp = fmin(fmax((i - low) / (high - low), 0), 1);
        inv[i] = plain / y->factor * ramp + plain * (1 - ramp);
    }
}

static void check_yarn_against_reference(const rope_yarn *y, const char *what) {
    float got[HALF];
    double want[HALF], err = 0.0;
    rope_yarn_inv_freq(got, HD, THETA, y);
    yarn_reference(want, y);
    for (int i = 0; i < HALF; i++) err = fmax(err, fabs(got[i] / want[i] - 1));
    check(err < 1e-6, "yarn inv_freq %s against the double formula (rel err %.3g)", what, err);
}

// gpt-oss-120b: head_dim 64, theta 150000, factor 32, original 4096, beta 32 / 1, truncate off
// (its config.json). The correction range is [8.0928, 17.398] (64 ln(4096 / (32 * 2 pi)) /
// (2 ln 150000) and the same at 1 rotation), so entries 0..8 keep the plain frequency bit for
// bit, 18..31 are bitwise plain / 32, and 9..17 lie between.
static void test_yarn_gpt_oss(void) {
    rope_yarn y = {.factor = 32, .orig_ctx = 4096, .beta_fast = 32, .beta_slow = 1};
    float plain[HALF], got[HALF];
    rope_inv_freq(plain, HD, THETA);
    double attention = rope_yarn_inv_freq(got, HD, THETA, &y);
    check_yarn_against_reference(&y, "gpt-oss-120b");
    check(fabs(attention - 1.3465735902799727) < 1e-15,
          "attention factor 0.1 ln(32) + 1 = 1.34657359028 (got %.17g)", attention);
    int kept = 1, divided = 1, between = 1;
    for (int i = 0; i <= 8; i++) kept &= got[i] == plain[i];
    for (int i = 18; i < HALF; i++) divided &= got[i] == plain[i] / 32.0f;
    for (int i = 9; i <= 17; i++) between &= got[i] < plain[i] && got[i] > plain[i] / 32.0f;
    check(got[0] == 1.0f && kept, "entries 0..8 are the plain frequencies bit for bit");
    check(divided, "entries 18..31 are the plain frequencies / 32 bit for bit");
    check(between, "entries 9..17 lie strictly between");
    // entry 13 by hand: ramp (13 - 8.092779) / (17.398025 - 8.092779) = 0.527356
    double ramp = (13 - 8.092779115512402) / (17.39802450158856 - 8.092779115512402);
    double want13 = plain[13] * (1 - ramp) + plain[13] / 32 * ramp;
    check(fabs(got[13] / want13 - 1) < 1e-6, "entry 13: %.9g (by hand %.9g, ramp %.6f)", got[13],
          want13, ramp);

    rope_yarn defaults = {.factor = 32, .orig_ctx = 4096}; // beta 0: transformers' 32 and 1
    float got_defaults[HALF];
    rope_yarn_inv_freq(got_defaults, HD, THETA, &defaults);
    check(!memcmp(got, got_defaults, sizeof got), "beta_fast / beta_slow 0 mean 32 and 1");
}

// truncate (transformers' default when config.json does not say): the range becomes [8, 18],
// so entry 13 sits mid-ramp, plain * (1/2 + 1/64), and entry 9 at a tenth, plain * (0.9 + 0.1/32).
static void test_yarn_truncated(void) {
    rope_yarn y = {.factor = 32, .orig_ctx = 4096, .beta_fast = 32, .beta_slow = 1, .truncate = 1};
    float plain[HALF], got[HALF];
    rope_inv_freq(plain, HD, THETA);
    rope_yarn_inv_freq(got, HD, THETA, &y);
    check_yarn_against_reference(&y, "truncated");
    check(fabs(got[13] / (plain[13] * 33.0 / 64) - 1) < 1e-6,
          "truncated entry 13 = plain * 33/64 (%.9g vs %.9g)", got[13], plain[13] * 33.0 / 64);
    check(fabs(got[9] / (plain[9] * (0.9 + 0.1 / 32)) - 1) < 1e-6,
          "truncated entry 9 = plain * (0.9 + 0.1/32)");
    check(got[8] == plain[8] && got[18] == plain[18] / 32.0f, "truncated entries 8 and 18 exact");
}

// The attention factor: given, from mscale / mscale_all_dim (both needed), or 1 for factor <= 1.
static void test_yarn_attention_factor(void) {
    float t[HALF];
    rope_yarn given = {.factor = 32, .orig_ctx = 4096, .attention_factor = 1.25};
    check(rope_yarn_inv_freq(t, HD, THETA, &given) == 1.25, "an attention_factor given is used");
    rope_yarn ms = {.factor = 40, .orig_ctx = 4096, .mscale = 1, .mscale_all_dim = 0.5};
    double want = (0.1 * log(40.0) + 1) / (0.05 * log(40.0) + 1);
    check(fabs(rope_yarn_inv_freq(t, HD, THETA, &ms) - want) < 1e-15,
          "mscale 1 / mscale_all_dim 0.5 at factor 40: %.12g", want);
    rope_yarn one = {.factor = 40, .orig_ctx = 4096, .mscale = 1}; // mscale_all_dim missing
    check(fabs(rope_yarn_inv_freq(t, HD, THETA, &one) - (0.1 * log(40.0) + 1)) < 1e-15,
          "mscale without mscale_all_dim is ignored");
    rope_yarn flat = {.factor = 1, .orig_ctx = 4096};
    check(rope_yarn_inv_freq(t, HD, THETA, &flat) == 1.0, "factor 1: attention factor 1");
}

int main(void) {
    omp_set_num_threads(1);
    test_swiglu_clamped();
    test_swiglu_clamped_edges();
    test_yarn_gpt_oss();
    test_yarn_truncated();
    test_yarn_attention_factor();
    return tests_summary();
}
