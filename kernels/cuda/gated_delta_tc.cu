// The chunked gated delta rule on tensor cores: the math of kernels/cpu/gated_delta_chunked.c in
// the WY/UT form, per chunk of L <= 64 tokens entered with state S0 [dk, dv], with gamma the
// cumulative sum of g, D_ij = exp(gamma_i - gamma_j), w_j = exp(gamma_last - gamma_j):
//   A_ij = beta_i D_ij k_i.k_j (j < i),  T = (I + A)^-1                (fp32 substitution);
//   W = T diag(beta exp(gamma)) K,  U = T diag(beta) V                  (state-independent);
//   V' = U - W S0                                                       (the sequential part);
//   S_end = exp(gamma_last) S0 + K^T diag(w) V';
//   O = scale (diag(exp(gamma)) Q S0 + P V'),  P_ij = D_ij q_i.k_j (j <= i).
// Only V' and S_end need the chunk before; they are two [L, dk] x [dk, dv]-sized products a
// chunk. Every product runs on bf16 tensor cores (mma.sync) with fp32 accumulation; fp32 operands
// enter rounded to bf16, or split in two bf16 halves in the exact mode (gated_delta_tc.cuh). The
// triangular solve, the gates' exponentials and the state stay fp32.
//
// The forward works a segment of TC_SEG chunks at a time (its scratch holds two segments' W,
// U, V' and entering states, which segments take in turn). Kernels, in call order:
// - chunk_list_kernel (gated_delta.cu): each row's chunk starts.
// - prep_kernel, grid (chunks of the segment, H, B): KK^T, A, T, W and U (and for the backward
//   P, T and M) of one (chunk, value head).
// - pass_kernel (gated_delta_pass.cu), grid (column blocks of 16 to 64 state columns, H, B): the
//   segment's chunks in order, the state in registers: V' = U - W S, S = decay S + K^T diag(w)
//   V'; keeps each chunk's entering state and V'; carries the state to the next segment. It runs
//   on a side stream (a lane, gated_delta_tc.cuh), beside the next segment's prep and the
//   previous segment's out: a pass is a few dozen blocks of dependent steps, which leave most
//   multiprocessors to the per-chunk kernels.
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

// ---- prep: the chunk's state-independent factors -------------------------------------------

// M and X for the solve. A block takes 68 KB at dk = dv = 128, three a multiprocessor: T, split
// in the default mode, lies over M, which the solve leaves dead (the backward stores M first);
// one region R holds Q (the backward's, for P), then the solve's sums, then V, which lands
// while W is made. X's rows are 68 floats apart, which spreads a warp's writes of four rows of
// 8 columns over the banks.
const int XLD = L + 4;
const int SOLVE_SUMS = 768; // invert_unit_lower's Y

struct PrepSmem {
    bf *K, *Q, *V; // Q and V in R, in turn
    float *Y;      // in R too
    Gates g;
    float *M, *X; // [L, L] and [L, XLD]
    Split T;      // T with its columns scaled, [L, L]
};

__host__ __device__ PrepSmem prep_smem(unsigned char *base, int dk, int dv, bool exact,
                                       size_t *bytes) {
    Carve cv = {base, 0};
    PrepSmem s;
    s.K = cv.take<bf>(L * ldb16(dk));
    size_t r = sizeof(bf) * L * ldb16(dk > dv ? dk : dv);
    if (r < sizeof(float) * SOLVE_SUMS) r = sizeof(float) * SOLVE_SUMS;
    unsigned char *region = cv.take<unsigned char>(r);
    s.Q = s.V = reinterpret_cast<bf *>(region);
    s.Y = reinterpret_cast<float *>(region);
    s.g = take_gates(cv);
    s.M = cv.take<float>(L * L);
    s.X = cv.take<float>(L * XLD);
    if (exact) // hi and lo: more than M's bytes
        s.T = take_split(cv, L, L, exact);
    else
        s.T = Split{reinterpret_cast<bf *>(s.M), NULL, ldb16(L)};
    *bytes = cv.off;
    return s;
}

// T's columns scaled by beta_j (and exp(gamma_j) with eg), split; eight columns a thread at a
// time (16-byte accesses).
__device__ void scaled_t(const PrepSmem &s, const float *eg) {
    for (int e = 8 * threadIdx.x; e < L * L; e += 8 * blockDim.x) {
        int i = e / L, j = e % L;
        __align__(16) float x[8];
        row8(x, s.X + i * XLD + j);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = x[k] * s.g.beta[j + k] * (eg ? eg[j + k] : 1.0f);
        split_put8(s.T.hi, s.T.lo, i * s.T.ld + j, x);
    }
}

// The tile of QK^T at (m0, n0) in acc as the same tile of P = D QK^T (lower, with the
// diagonal; zero on the rows past Lc), in the lanes' registers.
__device__ void frag_p_mask(FragC &acc, const float *gam, int Lc, int m0, int n0) {
#pragma unroll
    for (int k = 0; k < FRAG_PAIRS; k++) {
        int i = m0 + frag_pair_row(k), j = n0 + frag_pair_col(k);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float &x = acc.x[2 * k + e];
            x = i < Lc && j + e <= i ? expf(gam[i] - gam[j + e]) * x : 0.0f;
        }
    }
}

// P's tile at (m0, n0) from Q, K and the gates in shared memory, into the split matrix (hi, lo)
// at p (row stride L), for the backward.
__device__ void p_tile(const bf *Q, const bf *K, int ld, const float *gam, int Lc, int m0, int n0,
                       int dk, bf *phi, bf *plo) {
    FragC acc;
    frag_fill(acc, 0.0f);
    mma_tile<row_major, col_major>(acc, Q, ld, K, ld, m0, n0, dk);
    frag_p_mask(acc, gam, Lc, m0, n0);
    frag_put_split(phi, plo, L, (long)m0 * L + n0, acc);
}

// KK^T into M and (with_p) P = D QK^T (lower, split into the factors), then A's M = D KK^T
// (strict lower) and X = I.
__device__ void prep_mats(const PrepSmem &s, const Factors &f, long idx, int Lc, int dk,
                          bool with_p) {
    int ld = ldb16(dk);
    for (int id = threadIdx.x / 32; id < 16; id += TC_WARPS) {
        int m0 = id / 4 * 16, n0 = id % 4 * 16;
        FragC acc;
        frag_fill(acc, 0.0f);
        mma_tile<row_major, col_major>(acc, s.K, ld, s.K, ld, m0, n0, dk);
        frag_store(s.M + m0 * L + n0, acc, L);
        if (with_p)
            p_tile(s.Q, s.K, ld, s.g.gam, Lc, m0, n0, dk, f.phi + idx * L * L,
                   f.plo ? f.plo + idx * L * L : NULL);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        int i = e / L, j = e % L;
        float D = i < Lc && j < i ? expf(s.g.gam[i] - s.g.gam[j]) : 0.0f;
        s.M[e] = D * s.M[e];
        s.X[i * XLD + j] = i == j ? 1.0f : 0.0f;
    }
    __syncthreads();
}

// T = (I + diag(beta) M)^-1 for the strictly lower M [L, L] (zero on the rows past the chunk,
// so those rows of T are the identity's), into X [L, XLD], which holds the identity on entry:
// blockwise in fp32, where row-by-row substitution would be a chain of L dependent steps. The
// four diagonal 16 x 16 blocks first, by substitution with each column's values in the
// registers of four lanes (16 steps); then the blocks below them by distance d from the
// diagonal, T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj (A = diag(beta) M), whose terms are all of
// distance below d (three rounds of two products). Y holds a round's sums (768 floats). Ends
// with a barrier. Needs 256 threads: four lanes a column.
__device__ void invert_unit_lower(float *X, const float *M, const float *beta, float *Y) {
    int col = threadIdx.x / 4, sub = threadIdx.x % 4, r0 = col / 16 * 16, cl = col % 16;
    float x[4]; // rows r0 + 4 m + sub of the column
#pragma unroll
    for (int i = 0; i < 16; i++) {
        float s = 0.0f;
#pragma unroll
        for (int m = 0; m < 4; m++)
            if (4 * m + sub < i) s += M[(r0 + i) * L + r0 + 4 * m + sub] * x[m];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        float xi = (i == cl ? 1.0f : 0.0f) - beta[r0 + i] * s;
        if (sub == i % 4) x[i / 4] = xi;
    }
#pragma unroll
    for (int m = 0; m < 4; m++) X[(r0 + 4 * m + sub) * XLD + col] = x[m];
    __syncthreads();
    for (int d = 1; d < L / 16; d++) {
        int n = (L / 16 - d) * 256; // the elements of the blocks (j + d, j)
        for (int e = threadIdx.x; e < n; e += blockDim.x) {
            int j = e / 256, i = j + d, r = e / 16 % 16, c = e % 16;
            float s = 0.0f;
            for (int q = 16 * j; q < 16 * i; q += 4) { // M's row four at a time, q in order
                float4 m = *reinterpret_cast<const float4 *>(M + (16 * i + r) * L + q);
                const float *x = X + q * XLD + 16 * j + c;
                s += m.x * x[0];
                s += m.y * x[XLD];
                s += m.z * x[2 * XLD];
                s += m.w * x[3 * XLD];
            }
            Y[e] = beta[16 * i + r] * s;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < n; e += blockDim.x) {
            int j = e / 256, i = j + d, r = e / 16 % 16, c = e % 16;
            float s = 0.0f;
            for (int q = 0; q <= r; q++)
                s += X[(16 * i + r) * XLD + 16 * i + q] * Y[j * 256 + q * 16 + c];
            X[(16 * i + r) * XLD + 16 * j + c] = -s;
        }
        __syncthreads();
    }
}

// Grid (chunks of the span, H, B); DK, DV: the head dims, or 0 (dim_or, gated_delta_tc.cuh).
template <int DK, int DV>
__global__ void __launch_bounds__(TC_THREADS)
    prep_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, Factors f) {
    extern __shared__ __align__(128) unsigned char smem[];
    int slot = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0, Lc;
    if (!chunk_at(starts, counts, max_chunks, span, b, span.begin + slot, &t0, &Lc)) return;
    int dk = dim_or<DK>(a.dk), dv = dim_or<DV>(a.dv), hk = h / (a.H / a.HK);
    bool with_p = f.phi != NULL;
    size_t bytes;
    PrepSmem s = prep_smem(smem, dk, dv, f.wlo != NULL, &bytes);
    long idx = factor_index(a, b, h, slot), qks = (long)a.HK * dk;
    load_bf16_rows(s.K, t.k + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    if (with_p) load_bf16_rows(s.Q, t.q + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    gates_of(s.g, a, t, b, t0, h, Lc);
    loads_done();
    __syncthreads();
    prep_mats(s, f, idx, Lc, dk, with_p);
    invert_unit_lower(s.X, s.M, s.g.beta, s.Y); // X = T; ends with a barrier
    load_bf16_rows(s.V, t.v + gdn_v_off(&a, b, t0, h), (long)a.H * dv, Lc, dv); // over Y
    if (with_p) { // the backward's M and T, before T's scaled copy lands on M
        for (int e = 8 * threadIdx.x; e < L * L; e += 8 * blockDim.x) {
            __align__(16) float x[8];
            row8(x, s.M + e);
            put8(f.m + idx * L * L + e, x);
            row8(x, s.X + e / L * XLD + e % L);
            split_put8(f.thi, f.tlo, idx * L * L + e, x);
        }
        __syncthreads();
    }
    // W = (T diag(beta exp(gamma))) K, split on its way out from the lanes' registers.
    scaled_t(s, s.g.eg);
    __syncthreads();
    FragC acc[MAX_TILES];
    WarpTiles wt = warp_tiles(dk);
    tiles_zero(acc);
    mma_split_tiles<row_major, row_major>(acc, wt, s.T.hi, s.T.lo, s.T.ld, s.K, NULL, ldb16(dk), L);
#pragma unroll
    for (int j = 0; j < MAX_TILES; j++)
        if (j < wt.n)
            frag_put_split(f.whi + idx * L * dk, f.wlo ? f.wlo + idx * L * dk : NULL, dk,
                           wt.m0 * dk + tile_col(wt, j), acc[j]);
    __syncthreads();
    // U = (T diag(beta)) V, straight to global memory.
    scaled_t(s, NULL);
    loads_done(); // V
    __syncthreads();
    wt = warp_tiles(dv);
    tiles_zero(acc);
    mma_split_tiles<row_major, row_major>(acc, wt, s.T.hi, s.T.lo, s.T.ld, s.V, NULL, ldb16(dv), L);
    tiles_store(f.u + idx * L * dv, dv, acc, wt);
}

// ---- out: the chunk's outputs ------------------------------------------------------------

// The block's tiles. Each warp makes its own rows of P in its registers (p_rows), so no P or
// staging tile is carved. In the default mode at dk = dv (the "halves" layout) S0's rows
// [dk / 2, dk) land where K was once P is made, and a block takes 69 KB at dk = dv = 128:
// three a multiprocessor.
struct OutSmem {
    bf *Q, *K;
    Split S, V; // S0 [dk, dv] (or its first half), V' [L, dv]
    bf *S2;     // the halves layout: S0's second half, over K (else NULL)
    Gates g;
};

inline __host__ __device__ bool out_halves(int dk, int dv, bool exact) {
    return !exact && dk == dv && dk % 32 == 0 && dk / 2 <= L;
}

__host__ __device__ OutSmem out_smem(unsigned char *base, int dk, int dv, bool exact,
                                     size_t *bytes) {
    Carve cv = {base, 0};
    OutSmem s;
    bool halves = out_halves(dk, dv, exact);
    s.Q = cv.take<bf>(L * ldb16(dk));
    s.K = cv.take<bf>(L * ldb16(dk));
    s.S2 = halves ? s.K : NULL;
    s.S = take_split(cv, halves ? dk / 2 : dk, dv, exact);
    s.V = take_split(cv, L, dv, exact);
    s.g = take_gates(cv);
    *bytes = cv.off;
    return s;
}

// Rows m0 .. m0 + 16 of P = D QK^T (lower, with the diagonal) as the A fragments of P V':
// column tile kt (kt <= m0 / 16; the tiles past the diagonal are zero) in a[kt], rounded to
// bf16 as p_tile rounds them (lo: the remainders, in the exact mode). Pair k of a FragC is
// register k of an A fragment.
template <bool EXACT> struct PRows { uint32_t hi[L / 16][4], lo[EXACT ? L / 16 : 1][4]; };

template <bool EXACT>
__device__ void p_rows(PRows<EXACT> &p, const bf *Q, const bf *K, int ld, const float *gam, int Lc,
                       int m0, int dk) {
#pragma unroll
    for (int kt = 0; kt < L / 16; kt++) {
        if (16 * kt > m0) break;
        FragC acc;
        frag_fill(acc, 0.0f);
        mma_tile<row_major, col_major>(acc, Q, ld, K, ld, m0, 16 * kt, dk);
        frag_p_mask(acc, gam, Lc, m0, 16 * kt);
#pragma unroll
        for (int k = 0; k < FRAG_PAIRS; k++) {
            SplitPair sp = split_pair(acc.x[2 * k], acc.x[2 * k + 1]);
            p.hi[kt][k] = sp.hi;
            if (EXACT) p.lo[EXACT ? kt : 0][k] = sp.lo;
        }
    }
}

// acc[j] += A V' over the k-tiles of the warp's rows below the diagonal (the zero ones skipped),
// A's fragments in registers, each tile's k-steps in order.
template <int N>
__device__ void pv_pass(FragC (&acc)[N], const WarpTiles &wt, const uint32_t (*A)[4], const bf *V,
                        int ldv) {
#pragma unroll
    for (int kt = 0; kt < L / 16; kt++) {
        if (16 * kt > wt.m0) break;
        uint32_t b[N][4];
#pragma unroll
        for (int j = 0; j < N; j++)
            if (j < wt.n) frag_b<row_major>(b[j], V, ldv, 16 * kt, tile_col(wt, j));
#pragma unroll
        for (int j = 0; j < N; j++)
            if (j < wt.n) mma_step(acc[j], A[kt], b[j]);
    }
}

// O's tiles: diag(exp(gamma)) Q S0 (its rows scaled in the lanes' registers), then + P V' (the
// products in mma_split_tiles' order: lo x hi, hi x lo, hi x hi), times scale, to out's rows
// below Lc (row stride ostride) in bf16, straight from the lanes' registers.
template <bool EXACT>
__device__ void out_tiles(const OutSmem &s, const PRows<EXACT> &p, int dk, int dv, float scale,
                          bf *out, long ostride, int Lc) {
    WarpTiles wt = warp_tiles(dv);
    int ld = ldb16(dk);
    FragC acc[MAX_TILES];
    tiles_zero(acc);
    if (s.S2) { // S0's halves: the first here, the second where K was, once it has landed
        mma_tiles<row_major, row_major>(acc, wt, s.Q, ld, s.S.hi, s.S.ld, dk / 2);
        loads_done();
        __syncthreads();
        mma_tiles<row_major, row_major>(acc, wt, s.Q + dk / 2, ld, s.S2, s.S.ld, dk / 2);
    } else {
        mma_split_tiles<row_major, row_major>(acc, wt, s.Q, NULL, ld, s.S.hi, s.S.lo, s.S.ld, dk);
    }
#pragma unroll
    for (int j = 0; j < MAX_TILES; j++)
        if (j < wt.n) frag_scale_rows(acc[j], s.g.eg + wt.m0);
    if (EXACT) pv_pass(acc, wt, p.lo, s.V.hi, s.V.ld);
    if (s.V.lo) pv_pass(acc, wt, p.hi, s.V.lo, s.V.ld);
    pv_pass(acc, wt, p.hi, s.V.hi, s.V.ld);
#pragma unroll
    for (int j = 0; j < MAX_TILES; j++) {
        if (j >= wt.n) continue;
#pragma unroll
        for (int k = 0; k < FRAG_PAIRS; k++) {
            int i = wt.m0 + frag_pair_row(k), c = tile_col(wt, j) + frag_pair_col(k);
            if (i < Lc)
                *reinterpret_cast<uint32_t *>(out + i * ostride + c) =
                    pack_bf16(scale * acc[j].x[2 * k], scale * acc[j].x[2 * k + 1]);
        }
    }
}

// Grid (chunks of the span, H, B): the outputs of one (chunk, value head) from its entering
// state (slot c - span.begin of states) and V'. EXACT: the factors' exact mode.
template <int DK, int DV, bool EXACT>
__global__ void __launch_bounds__(TC_THREADS)
    out_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
               Span span, Factors f, Kept states) {
    extern __shared__ __align__(128) unsigned char smem[];
    int slot = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0, Lc;
    if (!chunk_at(starts, counts, max_chunks, span, b, span.begin + slot, &t0, &Lc)) return;
    int dk = dim_or<DK>(a.dk), dv = dim_or<DV>(a.dv), hk = h / (a.H / a.HK), ld = ldb16(dk);
    size_t bytes;
    OutSmem s = out_smem(smem, dk, dv, EXACT, &bytes);
    long idx = factor_index(a, b, h, slot), qks = (long)a.HK * dk;
    long so = kept_index(states, a, b, h, slot);
    load_bf16_rows(s.Q, t.q + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_bf16_rows(s.K, t.k + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_split_block(s.S, states.hi, states.lo, so, s.S2 ? dk / 2 : dk, dv);
    load_split_block(s.V, f.vphi, f.vplo, idx * L * dv, L, dv);
    gates_of(s.g, a, t, b, t0, h, Lc);
    loads_done();
    __syncthreads();
    PRows<EXACT> p;
    p_rows(p, s.Q, s.K, ld, s.g.gam, Lc, warp_tiles(dv).m0, dk);
    if (s.S2) { // K is done with: S0's second half lands there
        __syncthreads();
        load_bf16_block(s.S2, states.hi + so + (long)dk / 2 * dv, dv, dk / 2, dk / 2, dv);
    }
    out_tiles(s, p, dk, dv, a.scale, t.out + gdn_v_off(&a, b, t0, h), (long)a.H * dv, Lc);
}

// ---- host side -----------------------------------------------------------------------------

template <int DK, int DV> constexpr auto out_exact = out_kernel<DK, DV, true>;
template <int DK, int DV> constexpr auto out_rounded = out_kernel<DK, DV, false>;

template <typename Kernel> void allow_smem(Kernel k, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

void out_launch(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                int max_chunks, Span span, const Factors &f, Kept states, cudaStream_t stream) {
    size_t bytes;
    bool exact = f.wlo != NULL;
    out_smem(NULL, a->dk, a->dv, exact, &bytes);
    auto kernel = exact ? GDN_DIMS_KERNEL(out_exact, a) : GDN_DIMS_KERNEL(out_rounded, a);
    allow_smem(kernel, bytes);
    phase_begin(GDN_PHASE_OUT, stream);
    kernel<<<dim3(span.end - span.begin, a->H, a->B), TC_THREADS, bytes, stream>>>(
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
    auto kernel = GDN_DIMS_KERNEL(prep_kernel, a);
    allow_smem(kernel, bytes);
    phase_begin(GDN_PHASE_PREP, stream);
    kernel<<<dim3(span.end - span.begin, a->H, a->B), TC_THREADS, bytes, stream>>>(
        *a, t, starts, counts, max_chunks, span, f);
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

namespace {
struct Lanes {
    bool made, off;
    cudaStream_t s[LANES];
    cudaEvent_t ev[MARKS];
} lanes;

void make_lanes() {
    if (lanes.made) return;
    int least, greatest;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int i = 0; i < LANES; i++)
        CUDA_CHECK(cudaStreamCreateWithPriority(&lanes.s[i], cudaStreamNonBlocking, greatest));
    for (int i = 0; i < MARKS; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&lanes.ev[i], cudaEventDisableTiming));
    lanes.made = true;
}
} // namespace

cudaStream_t gdn::lane(Lane which, cudaStream_t stream) {
    if (lanes.off) return stream;
    make_lanes();
    return lanes.s[which];
}

extern "C" void cuda_gated_delta_lanes(int on) {
    lanes.off = !on;
}

cudaEvent_t gdn::mark(Mark m, cudaStream_t s) {
    make_lanes();
    CUDA_CHECK(cudaEventRecord(lanes.ev[m], s));
    return lanes.ev[m];
}

void gdn::after(cudaStream_t waiter, cudaEvent_t e) {
    CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
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

// The forward's scratch after the chunk lists: two sets (segments take them in turn; one where
// there is a single segment, sets_of) of one segment's factors and its chunks' entering states
// (split). The states carried between segments are the checkpoints (t->ckpt).
struct FwdScratch {
    Factors f[2];
    Kept keep[2];
};

static size_t fwd_carve(FwdScratch *s, unsigned char *p, const gdn_args *a, int max_chunks) {
    size_t off = 0;
    int sets = sets_of(max_chunks);
    bool exact = tc_exact();
    for (int i = 0; i < sets; i++) off += factors_carve(&s->f[i], p + off, *a, false, exact);
    Carve cv = {p ? p + off : NULL, 0};
    for (int i = 0; i < sets; i++) s->keep[i] = take_kept(cv, *a, TC_SEG, exact, false);
    if (sets == 1) s->f[1] = s->f[0], s->keep[1] = s->keep[0]; // never taken
    return off + cv.off;
}

extern "C" size_t cuda_gated_delta_ckpt_bytes(const gdn_args *a, int max_chunks) {
    // the _ref kernels keep theirs in their scratch; one segment needs none
    if (!gdn_tc_shape(a) || segments_of(max_chunks) < 2) return 0;
    return sizeof(float) * (segments_of(max_chunks) - 1) * a->B * a->H * a->dk * a->dv;
}

StateBuf gdn::checkpoints(const gdn_args *a, int max_chunks, const cuda_gdn_tensors *t) {
    int n = segments_of(max_chunks) - 1;
    if (n > 0 && !t->ckpt) {
        fprintf(stderr,
                "megatrain: gated_delta_tc.cu: rows of %d chunks need the checkpoints' %zu "
                "bytes (cuda_gdn_tensors.ckpt is NULL)\n",
                max_chunks, cuda_gated_delta_ckpt_bytes(a, max_chunks));
        exit(2);
    }
    return StateBuf{t->ckpt, n, 1};
}

extern "C" size_t cuda_gated_delta_scratch_bytes(const gdn_args *a, int max_chunks, int backward) {
    if (!gdn_tc_shape(a)) return cuda_gated_delta_scratch_bytes_ref(a, max_chunks, backward);
    FwdScratch s;
    size_t fwd = lists_bytes(a, max_chunks) + fwd_carve(&s, NULL, a, max_chunks);
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
    FwdScratch s;
    fwd_carve(&s, static_cast<unsigned char *>(scratch) + lists_bytes(a, max_chunks), a,
              max_chunks);
    const StateBuf none = {NULL, 0, 1}, ckpt = checkpoints(a, max_chunks, t);
    Tensors tt = tensors_of(t);
    int nseg = segments_of(max_chunks);
    // Segment sg's pass runs on the pass lane beside the next segment's prep and the previous
    // segment's out on `stream`; set sg % 2 is free again once out(sg - 2) is done, which
    // prep(sg) follows on `stream` and pass(sg) follows by its wait on prep(sg).
    cudaStream_t pass = lane(LANE_PASS, stream);
    tc_prep(a, tt, starts, counts, max_chunks, span_at(0, max_chunks), s.f[0], stream);
    after(pass, mark(MARK_PREP, stream));
    for (int sg = 0; sg < nseg; sg++) {
        Span span = span_at(sg, max_chunks);
        int k = sg % 2;
        tc_pass(a, tt, starts, counts, max_chunks, span, s.f[k], sg > 0 ? ckpt : none, sg - 1,
                sg + 1 < nseg ? ckpt : none, sg, s.keep[k], pass);
        cudaEvent_t passed = mark(MARK_PASS, pass);
        if (sg + 1 < nseg) {
            tc_prep(a, tt, starts, counts, max_chunks, span_at(sg + 1, max_chunks), s.f[1 - k],
                    stream);
            after(pass, mark(MARK_PREP, stream));
        }
        after(stream, passed);
        out_launch(a, tt, starts, counts, max_chunks, span, s.f[k], s.keep[k], stream);
    }
}
