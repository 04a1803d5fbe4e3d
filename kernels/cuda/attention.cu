// Causal grouped-query flash attention (FlashAttention-2 scheme) for bf16 q, k, v.
//
// The math is exactly kernels/cpu/attention.c: scale 1/sqrt(hd), query head h reads kv head
// h / (H / KV), lse = natural-log log-sum-exp of each row's scaled scores. Memory is O(T): a
// CTA holds one 64-row tile of queries (or keys) and streams the other side through shared
// memory; the T x T probabilities are recomputed from lse in the backward, never stored.
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
constexpr int TILE = 64;     // query rows (forward, dq) or key rows (dk, dv) per CTA
constexpr int THREADS = 128; // 4 warps, 16 tile rows each

struct Dims {
    int B, T, H, KV, hd, group;
    float scale;      // 1/sqrt(hd)
    float scale_log2; // scale * log2(e): the kernels use exp2
};

// ---- bf16 and PTX helpers ------------------------------------------------------------------

__device__ __forceinline__ float bf2f(bf16 x) { return __uint_as_float((uint32_t)x << 16); }
__device__ __forceinline__ bf16 f2bf(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

// Two floats as one bf16x2 register: lo in the low half (the lower column of an MMA fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    return (uint32_t)f2bf(lo) | ((uint32_t)f2bf(hi) << 16);
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
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
// the 8 rows of each ldmatrix 8x8 block in distinct banks.

// A fragment for k-step ks of a 16-row block at sA (row-major [16][k]).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16 *sA, int ld, int ks,
                                       int lane) {
    ldsm_x4(a, sA + (lane & 15) * ld + (lane >> 4) * 8 + ks * 16);
}

// acc (16 x 8*NT) += A . B^T for B stored row-major as [n][k] (K tile for Q K^T). One x4
// ldmatrix gives b0, b1 of two adjacent n-tiles.
template <int NT>
__device__ __forceinline__ void mma_nt_step(float (&acc)[NT][4], const uint32_t (&a)[4],
                                            const bf16 *sB, int ld, int ks, int lane) {
    const bf16 *p = sB + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8 + ks * 16;
#pragma unroll
    for (int np = 0; np < NT / 2; np++) {
        uint32_t b[4];
        ldsm_x4(b, p + np * 16 * ld);
        mma16816(acc[2 * np], a, b[0], b[1]);
        mma16816(acc[2 * np + 1], a, b[2], b[3]);
    }
}

// A already in registers (KS k-steps).
template <int KS, int NT>
__device__ __forceinline__ void mma_rs_nt(float (&acc)[NT][4], const uint32_t (&a)[KS][4],
                                          const bf16 *sB, int ld, int lane) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) mma_nt_step<NT>(acc, a[ks], sB, ld, ks, lane);
}

// A read from shared memory (16 rows at sA) one k-step at a time, to save registers.
template <int KS, int NT>
__device__ __forceinline__ void mma_ss_nt(float (&acc)[NT][4], const bf16 *sA, const bf16 *sB,
                                          int ld, int lane) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        load_a(a, sA, ld, ks, lane);
        mma_nt_step<NT>(acc, a, sB, ld, ks, lane);
    }
}

// acc (16 x 8*NT) += A . B for B stored row-major as [k][n] (V tile for P V): the transposing
// ldmatrix turns rows of B into "col" fragments.
template <int KS, int NT>
__device__ __forceinline__ void mma_rs_t(float (&acc)[NT][4], const uint32_t (&a)[KS][4],
                                         const bf16 *sB, int ld, int lane) {
    const bf16 *p = sB + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4_t(b, p + ks * 16 * ld + np * 16);
            mma16816(acc[2 * np], a[ks], b[0], b[1]);
            mma16816(acc[2 * np + 1], a[ks], b[2], b[3]);
        }
    }
}

// A 16 x 16*KS accumulator block (NT = 2*KS n-tiles) as bf16 A fragments: an accumulator's
// (row, column) layout is exactly an A fragment's, two n-tiles per k-step.
template <int KS>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[KS][4], const float (&acc)[2 * KS][4]) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        a[ks][0] = pack_bf16(acc[2 * ks][0], acc[2 * ks][1]);
        a[ks][1] = pack_bf16(acc[2 * ks][2], acc[2 * ks][3]);
        a[ks][2] = pack_bf16(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
        a[ks][3] = pack_bf16(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
    }
}

// ---- tiles: global <-> shared ------------------------------------------------------------

// Rows [row0, row0 + ROWS) of a [T, stride] matrix (first hd columns) into shared [ROWS][LD]
// through cp.async. Rows >= T and columns in [hd, HDP) are zeroed, so that the MMAs need no
// tail cases: zero rows of q/k/v/dout give finite scores that the masks then drop, and zero
// columns add nothing to dot products. hd % 8 == 0, so a 16-byte chunk never straddles hd.
template <int HDP, int ROWS>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int row0, int T,
                                          long stride, int hd) {
    constexpr int CPR = HDP / 8, LD = HDP + 8;
    for (int c = threadIdx.x; c < ROWS * CPR; c += THREADS) {
        int r = c / CPR, col = (c % CPR) * 8;
        bf16 *d = dst + r * LD + col;
        if (row0 + r < T && col < hd)
            cp_async16(d, src + (long)(row0 + r) * stride + col);
        else
            *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

// Writes a warp's 16 x HDP fp32 accumulator (times mul) as bf16 rows [row0, row0 + 16) of a
// [T, stride] matrix, staged through the warp's own 16 rows of shared memory (stage) so that
// the global stores are 16-byte and coalesced.
template <int HDP>
__device__ __forceinline__ void store_rows(bf16 *dst, long stride, int row0, int T, int hd,
                                           const float (&acc)[HDP / 8][4], float mul0,
                                           float mul1, bf16 *stage, int lane) {
    constexpr int LD = HDP + 8, CPR = HDP / 8;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < HDP / 8; nt++) {
        *(uint32_t *)(stage + g * LD + nt * 8 + 2 * t) =
            pack_bf16(acc[nt][0] * mul0, acc[nt][1] * mul0);
        *(uint32_t *)(stage + (g + 8) * LD + nt * 8 + 2 * t) =
            pack_bf16(acc[nt][2] * mul1, acc[nt][3] * mul1);
    }
    __syncwarp();
    for (int c = lane; c < 16 * CPR; c += 32) {
        int r = c / CPR, col = (c % CPR) * 8;
        if (row0 + r < T && col < hd)
            *(uint4 *)(dst + (long)(row0 + r) * stride + col) = *(const uint4 *)(stage + r * LD + col);
    }
}

// ---- tensor-core forward -----------------------------------------------------------------

// One online-softmax step over a 16 x 64 score block (two rows per thread: g and g+8). s holds
// raw scores on entry and unnormalized probabilities on exit; o and l are rescaled to the new
// running max m (base-2 units). On the diagonal tile, keys after the query are masked.
template <int NO>
__device__ __forceinline__ void softmax_step(float (&s)[TILE / 8][4], float (&o)[NO][4],
                                             float (&m)[2], float (&l)[2], float scale_log2,
                                             bool diag, int row_lo, int key0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = m[r];
#pragma unroll
        for (int nt = 0; nt < TILE / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = s[nt][2 * r + e] * scale_log2;
                int key = key0 + nt * 8 + 2 * (lane & 3) + e;
                if (diag && key > row_lo + 8 * r) x = -INFINITY;
                s[nt][2 * r + e] = x;
                mx = fmaxf(mx, x);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Every row has an unmasked key in every tile it visits (key tiles start at or before
        // the row), so mx is finite and exp2(-inf - mx) = 0 on the first tile.
        float alpha = exp2f(m[r] - mx);
        m[r] = mx;
        l[r] *= alpha;
#pragma unroll
        for (int nt = 0; nt < NO; nt++) {
            o[nt][2 * r] *= alpha;
            o[nt][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int nt = 0; nt < TILE / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = exp2f(s[nt][2 * r + e] - mx);
                s[nt][2 * r + e] = p;
                l[r] += p; // this thread's partial row sum; the quad reduces it at the end
            }
        }
    }
}

// One CTA per (b, h, 64-query tile); each warp owns 16 query rows and streams the key/value
// tiles up to the diagonal through a two-stage cp.async pipeline.
template <int HDP>
__global__ void __launch_bounds__(THREADS)
    attn_fwd_tc(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NS = TILE / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem;
    bf16 *sKV = sQ + TILE * LD; // stage s: K at sKV + 2*s*TILE*LD, V right after it

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int qt = gridDim.y - 1 - blockIdx.y; // the longest rows first, for load balance
    const int q0 = qt * TILE;
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const bf16 *qb = q + (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;

    load_tile<HDP, TILE>(sQ, qb, q0, d.T, qs, d.hd);
    load_tile<HDP, TILE>(sKV, kb, 0, d.T, kvs, d.hd);
    load_tile<HDP, TILE>(sKV + TILE * LD, vb, 0, d.T, kvs, d.hd);
    cp_async_commit();

    uint32_t qf[KS][4];
    float o[NO][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int row_lo = q0 + warp * 16 + (lane >> 2);
    for (int kt = 0; kt <= qt; kt++) {
        const bf16 *sK = sKV + (kt & 1) * 2 * TILE * LD, *sV = sK + TILE * LD;
        if (kt < qt) { // prefetch the next tile into the other stage, freed by the last barrier
            bf16 *nK = sKV + ((kt + 1) & 1) * 2 * TILE * LD;
            load_tile<HDP, TILE>(nK, kb, (kt + 1) * TILE, d.T, kvs, d.hd);
            load_tile<HDP, TILE>(nK + TILE * LD, vb, (kt + 1) * TILE, d.T, kvs, d.hd);
        }
        cp_async_commit(); // possibly empty: keeps the wait count uniform
        cp_async_wait<1>();
        __syncthreads();
        if (kt == 0) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) load_a(qf[ks], sQ + warp * 16 * LD, LD, ks, lane);
        }
        float s[NS][4] = {};
        mma_rs_nt<KS, NS>(s, qf, sK, LD, lane);
        softmax_step<NO>(s, o, m, l, d.scale_log2, kt == qt, row_lo, kt * TILE, lane);
        uint32_t pf[TILE / 16][4];
        acc_to_a<TILE / 16>(pf, s);
        mma_rs_t<TILE / 16, NO>(o, pf, sV, LD, lane);
        __syncthreads(); // this stage is refilled two iterations on
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        int row = row_lo + 8 * r;
        if ((lane & 3) == 0 && row < d.T)
            lse[((long)b * d.H + h) * d.T + row] = (m[r] + log2f(l[r])) * LN2;
    }
    // Each warp only ever read its own 16 rows of sQ, so it can reuse them as staging.
    store_rows<HDP>(out + (long)b * d.T * qs + (long)h * d.hd, qs, q0 + warp * 16, d.T, d.hd, o,
                    1.0f / l[0], 1.0f / l[1], sQ + warp * 16 * LD, lane);
}

// ---- backward: D = rowsum(dout * out) ------------------------------------------------------

// One warp per row (b, t, h); D is laid out like lse, [B, H, T].
__global__ void attn_bwd_rowdot(float *D, const bf16 *dout, const bf16 *out, Dims d) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    long rows = (long)d.B * d.T * d.H;
    if (row >= rows) return;
    const bf16 *g = dout + row * d.hd, *o = out + row * d.hd;
    float s = 0.0f;
    for (int i = lane; i < d.hd; i += 32) s += bf2f(g[i]) * bf2f(o[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    int h = (int)(row % d.H);
    long bt = row / d.H;
    int t = (int)(bt % d.T), b = (int)(bt / d.T);
    if (lane == 0) D[((long)b * d.H + h) * d.T + t] = s;
}

// ---- tensor-core backward: dq --------------------------------------------------------------

// One CTA per (b, h, 64-query tile), the forward's shape: dq = scale * sum_j dS_ij k_j with
// dS = P * (dout . v_j - D). q and dout stay in shared memory (re-read each key tile) to keep
// registers for the three 16 x 64 / 16 x HDP accumulators.
template <int HDP>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dq_tc(bf16 *dq, const bf16 *dout, const float *lse, const float *D, const bf16 *q,
                   const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NS = TILE / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem, *sdO = sQ + TILE * LD, *sKV = sdO + TILE * LD;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * TILE;
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long qoff = (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;

    load_tile<HDP, TILE>(sQ, q + qoff, q0, d.T, qs, d.hd);
    load_tile<HDP, TILE>(sdO, dout + qoff, q0, d.T, qs, d.hd);
    load_tile<HDP, TILE>(sKV, kb, 0, d.T, kvs, d.hd);
    load_tile<HDP, TILE>(sKV + TILE * LD, vb, 0, d.T, kvs, d.hd);
    cp_async_commit();

    // Rows past T: zero q and dout make dS = 1 * (0 - 0) = 0, and they are never stored.
    const int row_lo = q0 + warp * 16 + (lane >> 2);
    float lse2[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row_lo + 8 * r;
        long i = ((long)b * d.H + h) * d.T + row;
        lse2[r] = row < d.T ? lse[i] * LOG2E : 0.0f;
        Dr[r] = row < d.T ? D[i] : 0.0f;
    }

    float acc[NO][4] = {};
    const bf16 *sQw = sQ + warp * 16 * LD, *sdOw = sdO + warp * 16 * LD;
    for (int kt = 0; kt <= qt; kt++) {
        const bf16 *sK = sKV + (kt & 1) * 2 * TILE * LD, *sV = sK + TILE * LD;
        if (kt < qt) {
            bf16 *nK = sKV + ((kt + 1) & 1) * 2 * TILE * LD;
            load_tile<HDP, TILE>(nK, kb, (kt + 1) * TILE, d.T, kvs, d.hd);
            load_tile<HDP, TILE>(nK + TILE * LD, vb, (kt + 1) * TILE, d.T, kvs, d.hd);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        float s[NS][4] = {}, dp[NS][4] = {};
        mma_ss_nt<KS, NS>(s, sQw, sK, LD, lane);
        mma_ss_nt<KS, NS>(dp, sdOw, sV, LD, lane);
        const bool diag = kt == qt;
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = i >> 1, key = kt * TILE + nt * 8 + 2 * (lane & 3) + (i & 1);
                float p = exp2f(s[nt][i] * d.scale_log2 - lse2[r]);
                if (diag && key > row_lo + 8 * r) p = 0.0f;
                s[nt][i] = p * (dp[nt][i] - Dr[r]);
            }
        }
        uint32_t dsf[TILE / 16][4];
        acc_to_a<TILE / 16>(dsf, s);
        mma_rs_t<TILE / 16, NO>(acc, dsf, sK, LD, lane);
        __syncthreads();
    }
    store_rows<HDP>(dq + qoff, qs, q0 + warp * 16, d.T, d.hd, acc, d.scale, d.scale,
                    (bf16 *)sQw, lane);
}

// ---- tensor-core backward: dk, dv ----------------------------------------------------------

// One CTA per (b, kv head, 64-key tile); each warp owns 16 keys and keeps their dk, dv in
// registers while the query tiles (BQ rows) of every head of the group stream through a
// two-stage pipeline, from the diagonal to T. Computing S^T = K Q^T directly puts the keys on
// the MMA rows, so dv += P^T dout and dk += dS^T q need no cross-warp reduction.
template <int HDP, int BQ>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dkdv_tc(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                     const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NQ = BQ / 8, KQ = BQ / 16;
    constexpr int STAGE = 2 * BQ * LD; // q then dout, in bf16 elements
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = (bf16 *)smem, *sV = sK + TILE * LD, *sQdO = sV + TILE * LD;
    float *sL = (float *)(sQdO + 2 * STAGE), *sD = sL + 2 * BQ; // [stage][BQ] each

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.KV, kvh = blockIdx.x % d.KV;
    const int k0 = blockIdx.y * TILE; // low key tiles have the most queries: they go first
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
        for (int i = threadIdx.x; i < BQ; i += THREADS) {
            int row = qbase + i;
            long li = ((long)b * d.H + h) * d.T + row;
            sL[st * BQ + i] = row < d.T ? lse[li] * LOG2E : 0.0f;
            sD[st * BQ + i] = row < d.T ? D[li] : 0.0f;
        }
    };

    load_tile<HDP, TILE>(sK, k + kvoff, k0, d.T, kvs, d.hd);
    load_tile<HDP, TILE>(sV, v + kvoff, k0, d.T, kvs, d.hd);
    load_item(0, 0);
    cp_async_commit();

    float dka[NO][4] = {}, dva[NO][4] = {};
    const int key_lo = k0 + warp * 16 + (lane >> 2); // this thread's keys: key_lo, key_lo + 8
    const bf16 *sKw = sK + warp * 16 * LD, *sVw = sV + warp * 16 * LD;
    for (int it = 0; it < items; it++) {
        const int st = it & 1;
        if (it + 1 < items) load_item(it + 1, st ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int qbase = (qt0 + it % nqt) * BQ;
        const bf16 *sQ = sQdO + st * STAGE, *sdO = sQ + BQ * LD;
        const float *L = sL + st * BQ, *Dq = sD + st * BQ;
        // A warp whose keys all come after every query of the tile has P = 0: skip it.
        if (qbase + BQ - 1 >= k0 + warp * 16) {
            float s[NQ][4] = {}, dp[NQ][4] = {};
            mma_ss_nt<KS, NQ>(s, sKw, sQ, LD, lane);
            mma_ss_nt<KS, NQ>(dp, sVw, sdO, LD, lane);
            const bool edge = qbase < k0 + TILE || qbase + BQ > d.T;
#pragma unroll
            for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int col = nt * 8 + 2 * (lane & 3) + (i & 1), row = qbase + col;
                    int key = key_lo + 8 * (i >> 1);
                    float p = exp2f(s[nt][i] * d.scale_log2 - L[col]);
                    if (edge && (row >= d.T || key > row)) p = 0.0f;
                    s[nt][i] = p;
                    dp[nt][i] = p * (dp[nt][i] - Dq[col]);
                }
            }
            uint32_t pf[KQ][4], dsf[KQ][4];
            acc_to_a<KQ>(pf, s);
            acc_to_a<KQ>(dsf, dp);
            mma_rs_t<KQ, NO>(dva, pf, sdO, LD, lane);
            mma_rs_t<KQ, NO>(dka, dsf, sQ, LD, lane);
        }
        __syncthreads();
    }
    // Each warp only ever read its own 16 rows of sK and sV: reuse them as staging.
    store_rows<HDP>(dk + kvoff, kvs, k0 + warp * 16, d.T, d.hd, dka, d.scale, d.scale,
                    (bf16 *)sKw, lane);
    store_rows<HDP>(dv + kvoff, kvs, k0 + warp * 16, d.T, d.hd, dva, 1.0f, 1.0f, (bf16 *)sVw,
                    lane);
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

__global__ void attn_fwd_simple(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                const bf16 *v, Dims d) {
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
        for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
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
                                     const float *D, const bf16 *q, const bf16 *k,
                                     const bf16 *v, Dims d) {
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

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// The tensor-core path needs 16-byte rows (hd % 8 == 0) and 16-byte aligned bases for
// cp.async and the vector stores; anything else, or MT_ATTENTION_SIMPLE=1, takes the simple
// path. getenv on every call, so that a test can switch paths at run time.
bool use_simple(int hd, const void *const *ptrs, int n) {
    const char *e = getenv("MT_ATTENTION_SIMPLE");
    if (e && e[0] == '1') return true;
    if (hd % 8 != 0) return true;
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i])) return true;
    return false;
}

int padded_hd(int hd) { return hd <= 32 ? 32 : hd <= 64 ? 64 : 128; }

// Raise the kernel's dynamic shared-memory limit (above 48 KB needs it). Cheap, and setting it
// on every launch keeps the code free of static state.
template <typename K> void set_smem_limit(K kernel, size_t smem) {
    CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <int HDP> size_t fwd_smem() { return (size_t)5 * TILE * (HDP + 8) * sizeof(bf16); }
template <int HDP> size_t dq_smem() { return (size_t)6 * TILE * (HDP + 8) * sizeof(bf16); }
template <int HDP> constexpr int dkdv_bq() { return HDP >= 128 ? 32 : 64; } // register budget
template <int HDP> size_t dkdv_smem() {
    constexpr int BQ = dkdv_bq<HDP>();
    return (size_t)(2 * TILE + 4 * BQ) * (HDP + 8) * sizeof(bf16) + 4 * BQ * sizeof(float);
}

template <int HDP>
void forward_tc(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                const Dims &d, cudaStream_t stream) {
    dim3 grid(d.B * d.H, (d.T + TILE - 1) / TILE);
    size_t smem = fwd_smem<HDP>();
    set_smem_limit(attn_fwd_tc<HDP>, smem);
    attn_fwd_tc<HDP><<<grid, THREADS, smem, stream>>>(out, lse, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

template <int HDP>
void backward_tc(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                 const float *D, const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                 cudaStream_t stream) {
    const int tiles = (d.T + TILE - 1) / TILE;
    dim3 gq(d.B * d.H, tiles);
    size_t sq = dq_smem<HDP>();
    set_smem_limit(attn_bwd_dq_tc<HDP>, sq);
    attn_bwd_dq_tc<HDP><<<gq, THREADS, sq, stream>>>(dq, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();

    constexpr int BQ = dkdv_bq<HDP>();
    dim3 gk(d.B * d.KV, tiles);
    size_t sk = dkdv_smem<HDP>();
    set_smem_limit(attn_bwd_dkdv_tc<HDP, BQ>, sk);
    attn_bwd_dkdv_tc<HDP, BQ><<<gk, THREADS, sk, stream>>>(dk, dv, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

unsigned simple_blocks(long rows) { return (unsigned)((rows + SIMPLE_WARPS - 1) / SIMPLE_WARPS); }

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
    case 32: forward_tc<32>(out, lse, q, k, v, d, stream); break;
    case 64: forward_tc<64>(out, lse, q, k, v, d, stream); break;
    default: forward_tc<128>(out, lse, q, k, v, d, stream); break;
    }
}

extern "C" void cuda_attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                                        const bf16 *out, const float *lse, const bf16 *q,
                                        const bf16 *k, const bf16 *v, int B, int T, int H,
                                        int KV, int hd, void *scratch, cudaStream_t stream) {
    Dims d = make_dims(B, T, H, KV, hd);
    if (B == 0 || T == 0) return;
    float *D = (float *)scratch;
    const long qrows = (long)B * T * H;
    attn_bwd_rowdot<<<(unsigned)((qrows + 7) / 8), 256, 0, stream>>>(D, dout, out, d);
    CUDA_CHECK_LAUNCH();

    const void *ptrs[] = {dq, dk, dv, dout, q, k, v};
    if (use_simple(hd, ptrs, 7)) {
        attn_bwd_dq_simple<<<simple_blocks(qrows), 32 * SIMPLE_WARPS, 0, stream>>>(
            dq, dout, lse, D, q, k, v, d);
        CUDA_CHECK_LAUNCH();
        attn_bwd_dkdv_simple<<<simple_blocks((long)B * KV * T), 32 * SIMPLE_WARPS, 0, stream>>>(
            dk, dv, dout, lse, D, q, k, v, d);
        CUDA_CHECK_LAUNCH();
        return;
    }
    switch (padded_hd(hd)) {
    case 32: backward_tc<32>(dq, dk, dv, dout, lse, D, q, k, v, d, stream); break;
    case 64: backward_tc<64>(dq, dk, dv, dout, lse, D, q, k, v, d, stream); break;
    default: backward_tc<128>(dq, dk, dv, dout, lse, D, q, k, v, d, stream); break;
    }
}
