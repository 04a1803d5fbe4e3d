// The AdamW paths (scalar, AVX2, AVX-512) against each other and against an exact reference:
// every float operation of adamw_kernel_scalar, done in double and rounded to float (for +, -,
// *, / and sqrt of floats that gives the correctly rounded float result, since 53 >= 2*24 + 2),
// independent of the ISA. GCC narrows such double ops back to float ops and would then fuse them
// into FMAs under -march=native, so this file too is compiled without contraction.
// Claims checked, all BITWISE: every path equals the reference and the scalar path, for sizes
// that are no multiple of the vector width, any pointer alignment and every store policy; 1, 2
// and 3 threads give the same bits; one call equals three uneven shards; the SIMD bf16
// conversions equal bf16_from_float on all the edge cases.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/adamw.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"

static uint64_t rng_next(uint64_t *s) { // xorshift64*
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}
static double rng_unit(uint64_t *s) {
    return (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Mostly training-like values, plus zeros, subnormals, tiny and huge magnitudes (up to 1e30,
// so that g*g and v overflow to Inf now and then) and both signs.
static float wild(uint64_t *s, int nonnegative) {
    double u = rng_unit(s), x;
    int kind = (int)(rng_next(s) % 16);
    if (kind == 0)
        x = 0.0;
    else if (kind == 1)
        x = ldexp(rng_unit(s), -149 + (int)(rng_next(s) % 24)); // subnormal
    else if (kind <= 4)
        x = ldexp(0.5 + u, -126 + (int)(rng_next(s) % 226)); // 1e-38..1e30
    else
        x = (u - 0.5) * ldexp(1.0, -(int)(rng_next(s) % 12)); // ~|x| < 0.5
    x = fabs(x);
    if (!nonnegative && (rng_next(s) & 1)) x = -x;
    return (float)x;
}

// ---- the exact reference ----
static float mul_(float a, float b) {
    return (float)((double)a * (double)b);
}
static float add_(float a, float b) {
    return (float)((double)a + (double)b);
}
static float sub_(float a, float b) {
    return (float)((double)a - (double)b);
}
static float div_(float a, float b) {
    return (float)((double)a / (double)b);
}
static float sqrt_(float a) {
    return (float)sqrt((double)a);
}

static void reference(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                      const adamw_params *hp) {
    adamw_consts k;
    adamw_consts_init(&k, hp); // the per-step scalars are computed once, in double, then cast
    for (size_t i = 0; i < n; i++) {
        float grad = mul_(g[i], k.grad_scale);
        float param = mul_(p[i], k.decay);
        float mi = add_(m[i], mul_(k.one_minus_b1, sub_(grad, m[i])));
        float vi = add_(mul_(v[i], k.beta2), mul_(mul_(k.one_minus_b2, grad), grad));
        float denom = add_(div_(sqrt_(vi), k.bc2_sqrt), k.eps);
        param = sub_(param, mul_(k.step_size, div_(mi, denom)));
        p[i] = param, m[i] = mi, v[i] = vi;
        wire[i] = bf16_from_float(param);
    }
}

// ---- state: five arrays, each at its own misalignment from a 64-byte line ----
typedef struct {
    size_t n;
    float *p, *m, *v, *g;
    bf16 *w;
    void *raw[5];
} state;

static void *at_offset(void **raw, size_t bytes, size_t offset) {
    *raw = aligned_alloc(64, (bytes + offset + 64 + 63) / 64 * 64);
    if (!*raw) abort();
    return (char *)*raw + offset;
}

// offsets[]: misalignment in elements of p, m, v, g, wire
static void state_alloc(state *s, size_t n, const int offsets[5]) {
    s->n = n;
    s->p = at_offset(&s->raw[0], n * 4, offsets[0] * 4);
    s->m = at_offset(&s->raw[1], n * 4, offsets[1] * 4);
    s->v = at_offset(&s->raw[2], n * 4, offsets[2] * 4);
    s->g = at_offset(&s->raw[3], n * 4, offsets[3] * 4);
    s->w = at_offset(&s->raw[4], n * 2, offsets[4] * 2);
}
static void state_free(state *s) {
    for (int i = 0; i < 5; i++) free(s->raw[i]);
}
static void state_fill(state *s, uint64_t seed) {
    for (size_t i = 0; i < s->n; i++) {
        s->p[i] = wild(&seed, 0), s->m[i] = wild(&seed, 0), s->v[i] = wild(&seed, 1);
        s->g[i] = wild(&seed, 0), s->w[i] = 0xdead;
    }
}
static void state_copy(state *d, const state *s) {
    memcpy(d->p, s->p, s->n * 4), memcpy(d->m, s->m, s->n * 4), memcpy(d->v, s->v, s->n * 4);
    memcpy(d->g, s->g, s->n * 4), memcpy(d->w, s->w, s->n * 2);
}

// Index of the first element whose p, m, v or wire bits differ; n when none. NaNs count as equal
// only with nan_equal (payload propagation between two NaN operands is not pinned down in C).
static size_t first_difference(const state *a, const state *b, int nan_equal) {
    for (size_t i = 0; i < a->n; i++) {
        const float *x[3] = {a->p, a->m, a->v}, *y[3] = {b->p, b->m, b->v};
        for (int j = 0; j < 3; j++) {
            if (float_bits(x[j][i]) == float_bits(y[j][i])) continue;
            if (nan_equal && isnan(x[j][i]) && isnan(y[j][i])) continue;
            return i;
        }
        if (a->w[i] != b->w[i]) {
            int a_nan = (a->w[i] & 0x7fff) > 0x7f80, b_nan = (b->w[i] & 0x7fff) > 0x7f80;
            if (!(nan_equal && a_nan && b_nan)) return i;
        }
    }
    return a->n;
}

static void describe(const state *a, const state *b, size_t i, const char *an, const char *bn) {
    printf("    at [%zu]: %s p=%08x m=%08x v=%08x w=%04x   %s p=%08x m=%08x v=%08x w=%04x\n", i, an,
           float_bits(a->p[i]), float_bits(a->m[i]), float_bits(a->v[i]), a->w[i], bn,
           float_bits(b->p[i]), float_bits(b->m[i]), float_bits(b->v[i]), b->w[i]);
}

static const adamw_params HP[] = {
    {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f},    // first step, no clipping
    {3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 7, 0.37f}, // clipped gradient
    {1.0f, 0.5f, 0.75f, 1e-3f, 0.5f, 1000, 2.5f},  // large lr, large step count
};
enum { N_HP = sizeof HP / sizeof HP[0] };

static const int OFFSETS[][5] = {
    {0, 0, 0, 0, 0}, {1, 1, 1, 1, 1}, {0, 3, 5, 7, 9}, {13, 2, 0, 15, 3}};
enum { N_OFFSETS = sizeof OFFSETS / sizeof OFFSETS[0] };

// Every path and store policy, one step, vs the reference and vs the scalar path; per size,
// over 4 pointer-alignment sets and 3 sets of hyperparameters.
static void paths_vs_reference(void) {
    static const size_t sizes[] = {1, 7, 15, 16, 17, 31, 33, 1000003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        int ok[ADAMW_ISA_COUNT][ADAMW_NT_COUNT];
        for (int a = 0; a < ADAMW_ISA_COUNT; a++)
            for (int b = 0; b < ADAMW_NT_COUNT; b++) ok[a][b] = 1;
        for (int oi = 0; oi < N_OFFSETS; oi++) {
            state in, ref, scalar, out;
            state_alloc(&in, n, OFFSETS[oi]), state_alloc(&ref, n, OFFSETS[oi]);
            state_alloc(&scalar, n, OFFSETS[oi]), state_alloc(&out, n, OFFSETS[oi]);
            state_fill(&in, 1234567 + n * 31 + oi);
            for (int h = 0; h < N_HP; h++) {
                adamw_consts k;
                adamw_consts_init(&k, &HP[h]);
                state_copy(&ref, &in);
                reference(ref.p, ref.m, ref.v, ref.w, ref.g, n, &HP[h]);
                state_copy(&scalar, &in);
                adamw_kernel(ADAMW_ISA_SCALAR, ADAMW_NT_NONE, scalar.p, scalar.m, scalar.v,
                             scalar.w, scalar.g, n, &k);
                size_t d = first_difference(&scalar, &ref, 0);
                if (d != n && ok[0][0]) {
                    printf("    offsets set %d, hparams %d:\n", oi, h);
                    describe(&scalar, &ref, d, "scalar", "ref");
                }
                ok[0][0] &= d == n;
                for (int isa = 1; isa < ADAMW_ISA_COUNT; isa++) {
                    if (!adamw_isa_available((adamw_isa)isa)) continue;
                    for (int nt = 0; nt < ADAMW_NT_COUNT; nt++) {
                        state_copy(&out, &in);
                        adamw_kernel((adamw_isa)isa, (adamw_nt)nt, out.p, out.m, out.v, out.w,
                                     out.g, n, &k);
                        // vs scalar, and (the same thing when scalar passed) vs the reference
                        d = first_difference(&out, &scalar, 0);
                        size_t dr = first_difference(&out, &ref, 0);
                        if ((d != n || dr != n) && ok[isa][nt]) {
                            printf("    offsets set %d, hparams %d:\n", oi, h);
                            describe(&out, d != n ? &scalar : &ref, d != n ? d : dr,
                                     adamw_isa_name((adamw_isa)isa), d != n ? "scalar" : "ref");
                        }
                        ok[isa][nt] &= d == n && dr == n;
                    }
                }
            }
            state_free(&in), state_free(&ref), state_free(&scalar), state_free(&out);
        }
        check(ok[0][0], "scalar == exact reference, bitwise, n=%zu (4 alignments x 3 hparams)", n);
        for (int isa = 1; isa < ADAMW_ISA_COUNT; isa++) {
            if (!adamw_isa_available((adamw_isa)isa)) {
                printf("SKIP: %s not available on this CPU\n", adamw_isa_name((adamw_isa)isa));
                continue;
            }
            for (int nt = 0; nt < ADAMW_NT_COUNT; nt++)
                check(ok[isa][nt],
                      "%s (streaming stores: %s) == scalar == reference, bitwise, n=%zu "
                      "(4 alignments x 3 hparams)",
                      adamw_isa_name((adamw_isa)isa), adamw_nt_name((adamw_nt)nt), n);
        }
    }
}

// Inf, NaN, negative v, -0, max float and subnormals in every input: the paths agree. With NaN
// inputs, "agree" means the same bits except that a NaN may carry another NaN's payload.
static void special_values(void) {
    static const uint32_t specials[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff,
                                        0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000,
                                        0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
                                        0x3f800000, 0xbf808000, 0x1e3ce508, 0x5f000000};
    enum { S = sizeof specials / sizeof specials[0], N = S * S * 4 + 5 };
    int off[5] = {0, 0, 0, 0, 0};
    state in, scalar, out;
    state_alloc(&in, N, off), state_alloc(&scalar, N, off), state_alloc(&out, N, off);
    uint64_t seed = 99;
    for (size_t i = 0; i < N; i++) { // every pair of specials meets in (p, m), (v, g), ...
        in.p[i] = bits_to_float(specials[i % S]);
        in.m[i] = bits_to_float(specials[(i / S) % S]);
        in.v[i] = bits_to_float(specials[(i / (S * S)) % S]);
        in.g[i] = (i & 1) ? bits_to_float(specials[(i * 7) % S]) : wild(&seed, 0);
        in.w[i] = 0;
    }
    for (int h = 0; h < N_HP; h++) {
        adamw_consts k;
        adamw_consts_init(&k, &HP[h]);
        state_copy(&scalar, &in);
        adamw_kernel(ADAMW_ISA_SCALAR, ADAMW_NT_NONE, scalar.p, scalar.m, scalar.v, scalar.w,
                     scalar.g, N, &k);
        for (int isa = 1; isa < ADAMW_ISA_COUNT; isa++) {
            if (!adamw_isa_available((adamw_isa)isa)) continue;
            state_copy(&out, &in);
            adamw_kernel((adamw_isa)isa, ADAMW_NT_WIRE, out.p, out.m, out.v, out.w, out.g, N, &k);
            size_t d = first_difference(&out, &scalar, 1);
            check(d == N,
                  "%s == scalar on Inf/NaN/subnormal/max inputs (NaN payloads aside), hparams %d",
                  adamw_isa_name((adamw_isa)isa), h);
            if (d != N) describe(&out, &scalar, d, adamw_isa_name((adamw_isa)isa), "scalar");
        }
    }
    // lr = 0: p passes through (decay 1, step 0), so the wire copy of the edge values is tested
    // through the kernel itself.
    adamw_params pass = {0.0f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    adamw_consts k;
    adamw_consts_init(&k, &pass);
    for (int isa = 0; isa < ADAMW_ISA_COUNT; isa++) {
        if (!adamw_isa_available((adamw_isa)isa)) continue;
        state_copy(&out, &in);
        for (size_t i = 0; i < N; i++) out.m[i] = out.g[i] = 0.0f, out.v[i] = 1.0f; // m/denom = 0
        adamw_kernel((adamw_isa)isa, ADAMW_NT_WIRE, out.p, out.m, out.v, out.w, out.g, N, &k);
        int ok = 1;
        for (size_t i = 0; i < N && ok; i++)
            ok =
                (float_bits(out.p[i]) == float_bits(in.p[i]) ||
                 (isnan(in.p[i]) && (float_bits(out.p[i]) == (float_bits(in.p[i]) | 0x400000u)))) &&
                out.w[i] == bf16_from_float(out.p[i]);
        check(ok,
              "%s kernel: lr=0 keeps p (NaN quieted) and wire == bf16_from_float(p) on edge values",
              adamw_isa_name((adamw_isa)isa));
    }
    state_free(&in), state_free(&scalar), state_free(&out);
}

// 1, 2 and 3 OpenMP threads (different chunk boundaries) give the same bits, on every path.
static void thread_counts(void) {
    size_t n = 1000003;
    int off[5] = {3, 3, 3, 0, 3};
    state in, base, out;
    state_alloc(&in, n, off), state_alloc(&base, n, off), state_alloc(&out, n, off);
    state_fill(&in, 42);
    state_copy(&base, &in);
    reference(base.p, base.m, base.v, base.w, base.g, n, &HP[1]);
    int saved = omp_get_max_threads();
    for (int isa = 0; isa < ADAMW_ISA_COUNT; isa++) {
        if (!adamw_isa_available((adamw_isa)isa)) continue;
        for (int t = 1; t <= 3; t++) {
            omp_set_num_threads(t);
            state_copy(&out, &in);
            adamw_update_ex(out.p, out.m, out.v, out.w, out.g, n, &HP[1], (adamw_isa)isa,
                            ADAMW_NT_ALL);
            size_t d = first_difference(&out, &base, 0);
            check(d == n, "%s with %d thread%s == reference, bitwise (n=%zu)",
                  adamw_isa_name((adamw_isa)isa), t, t > 1 ? "s" : "", n);
            if (d != n) describe(&out, &base, d, "threads", "ref");
        }
    }
    omp_set_num_threads(saved);
    state_free(&in), state_free(&base), state_free(&out);
}

// One call over the whole array vs three uneven shards with odd boundaries (as optimizer ranks
// would own them), over 12 steps, with different paths on the two sides: the same bits.
static void sharding_invariance(void) {
    size_t n = 1000003, cut[4] = {0, 333331, 333331 + 500009, 1000003};
    int off[5] = {0, 0, 0, 0, 0};
    state in, whole, pieces;
    state_alloc(&in, n, off), state_alloc(&whole, n, off), state_alloc(&pieces, n, off);
    state_fill(&in, 7);
    for (int isa = 0; isa < ADAMW_ISA_COUNT; isa++) {
        if (!adamw_isa_available((adamw_isa)isa)) continue;
        adamw_isa other = adamw_isa_default(); // the best path, on the shards
        state_copy(&whole, &in), state_copy(&pieces, &in);
        uint64_t seed = 5;
        for (int step = 1; step <= 12; step++) {
            adamw_params hp = HP[0];
            hp.step = step;
            hp.grad_scale = 0.5f + (float)rng_unit(&seed);
            for (size_t i = 0; i < n; i++) whole.g[i] = pieces.g[i] = wild(&seed, 0);
            adamw_update_ex(whole.p, whole.m, whole.v, whole.w, whole.g, n, &hp, (adamw_isa)isa,
                            ADAMW_NT_NONE);
            for (int k = 0; k < 3; k++) {
                size_t lo = cut[k], len = cut[k + 1] - cut[k];
                adamw_update_ex(pieces.p + lo, pieces.m + lo, pieces.v + lo, pieces.w + lo,
                                pieces.g + lo, len, &hp, other, ADAMW_NT_WIRE);
            }
        }
        size_t d = first_difference(&whole, &pieces, 0);
        check(d == n,
              "12 steps: %s in one call == %s on 3 shards [0,333331,833340,1000003), bitwise",
              adamw_isa_name((adamw_isa)isa), adamw_isa_name(other));
        if (d != n) describe(&whole, &pieces, d, "whole", "shards");
    }
    state_free(&in), state_free(&whole), state_free(&pieces);
}

// The SIMD conversions vs bf16_from_float: the named edge cases, then every sign/exponent/top
// mantissa pattern with low halves that sit below, on and above the rounding tie.
static void bf16_conversions(void) {
    static const uint32_t named[] = {
        0x3f800000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, // 1, ties to even, near ties
        0x7f800000, 0xff800000,                                     // +-Inf
        0x7f800001, 0xff800001, 0x7fc00000, 0x7fffffff, 0xffffffff, // NaNs, low and full payloads
        0x7f808000, 0x7fbfffff,                         // NaNs whose rounding would carry
        0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, // max float rounds to Inf; ties
        0x00010000, 0x00008000, 0x00018000, 0x00000001, 0x807fffff, // subnormals, ties
        0x00000000, 0x80000000, 0x00800000,                         // zeros, min normal
    };
    enum { NAMED = sizeof named / sizeof named[0] };
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    enum { LOWS = sizeof lows / sizeof lows[0] };
    size_t n = NAMED + 65536 * LOWS + 3; // + 3: not a multiple of the vector width
    float *x = malloc(n * sizeof(float));
    bf16 *want = malloc(n * sizeof(bf16)), *got = malloc(n * sizeof(bf16));
    for (size_t i = 0; i < NAMED; i++) x[i] = bits_to_float(named[i]);
    for (size_t i = 0; i < 65536 * LOWS; i++)
        x[NAMED + i] = bits_to_float(((uint32_t)(i / LOWS) << 16) | lows[i % LOWS]);
    for (size_t i = NAMED + 65536 * LOWS; i < n; i++) x[i] = bits_to_float(0x3f818000);
    for (size_t i = 0; i < n; i++) want[i] = bf16_from_float(x[i]);
    check(want[1] == 0x3f80 && want[2] == 0x3f82 && want[14] == 0x7f80 && want[7] == 0x7fc0 &&
              want[13] == 0x7fff && want[19] == 0x0000,
          "bf16_from_float itself: ties to even, max float -> Inf, NaN stays NaN, tiny tie -> 0");
    for (int isa = 0; isa < ADAMW_ISA_COUNT; isa++) {
        if (!adamw_isa_available((adamw_isa)isa)) continue;
        static const size_t lens[] = {1, 7, 15, 16, 17};
        for (size_t start = 0; start < 3; start++) { // misaligned starts, every named value first
            memset(got, 0, n * sizeof(bf16));
            adamw_to_bf16((adamw_isa)isa, got + start, x + start, n - start);
            size_t bad = n;
            for (size_t i = start; i < n && bad == n; i++)
                if (got[i] != want[i]) bad = i;
            check(bad == n,
                  "%s bf16 conversion == bf16_from_float on %zu values (ties, NaN, Inf, "
                  "subnormals, max float), start %zu",
                  adamw_isa_name((adamw_isa)isa), n - start, start);
            if (bad != n)
                printf("    at [%zu]: x=%08x got %04x want %04x\n", bad, float_bits(x[bad]),
                       got[bad], want[bad]);
        }
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) { // tails write nothing past n
            bf16 buf[40];
            for (int i = 0; i < 40; i++) buf[i] = 0x5555;
            adamw_to_bf16((adamw_isa)isa, buf + 1, x, lens[li]);
            int ok = buf[0] == 0x5555 && buf[1 + lens[li]] == 0x5555;
            for (size_t i = 0; i < lens[li]; i++) ok &= buf[1 + i] == want[i];
            check(ok, "%s bf16 conversion of %zu values writes exactly them",
                  adamw_isa_name((adamw_isa)isa), lens[li]);
        }
    }
    free(x), free(want), free(got);
}

// Kernel tails write nothing outside [0, n).
static void no_stray_writes(void) {
    for (int isa = 0; isa < ADAMW_ISA_COUNT; isa++) {
        if (!adamw_isa_available((adamw_isa)isa)) continue;
        int ok = 1;
        for (size_t n = 0; n <= 40 && ok; n++)
            for (int o = 0; o < 16 && ok; o++) {
                float p[80], m[80], v[80], g[80];
                bf16 w[80];
                for (int i = 0; i < 80; i++) p[i] = m[i] = v[i] = g[i] = -7.0f, w[i] = 0x5555;
                adamw_consts k;
                adamw_consts_init(&k, &HP[0]);
                adamw_kernel((adamw_isa)isa, ADAMW_NT_ALL, p + o, m + o, v + o, w + o, g + o, n,
                             &k);
                for (int i = 0; i < 80; i++)
                    if (i < o || i >= o + (int)n)
                        ok &= p[i] == -7.0f && m[i] == -7.0f && v[i] == -7.0f && w[i] == 0x5555;
            }
        check(ok, "%s kernel writes only [0, n) (n = 0..40, 16 alignments)",
              adamw_isa_name((adamw_isa)isa));
    }
}

// The chunks cover [0, n) in order, inner boundaries on 64-byte lines, balanced within a line
// (+ the head); the first touch and the update use the same ones.
static void chunking(void) {
    int ok = 1;
    static const size_t ns[] = {0, 1, 15, 16, 17, 100, 4096, 32768, 1000003, 123456789};
    for (size_t a = 0; a < 16 && ok; a++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] && ok; ni++)
            for (int T = 1; T <= 67 && ok; T += (T < 8 ? 1 : 29)) {
                const char *base = (const char *)(uintptr_t)(0x100000 + 4 * a);
                size_t prev = 0, lo, hi, smallest = (size_t)-1, largest = 0;
                for (int t = 0; t < T; t++) {
                    adamw_chunk(base, ns[ni], T, t, &lo, &hi);
                    ok &= lo == prev && hi >= lo;
                    if (t > 0 && lo < ns[ni]) ok &= ((uintptr_t)(base + 4 * lo) & 63) == 0;
                    if (t > 0 && t < T - 1) {
                        smallest = hi - lo < smallest ? hi - lo : smallest;
                        largest = hi - lo > largest ? hi - lo : largest;
                    }
                    prev = hi;
                }
                ok &= prev == ns[ni];
                if (T > 2) ok &= largest - smallest <= 16;
                if (!ok) printf("    chunking broke: n=%zu T=%d misalignment %zu\n", ns[ni], T, a);
            }
    check(ok,
          "adamw_chunk: contiguous cover of [0,n), 64-byte inner boundaries, balanced within 16");
    ok = adamw_threads_for(ADAMW_PARALLEL_MIN - 1, 64) == 1 &&
         adamw_threads_for(1 << 30, 64) == 64 && adamw_threads_for(ADAMW_PARALLEL_MIN, 64) == 8;
    check(ok, "adamw_threads_for: 1 thread below ADAMW_PARALLEL_MIN, >= 4096 elements a thread");
    float *x = malloc(1000003 * sizeof(float));
    for (size_t i = 0; i < 1000003; i++) x[i] = 1.0f;
    adamw_first_touch(x, 1000003);
    ok = 1;
    for (size_t i = 0; i < 1000003; i++) ok &= float_bits(x[i]) == 0;
    check(ok, "adamw_first_touch zeroes the whole array");
    free(x);
}

int main(void) {
    printf("AdamW paths on this machine:");
    for (int isa = 0; isa < ADAMW_ISA_COUNT; isa++)
        if (adamw_isa_available((adamw_isa)isa)) printf(" %s", adamw_isa_name((adamw_isa)isa));
    printf(" (default %s, streaming stores: %s)\n", adamw_isa_name(adamw_isa_default()),
           adamw_nt_name(adamw_nt_default()));
    paths_vs_reference();
    special_values();
    thread_counts();
    sharding_invariance();
    bf16_conversions();
    no_stray_writes();
    chunking();
    return tests_summary();
}
