// AdamW, AVX2: 8 floats a step, the same operations in the same order as adamw_kernel_scalar
// (explicit intrinsics, never an FMA: the target is "avx2" alone, so none can even be emitted),
// hence the scalar path's bits. Head and tail go through an 8-lane scratch buffer, so no scalar
// arithmetic is compiled here either.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off") // see adamw.c
#endif

#include "kernels/adamw.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TARGET __attribute__((target("avx2")))
#define INLINE static inline __attribute__((always_inline)) TARGET

typedef struct {
    __m256 step_size, bc2_sqrt, decay, one_minus_b1, one_minus_b2, beta2, eps, scale;
} consts8;

// bf16_from_float on 8 lanes (see adamw_avx512.c), narrowed to 8 x 16 bits in order.
INLINE __m128i bf16x8(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i top = _mm256_srli_epi32(u, 16);
    __m256i bias =
        _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(top, _mm256_set1_epi32(1)));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    __m256i bits = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
    // Every lane is in [0, 0xffff], so the saturating pack is exact.
    return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
}

INLINE void step8(const consts8 *k, __m256 *p, __m256 *m, __m256 *v, __m256 g) {
    __m256 grad = _mm256_mul_ps(g, k->scale);
    __m256 param = _mm256_mul_ps(*p, k->decay);
    __m256 mi = _mm256_add_ps(*m, _mm256_mul_ps(k->one_minus_b1, _mm256_sub_ps(grad, *m)));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(*v, k->beta2),
                              _mm256_mul_ps(_mm256_mul_ps(k->one_minus_b2, grad), grad));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), k->bc2_sqrt), k->eps);
    *p = _mm256_sub_ps(param, _mm256_mul_ps(k->step_size, _mm256_div_ps(mi, denom)));
    *m = mi;
    *v = vi;
}

// Fewer than 8 elements: copied through a scratch buffer, run as one full step.
INLINE void partial8(const consts8 *k, size_t r, float *p, float *m, float *v, bf16 *wire,
                     const float *g) {
    float P[8] = {0}, M[8] = {0}, V[8] = {0}, G[8] = {0};
    bf16 W[8];
    memcpy(P, p, r * sizeof(float)), memcpy(M, m, r * sizeof(float));
    memcpy(V, v, r * sizeof(float)), memcpy(G, g, r * sizeof(float));
    __m256 Pv = _mm256_loadu_ps(P), Mv = _mm256_loadu_ps(M), Vv = _mm256_loadu_ps(V);
    step8(k, &Pv, &Mv, &Vv, _mm256_loadu_ps(G));
    _mm256_storeu_ps(P, Pv), _mm256_storeu_ps(M, Mv), _mm256_storeu_ps(V, Vv);
    _mm_storeu_si128((__m128i *)W, bf16x8(Pv));
    memcpy(p, P, r * sizeof(float)), memcpy(m, M, r * sizeof(float));
    memcpy(v, V, r * sizeof(float));
    if (wire) memcpy(wire, W, r * sizeof(bf16));
}

static int aligned(const void *x, uintptr_t a) {
    return ((uintptr_t)x & (a - 1)) == 0;
}

TARGET void adamw_kernel_avx2(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                              size_t n, const adamw_consts *c) {
    consts8 k = {_mm256_set1_ps(c->step_size),    _mm256_set1_ps(c->bc2_sqrt),
                 _mm256_set1_ps(c->decay),        _mm256_set1_ps(c->one_minus_b1),
                 _mm256_set1_ps(c->one_minus_b2), _mm256_set1_ps(c->beta2),
                 _mm256_set1_ps(c->eps),          _mm256_set1_ps(c->grad_scale)};
    size_t i = ((32 - ((uintptr_t)p & 31)) & 31) / sizeof(float); // up to p's 32-byte boundary
    if (i > n) i = n;
    if (i) partial8(&k, i, p, m, v, wire, g);
    int nt_p = nt == ADAMW_NT_ALL && aligned(p + i, 32);
    int nt_m = nt == ADAMW_NT_ALL && aligned(m + i, 32);
    int nt_v = nt == ADAMW_NT_ALL && aligned(v + i, 32);
    int nt_w = wire && nt != ADAMW_NT_NONE && aligned(wire + i, 16);
    for (; i + 8 <= n; i += 8) {
        __m256 P = _mm256_load_ps(p + i), M = _mm256_loadu_ps(m + i);
        __m256 V = _mm256_loadu_ps(v + i), G = _mm256_loadu_ps(g + i);
        step8(&k, &P, &M, &V, G);
        if (nt_p)
            _mm256_stream_ps(p + i, P);
        else
            _mm256_store_ps(p + i, P);
        if (nt_m)
            _mm256_stream_ps(m + i, M);
        else
            _mm256_storeu_ps(m + i, M);
        if (nt_v)
            _mm256_stream_ps(v + i, V);
        else
            _mm256_storeu_ps(v + i, V);
        if (!wire) continue; // no bf16 copy wanted (the GPU rounds the streamed master)
        __m128i W = bf16x8(P);
        if (nt_w)
            _mm_stream_si128((__m128i *)(wire + i), W);
        else
            _mm_storeu_si128((__m128i *)(wire + i), W);
    }
    if (i < n) partial8(&k, n - i, p + i, m + i, v + i, wire ? wire + i : NULL, g + i);
    if (nt_p || nt_m || nt_v || nt_w) _mm_sfence(); // see adamw_avx512.c
}

TARGET void adamw_to_bf16_avx2(bf16 *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), bf16x8(_mm256_loadu_ps(src + i)));
    if (i < n) {
        float x[8] = {0};
        bf16 w[8];
        memcpy(x, src + i, (n - i) * sizeof(float));
        _mm_storeu_si128((__m128i *)w, bf16x8(_mm256_loadu_ps(x)));
        memcpy(dst + i, w, (n - i) * sizeof(bf16));
    }
}

#endif
