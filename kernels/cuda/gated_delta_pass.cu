// The chunked gated delta rule's state passes with the state in registers: the forward's
// (tc_pass; gated_delta_tc.cu has the math) and, below it, the backward's state-gradient pass
// (tc_dpass; gated_delta_tc_bwd.cu has its math). The pass is a chain of dependent chunks, so its
// time is the chain's latency: what it keeps off the chain is what makes it fast.
//
// A warp owns 16 columns of one head's state S [dk, dv] and keeps S^T, [16, dk], in mma.sync
// accumulators for the whole span (at dk 128: 64 registers a thread). A chunk is then two
// products on the warp's own registers, with no barrier between them:
//   V'^T = U^T - S^T W^T      (S^T's accumulators are the A fragments, as P in flash attention)
//   S^T  = decay S^T + X^T K  (X^T = V'^T diag(w), again from accumulators to A fragments)
// and a block's warps (16 to 64 columns of one head) share one copy of the chunk's W, K and U
// in shared memory, loaded with cp.async while the chunk before computes: one barrier a chunk.
// Each chunk's entering state and V' go to global memory for the output kernel and the
// backward. Operands enter the products rounded to bf16 once, or split in two bf16 halves in
// the exact mode (gated_delta_tc.cuh); the state and every sum stay fp32.
//
// A warp's arithmetic does not depend on how many warps its block has, so pass_warps may choose
// the block size for speed alone: every choice gives the same bits (test_gdn_cuda checks).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"
#include "kernels/cuda/mma.cuh"

namespace {

using namespace gdn;

const int PASS_MAX_WARPS = 4;

// One chunk's tiles in shared memory: W (hi, lo) and K, [L, ldb16(dk)] bf16 (W's lo in the
// exact mode only), and the block's columns of U, [L, ldf32(bv)] fp32. A block has two, the
// next chunk's in flight while a chunk computes.
struct PassTiles {
    bf16 *whi, *wlo, *k;
    float *u;
};

// Each warp's floats for chunk_decay's trade, after the staging tiles.
const int DECAY_FLOATS = 2 * L;

// Row stride (bf16) of a warp's staging tile, through which its kept states and V' leave in
// 16-byte stores: 16 columns and 8 of padding (48 bytes), which puts the eight 16-byte rows an
// stmatrix writes in distinct banks. A tile has STAGE_ROWS rows: a state of dk 128 passes in
// two halves, so that a pass block (119 KB at dk 128, chunk_decay's floats with it) still leaves
// room on its multiprocessor for an out or prep block beside it (measured: a whole state's tile
// made the forward's out kernel 19% slower).
const int STAGE_LD = 24;
const int STAGE_ROWS = L;

// The block's staging tiles (bv / 16 warps'), after its chunk tiles; none in the exact mode,
// whose split stores take the element path (acc_t_split).
__host__ __device__ bf16 *take_stage(Carve &cv, int bv, bool exact) {
    return exact ? NULL : cv.take<bf16>(bv / 16 * STAGE_ROWS * STAGE_LD);
}

__host__ __device__ void pass_tiles(PassTiles (&t)[2], bf16 **stage, float **decay,
                                    unsigned char *base, int dk, int bv, bool exact,
                                    size_t *bytes) {
    Carve cv = {base, 0};
    for (int i = 0; i < 2; i++) {
        t[i].whi = cv.take<bf16>(L * ldb16(dk));
        t[i].wlo = exact ? cv.take<bf16>(L * ldb16(dk)) : NULL;
        t[i].k = cv.take<bf16>(L * ldb16(dk));
        t[i].u = cv.take<float>(L * ldf32(bv));
    }
    *stage = take_stage(cv, bv, exact);
    *decay = cv.take<float>(bv / 16 * DECAY_FLOATS);
    *bytes = cv.off;
}

// Rows [0, n) of a [., WIDTH] bf16 matrix (row stride `stride`) into a [L, ldb16(WIDTH)] tile
// by cp.async, rows from n to L zero (FULL: n is L). A thread takes one 16-byte column of every
// STEP-th row, STEP = threads / (WIDTH / 8), with THREADS the block's threads where the kernel
// fixes them (0: blockDim.x): then the copies unroll with their offsets folded into the
// instructions. These copies sit on the passes' chain of chunks, and as loops stepped at run
// time they were a third of a chunk's instructions in the pass's SASS.
template <int WIDTH, int THREADS, bool FULL>
__device__ __forceinline__ void copy_rows_async(bf16 *dst, const bf *src, long stride, int n) {
    const int vecs = WIDTH / 8, ld = ldb16(WIDTH);
    int i = threadIdx.x / vecs, m = threadIdx.x % vecs * 8;
    const bf *from = src + i * stride + m;
    bf16 *to = dst + i * ld + m;
    if (THREADS) {
        const int step = (THREADS ? THREADS : vecs) / vecs;
        const long jump = step * stride;
#pragma unroll
        for (int r = 0; r < L / step; r++, from += jump)
            cp_async16_zfill(to + r * step * ld, from, FULL || i + r * step < n);
        return;
    }
    int step = blockDim.x / vecs;
    for (; i < L; i += step, from += step * stride, to += step * ld) {
        if (FULL || i < n)
            cp_async16(to, from);
        else
            *reinterpret_cast<uint4 *>(to) = make_uint4(0, 0, 0, 0);
    }
}

// Rows [0, n) of a block's bv columns of a fp32 matrix (row stride `stride`) into a
// [L, ldf32(bv)] tile by cp.async, rows from n to L zero (FULL: n is L). blockDim.x = 8 (bv / 4):
// a thread takes one 4-column vector of every eighth row, its source stepped by a stride
// computed once, and the rows past n are the copy's zero fill.
template <bool FULL>
__device__ __forceinline__ void copy_cols_async(float *dst, const float *src, long stride, int n,
                                                int bv) {
    int vecs = bv / 4, ld = ldf32(bv), c = threadIdx.x % vecs * 4, i0 = threadIdx.x / vecs;
    const float *from = src + i0 * stride + c;
    float *to = dst + i0 * ld + c;
    const long step = 8 * stride;
#pragma unroll
    for (int r = 0; r < L / 8; r++, from += step)
        cp_async16_zfill(to + 8 * r * ld, from, FULL || i0 + 8 * r < n);
}

// Starts the copies of one chunk's tiles (every thread of the block takes a share) and commits
// them as one cp.async group. K's rows past Lc are zeroed here: X's columns there are zero, but
// uninitialised shared memory could hold a NaN.
template <int KS, int THREADS>
__device__ void pass_load(const PassTiles &s, const gdn_args &a, const Tensors &t, const Factors &f,
                          long idx, int b, int h, int t0, int Lc, int n0, int bv) {
    const int dk = 16 * KS;
    copy_rows_async<dk, THREADS, true>(s.whi, f.whi + idx * L * dk, dk, L);
    if (s.wlo) copy_rows_async<dk, THREADS, true>(s.wlo, f.wlo + idx * L * dk, dk, L);
    copy_rows_async<dk, THREADS, false>(s.k, t.k + gdn_qk_off(&a, b, t0, h / (a.H / a.HK)),
                                        (long)a.HK * dk, Lc);
    copy_cols_async<true>(s.u, f.u + idx * L * a.dv + n0, a.dv, L, bv);
    cp_async_commit();
}

// Where element e of n8-tile j of a warp's [16, 8 NT] accumulator lies (mma16816's C layout,
// lane = 4 g + q): row g or g + 8, column 8 j + 2 q or one past it.
__device__ __forceinline__ int frag_row(int lane, int e) {
    return lane / 4 + (e >> 1) * 8;
}
__device__ __forceinline__ int frag_col(int lane, int j, int e) {
    return 8 * j + 2 * (lane % 4) + (e & 1);
}

// S^T's accumulators from a [dk, dv] fp32 state (columns nw .. nw + 15; src NULL: zeros), and
// back.
template <int NT>
__device__ void state_in(float (&st)[1][NT][4], const float *src, int dv, int nw, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            st[0][j][e] =
                src ? src[(long)frag_col(lane, j, e) * dv + nw + frag_row(lane, e)] : 0.0f;
}
template <int NT>
__device__ void state_out(float *dst, const float (&st)[1][NT][4], int dv, int nw, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dst[(long)frag_col(lane, j, e) * dv + nw + frag_row(lane, e)] = st[0][j][e];
}

// A warp's accumulators zeroed where `reset` (a chunk that starts a document: rare). The empty asm
// keeps the branch a branch: the compiler had made the zeroing selects, 64 instructions on every
// chunk of the chain.
template <int NT> __device__ __forceinline__ void zero_where(float (&acc)[1][NT][4], bool reset) {
    if (reset) {
        asm volatile("");
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[0][j][e] = 0.0f;
    }
}

// Two fp32 values as a bf16x2 register (hi) and, in the exact mode, their remainders' (lo).
template <bool EXACT>
__device__ __forceinline__ void split_pack(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    hi = pack_bf16(x0, x1);
    if (EXACT) lo = pack_bf16(x0 - bf2f(f2bf(x0)), x1 - bf2f(f2bf(x1)));
}

// acc as acc_t_split below with lo NULL, rounded to bf16 pairs and stored transposed into the
// warp's staging tile (stmatrix: 8 rows of acc's fragments, 8 of the matrix's rows, at a time),
// whose rows then leave in two 16-byte stores each, to rows 0 .. 8 NT - 1 of the [., ld]
// matrix at dst (column nw there). A quarter of the element path's instructions, the same bits.
template <int NT>
__device__ void acc_t_store(bf *dst, const float (&acc)[1][NT][4], bf16 *stage, int ld, int lane) {
    const int PART = STAGE_ROWS / 8; // n8-tiles (8 rows of the matrix each) the tile holds
    int m = lane / 8; // the matrix whose row this lane names: acc's rows 8 (m % 2) .., tile m / 2
    bf16 *row = stage + (lane % 8 + 8 * (m / 2)) * STAGE_LD + 8 * (m % 2);
    const bf16 *src = stage + lane / 2 * STAGE_LD + lane % 2 * 8;
    bf *out = dst + (long)(lane / 2) * ld + lane % 2 * 8;
#pragma unroll
    for (int p = 0; p < NT; p += PART) {
        const int n = NT - p < PART ? NT - p : PART;
#pragma unroll
        for (int j = 0; j < n; j += 2)
            stsm_x4_t(row + 8 * j * STAGE_LD, pack_bf16(acc[0][p + j][0], acc[0][p + j][1]),
                      pack_bf16(acc[0][p + j][2], acc[0][p + j][3]),
                      pack_bf16(acc[0][p + j + 1][0], acc[0][p + j + 1][1]),
                      pack_bf16(acc[0][p + j + 1][2], acc[0][p + j + 1][3]));
        __syncwarp();
#pragma unroll
        for (int i = 0; i < n / 2; i++) // 16 rows at a time
            *reinterpret_cast<uint4 *>(out + (long)(8 * p + 16 * i) * ld) =
                *reinterpret_cast<const uint4 *>(src + 16 * i * STAGE_LD);
        __syncwarp(); // the tile is free for the next part or store
    }
}

// A warp's accumulator block acc, [16, 8 NT] whose element (r, c) is the matrix's (c, nw + r),
// into rows of a [., ld] row-major matrix in global memory at hi + off (and lo + off; lo NULL:
// hi alone), split as load_split_rows would split it. With a staging tile (stage) and lo NULL
// on sm_90: acc_t_store; else one store an element, as many as fp32's and no shuffles (the
// passes' chunks are a chain, where every instruction counts).
template <int NT>
__device__ void acc_t_split(bf *hi, bf *lo, long off, const float (&acc)[1][NT][4], int ld, int nw,
                            bf16 *stage, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (stage && !lo) {
        acc_t_store<NT>(hi + off + nw, acc, stage, ld, lane);
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            split_put(hi, lo, off + (long)frag_col(lane, j, e) * ld + nw + frag_row(lane, e),
                      acc[0][j][e]);
}

// S^T's accumulators into slot `slot` of the kept states: split, or fp32 where k.f32 is set.
template <int NT>
__device__ void keep_state(const Kept &k, const gdn_args &a, int b, int h, int slot,
                           const float (&st)[1][NT][4], int nw, bf16 *stage, int lane) {
    long o = kept_index(k, a, b, h, slot);
    if (k.f32)
        state_out<NT>(k.f32 + o, st, a.dv, nw, lane);
    else
        acc_t_split<NT>(k.hi, k.lo, o, st, a.dv, nw, stage, lane);
}

// k-step ks of a [16, 16 KS] accumulator block as A fragments (acc_to_a's layout), split.
template <bool EXACT, int NT>
__device__ __forceinline__ void acc_split_a(uint32_t (&hi)[1][4], uint32_t (&lo)[1][4],
                                            const float (&acc)[1][NT][4], int ks) {
    split_pack<EXACT>(acc[0][2 * ks][0], acc[0][2 * ks][1], hi[0][0], lo[0][0]);
    split_pack<EXACT>(acc[0][2 * ks][2], acc[0][2 * ks][3], hi[0][1], lo[0][1]);
    split_pack<EXACT>(acc[0][2 * ks + 1][0], acc[0][2 * ks + 1][1], hi[0][2], lo[0][2]);
    split_pack<EXACT>(acc[0][2 * ks + 1][2], acc[0][2 * ks + 1][3], hi[0][3], lo[0][3]);
}

// vt = S^T B^T ([16, L]) for B = Bhi + Blo, [L, 16 KS] rows in shared memory (Blo NULL: exact
// in bf16): B's rows are the product's columns (mma_nt_step), S^T's k-steps the A fragments.
template <bool EXACT, int KS>
__device__ void state_times_rows(float (&vt)[1][8][4], const float (&st)[1][2 * KS][4],
                                 const bf16 *Bhi, const bf16 *Blo, int ld, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) vt[0][j][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t hi[1][4], lo[1][4];
        acc_split_a<EXACT, 2 * KS>(hi, lo, st, ks);
        if (EXACT) mma_nt_step<1, 8>(vt, lo, Bhi, ld, ks, lane);
        if (EXACT && Blo) mma_nt_step<1, 8>(vt, hi, Blo, ld, ks, lane);
        mma_nt_step<1, 8>(vt, hi, Bhi, ld, ks, lane);
    }
}

// A [16, L] accumulator block's four k-steps as A fragments, split.
template <bool EXACT>
__device__ __forceinline__ void rows_split_a(uint32_t (&hi)[1][4][4], uint32_t (&lo)[1][4][4],
                                             const float (&x)[1][8][4]) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t h1[1][4], l1[1][4];
        acc_split_a<EXACT, 8>(h1, l1, x, ks);
#pragma unroll
        for (int r = 0; r < 4; r++) hi[0][ks][r] = h1[0][r], lo[0][ks][r] = l1[0][r];
    }
}

// The chunk's w_i = exp(gamma_last - gamma_i) and exp(gamma_i) (EG) at the columns i of a [16, L]
// accumulator's elements (zero past Lc), and exp(gamma_last), from the raw gates each warp
// fetched. A lane computes columns lane and lane + 32, and the warp trades them through its own
// 64 (EG: 128) floats of shared memory, buf: an adjacent pair a load, where a shuffle an element
// was twice the instructions (and the shuffles' convergence checks as many again).
struct ChunkDecay {
    float w[8][2], eg[8][2]; // n8-tile j, element e & 1 (rows g and g + 8 share a column)
    float last;
};

template <bool EG> __device__ ChunkDecay chunk_decay(const RawGates &r, float *buf, int lane) {
    float x[2] = {r.g[0], r.g[1]};
    float glast = cumulate_gates(x, r.Lc);
    __syncwarp(); // every lane has read the chunk before's
    for (int half = 0; half < 2; half++) {
        bool live = lane + 32 * half < r.Lc;
        buf[lane + 32 * half] = live ? expf(glast - x[half]) : 0.0f;
        if (EG) buf[L + lane + 32 * half] = live ? expf(x[half]) : 0.0f;
    }
    __syncwarp();
    ChunkDecay d;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int i = frag_col(lane, j, 0); // even: the pair i, i + 1
        float2 w = *reinterpret_cast<const float2 *>(buf + i);
        float2 eg = EG ? *reinterpret_cast<const float2 *>(buf + L + i) : make_float2(0.0f, 0.0f);
        d.w[j][0] = w.x, d.w[j][1] = w.y, d.eg[j][0] = eg.x, d.eg[j][1] = eg.y;
    }
    d.last = expf(glast);
    return d;
}

// V'^T = U^T - vt in place (U from the block's tile, its columns 16 warp ..), kept split in
// columns nw .. nw + 15 of the [L, dv] matrix at vphi + vo (and vplo + vo) where vphi is not
// NULL.
__device__ void vprime_finish(float (&vt)[1][8][4], const PassTiles &s, int bv, int warp, bf *vphi,
                              bf *vplo, long vo, int dv, int nw, bf16 *stage, int lane) {
    int ldu = ldf32(bv);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = frag_col(lane, j, e), n = frag_row(lane, e);
            vt[0][j][e] = s.u[i * ldu + 16 * warp + n] - vt[0][j][e];
        }
    if (vphi) acc_t_split<8>(vphi, vplo, vo, vt, dv, nw, stage, lane);
}

// S^T = decay S^T + (V'^T diag(w)) K: X^T's accumulators become A fragments, K's rows B's
// (mma_rs_t's transposing loads).
template <bool EXACT, int KS>
__device__ void state_update(float (&st)[1][2 * KS][4], const float (&vt)[1][8][4],
                             const ChunkDecay &d, const PassTiles &s, int ld, int lane) {
    float x[1][8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) x[0][j][e] = vt[0][j][e] * d.w[j][e & 1];
    uint32_t hi[1][4][4], lo[1][4][4];
    rows_split_a<EXACT>(hi, lo, x);
#pragma unroll
    for (int j = 0; j < 2 * KS; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) st[0][j][e] *= d.last;
    if (EXACT) mma_rs_t<1, 4, 2 * KS>(st, lo, s.k, ld, lane);
    mma_rs_t<1, 4, 2 * KS>(st, hi, s.k, ld, lane);
}

// Grid (dv / bv, H, B), bv = 16 x the block's warps: the chunks of span in order (the header of
// tc_pass in gated_delta_tc.cuh), dk = 16 KS; NW the block's warps where the instance fixes them
// (0: any).
template <int KS, bool EXACT, int NW>
__global__ void __launch_bounds__(32 * PASS_MAX_WARPS)
    pass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, Factors f, StateBuf entry, int entry_slot, StateBuf leave,
                int leave_slot, Kept keep) {
    extern __shared__ __align__(128) unsigned char smem[];
    int b = blockIdx.z, h = blockIdx.y, bv = NW ? 16 * NW : blockDim.x / 2, n0 = blockIdx.x * bv;
    int dv = a.dv, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = n0 + 16 * warp;
    const int ld = ldb16(16 * KS);
    int c1 = min(span.end, counts[b]);
    if (span.begin >= c1) return; // the row has no chunk in the span
    size_t bytes;
    PassTiles tiles[2];
    bf16 *stage;
    float *decay;
    pass_tiles(tiles, &stage, &decay, smem, a.dk, bv, EXACT, &bytes);
    if (stage) stage += warp * STAGE_ROWS * STAGE_LD;
    decay += warp * DECAY_FLOATS;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    float st[1][2 * KS][4];
    state_in<2 * KS>(st, entry.p ? state_at(entry, a, b, h, entry_slot) : NULL, dv, nw, lane);
    int t0 = row[span.begin], Lc = row[span.begin + 1] - t0;
    pass_load<KS, 32 * NW>(tiles[0], a, t, f, factor_index(a, b, h, 0), b, h, t0, Lc, n0, bv);
    long go = gdn_gate_off(&a, b, t0, h);
    RawGates next = fetch_gates(t.g + go, t.beta + go, a.H, Lc);
    for (int c = span.begin; c < c1; c++) {
        int slot = c - span.begin;
        t0 = row[c];
        RawGates gates = next;
        PassTiles s = slot % 2 ? tiles[1] : tiles[0], other = slot % 2 ? tiles[0] : tiles[1];
        cp_async_wait<0>();
        __syncthreads(); // this chunk's tiles are in; everyone is done with the other pair
        if (c + 1 < c1) {
            int t1 = row[c + 1], L1 = row[c + 2] - t1;
            pass_load<KS, 32 * NW>(other, a, t, f, factor_index(a, b, h, slot + 1), b, h, t1, L1,
                                   n0, bv);
            go = gdn_gate_off(&a, b, t1, h);
            next = fetch_gates(t.g + go, t.beta + go, a.H, L1);
        }
        zero_where<2 * KS>(st, starts_document(a, b, t0));
        bool keeping = keeps(keep);
        if (keeping) keep_state<2 * KS>(keep, a, b, h, slot, st, nw, stage, lane);
        ChunkDecay d = chunk_decay<false>(gates, decay, lane);
        float vt[1][8][4];
        state_times_rows<EXACT, KS>(vt, st, s.whi, s.wlo, ld, lane);
        long vo = factor_index(a, b, h, slot) * L * dv;
        vprime_finish(vt, s, bv, warp, keeping ? f.vphi : NULL, f.vplo, vo, dv, nw, stage, lane);
        state_update<EXACT, KS>(st, vt, d, s, ld, lane);
    }
    if (leave.p) state_out<2 * KS>(state_at(leave, a, b, h, leave_slot), st, dv, nw, lane);
}

// ---- the backward's state-gradient pass ------------------------------------------------------
//
// The same scheme for dpass (gated_delta_tc_bwd.cu has the math): a warp keeps 16 columns of
// dS^T, the gradient of the state leaving the chunk, in accumulators, and walks the span's
// chunks back:
//   dV'^T = (dS^T K^T) diag(w) + dO^T P
//   dS^T  = decay dS^T + (dO^T diag(exp(gamma))) Q - dV'^T W   (zero before a document's start)
// with dO = scale dout read from the block's fp32 tile straight into A fragments.

// One chunk's tiles: W (hi, lo), K and Q [L, ldb16(dk)], P (hi, lo) [L, ldb16(L)] bf16 (the lo
// halves in the exact mode only), and the block's columns of dout, [L, ldf32(bv)] fp32.
struct DpassTiles {
    bf16 *whi, *wlo, *k, *q, *phi, *plo;
    float *dout;
};

__host__ __device__ void dpass_tiles(DpassTiles (&t)[2], bf16 **stage, float **decay,
                                     unsigned char *base, int dk, int bv, bool exact,
                                     size_t *bytes) {
    Carve cv = {base, 0};
    for (int i = 0; i < 2; i++) {
        t[i].whi = cv.take<bf16>(L * ldb16(dk));
        t[i].wlo = exact ? cv.take<bf16>(L * ldb16(dk)) : NULL;
        t[i].k = cv.take<bf16>(L * ldb16(dk));
        t[i].q = cv.take<bf16>(L * ldb16(dk));
        t[i].phi = cv.take<bf16>(L * ldb16(L));
        t[i].plo = exact ? cv.take<bf16>(L * ldb16(L)) : NULL;
        t[i].dout = cv.take<float>(L * ldf32(bv));
    }
    *stage = take_stage(cv, bv, exact);
    *decay = cv.take<float>(bv / 16 * DECAY_FLOATS);
    *bytes = cv.off;
}

template <int KS, int THREADS>
__device__ void dpass_load(const DpassTiles &s, const gdn_args &a, const Tensors &t,
                           const Factors &f, long idx, int b, int h, int t0, int Lc, int n0,
                           int bv) {
    const int dk = 16 * KS;
    int hk = h / (a.H / a.HK);
    long qks = (long)a.HK * dk;
    copy_rows_async<dk, THREADS, true>(s.whi, f.whi + idx * L * dk, dk, L);
    if (s.wlo) copy_rows_async<dk, THREADS, true>(s.wlo, f.wlo + idx * L * dk, dk, L);
    copy_rows_async<dk, THREADS, false>(s.k, t.k + gdn_qk_off(&a, b, t0, hk), qks, Lc);
    copy_rows_async<dk, THREADS, false>(s.q, t.q + gdn_qk_off(&a, b, t0, hk), qks, Lc);
    copy_rows_async<L, THREADS, true>(s.phi, f.phi + idx * L * L, L, L);
    if (s.plo) copy_rows_async<L, THREADS, true>(s.plo, f.plo + idx * L * L, L, L);
    copy_cols_async<false>(s.dout, t.dout + gdn_v_off(&a, b, t0, h) + n0, (long)a.H * a.dv, Lc, bv);
    cp_async_commit();
}

// The four k-steps of (scale dout diag(mul))^T's A fragments ([16 columns, L]), split: mul the
// chunk's exp(gamma) (ChunkDecay's eg) or NULL.
template <bool EXACT>
__device__ void dout_split_a(uint32_t (&hi)[1][4][4], uint32_t (&lo)[1][4][4], const float *dout,
                             int ldo, int col, const float (*mul)[2], float scale, int lane) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
#pragma unroll
        for (int r = 0; r < 4; r++) { // a's registers: rows +8 for r odd, columns +8 from r = 2
            int n = col + lane / 4 + (r & 1) * 8, j = 2 * ks + (r >> 1), i = frag_col(lane, j, 0);
            float k0 = scale * (mul ? mul[j][0] : 1.0f), k1 = scale * (mul ? mul[j][1] : 1.0f);
            split_pack<EXACT>(dout[i * ldo + n] * k0, dout[(i + 1) * ldo + n] * k1, hi[0][ks][r],
                              lo[0][ks][r]);
        }
}

// acc += A B for A's four k-steps (hi, lo) and B = Bhi + Blo, [L, 8 NT] rows in shared memory
// (mma_rs_t's transposing loads; Blo NULL: exact in bf16): the small terms first.
template <bool EXACT, int NT>
__device__ __forceinline__ void rows_times(float (&acc)[1][NT][4], const uint32_t (&hi)[1][4][4],
                                           const uint32_t (&lo)[1][4][4], const bf16 *Bhi,
                                           const bf16 *Blo, int ld, int lane) {
    if (EXACT) mma_rs_t<1, 4, NT>(acc, lo, Bhi, ld, lane);
    if (EXACT && Blo) mma_rs_t<1, 4, NT>(acc, hi, Blo, ld, lane);
    mma_rs_t<1, 4, NT>(acc, hi, Bhi, ld, lane);
}

// dV'^T of the chunk from dS^T, into dvt, kept split in columns nw .. nw + 15 of the [L, dv]
// matrix at dvphi + vo (and dvplo + vo).
template <bool EXACT, int KS>
__device__ void dvprime(float (&dvt)[1][8][4], const float (&ds)[1][2 * KS][4], const DpassTiles &s,
                        const ChunkDecay &d, int bv, int warp, float scale, bf *dvphi, bf *dvplo,
                        long vo, int dv, int nw, bf16 *stage, int lane) {
    int ld = ldb16(KS * 16);
    state_times_rows<EXACT, KS>(dvt, ds, s.k, NULL, ld, lane);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dvt[0][j][e] *= d.w[j][e & 1];
    uint32_t hi[1][4][4], lo[1][4][4];
    dout_split_a<EXACT>(hi, lo, s.dout, ldf32(bv), 16 * warp, NULL, scale, lane);
    rows_times<EXACT, 8>(dvt, hi, lo, s.phi, s.plo, ldb16(L), lane);
    acc_t_split<8>(dvphi, dvplo, vo, dvt, dv, nw, stage, lane);
}

// dS^T = decay dS^T + (dO^T diag(exp(gamma))) Q - dV'^T W, or zero where the chunk starts a
// document.
template <bool EXACT, int KS>
__device__ void dstate_update(float (&ds)[1][2 * KS][4], float (&dvt)[1][8][4], const DpassTiles &s,
                              const ChunkDecay &d, int bv, int warp, float scale, bool reset,
                              int lane) {
    int ld = ldb16(KS * 16);
#pragma unroll
    for (int j = 0; j < 2 * KS; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) ds[0][j][e] *= d.last;
    uint32_t hi[1][4][4], lo[1][4][4];
    dout_split_a<EXACT>(hi, lo, s.dout, ldf32(bv), 16 * warp, d.eg, scale, lane);
    rows_times<EXACT, 2 * KS>(ds, hi, lo, s.q, NULL, ld, lane);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dvt[0][j][e] = -dvt[0][j][e];
    rows_split_a<EXACT>(hi, lo, dvt);
    rows_times<EXACT, 2 * KS>(ds, hi, lo, s.whi, s.wlo, ld, lane);
    zero_where<2 * KS>(ds, reset);
}

// Grid (dv / bv, H, B): walks the chunks of span back with dS^T (carry holds dS for the span's
// last chunk on entry, [B, H, dk, dv], and gets it for the chunk before the span on return),
// keeping it in slot c - span.begin of keep and each chunk's dV' in f.dvphi (and f.dvplo).
template <int KS, bool EXACT, int NW>
__global__ void __launch_bounds__(32 * PASS_MAX_WARPS)
    dpass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts,
                 int max_chunks, Span span, Factors f, float *carry, Kept keep) {
    extern __shared__ __align__(128) unsigned char smem[];
    int b = blockIdx.z, h = blockIdx.y, bv = NW ? 16 * NW : blockDim.x / 2, n0 = blockIdx.x * bv;
    int dv = a.dv, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = n0 + 16 * warp;
    int c1 = min(span.end, counts[b]);
    if (span.begin >= c1) return; // the row has no chunk in the span: carry stays
    size_t bytes;
    DpassTiles tiles[2];
    bf16 *stage;
    float *decay;
    dpass_tiles(tiles, &stage, &decay, smem, a.dk, bv, EXACT, &bytes);
    if (stage) stage += warp * STAGE_ROWS * STAGE_LD;
    decay += warp * DECAY_FLOATS;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    float *carry_bh = carry + ((long)b * a.H + h) * a.dk * dv;
    float ds[1][2 * KS][4];
    state_in<2 * KS>(ds, carry_bh, dv, nw, lane);
    int t0 = row[c1 - 1], Lc = row[c1] - t0;
    dpass_load<KS, 32 * NW>(tiles[0], a, t, f, factor_index(a, b, h, c1 - 1 - span.begin), b, h, t0,
                            Lc, n0, bv);
    long go = gdn_gate_off(&a, b, t0, h);
    RawGates next = fetch_gates(t.g + go, t.beta + go, a.H, Lc);
    for (int c = c1 - 1; c >= span.begin; c--) {
        int slot = c - span.begin, odd = (c1 - 1 - c) % 2;
        t0 = row[c];
        RawGates gates = next;
        DpassTiles s = odd ? tiles[1] : tiles[0], other = odd ? tiles[0] : tiles[1];
        cp_async_wait<0>();
        __syncthreads(); // this chunk's tiles are in; everyone is done with the other pair
        if (c > span.begin) {
            int tp = row[c - 1], Lp = t0 - tp;
            dpass_load<KS, 32 * NW>(other, a, t, f, factor_index(a, b, h, slot - 1), b, h, tp, Lp,
                                    n0, bv);
            go = gdn_gate_off(&a, b, tp, h);
            next = fetch_gates(t.g + go, t.beta + go, a.H, Lp);
        }
        keep_state<2 * KS>(keep, a, b, h, slot, ds, nw, stage, lane);
        ChunkDecay d = chunk_decay<true>(gates, decay, lane);
        float dvt[1][8][4];
        long vo = factor_index(a, b, h, slot) * L * dv;
        dvprime<EXACT, KS>(dvt, ds, s, d, bv, warp, a.scale, f.dvphi, f.dvplo, vo, dv, nw, stage,
                           lane);
        dstate_update<EXACT, KS>(ds, dvt, s, d, bv, warp, a.scale, starts_document(a, b, t0), lane);
    }
    state_out<2 * KS>(carry_bh, ds, dv, nw, lane);
}

// The instance of a pass kernel template for dk = 16 KS (gdn_tc_shape: dk <= MAX_DIM = 128), the
// mode and the block's warps: Qwen3.5's dk 128 in blocks of 4 warps has its own, whose copies
// unroll (copy_rows_async); any other shape the instance of any block size.
#define PASS_KS(kernel, dk, exact, nw)                                                             \
    ((dk) == 16    ? kernel<1, exact, 0>                                                           \
     : (dk) == 32  ? kernel<2, exact, 0>                                                           \
     : (dk) == 48  ? kernel<3, exact, 0>                                                           \
     : (dk) == 64  ? kernel<4, exact, 0>                                                           \
     : (dk) == 80  ? kernel<5, exact, 0>                                                           \
     : (dk) == 96  ? kernel<6, exact, 0>                                                           \
     : (dk) == 112 ? kernel<7, exact, 0>                                                           \
     : (nw) == 4   ? kernel<8, exact, 4>                                                           \
                   : kernel<8, exact, 0>)
#define PASS_INSTANCE(kernel, dk, exact, nw)                                                       \
    ((exact) ? PASS_KS(kernel, dk, true, nw) : PASS_KS(kernel, dk, false, nw))

int forced_warps; // cuda_gated_delta_pass_warps

// Shared-memory bytes of a pass's or dpass's two chunks of tiles at bv state columns.
size_t pass_bytes(int dk, int bv, bool exact) {
    PassTiles t[2];
    bf16 *stage;
    float *decay;
    size_t bytes;
    pass_tiles(t, &stage, &decay, NULL, dk, bv, exact, &bytes);
    return bytes;
}
size_t dpass_bytes(int dk, int bv, bool exact) {
    DpassTiles t[2];
    bf16 *stage;
    float *decay;
    size_t bytes;
    dpass_tiles(t, &stage, &decay, NULL, dk, bv, exact, &bytes);
    return bytes;
}

// Warps a block of a pass whose tiles take bytes_of: the most (up to 4; or the forced number)
// whose tiles fit a block's shared memory, else 1. One copy of a chunk's tiles serves every warp of
// the block, and the pass is a chain of dependent chunks, bound by latency: fewer, larger blocks
// lose nothing where each holds a multiprocessor of its own (measured on the H100: blocks of 4
// warps ran the backward 1.4x faster than blocks of 1 spread over every multiprocessor).
int pass_warps(const gdn_args *a, size_t (*bytes_of)(int, int, bool), bool exact) {
    int dev, most;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    for (int nw = PASS_MAX_WARPS; nw > 1; nw /= 2)
        if ((!forced_warps || nw == forced_warps) && a->dv % (16 * nw) == 0 &&
            bytes_of(a->dk, 16 * nw, exact) <= (size_t)most)
            return nw;
    return 1;
}

// One launch of a pass kernel in blocks of nw warps over grid (dv / bv, H, B).
template <typename Kernel, typename... Args>
void pass_launch(Kernel kernel, int nw, int phase, const gdn_args *a,
                 size_t (*bytes_of)(int, int, bool), bool exact, cudaStream_t stream,
                 Args... args) {
    size_t bytes = bytes_of(a->dk, 16 * nw, exact);
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    phase_begin(phase, stream);
    kernel<<<dim3(a->dv / (16 * nw), a->H, a->B), 32 * nw, bytes, stream>>>(args...);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
}

} // namespace

extern "C" void cuda_gated_delta_pass_warps(int warps) {
    forced_warps = warps >= 1 && warps <= PASS_MAX_WARPS && !(warps & (warps - 1)) ? warps : 0;
}

void gdn::tc_pass(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                  int max_chunks, Span span, const Factors &f, StateBuf entry, int entry_slot,
                  StateBuf leave, int leave_slot, Kept keep, cudaStream_t stream) {
    bool exact = f.wlo != NULL;
    int nw = pass_warps(a, pass_bytes, exact);
    pass_launch(PASS_INSTANCE(pass_kernel, a->dk, exact, nw), nw, GDN_PHASE_PASS, a, pass_bytes,
                exact, stream, *a, t, starts, counts, max_chunks, span, f, entry, entry_slot, leave,
                leave_slot, keep);
}

void gdn::tc_dpass(const gdn_args *a, const Tensors &t, const int32_t *starts,
                   const int32_t *counts, int max_chunks, Span span, const Factors &f, float *carry,
                   Kept keep, cudaStream_t stream) {
    bool exact = f.wlo != NULL;
    int nw = pass_warps(a, dpass_bytes, exact);
    pass_launch(PASS_INSTANCE(dpass_kernel, a->dk, exact, nw), nw, GDN_PHASE_DPASS, a, dpass_bytes,
                exact, stream, *a, t, starts, counts, max_chunks, span, f, carry, keep);
}
