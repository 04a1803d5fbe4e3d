// The portable AdamW path, the run-time choice of the SIMD one, and the threading.
//
// No FMA contraction: with -std=gnu11 GCC fuses a*b+c into an FMA (-ffp-contract=fast) as
// soon as the target has FMA (-march=native, or a target attribute), which rounds once
// instead of twice and gives other bits than torch's CPU kernels and than our other paths.
// CMake also passes -ffp-contract=off for these files; the pragma keeps a hand build right.
// No errno from sqrtf either: sqrtf(v) of a negative v would call libm to set EDOM, which keeps
// the compiler from vectorizing the portable loop (4x slower); the value is the same.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "no-math-errno")
#endif

#include "kernels/adamw.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ADAMW_X86 1
#else
#define ADAMW_X86 0
#endif

// torch computes bias corrections in Python floats (double) and the per-element math in the
// tensor dtype; the same split here keeps us within an ulp of it.
void adamw_consts_init(adamw_consts *k, const adamw_params *hp) {
    double bc1 = 1.0 - pow(hp->beta1, hp->step);
    double bc2 = 1.0 - pow(hp->beta2, hp->step);
    k->step_size = (float)(hp->lr / bc1);
    k->bc2_sqrt = (float)sqrt(bc2);
    k->decay = (float)(1.0 - (double)hp->lr * hp->weight_decay);
    k->one_minus_b1 = 1.0f - hp->beta1;
    k->one_minus_b2 = 1.0f - hp->beta2;
    k->beta2 = hp->beta2;
    k->eps = hp->eps;
    k->grad_scale = hp->grad_scale;
}

// The reference arithmetic; the SIMD paths repeat it operation for operation. Portable C, which
// the compiler may vectorize for the baseline ISA (SSE2, NEON): same operations, same bits.
void adamw_kernel_scalar(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                         size_t n, const adamw_consts *k) {
    (void)nt; // the portable path has no streaming stores
    const float decay = k->decay, one_minus_b1 = k->one_minus_b1, one_minus_b2 = k->one_minus_b2;
    const float b2 = k->beta2, eps = k->eps, scale = k->grad_scale;
    const float step_size = k->step_size, bc2_sqrt = k->bc2_sqrt;
    for (size_t i = 0; i < n; i++) {
        float grad = g[i] * scale;
        float param = p[i] * decay;
        float mi = m[i] + one_minus_b1 * (grad - m[i]); // lerp, as torch's exp_avg.lerp_
        float vi = v[i] * b2 + one_minus_b2 * grad * grad;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param = param - step_size * (mi / denom);
        p[i] = param;
        m[i] = mi;
        v[i] = vi;
        if (wire) wire[i] = bf16_from_float(param);
    }
}

#if !ADAMW_X86
// Never called: adamw_isa_available() says no. They keep the link whole off x86.
void adamw_kernel_avx2(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                       size_t n, const adamw_consts *k) {
    adamw_kernel_scalar(nt, p, m, v, wire, g, n, k);
}
void adamw_kernel_avx512(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                         size_t n, const adamw_consts *k) {
    adamw_kernel_scalar(nt, p, m, v, wire, g, n, k);
}
void adamw_to_bf16_avx2(bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}
void adamw_to_bf16_avx512(bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}
#endif

const char *adamw_isa_name(adamw_isa isa) {
    static const char *names[] = {"scalar", "avx2", "avx512"};
    return (unsigned)isa < ADAMW_ISA_COUNT ? names[isa] : "?";
}

const char *adamw_nt_name(adamw_nt nt) {
    static const char *names[] = {"none", "wire", "all"};
    return (unsigned)nt < ADAMW_NT_COUNT ? names[nt] : "?";
}

int adamw_isa_available(adamw_isa isa) {
    switch (isa) {
    case ADAMW_ISA_SCALAR:
        return 1;
#if ADAMW_X86
    case ADAMW_ISA_AVX2:
        return __builtin_cpu_supports("avx2");
    case ADAMW_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#endif
    default:
        return 0;
    }
}

adamw_isa adamw_isa_default(void) {
    static int chosen = -1; // a benign race: every thread computes the same value
    if (chosen >= 0) return (adamw_isa)chosen;
    int best = ADAMW_ISA_SCALAR;
    for (int i = ADAMW_ISA_COUNT - 1; i > 0; i--)
        if (adamw_isa_available((adamw_isa)i)) {
            best = i;
            break;
        }
    const char *want = getenv("MT_ADAMW_ISA");
    if (want && *want) {
        int found = -1;
        for (int i = 0; i < ADAMW_ISA_COUNT; i++)
            if (!strcmp(want, adamw_isa_name((adamw_isa)i))) found = i;
        if (found >= 0 && adamw_isa_available((adamw_isa)found))
            best = found;
        else
            fprintf(stderr, "adamw: MT_ADAMW_ISA=%s is not available here; using %s\n", want,
                    adamw_isa_name((adamw_isa)best));
    }
    chosen = best;
    return (adamw_isa)best;
}

adamw_nt adamw_nt_default(void) {
    static int chosen = -1;
    if (chosen >= 0) return (adamw_nt)chosen;
    int nt = ADAMW_NT_WIRE; // the wire copy is only written: streaming it saves its RFO read
    const char *want = getenv("MT_ADAMW_NT");
    if (want && *want) {
        int found = -1;
        for (int i = 0; i < ADAMW_NT_COUNT; i++)
            if (!strcmp(want, adamw_nt_name((adamw_nt)i))) found = i;
        if (found >= 0)
            nt = found;
        else
            fprintf(stderr, "adamw: MT_ADAMW_NT=%s: expected none, wire or all\n", want);
    }
    chosen = nt;
    return (adamw_nt)nt;
}

void adamw_kernel(adamw_isa isa, adamw_nt nt, float *p, float *m, float *v, bf16 *wire,
                  const float *g, size_t n, const adamw_consts *k) {
    switch (isa) {
    case ADAMW_ISA_AVX512:
        adamw_kernel_avx512(nt, p, m, v, wire, g, n, k);
        break;
    case ADAMW_ISA_AVX2:
        adamw_kernel_avx2(nt, p, m, v, wire, g, n, k);
        break;
    default:
        adamw_kernel_scalar(nt, p, m, v, wire, g, n, k);
        break;
    }
}

void adamw_to_bf16(adamw_isa isa, bf16 *dst, const float *src, size_t n) {
    if (!adamw_isa_available(isa)) isa = ADAMW_ISA_SCALAR;
    switch (isa) {
    case ADAMW_ISA_AVX512:
        adamw_to_bf16_avx512(dst, src, n);
        break;
    case ADAMW_ISA_AVX2:
        adamw_to_bf16_avx2(dst, src, n);
        break;
    default:
        for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
        break;
    }
}

int adamw_threads_for(size_t n, int max_threads) {
    if (n < ADAMW_PARALLEL_MIN || max_threads <= 1) return 1;
    size_t most = n / (ADAMW_PARALLEL_MIN / 8); // at least 4096 elements (16 KiB) a thread
    return most < (size_t)max_threads ? (int)most : max_threads;
}

// Boundaries on 64-byte lines of p: no two threads write one cache line of p (nor of m and v,
// which are allocated with the same alignment), and each chunk starts on a vector boundary.
void adamw_chunk(const void *p, size_t n, int nthreads, int t, size_t *lo, size_t *hi) {
    enum { LINE = 16 }; // floats per 64-byte line
    size_t head = ((64 - ((uintptr_t)p & 63)) & 63) / sizeof(float);
    if (head > n) head = n;
    size_t lines = (n - head) / LINE;
    *lo = t == 0 ? 0 : head + LINE * (lines * (size_t)t / (size_t)nthreads);
    *hi = t == nthreads - 1 ? n : head + LINE * (lines * (size_t)(t + 1) / (size_t)nthreads);
}

void adamw_first_touch(float *x, size_t n) {
    int threads = adamw_threads_for(n, omp_get_max_threads());
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        size_t lo, hi;
        adamw_chunk(x, n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        if (hi > lo) memset(x + lo, 0, (hi - lo) * sizeof(float));
    }
}

void adamw_update_ex(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                     const adamw_params *hp, adamw_isa isa, adamw_nt nt) {
    adamw_consts k;
    adamw_consts_init(&k, hp);
    if (!adamw_isa_available(isa)) isa = ADAMW_ISA_SCALAR;
    int threads = adamw_threads_for(n, omp_get_max_threads());
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        size_t lo, hi;
        adamw_chunk(p, n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        if (hi > lo)
            adamw_kernel(isa, nt, p + lo, m + lo, v + lo, wire ? wire + lo : NULL, g + lo, hi - lo,
                         &k);
    }
}

// A thread's chunk with bf16 gradients: widened a block at a time into a buffer that stays in
// L1, so the update reads 2 bytes of gradient a parameter and runs the fp32 kernels unchanged.
static void kernel_bf16_grads(adamw_isa isa, adamw_nt nt, float *p, float *m, float *v, bf16 *wire,
                              const bf16 *g, size_t n, const adamw_consts *k) {
    enum { BLOCK = 2048 };
    float wide[BLOCK] __attribute__((aligned(64)));
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t len = n - i < BLOCK ? n - i : BLOCK;
        for (size_t j = 0; j < len; j++) wide[j] = bf16_to_float(g[i + j]);
        adamw_kernel(isa, nt, p + i, m + i, v + i, wire ? wire + i : NULL, wide, len, k);
    }
}

void adamw_update_bf16_grads(float *p, float *m, float *v, bf16 *wire, const bf16 *g, size_t n,
                             const adamw_params *hp) {
    adamw_consts k;
    adamw_consts_init(&k, hp);
    adamw_isa isa = adamw_isa_default();
    adamw_nt nt = adamw_nt_default();
    int threads = adamw_threads_for(n, omp_get_max_threads());
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        size_t lo, hi;
        adamw_chunk(p, n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        if (hi > lo)
            kernel_bf16_grads(isa, nt, p + lo, m + lo, v + lo, wire ? wire + lo : NULL, g + lo,
                              hi - lo, &k);
    }
}

void adamw_update(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                  const adamw_params *hp) {
    adamw_update_ex(p, m, v, wire, g, n, hp, adamw_isa_default(), adamw_nt_default());
}

float clip_coefficient(double total_norm, double max_norm) {
    double coef = max_norm / (total_norm + 1e-6);
    return (float)(coef < 1.0 ? coef : 1.0);
}

float clip_scale_of_groups(const double *group_sumsq, int n_groups, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double total = 0;
    for (int g = 0; g < n_groups; g++) total += group_sumsq[g];
    return clip_coefficient(sqrt(total), max_norm);
}

double sum_of_squares(const float *x, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return acc;
}
