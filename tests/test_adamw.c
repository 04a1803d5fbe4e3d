// AdamW + clip_grad_norm_ against a plain scalar transcription of PyTorch's algorithm
// (torch/optim/adamw.py single-tensor path and torch/nn/utils/clip_grad.py), computed in
// double; and the bf16 wire conversion on its edge cases.
// No FMA contraction here either (as in kernels/adamw.c): under -march=native GCC would fuse the
// float transcription's a*b+c and it would drift from the (unfused) kernel by more than 1e-6.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kernels/adamw.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"

static double uniform(unsigned *s) {
    return (rand_r(s) + 0.5) / ((double)RAND_MAX + 1.0);
}

// The reference, in the dtype torch computes in (float tensors, Python-float scalars):
// total_norm = ||g||, coef = clamp(max_norm / (total + 1e-6), max=1), g *= coef;
// p.mul_(1 - lr*wd); m.lerp_(g, 1-b1); v.mul_(b2).addcmul_(g, g, value=1-b2);
// denom = v.sqrt() / sqrt(1-b2^t) + eps; p.addcdiv_(m, denom, value=-lr/(1-b1^t)).
// T is float for the transcription and double for a second, formula-level check.
#define REFERENCE_STEPS(NAME, T, SQRT)                                                             \
    static void NAME(T *p, T *m, T *v, double *const *grads, int n, int steps, double lr,          \
                     double b1, double b2, double eps, double wd, double max_norm) {               \
        for (int t = 1; t <= steps; t++) {                                                         \
            const double *g = grads[t - 1];                                                        \
            double total = 0;                                                                      \
            for (int i = 0; i < n; i++) total += g[i] * g[i];                                      \
            T coef = (T)fmin(1.0, max_norm / (sqrt(total) + 1e-6));                                \
            T decay = (T)(1 - lr * wd), step_size = (T)(lr / (1 - pow(b1, t)));                    \
            T bc2_sqrt = (T)sqrt(1 - pow(b2, t));                                                  \
            for (int i = 0; i < n; i++) {                                                          \
                T gi = (T)g[i] * coef;                                                             \
                p[i] *= decay;                                                                     \
                m[i] += (T)(1 - b1) * (gi - m[i]);                                                 \
                v[i] = v[i] * (T)b2 + (T)(1 - b2) * gi * gi;                                       \
                T denom = SQRT(v[i]) / bc2_sqrt + (T)eps;                                          \
                p[i] = p[i] - step_size * (m[i] / denom);                                          \
            }                                                                                      \
        }                                                                                          \
    }
REFERENCE_STEPS(reference_steps_float, float, sqrtf)
REFERENCE_STEPS(reference_steps_double, double, sqrt)

// Ours, the way the optimizer ranks run it: the gradient is split over `shards` contiguous
// pieces, each updated by its own call, with the clip coefficient from the summed squares.
static void our_steps(float *p, float *m, float *v, double *const *grads, int n, int steps,
                      int shards, const adamw_params *base, double max_norm) {
    float *g = malloc(sizeof(float) * n);
    bf16 *wire = malloc(sizeof(bf16) * n);
    for (int t = 1; t <= steps; t++) {
        for (int i = 0; i < n; i++) g[i] = (float)grads[t - 1][i];
        double sumsq = 0;
        for (int k = 0; k < shards; k++) {
            int lo = n * k / shards, hi = n * (k + 1) / shards;
            sumsq += sum_of_squares(g + lo, hi - lo);
        }
        adamw_params hp = *base;
        hp.step = t;
        hp.grad_scale = clip_coefficient(sqrt(sumsq), max_norm);
        for (int k = 0; k < shards; k++) {
            int lo = n * k / shards, hi = n * (k + 1) / shards;
            adamw_update(p + lo, m + lo, v + lo, wire + lo, g + lo, hi - lo, &hp);
        }
        for (int i = 0; i < n; i++)
            if (wire[i] != bf16_from_float(p[i])) {
                check(0, "wire copy is bf16(p)");
                break;
            }
    }
    free(g);
    free(wire);
}

static double max_relative_error(const float *ours, const void *ref, int is_double, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double r = is_double ? ((const double *)ref)[i] : ((const float *)ref)[i];
        worst = fmax(worst, fabs(ours[i] - r) / fmax(fabs(r), 1e-3));
    }
    return worst;
}

static void adamw_case(double grad_scale, double max_norm, const char *what) {
    enum { N = 1003, STEPS = 25 };
    unsigned seed = 7;
    double *grads[STEPS], pd[N], md[N] = {0}, vd[N] = {0};
    float pf[N], mf[N] = {0}, vf[N] = {0}, po[N], mo[N] = {0}, vo[N] = {0};
    for (int t = 0; t < STEPS; t++) {
        grads[t] = malloc(sizeof(double) * N);
        for (int i = 0; i < N; i++) grads[t][i] = (float)((uniform(&seed) - 0.5) * grad_scale);
    }
    for (int i = 0; i < N; i++) po[i] = pf[i] = (float)(pd[i] = (float)(uniform(&seed) - 0.5));
    adamw_params hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    reference_steps_float(pf, mf, vf, grads, N, STEPS, hp.lr, hp.beta1, hp.beta2, hp.eps,
                          hp.weight_decay, max_norm);
    reference_steps_double(pd, md, vd, grads, N, STEPS, hp.lr, hp.beta1, hp.beta2, hp.eps,
                           hp.weight_decay, max_norm);
    our_steps(po, mo, vo, grads, N, STEPS, 3, &hp, max_norm);
    double e_float = max_relative_error(po, pf, 0, N), e_double = max_relative_error(po, pd, 1, N);
    double e_m = max_relative_error(mo, mf, 0, N), e_v = max_relative_error(vo, vf, 0, N);
    check(e_float < 1e-6, "%s: p after %d steps vs the fp32 transcription: %.2e < 1e-6", what,
          STEPS, e_float);
    check(e_m < 1e-6 && e_v < 1e-6, "%s: m, v vs the fp32 transcription: %.2e, %.2e < 1e-6", what,
          e_m, e_v);
    check(e_double < 1e-5, "%s: p vs the same algorithm in double: %.2e < 1e-5", what, e_double);
    for (int t = 0; t < STEPS; t++) free(grads[t]);
}

static float bits_to_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void bf16_cases(void) {
    check(bf16_from_float(1.0f) == 0x3f80, "bf16(1) = 0x3f80");
    // 1 + 2^-8 lies exactly between 0x3f80 and 0x3f81: ties go to the even mantissa.
    check(bf16_from_float(bits_to_float(0x3f808000u)) == 0x3f80, "tie rounds down to even");
    check(bf16_from_float(bits_to_float(0x3f818000u)) == 0x3f82, "tie rounds up to even");
    check(bf16_from_float(bits_to_float(0x3f808001u)) == 0x3f81, "above the tie rounds up");
    check(bf16_from_float(INFINITY) == 0x7f80 && bf16_from_float(-INFINITY) == 0xff80,
          "infinities are kept");
    bf16 nan = bf16_from_float(bits_to_float(0x7f800001u));
    check((nan & 0x7f80) == 0x7f80 && (nan & 0x007f) != 0, "a NaN with a low payload stays NaN");
    check(bf16_from_float(bits_to_float(0x7f7fffffu)) == 0x7f80, "max float rounds to Inf");
    check(bf16_from_float(bits_to_float(0x00010000u)) == 0x0001, "subnormal kept exactly");
    check(bf16_from_float(bits_to_float(0x00008000u)) == 0x0000, "smallest subnormal tie to 0");
    check(bf16_to_float(0xc040) == -3.0f, "bf16 -> float");
}

int main(void) {
    adamw_case(1e-2, 1.0, "no clipping (norm below max_norm)");
    adamw_case(10.0, 1.0, "clipping (norm above max_norm)");
    adamw_case(1.0, 1e9, "clip disabled by a huge max_norm");
    bf16_cases();
    return tests_summary();
}
