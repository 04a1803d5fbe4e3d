// AdamW, AVX-512: 16 floats a step, the same operations in the same order as
// adamw_kernel_scalar (explicit mul/add/sub/div/sqrt intrinsics, never an FMA), so the bits
// are the scalar path's. Head and tail are masked vector steps, not scalar code. Only the
// functions carry target("avx512f,avx512bw"); the rest of the build stays portable, and
// adamw_isa_available() checks the CPU before anything here runs.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off") // see adamw.c: GCC fuses even intrinsics otherwise
#endif

#include "kernels/adamw.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdint.h>

#define TARGET __attribute__((target("avx512f,avx512bw")))
#define INLINE static inline __attribute__((always_inline)) TARGET

typedef struct {
    __m512 step_size, bc2_sqrt, decay, one_minus_b1, one_minus_b2, beta2, eps, scale;
} consts16;

// bf16_from_float on 16 lanes, before the narrowing to 16 bits: round to nearest even by
// adding 0x7fff + lsb; a NaN keeps its top bits and is made quiet.
INLINE __m512i bf16_bits(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i top = _mm512_srli_epi32(u, 16);
    __m512i bias =
        _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(top, _mm512_set1_epi32(1)));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __m512i magnitude = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
}

// One step of the scalar loop body, on 16 lanes.
INLINE void step16(const consts16 *k, __m512 *p, __m512 *m, __m512 *v, __m512 g) {
    __m512 grad = _mm512_mul_ps(g, k->scale);
    __m512 param = _mm512_mul_ps(*p, k->decay);
    __m512 mi = _mm512_add_ps(*m, _mm512_mul_ps(k->one_minus_b1, _mm512_sub_ps(grad, *m)));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(*v, k->beta2),
                              _mm512_mul_ps(_mm512_mul_ps(k->one_minus_b2, grad), grad));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), k->bc2_sqrt), k->eps);
    *p = _mm512_sub_ps(param, _mm512_mul_ps(k->step_size, _mm512_div_ps(mi, denom)));
    *m = mi;
    *v = vi;
}

INLINE void masked16(const consts16 *k, __mmask16 lanes, float *p, float *m, float *v, bf16 *wire,
                     const float *g) {
    __m512 P = _mm512_maskz_loadu_ps(lanes, p), M = _mm512_maskz_loadu_ps(lanes, m);
    __m512 V = _mm512_maskz_loadu_ps(lanes, v), G = _mm512_maskz_loadu_ps(lanes, g);
    step16(k, &P, &M, &V, G);
    _mm512_mask_storeu_ps(p, lanes, P);
    _mm512_mask_storeu_ps(m, lanes, M);
    _mm512_mask_storeu_ps(v, lanes, V);
    if (wire) _mm512_mask_cvtepi32_storeu_epi16(wire, lanes, bf16_bits(P));
}

static int aligned(const void *x, uintptr_t a) {
    return ((uintptr_t)x & (a - 1)) == 0;
}

TARGET void adamw_kernel_avx512(adamw_nt nt, float *p, float *m, float *v, bf16 *wire,
                                const float *g, size_t n, const adamw_consts *c) {
    consts16 k = {_mm512_set1_ps(c->step_size),    _mm512_set1_ps(c->bc2_sqrt),
                  _mm512_set1_ps(c->decay),        _mm512_set1_ps(c->one_minus_b1),
                  _mm512_set1_ps(c->one_minus_b2), _mm512_set1_ps(c->beta2),
                  _mm512_set1_ps(c->eps),          _mm512_set1_ps(c->grad_scale)};
    // Head: a masked step up to p's first 64-byte line, so the main loop's p is aligned.
    size_t i = ((64 - ((uintptr_t)p & 63)) & 63) / sizeof(float);
    if (i > n) i = n;
    if (i) masked16(&k, (__mmask16)((1u << i) - 1), p, m, v, wire, g);
    // Streaming stores need aligned addresses: each array streams only if it is aligned here
    // (the optimizer's are: 2 MiB allocations and 64-byte shm slots).
    int nt_p = nt == ADAMW_NT_ALL && aligned(p + i, 64);
    int nt_m = nt == ADAMW_NT_ALL && aligned(m + i, 64);
    int nt_v = nt == ADAMW_NT_ALL && aligned(v + i, 64);
    int nt_w = wire && nt != ADAMW_NT_NONE && aligned(wire + i, 32);
    for (; i + 16 <= n; i += 16) {
        __m512 P = _mm512_load_ps(p + i), M = _mm512_loadu_ps(m + i);
        __m512 V = _mm512_loadu_ps(v + i), G = _mm512_loadu_ps(g + i);
        step16(&k, &P, &M, &V, G);
        if (nt_p)
            _mm512_stream_ps(p + i, P);
        else
            _mm512_store_ps(p + i, P);
        if (nt_m)
            _mm512_stream_ps(m + i, M);
        else
            _mm512_storeu_ps(m + i, M);
        if (nt_v)
            _mm512_stream_ps(v + i, V);
        else
            _mm512_storeu_ps(v + i, V);
        if (!wire) continue; // no bf16 copy wanted (the GPU rounds the streamed master)
        __m256i W = _mm512_cvtepi32_epi16(bf16_bits(P));
        if (nt_w)
            _mm256_stream_si256((__m256i *)(wire + i), W);
        else
            _mm256_storeu_si256((__m256i *)(wire + i), W);
    }
    if (i < n)
        masked16(&k, (__mmask16)((1u << (n - i)) - 1), p + i, m + i, v + i, wire ? wire + i : NULL,
                 g + i);
    // Streamed lines sit in write-combining buffers: fence them before anyone is told the
    // weights are ready (publish_weights runs right after on this process's main thread).
    if (nt_p || nt_m || nt_v || nt_w) _mm_sfence();
}

TARGET void adamw_to_bf16_avx512(bf16 *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtepi32_epi16(bf16_bits(_mm512_loadu_ps(src + i))));
    if (i < n) {
        __mmask16 lanes = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, lanes,
                                          bf16_bits(_mm512_maskz_loadu_ps(lanes, src + i)));
    }
}

#endif
