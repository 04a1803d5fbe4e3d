// The CPU kernel tests' shared tools (test_kernels_cpu.c, test_kernels_gdn.c): a seeded
// splitmix64 stream, random vectors, and the two checks every kernel gets: its backward against
// central finite differences of a scalar loss, and its outputs bitwise the same on 1 and on 3
// OpenMP threads. A file defines KERNEL_CHECK_SEED before including this, to keep its own stream.
#ifndef MT_TEST_KERNEL_CHECK_H
#define MT_TEST_KERNEL_CHECK_H

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef KERNEL_CHECK_SEED
#define KERNEL_CHECK_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng_state = KERNEL_CHECK_SEED;
static inline uint64_t rng_next(void) { // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// Uniform in [lo, hi), 24 random bits.
static inline float rng_range(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next() >> 40) * 0x1.0p-24);
}
static inline int rng_int(int n) {
    return (int)(rng_next() % (uint64_t)n);
}

static inline float *rand_in(long n, float lo, float hi) {
    float *p = malloc(sizeof(float) * n);
    if (!p) abort();
    for (long i = 0; i < n; i++) p[i] = rng_range(lo, hi);
    return p;
}
static inline float *copy_vec(const float *src, long n) {
    float *p = malloc(sizeof(float) * n);
    if (!p) abort();
    memcpy(p, src, sizeof(float) * n);
    return p;
}
static inline double dot_d(const float *a, const float *b, long n) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
// The gradient a backward added on top of prior (after - prior): it must add, not overwrite.
static inline float *grad_delta(const float *after, const float *prior, long n) {
    float *g = malloc(sizeof(float) * n);
    if (!g) abort();
    for (long i = 0; i < n; i++) g[i] = after[i] - prior[i];
    return g;
}

// Central differences of loss(ctx) in p[i], steps of eps, on `coords` random coordinates (all of
// them when there are fewer), against grad: max |grad - fd| / max(max |fd|, 1e-3); infinite
// where grad is not finite.
typedef double (*loss_fn)(void *ctx);
static inline double fd_rel_err(float *p, long n, const float *grad, loss_fn loss, void *ctx,
                                float eps, int coords) {
    double max_err = 0.0, max_ref = 1e-3;
    int m = n < coords ? (int)n : coords;
    for (int c = 0; c < m; c++) {
        long i = n <= coords ? c : (long)(rng_next() % (uint64_t)n);
        float saved = p[i], hi = saved + eps, lo = saved - eps;
        p[i] = hi;
        double lhi = loss(ctx);
        p[i] = lo;
        double llo = loss(ctx);
        p[i] = saved;
        double fd = (lhi - llo) / ((double)hi - (double)lo);
        max_err = isfinite(grad[i]) ? fmax(max_err, fabs(grad[i] - fd)) : INFINITY;
        max_ref = fmax(max_ref, fabs(fd));
    }
    return max_err / max_ref;
}

// Whether fn(ctx, out) gives the same bits on 3 threads and on 1.
typedef void (*run_fn)(void *ctx, float *out);
static inline int same_on_1_and_3_threads(run_fn fn, void *ctx, long nout) {
    float *a = calloc(nout, sizeof(float)), *b = calloc(nout, sizeof(float));
    if (!a || !b) abort();
    omp_set_num_threads(3);
    fn(ctx, b);
    omp_set_num_threads(1);
    fn(ctx, a);
    int same = memcmp(a, b, sizeof(float) * nout) == 0;
    free(a), free(b);
    return same;
}

#endif
