// The chunked gated delta rule on tensor cores: the math of kernels/cpu/gated_delta_chunked.c in
// the WY/UT form, per chunk of L <= 64 tokens entered with state S0 [dk, dv], with gamma the
// cumulative sum of g, D_ij = exp(gamma_i - gamma_j), w_j = exp(gamma_last - gamma_j):
//   A_ij = beta_i D_ij k_i.k_j (j < i),  T = (I + A)^-1                (fp32 substitution);
//   W = T diag(beta exp(gamma)) K,  U = T diag(beta) V                  (state-independent);
//   V' = U - W S0                                                       (the sequential part);
//   S_end = exp(gamma_last) S0 + K^T diag(w) V';
//   O = scale (diag(exp(gamma)) Q S0 + P V'),  P_ij = D_ij q_i.k_j (j <= i).
// Only V' and S_end need the chunk before; they are two [L, dk] x [dk, dv]-sized products a
// chunk. Every product runs on bf16 tensor cores (wmma) with fp32 accumulation; fp32 operands
// enter rounded to bf16, or split in two bf16 halves in the exact mode (gated_delta_tc.cuh). The
// triangular solve, the gates' exponentials and the state stay fp32.
//
// The forward works a segment of TC_SEG chunks at a time (its scratch holds one segment's W, U,
// V' and entering states). Kernels, in call order:
// - chunk_list_kernel (gated_delta.cu): each row's chunk starts.
// - prep_kernel, grid (chunks of the segment, H, B): KK^T, A, T, W and U (and for the backward
//   P, T and M) of one (chunk, value head).
// - pass_kernel, grid (dv / bv column blocks, H, B; bv = pass_cols, 16 or 32): the segment's
//   chunks in order, the state's [dk, bv] columns in shared memory: V' = U - W S, S = decay S + K^T
//   diag(w) V'; keeps each chunk's entering state and V'; carries the state to the next segment.
//   The next chunk's inputs load into registers while a chunk computes.
// - out_kernel, grid (chunks of the segment, H, B): O of one (chunk, value head).
// The backward (gated_delta_tc_bwd.cu) reuses prep and pass. No atomics: every output element
// has one owner thread, so a rerun gives the same bits.
//
// dk and dv must be multiples of 16 (the tiles); other shapes take the CUDA-core kernels of
// gated_delta.cu (cuda_gated_delta_forward_ref), which are also the reference test_gdn_cuda
// checks this path against.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"
#include "kernels/cuda/ktime.cuh"

namespace {

using namespace gdn;
using wmma::col_major;
using wmma::row_major;

// The per-chunk gates in shared memory.
struct Gates {
    float *gam, *beta, *eg, *w;
};

__host__ __device__ Gates take_gates(Carve &cv) {
    float *p = cv.take<float>(4 * L);
    return Gates{p, p + L, p + 2 * L, p + 3 * L};
}

__device__ void gates_of(const Gates &g, const gdn_args &a, const Tensors &t, int b, int t0, int h,
                         int Lc) {
    long go = gdn_gate_off(&a, b, t0, h);
    load_gates_padded(g.gam, g.beta, g.eg, g.w, t.g + go, t.beta + go, a.H, Lc);
}

// Where a block's (b, h, chunk) is: the chunk's first token and length, or false where row b
// has no chunk c in the span.
__device__ bool chunk_at(const int32_t *starts, const int32_t *counts, int max_chunks, Span span,
                         int b, int c, int *t0, int *Lc) {
    if (c >= min(span.end, counts[b])) return false;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    *t0 = row[c], *Lc = row[c + 1] - row[c];
    return true;
}

// ---- prep: the chunk's state-independent factors -------------------------------------------

// M and X for the solve; the products' tiles pass through each warp's tile (tmp) on their way
// to global memory, which keeps the block small enough for two a multiprocessor.
struct PrepSmem {
    bf *K, *V, *Q;
    Gates g;
    float *M, *X, *tmp; // [L, L] x 2; TC_WARPS 16 x 16 tiles
    Split T;            // T with its columns scaled, [L, L]
};

__host__ __device__ PrepSmem prep_smem(unsigned char *base, int dk, int dv, bool exact,
                                       size_t *bytes) {
    Carve cv = {base, 0};
    PrepSmem s;
    s.K = cv.take<bf>(L * ldb16(dk));
    s.Q = cv.take<bf>(L * ldb16(dk));
    s.V = cv.take<bf>(L * ldb16(dv));
    s.g = take_gates(cv);
    s.M = cv.take<float>(L * L);
    s.X = cv.take<float>(L * L);
    s.tmp = take_warp_tiles(cv);
    s.T = take_split(cv, L, L, exact);
    *bytes = cv.off;
    return s;
}

// T's columns scaled by beta_j (and exp(gamma_j) with eg), split.
__device__ void scaled_t(const PrepSmem &s, const float *eg) {
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        int i = e / L, j = e % L;
        split_store(s.T, i, j, s.X[e] * s.g.beta[j] * (eg ? eg[j] : 1.0f));
    }
}

// P = D QK^T (lower, with the diagonal) of the 16 x 16 tile at (m0, n0), from Q, K and the
// gates in shared memory, into the split matrix (hi, lo) at p (row stride L) or, with p NULL,
// into the shared split P.
__device__ void p_tile(float *tmp, const bf *Q, const bf *K, int ld, const float *gam, int Lc,
                       int m0, int n0, int dk, bf *phi, bf *plo, const Split *P) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_tile<row_major, col_major>(acc, Q, ld, K, ld, m0, n0, dk);
    tile_stage(tmp, acc);
    for (int e = threadIdx.x % 32; e < 256; e += 32) {
        int i = m0 + e / 16, j = n0 + e % 16;
        float x = i < Lc && j <= i ? expf(gam[i] - gam[j]) * tmp[e / 16 * TMP_LD + e % 16] : 0.0f;
        if (P)
            split_store(*P, i, j, x);
        else
            split_put(phi, plo, (long)i * L + j, x);
    }
}

// The warp's accumulator tile at (m0, n0) of a [., width] matrix into global memory, split
// (hi, lo) at row stride width.
__device__ void tile_to_global(float *tmp, const FragC &acc, bf *hi, bf *lo, int width, int m0,
                               int n0) {
    tile_stage(tmp, acc);
    for (int e = threadIdx.x % 32; e < 256; e += 32)
        split_put(hi, lo, (long)(m0 + e / 16) * width + n0 + e % 16, tmp[e / 16 * TMP_LD + e % 16]);
}

// KK^T into M and (with_p) P = D QK^T (lower, split into the factors), then A's M = D KK^T
// (strict lower) and X = I.
__device__ void prep_mats(const PrepSmem &s, const Factors &f, long idx, int Lc, int dk,
                          bool with_p) {
    int ld = ldb16(dk);
    float *tmp = warp_tile(s.tmp);
    for (int id = threadIdx.x / 32; id < 16; id += TC_WARPS) {
        int m0 = id / 4 * 16, n0 = id % 4 * 16;
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_tile<row_major, col_major>(acc, s.K, ld, s.K, ld, m0, n0, dk);
        wmma::store_matrix_sync(s.M + m0 * L + n0, acc, L, wmma::mem_row_major);
        if (with_p)
            p_tile(tmp, s.Q, s.K, ld, s.g.gam, Lc, m0, n0, dk, f.phi + idx * L * L,
                   f.plo ? f.plo + idx * L * L : NULL, NULL);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        int i = e / L, j = e % L;
        float D = i < Lc && j < i ? expf(s.g.gam[i] - s.g.gam[j]) : 0.0f;
        s.M[e] = D * s.M[e];
        s.X[e] = i == j ? 1.0f : 0.0f;
    }
    __syncthreads();
}

// Grid (chunks of the span, H, B).
__global__ void __launch_bounds__(TC_THREADS)
    prep_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, Factors f) {
    extern __shared__ __align__(128) unsigned char smem[];
    int slot = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0, Lc;
    if (!chunk_at(starts, counts, max_chunks, span, b, span.begin + slot, &t0, &Lc)) return;
    int dk = a.dk, dv = a.dv, hk = h / (a.H / a.HK), warp = threadIdx.x / 32;
    bool with_p = f.phi != NULL;
    size_t bytes;
    PrepSmem s = prep_smem(smem, dk, dv, f.wlo != NULL, &bytes);
    long idx = factor_index(a, b, h, slot), qks = (long)a.HK * dk;
    load_bf16_rows(s.K, t.k + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    if (with_p) load_bf16_rows(s.Q, t.q + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_bf16_rows(s.V, t.v + gdn_v_off(&a, b, t0, h), (long)a.H * dv, Lc, dv);
    gates_of(s.g, a, t, b, t0, h, Lc);
    __syncthreads();
    prep_mats(s, f, idx, Lc, dk, with_p);
    solve_lower(s.X, L, L, s.M, s.g.beta, Lc);                        // X = T; ends with a barrier
    for (int e = threadIdx.x; with_p && e < L * L; e += blockDim.x) { // the backward's M and T
        f.m[idx * L * L + e] = s.M[e];
        split_put(f.thi, f.tlo, idx * L * L + e, s.X[e]);
    }
    // W = (T diag(beta exp(gamma))) K, split on its way out.
    scaled_t(s, s.g.eg);
    __syncthreads();
    float *tmp = warp_tile(s.tmp);
    for (int id = warp; id < 4 * (dk / 16); id += TC_WARPS) {
        int m0 = id % 4 * 16, n0 = id / 4 * 16;
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_split<row_major, row_major>(acc, s.T.hi, s.T.lo, s.T.ld, s.K, NULL, ldb16(dk), m0, n0,
                                        L);
        tile_to_global(tmp, acc, f.whi + idx * L * dk, f.wlo ? f.wlo + idx * L * dk : NULL, dk, m0,
                       n0);
    }
    __syncthreads();
    // U = (T diag(beta)) V, straight to global memory.
    scaled_t(s, NULL);
    __syncthreads();
    for (int id = warp; id < 4 * (dv / 16); id += TC_WARPS) {
        int m0 = id % 4 * 16, n0 = id / 4 * 16;
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_split<row_major, row_major>(acc, s.T.hi, s.T.lo, s.T.ld, s.V, NULL, ldb16(dv), m0, n0,
                                        L);
        wmma::store_matrix_sync(f.u + idx * L * dv + m0 * dv + n0, acc, dv, wmma::mem_row_major);
    }
}

// ---- pass: the chunks in order -----------------------------------------------------------

struct PassSmem {
    float *S, *Vp;  // [dk, ldf32(bv)], [L, ldf32(bv)]
    Split Ss, W, X; // S [dk, bv], W [L, dk], diag(w) V' [L, bv]
    bf *K;
    Gates g;
};

__host__ __device__ PassSmem pass_smem(unsigned char *base, int dk, int bv, bool exact,
                                       size_t *bytes) {
    Carve cv = {base, 0};
    PassSmem s;
    s.S = cv.take<float>(dk * ldf32(bv));
    s.Vp = cv.take<float>(L * ldf32(bv));
    s.Ss = take_split(cv, dk, bv, exact);
    s.W = take_split(cv, L, dk, exact);
    s.X = take_split(cv, L, bv, exact);
    s.K = cv.take<bf>(L * ldb16(dk));
    s.g = take_gates(cv);
    *bytes = cv.off;
    return s;
}

// The block's columns [n0, n0 + bv) of a [dk, dv] state, from global memory (src NULL: zeros)
// into S, or from S to global memory.
__device__ void slice_in(float *S, const float *src, int dk, int dv, int n0, int bv) {
    int ld = ldf32(bv);
    for (int e = threadIdx.x; e < dk * bv; e += blockDim.x)
        S[e / bv * ld + e % bv] = src ? src[(long)(e / bv) * dv + n0 + e % bv] : 0.0f;
}
__device__ void slice_out(float *dst, const float *S, int dk, int dv, int n0, int bv) {
    int ld = ldf32(bv);
    for (int e = threadIdx.x; e < dk * bv; e += blockDim.x)
        dst[(long)(e / bv) * dv + n0 + e % bv] = S[e / bv * ld + e % bv];
}

// A chunk's pass inputs in registers, fetched while the chunk before it computes, so that their
// latency is off the pass's critical path: W (hi, lo) and K rows as 16-byte vectors, U's
// columns as float4 (element e = threadIdx.x + r TC_THREADS of each), warp 0's raw gates, and
// whether the chunk starts a document. W's lo rows in the exact mode only.
const int PF_W = 4; // L dk / 8 / TC_THREADS, dk <= 128
const int PF_U = 2; // L bv / 4 / TC_THREADS, bv <= 32
struct PassFetch {
    uint4 whi[PF_W], wlo[PF_W], k[PF_W];
    float4 u[PF_U];
    RawGates gates;
    bool reset;
};

__device__ PassFetch pass_fetch(const gdn_args &a, const Tensors &t, const Factors &f, long idx,
                                int b, int h, int t0, int Lc, int n0, int bv) {
    PassFetch p;
    int dk = a.dk, dv = a.dv, vecs = dk / 8, uvecs = bv / 4;
    const bf *k = t.k + gdn_qk_off(&a, b, t0, h / (a.H / a.HK));
    const bf *whi = f.whi + idx * L * dk, *wlo = f.wlo ? f.wlo + idx * L * dk : NULL;
    long ks = (long)a.HK * dk;
    uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int r = 0; r < PF_W; r++) {
        int e = threadIdx.x + r * TC_THREADS, i = e / vecs, m = e % vecs * 8;
        bool in = e < L * vecs;
        p.whi[r] = in ? *reinterpret_cast<const uint4 *>(whi + i * dk + m) : zero;
        p.wlo[r] = in && wlo ? *reinterpret_cast<const uint4 *>(wlo + i * dk + m) : zero;
        p.k[r] = in && i < Lc ? *reinterpret_cast<const uint4 *>(k + i * ks + m) : zero;
    }
    const float *u = f.u + idx * L * dv + n0;
#pragma unroll
    for (int r = 0; r < PF_U; r++) {
        int e = threadIdx.x + r * TC_THREADS, i = e / uvecs, n = e % uvecs * 4;
        p.u[r] = e < L * uvecs ? *reinterpret_cast<const float4 *>(u + (long)i * dv + n)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    long go = gdn_gate_off(&a, b, t0, h);
    p.gates = RawGates{{0.0f, 0.0f}, {0.0f, 0.0f}, Lc};
    if (threadIdx.x < 32) p.gates = fetch_gates(t.g + go, t.beta + go, a.H, Lc);
    p.reset = starts_document(a, b, t0);
    return p;
}

// The fetched chunk into shared memory: W, K, U's columns and the gates; S zero where the chunk
// starts a document. Ends with a barrier.
__device__ void pass_commit(const PassSmem &s, const PassFetch &p, int dk, int dv, int n0, int bv) {
    int vecs = dk / 8, uvecs = bv / 4, ld = ldb16(dk), ldv = ldf32(bv);
#pragma unroll
    for (int r = 0; r < PF_W; r++) {
        int e = threadIdx.x + r * TC_THREADS, i = e / vecs, m = e % vecs * 8;
        if (e >= L * vecs) continue;
        *reinterpret_cast<uint4 *>(s.W.hi + i * ld + m) = p.whi[r];
        if (s.W.lo) *reinterpret_cast<uint4 *>(s.W.lo + i * ld + m) = p.wlo[r];
        *reinterpret_cast<uint4 *>(s.K + i * ld + m) = p.k[r];
    }
#pragma unroll
    for (int r = 0; r < PF_U; r++) {
        int e = threadIdx.x + r * TC_THREADS, i = e / uvecs, n = e % uvecs * 4;
        if (e < L * uvecs) *reinterpret_cast<float4 *>(s.Vp + i * ldv + n) = p.u[r];
    }
    store_gates(p.gates, s.g.gam, s.g.beta, s.g.eg, s.g.w);
    if (p.reset) slice_in(s.S, NULL, dk, dv, n0, bv);
    __syncthreads();
}

// V' = U - W S in place of U (a warp a 16 x 16 tile).
__device__ void pass_vprime(const PassSmem &s, int dk, int bv) {
    int ldv = ldf32(bv);
    for (int id = threadIdx.x / 32; id < 4 * (bv / 16); id += TC_WARPS) {
        int m0 = id % 4 * 16, c0 = id / 4 * 16;
        FragC u, ws;
        wmma::load_matrix_sync(u, s.Vp + m0 * ldv + c0, ldv, wmma::mem_row_major);
        wmma::fill_fragment(ws, 0.0f);
        mma_split<row_major, row_major>(ws, s.W.hi, s.W.lo, s.W.ld, s.Ss.hi, s.Ss.lo, s.Ss.ld, m0,
                                        c0, dk);
        for (int i = 0; i < u.num_elements; i++) u.x[i] -= ws.x[i];
        wmma::store_matrix_sync(s.Vp + m0 * ldv + c0, u, ldv, wmma::mem_row_major);
    }
}

// S = decay S + K^T X (a warp a 16 x 16 tile of S).
__device__ void pass_update(const PassSmem &s, int dk, int bv, float decay) {
    int lds = ldf32(bv), nb = bv / 16;
    for (int id = threadIdx.x / 32; id < (dk / 16) * nb; id += TC_WARPS) {
        int m0 = id / nb * 16, c0 = id % nb * 16;
        FragC acc;
        wmma::load_matrix_sync(acc, s.S + m0 * lds + c0, lds, wmma::mem_row_major);
        for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= decay;
        mma_split<col_major, row_major>(acc, s.K, NULL, ldb16(dk), s.X.hi, s.X.lo, s.X.ld, m0, c0,
                                        L);
        wmma::store_matrix_sync(s.S + m0 * lds + c0, acc, lds, wmma::mem_row_major);
    }
}

// Grid (dv / bv, H, B): the chunks of span in order (the header of tc_pass in
// gated_delta_tc.cuh).
__global__ void __launch_bounds__(TC_THREADS)
    pass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, Factors f, StateBuf entry, int entry_slot, StateBuf leave,
                int leave_slot, StateBuf keep, int bv) {
    extern __shared__ __align__(128) unsigned char smem[];
    int b = blockIdx.z, h = blockIdx.y, n0 = blockIdx.x * bv, dk = a.dk, dv = a.dv;
    int c1 = min(span.end, counts[b]), ldv = ldf32(bv);
    if (span.begin >= c1) return; // the row has no chunk in the span
    size_t bytes;
    PassSmem s = pass_smem(smem, dk, bv, f.wlo != NULL, &bytes);
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    slice_in(s.S, entry.p ? state_at(entry, a, b, h, entry_slot) : NULL, dk, dv, n0, bv);
    PassFetch next = pass_fetch(a, t, f, factor_index(a, b, h, 0), b, h, row[span.begin],
                                row[span.begin + 1] - row[span.begin], n0, bv);
    for (int c = span.begin; c < c1; c++) {
        int slot = c - span.begin, Lc = row[c + 1] - row[c];
        long idx = factor_index(a, b, h, slot);
        __syncthreads(); // the previous chunk is done with the tiles
        pass_commit(s, next, dk, dv, n0, bv);
        if (c + 1 < c1) // the next chunk's loads fly while this one computes
            next = pass_fetch(a, t, f, idx + 1, b, h, row[c + 1], row[c + 2] - row[c + 1], n0, bv);
        if (keep.p) slice_out(state_at(keep, a, b, h, slot), s.S, dk, dv, n0, bv);
        for (int e = threadIdx.x; e < dk * bv; e += blockDim.x)
            split_store(s.Ss, e / bv, e % bv, s.S[e / bv * ldf32(bv) + e % bv]);
        __syncthreads();
        pass_vprime(s, dk, bv);
        __syncthreads();
        float *vp = f.vp + idx * L * dv + n0;
        for (int e = threadIdx.x; e < L * bv; e += blockDim.x) {
            int i = e / bv, n = e % bv;
            float x = s.Vp[i * ldv + n];
            if (keep.p) vp[(long)i * dv + n] = x;
            split_store(s.X, i, n, s.g.w[i] * x);
        }
        __syncthreads();
        pass_update(s, dk, bv, s.g.eg[Lc - 1]);
    }
    __syncthreads();
    if (leave.p) slice_out(state_at(leave, a, b, h, leave_slot), s.S, dk, dv, n0, bv);
}

// ---- out: the chunk's outputs ------------------------------------------------------------

struct OutSmem {
    bf *Q, *K;
    Split S, V, P; // S0 [dk, dv], V' [L, dv], P [L, L]
    float *tmp;    // TC_WARPS 16 x 16 tiles
    Gates g;
};

__host__ __device__ OutSmem out_smem(unsigned char *base, int dk, int dv, bool exact,
                                     size_t *bytes) {
    Carve cv = {base, 0};
    OutSmem s;
    s.Q = cv.take<bf>(L * ldb16(dk));
    s.K = cv.take<bf>(L * ldb16(dk));
    s.S = take_split(cv, dk, dv, exact);
    s.V = take_split(cv, L, dv, exact);
    s.P = take_split(cv, L, L, exact);
    s.tmp = take_warp_tiles(cv);
    s.g = take_gates(cv);
    *bytes = cv.off;
    return s;
}

// O's tiles: diag(exp(gamma)) Q S0 through the warp's tile (its rows scaled), then + P V',
// times scale, to out's rows below Lc (row stride ostride) in bf16.
__device__ void out_tiles(const OutSmem &s, int dk, int dv, float scale, bf *out, long ostride,
                          int Lc) {
    float *tmp = warp_tile(s.tmp);
    for (int id = threadIdx.x / 32; id < 4 * (dv / 16); id += TC_WARPS) {
        int m0 = id % 4 * 16, n0 = id / 4 * 16;
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_split<row_major, row_major>(acc, s.Q, NULL, ldb16(dk), s.S.hi, s.S.lo, s.S.ld, m0, n0,
                                        dk);
        tile_stage(tmp, acc);
        scale_tile_rows(tmp, TMP_LD, s.g.eg + m0);
        wmma::load_matrix_sync(acc, tmp, TMP_LD, wmma::mem_row_major);
        mma_split<row_major, row_major>(acc, s.P.hi, s.P.lo, s.P.ld, s.V.hi, s.V.lo, s.V.ld, m0, n0,
                                        L);
        tile_stage(tmp, acc);
        for (int e = threadIdx.x % 32; e < 256; e += 32) {
            int i = m0 + e / 16;
            if (i < Lc)
                out[i * ostride + n0 + e % 16] =
                    __float2bfloat16(scale * tmp[e / 16 * TMP_LD + e % 16]);
        }
    }
}

// Grid (chunks of the span, H, B): the outputs of one (chunk, value head) from its entering
// state (slot c - span.begin of states) and V'.
__global__ void __launch_bounds__(TC_THREADS)
    out_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
               Span span, Factors f, StateBuf states) {
    extern __shared__ __align__(128) unsigned char smem[];
    int slot = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0, Lc;
    if (!chunk_at(starts, counts, max_chunks, span, b, span.begin + slot, &t0, &Lc)) return;
    int dk = a.dk, dv = a.dv, hk = h / (a.H / a.HK), ld = ldb16(dk);
    size_t bytes;
    OutSmem s = out_smem(smem, dk, dv, f.wlo != NULL, &bytes);
    float *tmp = warp_tile(s.tmp);
    long idx = factor_index(a, b, h, slot), qks = (long)a.HK * dk;
    load_bf16_rows(s.Q, t.q + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_bf16_rows(s.K, t.k + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_split_rows(s.S, state_at(states, a, b, h, slot), dv, dk, dk, dv, NULL, 1.0f);
    load_split_rows(s.V, f.vp + idx * L * dv, dv, L, L, dv, NULL, 1.0f);
    gates_of(s.g, a, t, b, t0, h, Lc);
    __syncthreads();
    for (int id = threadIdx.x / 32; id < 16; id += TC_WARPS)
        p_tile(tmp, s.Q, s.K, ld, s.g.gam, Lc, id / 4 * 16, id % 4 * 16, dk, NULL, NULL, &s.P);
    __syncthreads();
    out_tiles(s, dk, dv, a.scale, t.out + gdn_v_off(&a, b, t0, h), (long)a.H * dv, Lc);
}

// ---- host side -----------------------------------------------------------------------------

template <typename Kernel> void allow_smem(Kernel k, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

void out_launch(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                int max_chunks, Span span, const Factors &f, StateBuf states, cudaStream_t stream) {
    size_t bytes;
    out_smem(NULL, a->dk, a->dv, f.wlo != NULL, &bytes);
    allow_smem(out_kernel, bytes);
    phase_begin(GDN_PHASE_OUT, stream);
    out_kernel<<<dim3(span.end - span.begin, a->H, a->B), TC_THREADS, bytes, stream>>>(
        *a, t, starts, counts, max_chunks, span, f, states);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
}

// cuda_gated_delta_exact: the hi/lo split of every fp32 operand.
bool exact_mode;

// The phases' events while profiling: a begin and an end event a launch.
const int MAX_MARKS = 4096;
struct Profile {
    bool on, open;
    int n;
    int phase[MAX_MARKS];
    cudaEvent_t ev[2 * MAX_MARKS];
} prof;

} // namespace

// State columns a pass block owns: 32, or 16 where dv is an odd multiple of 16 or where blocks
// of 32 would not give every multiprocessor two blocks (a long row of few heads: the pass is a
// chain of dependent steps, and a second block on a multiprocessor hides the first's latency).
int gdn::pass_cols(const gdn_args *a) {
    int dev, sms;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    bool few = (long)(a->dv / 32) * a->H * a->B < 2L * sms;
    return a->dv % 32 == 0 && !few ? 32 : 16;
}

bool gdn::tc_exact() {
    return exact_mode;
}

extern "C" void cuda_gated_delta_exact(int on) {
    exact_mode = on != 0;
}

void gdn::tc_prep(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                  int max_chunks, Span span, const Factors &f, cudaStream_t stream) {
    size_t bytes;
    prep_smem(NULL, a->dk, a->dv, f.wlo != NULL, &bytes);
    allow_smem(prep_kernel, bytes);
    phase_begin(GDN_PHASE_PREP, stream);
    prep_kernel<<<dim3(span.end - span.begin, a->H, a->B), TC_THREADS, bytes, stream>>>(
        *a, t, starts, counts, max_chunks, span, f);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
}

void gdn::tc_pass(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                  int max_chunks, Span span, const Factors &f, StateBuf entry, int entry_slot,
                  StateBuf leave, int leave_slot, StateBuf keep, cudaStream_t stream) {
    int bv = pass_cols(a);
    size_t bytes;
    pass_smem(NULL, a->dk, bv, f.wlo != NULL, &bytes);
    allow_smem(pass_kernel, bytes);
    phase_begin(GDN_PHASE_PASS, stream);
    pass_kernel<<<dim3(a->dv / bv, a->H, a->B), TC_THREADS, bytes, stream>>>(
        *a, t, starts, counts, max_chunks, span, f, entry, entry_slot, leave, leave_slot, keep, bv);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
}

void gdn::phase_begin(int ph, cudaStream_t stream) {
    if (!prof.on || prof.n >= MAX_MARKS) return;
    cudaEvent_t *ev = prof.ev + 2 * prof.n;
    if (!ev[0]) {
        CUDA_CHECK(cudaEventCreate(&ev[0]));
        CUDA_CHECK(cudaEventCreate(&ev[1]));
    }
    prof.phase[prof.n] = ph;
    prof.open = true;
    CUDA_CHECK(cudaEventRecord(ev[0], stream));
}

void gdn::phase_end(cudaStream_t stream) {
    if (!prof.open) return;
    CUDA_CHECK(cudaEventRecord(prof.ev[2 * prof.n + 1], stream));
    prof.open = false;
    prof.n++;
}

extern "C" void cuda_gated_delta_profile(int on) {
    prof.on = on != 0;
    prof.n = 0;
}

extern "C" void cuda_gated_delta_profile_ms(float ms[GDN_PHASES]) {
    for (int p = 0; p < GDN_PHASES; p++) ms[p] = 0.0f;
    for (int i = 0; i < prof.n; i++) {
        float t;
        CUDA_CHECK(cudaEventSynchronize(prof.ev[2 * i + 1]));
        CUDA_CHECK(cudaEventElapsedTime(&t, prof.ev[2 * i], prof.ev[2 * i + 1]));
        ms[prof.phase[i]] += t;
    }
    prof.n = 0;
}

// The forward's scratch after the chunk lists: one segment's factors, its chunks' entering
// states, and the state carried between segments.
static size_t forward_bytes(const gdn_args *a, Factors *f, unsigned char *p) {
    size_t n = factors_carve(f, p, *a, false, tc_exact());
    return n + sizeof(float) * (size_t)a->B * a->H * (TC_SEG + 1) * a->dk * a->dv;
}

extern "C" size_t cuda_gated_delta_scratch_bytes(const gdn_args *a, int max_chunks, int backward) {
    if (!gdn_tc_shape(a)) return cuda_gated_delta_scratch_bytes_ref(a, max_chunks, backward);
    Factors f;
    size_t fwd = lists_bytes(a, max_chunks) + forward_bytes(a, &f, NULL);
    size_t bwd = backward ? tc_backward_bytes(a, max_chunks) : 0;
    return bwd > fwd ? bwd : fwd; // a backward's scratch serves a forward too
}

extern "C" void cuda_gated_delta_forward(const gdn_args *a, int max_chunks,
                                         const cuda_gdn_tensors *t, void *scratch,
                                         cudaStream_t stream) {
    if (!gdn_tc_shape(a)) {
        cuda_gated_delta_forward_ref(a, max_chunks, t, scratch, stream);
        return;
    }
    KtScope kt(stream, KT_ATTENTION);
    if (a->B <= 0 || a->T <= 0) return;
    check_shape(a);
    kt_work(stream, KT_ATTENTION, forward_flops(a), 0, "gated delta forward dk %d", a->dk);
    int32_t *starts, *counts;
    build_lists(a, max_chunks, scratch, &starts, &counts, stream);
    unsigned char *p = static_cast<unsigned char *>(scratch) + lists_bytes(a, max_chunks);
    Factors f;
    size_t fbytes = factors_carve(&f, p, *a, false, tc_exact());
    float *states = reinterpret_cast<float *>(p + fbytes);
    const StateBuf keep = {states, TC_SEG, 1};
    const StateBuf carry = {states + (size_t)a->B * a->H * TC_SEG * a->dk * a->dv, 1, 1};
    const StateBuf none = {NULL, 0, 1};
    Tensors tt = tensors_of(t);
    int nseg = (max_chunks + TC_SEG - 1) / TC_SEG;
    for (int sg = 0; sg < nseg; sg++) {
        Span span = {sg * TC_SEG,
                     sg * TC_SEG + TC_SEG < max_chunks ? sg * TC_SEG + TC_SEG : max_chunks};
        tc_prep(a, tt, starts, counts, max_chunks, span, f, stream);
        tc_pass(a, tt, starts, counts, max_chunks, span, f, sg > 0 ? carry : none, 0,
                sg + 1 < nseg ? carry : none, 0, keep, stream);
        out_launch(a, tt, starts, counts, max_chunks, span, f, keep, stream);
    }
}
