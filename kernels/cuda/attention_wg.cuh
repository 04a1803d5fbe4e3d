// The Hopper path's warpgroup pieces (wgmma on 128-byte-swizzled shared memory): the score and
// gradient products, the forward's softmax and P V, and the backward's probabilities and dS with
// their document masks, for attention_wgmma.cu, attention_tma.cu and attention_bwd_tma.cu.
// attention.cuh includes it after the mma.sync tile pieces and the helpers both paths share,
// which these build on.
#ifndef MT_ATTENTION_WG_CUH
#define MT_ATTENTION_WG_CUH

#include "kernels/cuda/attention.cuh"

namespace {

#ifdef WGMMA_DEVICE
// S^T or S (64 x N) = A B^T over the head dim: the warpgroup's 64 rows of A (a rows_a-row
// tile) against the N rows of B (an N-row tile), both K-major.
template <int HDP, int N>
__device__ __forceinline__ void scores_wg(float (&acc)[N / 8][4], const void *a, int rows_a,
                                          int row0, const void *b) {
    float(&d)[N / 2] = *reinterpret_cast<float(*)[N / 2]>(&acc[0][0]);
#pragma unroll
    for (int ks = 0; ks < HDP / 16; ks++)
        wgmma_ss<N>(d, kmajor_desc(a, rows_a, row0, ks), kmajor_desc(b, N, 0, ks), ks > 0);
}

// O += P V, issued and committed, not waited for: P (bf16, this warpgroup's 64 rows x BC keys)
// from registers, V a swizzled BC-row tile read MN-major. The caller fences the registers.
template <int HDP, int BC>
__device__ __forceinline__ void issue_pv(float (&od)[HDP / 2], const uint32_t (&pf)[BC / 16][4],
                                         const void *sV) {
#pragma unroll
    for (int ks = 0; ks < BC / 16; ks++) wgmma_rs_t<HDP>(od, pf[ks], mnmajor_desc(sV, BC, ks), 1);
    wgmma_commit();
}

// A Hopper forward's work on one key tile once the warpgroup's scores s (64 x BC, raw) are in
// registers: the online softmax, then O += P V with P from registers and V, a swizzled BC-row
// tile, read MN-major. Returns when the MMAs are done.
template <int HDP, int BC>
__device__ __forceinline__ void softmax_pv(float (&s)[BC / 8][4], float (&o)[HDP / 8][4],
                                           float (&m)[2], float (&l)[2], float scale_log2,
                                           bool mask, int row_lo, int key0, const int (&first)[2],
                                           int lane, const void *sV) {
    softmax_step<BC / 8, HDP / 8>(s, o, m, l, scale_log2, mask, row_lo, key0, first, lane);
    uint32_t pf[1][BC / 16][4];
    acc_to_a<1, BC / 16>(pf, *reinterpret_cast<float(*)[1][BC / 8][4]>(&s[0][0]));
    float(&od)[HDP / 2] = *reinterpret_cast<float(*)[HDP / 2]>(&o[0][0]);
    fence_regs(od); // the softmax's rescaling of o is done before the MMA takes it
    wgmma_fence();
    issue_pv<HDP, BC>(od, pf[0], sV);
    wgmma_wait<0>();
    fence_regs(od);
}

// A backward tile's S-like products, both K-major from shared memory: s = A1 B1^T and
// dp = A2 B2^T (the A tiles rows_a rows, this warpgroup's 64 from row0; the B tiles N rows).
// Returns with both done.
template <int HDP, int N>
__device__ __forceinline__ void scores_and_dp(float (&s)[N / 8][4], float (&dp)[N / 8][4],
                                              const void *a1, const void *b1, const void *a2,
                                              const void *b2, int rows_a, int row0) {
    wgmma_fence();
    scores_wg<HDP, N>(s, a1, rows_a, row0, b1);
    scores_wg<HDP, N>(dp, a2, rows_a, row0, b2);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(s);
    fence_acc(dp);
}

// The key side's P^T and dS^T for 64 keys x NQ*8 queries from qbase (two rows per thread: keys
// key_lo and key_lo + 8): s holds raw S^T and becomes P^T, dp holds dP^T and becomes
// dS^T = P^T (dP^T - D). L and Dq: the queries' lse (natural log) and D. With mask set,
// queries before a key and past T drop.
template <int NQ>
__device__ __forceinline__ void probs_and_ds_t(float (&s)[NQ][4], float (&dp)[NQ][4],
                                               const float *L, const float *Dq, float scale_log2,
                                               bool mask, int qbase, int key_lo, int T, int lane) {
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int col = nt * 8 + 2 * (lane & 3) + (i & 1), row = qbase + col;
            const int key = key_lo + 8 * (i >> 1);
            float p = fast_exp2(fmaf(s[nt][i], scale_log2, -L[col] * LOG2E));
            if (mask && (row >= T || key > row)) p = 0.0f;
            s[nt][i] = p;
            dp[nt][i] = p * (dp[nt][i] - Dq[col]);
        }
    }
}

// Packed documents and windows, after probs_and_ds_t on a tile where some query's first key
// follows one of the keys: P^T and dS^T of those (query, key) pairs to 0. Sq: the document starts
// of the queries from qbase (global memory; rows past T are never read), NULL with a window
// alone; WIN: a sliding window, under which query qbase + col sees no key before wbase + col
// (qbase - W + 1 + col: first_key). A pass of its own, so that the tiles without such pairs run
// probs_and_ds_t's code unchanged.
template <int NQ, bool WIN>
__device__ __forceinline__ void mask_documents_t(float (&s)[NQ][4], float (&dp)[NQ][4],
                                                 const int *Sq, int qbase, int key_lo, int T,
                                                 int wbase, int lane) {
#pragma unroll
    for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int col = nt * 8 + 2 * (lane & 3) + (i & 1);
            const int key = key_lo + 8 * (i >> 1);
            if (qbase + col < T && (WIN ? max(Sq ? Sq[col] : 0, wbase + col) : Sq[col]) > key)
                s[nt][i] = dp[nt][i] = 0.0f;
        }
    }
}

// acc (64 x HDP) += A B: A as register fragments of KQ k-steps, B a KQ*16-row tile read
// MN-major.
template <int HDP, int KQ>
__device__ __forceinline__ void grad_wg(float (&acc)[HDP / 8][4], const uint32_t (&a)[1][KQ][4],
                                        const void *b) {
    float(&d)[HDP / 2] = *reinterpret_cast<float(*)[HDP / 2]>(&acc[0][0]);
#pragma unroll
    for (int ks = 0; ks < KQ; ks++) wgmma_rs_t<HDP>(d, a[0][ks], mnmajor_desc(b, KQ * 16, ks), 1);
}
#endif

} // namespace

#endif
