// mma.sync building blocks shared by the tensor-core kernels of any GPU (the attention family's
// mma.sync path and the gated delta rule's state passes): bf16 packing, cp.async, ldmatrix, the
// m16n8k16 bf16 MMA with fp32 accumulation, and the warp-level GEMM steps built on them, whose
// fragment layouts are written once here. Private to kernels/cuda/.
#ifndef MT_MMA_CUH
#define MT_MMA_CUH

#include "kernels/bf16.h"

#include <cuda_bf16.h>
#include <stdint.h>

namespace {
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
// cp_async16 where `valid`, else 16 zero bytes at dst with nothing read (src may then point
// anywhere): one instruction where a branch would be a store and a copy.
__device__ __forceinline__ void cp_async16_zfill(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
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

// Four 8x8 bf16 matrices from registers in the fragment layout (register i: matrix i, the lane's
// row lane / 4, columns 2 (lane % 4) ..) to shared memory, each transposed: lane l names the
// 16-byte row (l % 8) of matrix l / 8 there, which receives that matrix's column l % 8. sm_90.
__device__ __forceinline__ void stsm_x4_t(bf16 *p, uint32_t r0, uint32_t r1, uint32_t r2,
                                          uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr(p)),
        "r"(r0), "r"(r1), "r"(r2), "r"(r3)
        : "memory");
#else
    __trap(); // callers take another path below sm_90
#endif
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

} // namespace

#endif
