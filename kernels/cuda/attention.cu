// Causal grouped-query flash attention (FlashAttention-2 scheme) for bf16 q, k, v.
//
// The math is exactly kernels/cpu/attention.c: scale 1/sqrt(hd), query head h reads kv head
// h / (H / KV), lse = natural-log log-sum-exp of each row's scaled scores. Memory is O(T): a
// CTA holds one tile of 64 or 128 query (or key) rows and streams the other side through
// shared memory; the T x T probabilities are recomputed from lse in the backward, never stored.
//
// Two paths, each checked against the CPU reference by tests/test_attention_cuda.c:
// - tensor cores (default): mma.sync m16n8k16 bf16 with fp32 accumulation, ldmatrix from
//   padded shared memory, cp.async double buffering. head_dim is padded up to 32, 64 or 128
//   with zeros in shared memory, so every even hd <= 128 that is a multiple of 8 runs on it.
// - simple (MT_ATTENTION_SIMPLE=1, or an hd / pointer alignment the tensor path cannot take):
//   one warp per output row, fp32 CUDA-core math, scalar loads. Slow, but easy to trust.
//
// Backward, both paths: D = rowsum(dout * out) into scratch, then dq by query tile and dk, dv
// by key tile in two separate kernels. Every output element has one owner and every sum runs
// in a fixed order, so results are bitwise reproducible (no atomics).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr int WARPS = 4, THREADS = 32 * WARPS; // each warp owns 16*MT rows of a CTA's tile

struct Dims {
    int B, T, H, KV, hd, group;
    float scale;      // 1/sqrt(hd)
    float scale_log2; // scale * log2(e): the kernels use exp2
};

// ---- bf16 and PTX helpers ------------------------------------------------------------------

__device__ __forceinline__ float bf2f(bf16 x) {
    return __uint_as_float((uint32_t)x << 16);
}
__device__ __forceinline__ bf16 f2bf(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Two floats as one bf16x2 register: lo in the low half (the lower column of an MMA fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    return (uint32_t)f2bf(lo) | ((uint32_t)f2bf(hi) << 16);
}

// 2^x in one MUFU op; flushing denormal results to zero costs nothing that matters here
// (probabilities below 2^-126) and saves exp2f's rescaling. exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async8(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most N of the most recently committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// c (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col).
// Fragments, with g = lane / 4 and t = lane % 4: a = {(g, 2t..), (g+8, 2t..), (g, 2t+8..),
// (g+8, 2t+8..)}; b = {(k 2t.., n g), (k 2t+8.., n g)}; c = {(g, 2t), (g, 2t+1), (g+8, 2t),
// (g+8, 2t+1)}.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- warp-level GEMM pieces --------------------------------------------------------------
// Shared-memory tiles are row-major with LD = HDP + 8 elements per row: the 16-byte pad puts
// the 8 rows of each ldmatrix 8x8 block in distinct banks. A warp owns MT 16-row m-tiles, so
// that every B fragment read from shared memory feeds MT MMAs: with one m-tile a warp is
// limited by shared-memory bandwidth rather than by the tensor cores.

// A fragment for k-step ks of a 16-row block at sA (row-major [16][k]).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16 *sA, int ld, int ks, int lane) {
    ldsm_x4(a, sA + (lane & 15) * ld + (lane >> 4) * 8 + ks * 16);
}

// acc[mt] (16 x 8*NT) += A[mt] . B^T at k-step ks, for B stored row-major as [n][k] (the K
// tile of Q K^T). One x4 ldmatrix gives b0, b1 of two adjacent n-tiles.
template <int MT, int NT>
__device__ __forceinline__ void mma_nt_step(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4],
                                            const bf16 *sB, int ld, int ks, int lane) {
    const bf16 *p = sB + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8 + ks * 16;
#pragma unroll
    for (int np = 0; np < NT / 2; np++) {
        uint32_t b[4];
        ldsm_x4(b, p + np * 16 * ld);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma16816(acc[mt][2 * np], a[mt], b[0], b[1]);
            mma16816(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
    }
}

// A (MT m-tiles, KS k-steps) already in registers.
template <int MT, int KS, int NT>
__device__ __forceinline__ void mma_rs_nt(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][KS][4],
                                          const bf16 *sB, int ld, int lane) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t ak[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) ak[mt][i] = a[mt][ks][i];
        mma_nt_step<MT, NT>(acc, ak, sB, ld, ks, lane);
    }
}

// A read from shared memory (MT m-tiles of 16 rows from sA) one k-step at a time, to save
// registers.
template <int MT, int KS, int NT>
__device__ __forceinline__ void mma_ss_nt(float (&acc)[MT][NT][4], const bf16 *sA, const bf16 *sB,
                                          int ld, int lane) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) load_a(a[mt], sA + mt * 16 * ld, ld, ks, lane);
        mma_nt_step<MT, NT>(acc, a, sB, ld, ks, lane);
    }
}

// acc[mt] (16 x 8*NT) += A[mt] . B for B stored row-major as [k][n] (the V tile of P V): the
// transposing ldmatrix turns rows of B into "col" fragments.
template <int MT, int KS, int NT>
__device__ __forceinline__ void mma_rs_t(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][KS][4],
                                         const bf16 *sB, int ld, int lane) {
    const bf16 *p = sB + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4_t(b, p + ks * 16 * ld + np * 16);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816(acc[mt][2 * np], a[mt][ks], b[0], b[1]);
                mma16816(acc[mt][2 * np + 1], a[mt][ks], b[2], b[3]);
            }
        }
    }
}

// 16 x 16*KS accumulator blocks (2*KS n-tiles each) as bf16 A fragments: an accumulator's
// (row, column) layout is exactly an A fragment's, two n-tiles per k-step.
template <int MT, int KS>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[MT][KS][4],
                                         const float (&acc)[MT][2 * KS][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            a[mt][ks][0] = pack_bf16(acc[mt][2 * ks][0], acc[mt][2 * ks][1]);
            a[mt][ks][1] = pack_bf16(acc[mt][2 * ks][2], acc[mt][2 * ks][3]);
            a[mt][ks][2] = pack_bf16(acc[mt][2 * ks + 1][0], acc[mt][2 * ks + 1][1]);
            a[mt][ks][3] = pack_bf16(acc[mt][2 * ks + 1][2], acc[mt][2 * ks + 1][3]);
        }
    }
}

// ---- tiles: global <-> shared ------------------------------------------------------------

// Rows [row0, row0 + ROWS) of a [T, stride] matrix (first hd columns) into shared [ROWS][LD]
// through cp.async. Rows >= T and columns in [hd, HDP) are zeroed, so that the MMAs need no
// tail cases: zero rows of q/k/v/dout give finite scores that the masks then drop, and zero
// columns add nothing to dot products. hd is a multiple of the chunk, so none straddles hd.
// A chunk is 16 bytes (uint4) when hd % 8 == 0; for hd % 8 == 4 (e.g. 100 for dim 3200 / 32
// heads) every other head starts only 8-byte aligned, so rows move in 8-byte chunks (uint2).
template <typename V> __device__ __forceinline__ void cp_async_chunk(void *dst, const void *src);
template <> __device__ __forceinline__ void cp_async_chunk<uint4>(void *dst, const void *src) {
    cp_async16(dst, src);
}
template <> __device__ __forceinline__ void cp_async_chunk<uint2>(void *dst, const void *src) {
    cp_async8(dst, src);
}

template <int HDP, int ROWS, typename V>
__device__ __forceinline__ void load_tile_chunks(bf16 *dst, const bf16 *src, int row0, int T,
                                                 long stride, int hd) {
    constexpr int LD = HDP + 8, E = sizeof(V) / sizeof(bf16), CPR = HDP / E;
    for (int c = threadIdx.x; c < ROWS * CPR; c += THREADS) {
        int r = c / CPR, col = (c % CPR) * E;
        bf16 *d = dst + r * LD + col;
        if (row0 + r < T && col < hd)
            cp_async_chunk<V>(d, src + (long)(row0 + r) * stride + col);
        else
            *(V *)d = V{};
    }
}

template <int HDP, int ROWS>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int row0, int T, long stride,
                                          int hd) {
    if ((hd & 7) == 0)
        load_tile_chunks<HDP, ROWS, uint4>(dst, src, row0, T, stride, hd);
    else
        load_tile_chunks<HDP, ROWS, uint2>(dst, src, row0, T, stride, hd);
}

// The staged rows of store_rows out to global memory, in chunks as load_tile reads them.
template <int HDP, int ROWS, typename V>
__device__ __forceinline__ void store_chunks(bf16 *dst, long stride, int row0, int T, int hd,
                                             const bf16 *stage, int lane) {
    constexpr int LD = HDP + 8, E = sizeof(V) / sizeof(bf16), CPR = HDP / E;
    for (int c = lane; c < ROWS * CPR; c += 32) {
        int r = c / CPR, col = (c % CPR) * E;
        if (row0 + r < T && col < hd)
            *(V *)(dst + (long)(row0 + r) * stride + col) = *(const V *)(stage + r * LD + col);
    }
}

// Writes a warp's MT x 16 x HDP fp32 accumulators (row r times mul[mt][r / 8]) as bf16 rows
// [row0, row0 + 16*MT) of a [T, stride] matrix, staged through the warp's own 16*MT rows of
// shared memory (stage) so that the global stores are 16-byte and coalesced.
template <int HDP, int MT>
__device__ __forceinline__ void store_rows(bf16 *dst, long stride, int row0, int T, int hd,
                                           const float (&acc)[MT][HDP / 8][4],
                                           const float (&mul)[MT][2], bf16 *stage, int lane) {
    constexpr int LD = HDP + 8;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < HDP / 8; nt++) {
            bf16 *s = stage + (mt * 16 + g) * LD + nt * 8 + 2 * t;
            *(uint32_t *)s = pack_bf16(acc[mt][nt][0] * mul[mt][0], acc[mt][nt][1] * mul[mt][0]);
            *(uint32_t *)(s + 8 * LD) =
                pack_bf16(acc[mt][nt][2] * mul[mt][1], acc[mt][nt][3] * mul[mt][1]);
        }
    }
    __syncwarp();
    if ((hd & 7) == 0)
        store_chunks<HDP, 16 * MT, uint4>(dst, stride, row0, T, hd, stage, lane);
    else
        store_chunks<HDP, 16 * MT, uint2>(dst, stride, row0, T, hd, stage, lane);
}

// Key tiles of bc keys [0, nkt) that the query rows [q0, q0 + rows) attend to.
__device__ __forceinline__ int key_tiles(int q0, int rows, int T, int bc) {
    return (min(q0 + rows, T) - 1) / bc + 1;
}

// ---- tensor-core forward -----------------------------------------------------------------

// One online-softmax step over a 16 x 8*NS score block (two rows per thread: row_lo and
// row_lo + 8). s holds raw scores on entry and unnormalized probabilities on exit; o and l are
// rescaled to the new running max m (scaled, base-2 units). With mask set, keys after the row
// drop.
template <int NS, int NO>
__device__ __forceinline__ void softmax_step(float (&s)[NS][4], float (&o)[NO][4], float (&m)[2],
                                             float (&l)[2], float scale_log2, bool mask, int row_lo,
                                             int key0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY; // of the raw scores: scale_log2 > 0 keeps the order
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = key0 + nt * 8 + 2 * (lane & 3) + e;
                if (mask && key > row_lo + 8 * r) s[nt][2 * r + e] = -INFINITY;
                mx = fmaxf(mx, s[nt][2 * r + e]);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Every row meets key 0 in the first tile, so mx is finite from then on (a later tile
        // may mask a whole row: mx stays m) and exp2(-inf - mx) = 0 on the first tile.
        mx = fmaxf(m[r], mx * scale_log2);
        float alpha = fast_exp2(m[r] - mx);
        m[r] = mx;
        l[r] *= alpha;
#pragma unroll
        for (int nt = 0; nt < NO; nt++) {
            o[nt][2 * r] *= alpha;
            o[nt][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = fast_exp2(fmaf(s[nt][2 * r + e], scale_log2, -mx));
                s[nt][2 * r + e] = p;
                l[r] += p; // this thread's partial row sum; the quad reduces it at the end
            }
        }
    }
}

// One CTA per (b, h, 64*MT-query tile); each warp owns 16*MT query rows and streams the
// BC-key K/V tiles up to its diagonal through a two-stage cp.async pipeline.
template <int HDP, int MT, int BC>
__global__ void __launch_bounds__(THREADS)
    attn_fwd_tc(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NS = BC / 8, BR = 16 * WARPS * MT;
    constexpr bool QREG = HDP <= 64; // q's A fragments stay in registers when they fit
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem;
    bf16 *sKV = sQ + BR * LD; // stage s: K at sKV + 2*s*BC*LD, V right after it

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR; // the longest rows first: load balance
    const int wr0 = q0 + warp * 16 * MT, wr1 = wr0 + 16 * MT - 1; // this warp's rows
    const int nkt = key_tiles(q0, BR, d.T, BC);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const bf16 *qb = q + (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;
    bf16 *sQw = sQ + warp * 16 * MT * LD;

    load_tile<HDP, BR>(sQ, qb, q0, d.T, qs, d.hd);
    load_tile<HDP, BC>(sKV, kb, 0, d.T, kvs, d.hd);
    load_tile<HDP, BC>(sKV + BC * LD, vb, 0, d.T, kvs, d.hd);
    cp_async_commit();

    uint32_t qf[MT][KS][4];
    float o[MT][NO][4] = {}, m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
    for (int kt = 0; kt < nkt; kt++) {
        const bf16 *sK = sKV + (kt & 1) * 2 * BC * LD, *sV = sK + BC * LD;
        if (kt + 1 < nkt) { // prefetch into the other stage, freed by the last barrier
            bf16 *nK = sKV + ((kt + 1) & 1) * 2 * BC * LD;
            load_tile<HDP, BC>(nK, kb, (kt + 1) * BC, d.T, kvs, d.hd);
            load_tile<HDP, BC>(nK + BC * LD, vb, (kt + 1) * BC, d.T, kvs, d.hd);
        }
        cp_async_commit(); // possibly empty: keeps the wait count uniform
        cp_async_wait<1>();
        __syncthreads();
        if constexpr (QREG) {
            if (kt == 0)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int ks = 0; ks < KS; ks++)
                        load_a(qf[mt][ks], sQw + mt * 16 * LD, LD, ks, lane);
        }
        const int key0 = kt * BC;
        if (key0 <= wr1) { // else every key of the tile comes after every row of this warp
            float s[MT][NS][4] = {};
            if constexpr (QREG)
                mma_rs_nt<MT, KS, NS>(s, qf, sK, LD, lane);
            else
                mma_ss_nt<MT, KS, NS>(s, sQw, sK, LD, lane);
            const bool mask = key0 + BC - 1 > wr0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                softmax_step<NS, NO>(s[mt], o[mt], m[mt], l[mt], d.scale_log2, mask,
                                     wr0 + mt * 16 + (lane >> 2), key0, lane);
            uint32_t pf[MT][BC / 16][4];
            acc_to_a<MT, BC / 16>(pf, s);
            mma_rs_t<MT, BC / 16, NO>(o, pf, sV, LD, lane);
        }
        __syncthreads(); // this stage is refilled two iterations on
    }

    float inv[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float sum = l[mt][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            inv[mt][r] = 1.0f / sum;
            int row = wr0 + mt * 16 + (lane >> 2) + 8 * r;
            if ((lane & 3) == 0 && row < d.T)
                lse[((long)b * d.H + h) * d.T + row] = (m[mt][r] + log2f(sum)) * LN2;
        }
    }
    // Each warp only ever read its own rows of sQ, so it can reuse them as staging.
    store_rows<HDP, MT>(out + (long)b * d.T * qs + (long)h * d.hd, qs, wr0, d.T, d.hd, o, inv, sQw,
                        lane);
}

// ---- backward: D = rowsum(dout * out) ------------------------------------------------------

// Any hd, any alignment (the simple path): one warp per row (b, t, h), scalar loads. D is laid
// out like lse, [B, H, T].
__global__ void attn_bwd_rowdot(float *D, const bf16 *dout, const bf16 *out, Dims d) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= (long)d.B * d.T * d.H) return;
    const bf16 *g = dout + row * d.hd, *o = out + row * d.hd;
    float s = 0.0f;
    for (int i = lane; i < d.hd; i += 32) s += bf2f(g[i]) * bf2f(o[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    long bt = row / d.H;
    if (lane == 0) D[(bt / d.T * d.H + row % d.H) * d.T + bt % d.T] = s;
}

// The tensor-core path's rows (hd % 8 == 0, 16-byte aligned): 16 lanes per row, one 16-byte
// chunk of dout and out per lane, so that this memory-bound pass runs at full bandwidth.
__global__ void attn_bwd_rowdot16(float *D, const bf16 *dout, const bf16 *out, Dims d) {
    long row = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 16;
    int c = threadIdx.x & 15;
    bool valid = row < (long)d.B * d.T * d.H; // no early return: the shuffles need all lanes
    float s = 0.0f;
    if (valid && c * 8 < d.hd) {
        uint4 g = *(const uint4 *)(dout + row * d.hd + c * 8);
        uint4 o = *(const uint4 *)(out + row * d.hd + c * 8);
        const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s += bf2f((bf16)(gw[i] & 0xffff)) * bf2f((bf16)(ow[i] & 0xffff));
            s += bf2f((bf16)(gw[i] >> 16)) * bf2f((bf16)(ow[i] >> 16));
        }
    }
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    long bt = row / d.H;
    if (valid && c == 0) D[(bt / d.T * d.H + row % d.H) * d.T + bt % d.T] = s;
}

// ---- tensor-core backward: dq --------------------------------------------------------------

// One CTA per (b, h, 64*MT-query tile) streaming BC-key tiles, the forward's shape: dq = scale *
// sum_j dS_ij k_j with dS = P * (dout . v_j - D). q and dout stay in shared memory (re-read each
// key tile) to keep registers for the three accumulators (S, dP, dq).
template <int HDP, int MT, int BC>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dq_tc(bf16 *dq, const bf16 *dout, const float *lse, const float *D, const bf16 *q,
                   const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NS = BC / 8, BR = 16 * WARPS * MT;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem, *sdO = sQ + BR * LD, *sKV = sdO + BR * LD;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const int wr0 = q0 + warp * 16 * MT, wr1 = wr0 + 16 * MT - 1;
    const int nkt = key_tiles(q0, BR, d.T, BC);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long qoff = (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;
    bf16 *sQw = sQ + warp * 16 * MT * LD, *sdOw = sdO + warp * 16 * MT * LD;

    load_tile<HDP, BR>(sQ, q + qoff, q0, d.T, qs, d.hd);
    load_tile<HDP, BR>(sdO, dout + qoff, q0, d.T, qs, d.hd);
    load_tile<HDP, BC>(sKV, kb, 0, d.T, kvs, d.hd);
    load_tile<HDP, BC>(sKV + BC * LD, vb, 0, d.T, kvs, d.hd);
    cp_async_commit();

    // Rows past T: zero q and dout make dS = 1 * (0 - 0) = 0, and they are never stored.
    float lse2[MT][2], Dr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = wr0 + mt * 16 + (lane >> 2) + 8 * r;
            long i = ((long)b * d.H + h) * d.T + row;
            lse2[mt][r] = row < d.T ? lse[i] * LOG2E : 0.0f;
            Dr[mt][r] = row < d.T ? D[i] : 0.0f;
        }
    }

    float acc[MT][NO][4] = {};
    for (int kt = 0; kt < nkt; kt++) {
        const bf16 *sK = sKV + (kt & 1) * 2 * BC * LD, *sV = sK + BC * LD;
        if (kt + 1 < nkt) {
            bf16 *nK = sKV + ((kt + 1) & 1) * 2 * BC * LD;
            load_tile<HDP, BC>(nK, kb, (kt + 1) * BC, d.T, kvs, d.hd);
            load_tile<HDP, BC>(nK + BC * LD, vb, (kt + 1) * BC, d.T, kvs, d.hd);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int key0 = kt * BC;
        if (key0 <= wr1) {
            float s[MT][NS][4] = {}, dp[MT][NS][4] = {};
            mma_ss_nt<MT, KS, NS>(s, sQw, sK, LD, lane);
            mma_ss_nt<MT, KS, NS>(dp, sdOw, sV, LD, lane);
            const bool mask = key0 + BC - 1 > wr0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int nt = 0; nt < NS; nt++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int r = i >> 1, key = key0 + nt * 8 + 2 * (lane & 3) + (i & 1);
                        int row = wr0 + mt * 16 + (lane >> 2) + 8 * r;
                        float p = fast_exp2(s[mt][nt][i] * d.scale_log2 - lse2[mt][r]);
                        if (mask && key > row) p = 0.0f;
                        s[mt][nt][i] = p * (dp[mt][nt][i] - Dr[mt][r]);
                    }
                }
            }
            uint32_t dsf[MT][BC / 16][4];
            acc_to_a<MT, BC / 16>(dsf, s);
            mma_rs_t<MT, BC / 16, NO>(acc, dsf, sK, LD, lane);
        }
        __syncthreads();
    }
    float mul[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) mul[mt][0] = mul[mt][1] = d.scale;
    store_rows<HDP, MT>(dq + qoff, qs, wr0, d.T, d.hd, acc, mul, sQw, lane);
}

// ---- tensor-core backward: dk, dv ----------------------------------------------------------

// One CTA per (b, kv head, 64*MT-key tile); each warp owns 16*MT keys and keeps their dk, dv
// in registers while the query tiles (BQ rows) of every head of the group stream through a
// two-stage pipeline, from the diagonal to T. Computing S^T = K Q^T directly puts the keys on
// the MMA rows, so dv += P^T dout and dk += dS^T q need no cross-warp reduction.
template <int HDP, int MT, int BQ>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dkdv_tc(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                     const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NQ = BQ / 8, KQ = BQ / 16;
    constexpr int BK = 16 * WARPS * MT, STAGE = 2 * BQ * LD; // STAGE: q then dout, in bf16 elements
    static_assert(BK % BQ == 0, "query tiles must start on the key tile's first row");
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = (bf16 *)smem, *sV = sK + BK * LD, *sQdO = sV + BK * LD;
    float *sL = (float *)(sQdO + 2 * STAGE), *sD = sL + 2 * BQ; // lse, D: [stage][BQ]

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.KV, kvh = blockIdx.x % d.KV;
    const int k0 = blockIdx.y * BK; // low key tiles have the most queries: they go first
    const int wk0 = k0 + warp * 16 * MT, wk1 = wk0 + 16 * MT - 1; // this warp's keys
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long kvoff = (long)b * d.T * kvs + (long)kvh * d.hd;
    const int qt0 = k0 / BQ, nqt = (d.T + BQ - 1) / BQ - qt0, items = d.group * nqt;

    // Work item it: query head kvh * group + it / nqt, query tile qt0 + it % nqt.
    auto load_item = [&](int it, int st) {
        int h = kvh * d.group + it / nqt, qbase = (qt0 + it % nqt) * BQ;
        long qoff = (long)b * d.T * qs + (long)h * d.hd;
        bf16 *dst = sQdO + st * STAGE;
        load_tile<HDP, BQ>(dst, q + qoff, qbase, d.T, qs, d.hd);
        load_tile<HDP, BQ>(dst + BQ * LD, dout + qoff, qbase, d.T, qs, d.hd);
        // lse and D go through cp.async too: a plain load here would stall this iteration's
        // compute on global-memory latency.
        for (int i = threadIdx.x; i < BQ; i += THREADS) {
            int row = qbase + i;
            long li = ((long)b * d.H + h) * d.T + row;
            float *l = sL + st * BQ + i, *dd = sD + st * BQ + i;
            if (row < d.T) {
                cp_async4(l, lse + li);
                cp_async4(dd, D + li);
            } else {
                *l = *dd = 0.0f;
            }
        }
    };

    load_tile<HDP, BK>(sK, k + kvoff, k0, d.T, kvs, d.hd);
    load_tile<HDP, BK>(sV, v + kvoff, k0, d.T, kvs, d.hd);
    load_item(0, 0);
    cp_async_commit();

    float dka[MT][NO][4] = {}, dva[MT][NO][4] = {};
    bf16 *sKw = sK + warp * 16 * MT * LD, *sVw = sV + warp * 16 * MT * LD;
    for (int it = 0; it < items; it++) {
        const int st = it & 1;
        if (it + 1 < items) load_item(it + 1, st ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int qbase = (qt0 + it % nqt) * BQ;
        const bf16 *sQ = sQdO + st * STAGE, *sdO = sQ + BQ * LD;
        const float *L = sL + st * BQ, *Dq = sD + st * BQ;
        if (qbase + BQ - 1 >= wk0) { // else every query of the tile precedes this warp's keys
            float s[MT][NQ][4] = {}, dp[MT][NQ][4] = {};
            mma_ss_nt<MT, KS, NQ>(s, sKw, sQ, LD, lane);
            mma_ss_nt<MT, KS, NQ>(dp, sVw, sdO, LD, lane);
            const bool mask = wk1 > qbase || qbase + BQ > d.T;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int col = nt * 8 + 2 * (lane & 3) + (i & 1), row = qbase + col;
                        int key = wk0 + mt * 16 + (lane >> 2) + 8 * (i >> 1);
                        float p = fast_exp2(fmaf(s[mt][nt][i], d.scale_log2, -L[col] * LOG2E));
                        if (mask && (row >= d.T || key > row)) p = 0.0f;
                        s[mt][nt][i] = p;
                        dp[mt][nt][i] = p * (dp[mt][nt][i] - Dq[col]);
                    }
                }
            }
            uint32_t pf[MT][KQ][4], dsf[MT][KQ][4];
            acc_to_a<MT, KQ>(pf, s);
            acc_to_a<MT, KQ>(dsf, dp);
            mma_rs_t<MT, KQ, NO>(dva, pf, sdO, LD, lane);
            mma_rs_t<MT, KQ, NO>(dka, dsf, sQ, LD, lane);
        }
        __syncthreads();
    }
    // Each warp only ever read its own rows of sK and sV: reuse them as staging.
    float kmul[MT][2], vmul[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        kmul[mt][0] = kmul[mt][1] = d.scale;
        vmul[mt][0] = vmul[mt][1] = 1.0f;
    }
    store_rows<HDP, MT>(dk + kvoff, kvs, wk0, d.T, d.hd, dka, kmul, sKw, lane);
    store_rows<HDP, MT>(dv + kvoff, kvs, wk0, d.T, d.hd, dva, vmul, sVw, lane);
}

// ---- simple path: one warp per output row, fp32 on CUDA cores -----------------------------
// Lane l scores key (or query) j0 + l of each chunk of 32; the chunk's weights are then
// broadcast by shuffles and each lane accumulates dims lane, lane + 32, ... of the row.

constexpr int SIMPLE_WARPS = 4, MAXC = 4; // 4 warps per block; hd <= 32 * MAXC

// dot(row vector in shared memory (fp32), bf16 global row)
__device__ __forceinline__ float dot_sg(const float *a, const bf16 *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * bf2f(b[i]);
    return s;
}

__device__ __forceinline__ void load_row_f32(float *dst, const bf16 *src, int n, int lane) {
    for (int i = lane; i < n; i += 32) dst[i] = bf2f(src[i]);
    __syncwarp();
}

__global__ void attn_fwd_simple(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                Dims d) {
    __shared__ float sq[SIMPLE_WARPS][32 * MAXC];
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    long row = (long)blockIdx.x * SIMPLE_WARPS + w; // (b, h, i) with i fastest
    if (row >= (long)d.B * d.H * d.T) return;
    const int i = (int)(row % d.T), h = (int)(row / d.T % d.H), b = (int)(row / d.T / d.H);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)(h / d.group) * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)(h / d.group) * d.hd;
    load_row_f32(sq[w], q + ((long)b * d.T + i) * qs + (long)h * d.hd, d.hd, lane);

    float m = -INFINITY, l = 0.0f, acc[MAXC] = {};
    for (int j0 = 0; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        float s = j <= i ? dot_sg(sq[w], kb + (long)j * kvs, d.hd) * d.scale : -INFINITY;
        float mx = s;
        for (int off = 16; off > 0; off >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        mx = fmaxf(mx, m); // chunk j0 always holds key j0 <= i, so mx is finite
        float alpha = expf(m - mx), p = j <= i ? expf(s - mx) : 0.0f, ps = p;
        for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
        l = l * alpha + ps;
        m = mx;
        int n = min(32, i + 1 - j0);
#pragma unroll
        for (int c = 0; c < MAXC; c++) acc[c] *= alpha;
        for (int jj = 0; jj < n; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
            const bf16 *vj = vb + (long)(j0 + jj) * kvs;
#pragma unroll
            for (int c = 0; c < MAXC; c++)
                if (lane + 32 * c < d.hd) acc[c] += pj * bf2f(vj[lane + 32 * c]);
        }
    }
    bf16 *o = out + ((long)b * d.T + i) * qs + (long)h * d.hd;
#pragma unroll
    for (int c = 0; c < MAXC; c++)
        if (lane + 32 * c < d.hd) o[lane + 32 * c] = f2bf(acc[c] / l);
    if (lane == 0) lse[((long)b * d.H + h) * d.T + i] = m + logf(l);
}

__global__ void attn_bwd_dq_simple(bf16 *dq, const bf16 *dout, const float *lse, const float *D,
                                   const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    __shared__ float sq[SIMPLE_WARPS][32 * MAXC], sg[SIMPLE_WARPS][32 * MAXC];
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    long row = (long)blockIdx.x * SIMPLE_WARPS + w;
    if (row >= (long)d.B * d.H * d.T) return;
    const int i = (int)(row % d.T), h = (int)(row / d.T % d.H), b = (int)(row / d.T / d.H);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long qo = ((long)b * d.T + i) * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)(h / d.group) * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)(h / d.group) * d.hd;
    load_row_f32(sq[w], q + qo, d.hd, lane);
    load_row_f32(sg[w], dout + qo, d.hd, lane);
    const float L = lse[row], Di = D[row]; // row is exactly the [B, H, T] index

    float acc[MAXC] = {};
    for (int j0 = 0; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        float ds = 0.0f;
        if (j <= i) {
            float p = expf(dot_sg(sq[w], kb + (long)j * kvs, d.hd) * d.scale - L);
            ds = p * (dot_sg(sg[w], vb + (long)j * kvs, d.hd) - Di);
        }
        int n = min(32, i + 1 - j0);
        for (int jj = 0; jj < n; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
            const bf16 *kj = kb + (long)(j0 + jj) * kvs;
#pragma unroll
            for (int c = 0; c < MAXC; c++)
                if (lane + 32 * c < d.hd) acc[c] += dsj * bf2f(kj[lane + 32 * c]);
        }
    }
#pragma unroll
    for (int c = 0; c < MAXC; c++)
        if (lane + 32 * c < d.hd) dq[qo + lane + 32 * c] = f2bf(acc[c] * d.scale);
}

__global__ void attn_bwd_dkdv_simple(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                                     const float *D, const bf16 *q, const bf16 *k, const bf16 *v,
                                     Dims d) {
    __shared__ float sk[SIMPLE_WARPS][32 * MAXC], sv[SIMPLE_WARPS][32 * MAXC];
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    long row = (long)blockIdx.x * SIMPLE_WARPS + w; // (b, kvh, j) with j fastest
    if (row >= (long)d.B * d.KV * d.T) return;
    const int j = (int)(row % d.T), kvh = (int)(row / d.T % d.KV), b = (int)(row / d.T / d.KV);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long ko = ((long)b * d.T + j) * kvs + (long)kvh * d.hd;
    load_row_f32(sk[w], k + ko, d.hd, lane);
    load_row_f32(sv[w], v + ko, d.hd, lane);

    float acck[MAXC] = {}, accv[MAXC] = {};
    for (int h = kvh * d.group; h < (kvh + 1) * d.group; h++) {
        const bf16 *qb = q + (long)b * d.T * qs + (long)h * d.hd;
        const bf16 *gb = dout + (long)b * d.T * qs + (long)h * d.hd;
        const long lo = ((long)b * d.H + h) * d.T;
        for (int i0 = j; i0 < d.T; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < d.T) {
                p = expf(dot_sg(sk[w], qb + (long)i * qs, d.hd) * d.scale - lse[lo + i]);
                ds = p * (dot_sg(sv[w], gb + (long)i * qs, d.hd) - D[lo + i]);
            }
            int n = min(32, d.T - i0);
            for (int ii = 0; ii < n; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
                const bf16 *qi = qb + (long)(i0 + ii) * qs, *gi = gb + (long)(i0 + ii) * qs;
#pragma unroll
                for (int c = 0; c < MAXC; c++) {
                    if (lane + 32 * c < d.hd) {
                        accv[c] += pi * bf2f(gi[lane + 32 * c]);
                        acck[c] += dsi * bf2f(qi[lane + 32 * c]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < MAXC; c++) {
        if (lane + 32 * c < d.hd) {
            dk[ko + lane + 32 * c] = f2bf(acck[c] * d.scale);
            dv[ko + lane + 32 * c] = f2bf(accv[c]);
        }
    }
}

// ---- host side -----------------------------------------------------------------------------

Dims make_dims(int B, int T, int H, int KV, int hd) {
    if (B < 0 || T < 0 || H <= 0 || KV <= 0 || H % KV != 0 || hd <= 0 || hd > 32 * MAXC) {
        fprintf(stderr, "megatrain: attention: unsupported shape B=%d T=%d H=%d KV=%d hd=%d\n", B,
                T, H, KV, hd);
        exit(1);
    }
    float scale = 1.0f / sqrtf((float)hd);
    return Dims{B, T, H, KV, hd, H / KV, scale, scale * LOG2E};
}

bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

// The tensor-core path needs 16-byte rows (hd % 8 == 0) and 16-byte aligned bases for
// cp.async and the vector stores; anything else, or MT_ATTENTION_SIMPLE=1, takes the simple
// path. getenv on every call, so that a test can switch paths at run time.
bool use_simple(int hd, const void *const *ptrs, int n) {
    const char *e = getenv("MT_ATTENTION_SIMPLE");
    if (e && e[0] == '1') return true;
    if (hd % 4 != 0) return true; // hd % 8 == 4 takes the tensor path with 8-byte chunks
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i])) return true;
    return false;
}

int padded_hd(int hd) {
    return hd <= 32 ? 32 : hd <= 64 ? 64 : 128;
}

// Raise the kernel's dynamic shared-memory limit (above 48 KB needs it). Cheap, and setting it
// on every launch keeps the code free of static state.
template <typename K> void set_smem_limit(K kernel, size_t smem) {
    CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

// Per padded head size, chosen by timing on an H200 (B=8, T=2048): m-tiles per warp (MT; two
// where the registers allow), key tile BC of fwd and dq (32 at hd 128 keeps MT = 2 within 255
// registers), and the dk/dv kernel's query tile BQ. Shared memory: fwd and dq hold 64*MT query
// rows (q, and dout for dq) plus two K/V stages; dk/dv holds 64*MT K and V rows plus two stages
// of BQ q and dout rows with their lse and D.
template <int HDP> struct Cfg {
    static constexpr int LD = HDP + 8, FWD_MT = 2, FWD_BC = HDP <= 64 ? 64 : 32;
    static constexpr int DQ_MT = 2, DQ_BC = FWD_BC;
    static constexpr int KV_MT = HDP <= 64 ? 2 : 1, KV_BQ = 32;
    static constexpr size_t fwd_smem =
        (size_t)(16 * WARPS * FWD_MT + 4 * FWD_BC) * LD * sizeof(bf16);
    static constexpr size_t dq_smem =
        (size_t)(2 * 16 * WARPS * DQ_MT + 4 * DQ_BC) * LD * sizeof(bf16);
    static constexpr size_t kv_smem =
        (size_t)(2 * 16 * WARPS * KV_MT + 4 * KV_BQ) * LD * sizeof(bf16) +
        4 * KV_BQ * sizeof(float);
};

int cdiv(int a, int b) {
    return (a + b - 1) / b;
}

template <int HDP>
void forward_tc(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                cudaStream_t stream) {
    using C = Cfg<HDP>;
    auto kernel = attn_fwd_tc<HDP, C::FWD_MT, C::FWD_BC>;
    dim3 grid(d.B * d.H, cdiv(d.T, 16 * WARPS * C::FWD_MT));
    set_smem_limit(kernel, C::fwd_smem);
    kernel<<<grid, THREADS, C::fwd_smem, stream>>>(out, lse, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

template <int HDP>
void backward_tc(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                 const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d, cudaStream_t stream) {
    using C = Cfg<HDP>;
    auto dq_kernel = attn_bwd_dq_tc<HDP, C::DQ_MT, C::DQ_BC>;
    dim3 gq(d.B * d.H, cdiv(d.T, 16 * WARPS * C::DQ_MT));
    set_smem_limit(dq_kernel, C::dq_smem);
    dq_kernel<<<gq, THREADS, C::dq_smem, stream>>>(dq, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();

    auto kv_kernel = attn_bwd_dkdv_tc<HDP, C::KV_MT, C::KV_BQ>;
    dim3 gk(d.B * d.KV, cdiv(d.T, 16 * WARPS * C::KV_MT));
    set_smem_limit(kv_kernel, C::kv_smem);
    kv_kernel<<<gk, THREADS, C::kv_smem, stream>>>(dk, dv, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

unsigned simple_blocks(long rows) {
    return (unsigned)((rows + SIMPLE_WARPS - 1) / SIMPLE_WARPS);
}

} // namespace

extern "C" size_t cuda_attention_scratch_bytes(int B, int T, int H, int KV, int hd) {
    return (size_t)B * H * T * sizeof(float); // D = rowsum(dout * out), [B, H, T]
}

extern "C" void cuda_attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                       const bf16 *v, int B, int T, int H, int KV, int hd,
                                       cudaStream_t stream) {
    Dims d = make_dims(B, T, H, KV, hd);
    if (B == 0 || T == 0) return;
    const void *ptrs[] = {out, q, k, v};
    if (use_simple(hd, ptrs, 4)) {
        attn_fwd_simple<<<simple_blocks((long)B * H * T), 32 * SIMPLE_WARPS, 0, stream>>>(
            out, lse, q, k, v, d);
        CUDA_CHECK_LAUNCH();
        return;
    }
    switch (padded_hd(hd)) {
    case 32:
        forward_tc<32>(out, lse, q, k, v, d, stream);
        break;
    case 64:
        forward_tc<64>(out, lse, q, k, v, d, stream);
        break;
    default:
        forward_tc<128>(out, lse, q, k, v, d, stream);
        break;
    }
}

extern "C" void cuda_attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                                        const bf16 *out, const float *lse, const bf16 *q,
                                        const bf16 *k, const bf16 *v, int B, int T, int H, int KV,
                                        int hd, void *scratch, cudaStream_t stream) {
    Dims d = make_dims(B, T, H, KV, hd);
    if (B == 0 || T == 0) return;
    float *D = (float *)scratch;
    const long qrows = (long)B * T * H;
    const void *ptrs[] = {dq, dk, dv, dout, out, q, k, v};
    if (use_simple(hd, ptrs, 8)) {
        attn_bwd_rowdot<<<(unsigned)((qrows + 7) / 8), 256, 0, stream>>>(D, dout, out, d);
        CUDA_CHECK_LAUNCH();
        attn_bwd_dq_simple<<<simple_blocks(qrows), 32 * SIMPLE_WARPS, 0, stream>>>(dq, dout, lse, D,
                                                                                   q, k, v, d);
        CUDA_CHECK_LAUNCH();
        attn_bwd_dkdv_simple<<<simple_blocks((long)B * KV * T), 32 * SIMPLE_WARPS, 0, stream>>>(
            dk, dv, dout, lse, D, q, k, v, d);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (hd % 8 == 0)
        attn_bwd_rowdot16<<<(unsigned)((qrows + 15) / 16), 256, 0, stream>>>(D, dout, out, d);
    else
        attn_bwd_rowdot<<<(unsigned)((qrows + 7) / 8), 256, 0, stream>>>(D, dout, out, d);
    CUDA_CHECK_LAUNCH();
    switch (padded_hd(hd)) {
    case 32:
        backward_tc<32>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    case 64:
        backward_tc<64>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    default:
        backward_tc<128>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    }
}
