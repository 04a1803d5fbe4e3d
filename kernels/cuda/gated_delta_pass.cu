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
//
// The split pass (SPLIT 2, cuda_gated_delta_pass_warps(8), at dk 128) gives each 16 columns two
// warps, each holding half of dk (32 registers): a chunk's V'^T is then two partial products over
// the halves (32 mma.sync each), added through shared memory behind a barrier of the pair, and
// each warp updates its half (32 more): half a warp's chain a chunk, on twice the warps, as
// flash-linear-attention spreads its blocks' products over their warps. The sums' order differs
// from the whole-dk warp's, so its bits are its own (test_gdn_cuda checks it against the CPU).
#include "kernels/cuda/gated_delta_pass.cuh"

namespace {

// One chunk's tiles in shared memory: W (hi, lo) and K, [L, ldb16(dk)] bf16 (W's lo in the
// exact mode only), and the block's columns of U, [L, ldf32(bv)] fp32. A block has two, the
// next chunk's in flight while a chunk computes.
struct PassTiles {
    bf16 *whi, *wlo, *k;
    float *u;
    __host__ __device__ void take(Carve &cv, int dk, int bv, bool exact) {
        whi = cv.take<bf16>(L * ldb16(dk));
        wlo = exact ? cv.take<bf16>(L * ldb16(dk)) : NULL;
        k = cv.take<bf16>(L * ldb16(dk));
        u = cv.take<float>(L * ldf32(bv));
    }
};

// Starts the copies of one chunk's tiles (every thread of the block takes a share) and commits
// them as one cp.async group. K's rows past Lc are zeroed here: X's columns there are zero, but
// uninitialised shared memory could hold a NaN.
template <int KS, int THREADS, int STEP>
__device__ void pass_load(const PassTiles &s, const gdn_args &a, const Tensors &t, const Factors &f,
                          long idx, int b, int h, int t0, int Lc, int n0, int bv) {
    const int dk = 16 * KS;
    copy_rows_async<dk, THREADS, true>(s.whi, f.whi + idx * L * dk, dk, L);
    if (s.wlo) copy_rows_async<dk, THREADS, true>(s.wlo, f.wlo + idx * L * dk, dk, L);
    copy_rows_async<dk, THREADS, false>(s.k, t.k + gdn_qk_off(&a, b, t0, h / (a.H / a.HK)),
                                        (long)a.HK * dk, Lc);
    copy_cols_async<true, STEP>(s.u, f.u + idx * L * a.dv + n0, a.dv, L, bv);
    cp_async_commit();
}

// V'^T = U^T - vt in place (U from the block's tile, its columns 16 grp ..), kept split in
// columns nw .. nw + 15 of the [L, dv] matrix at vphi + vo (and vplo + vo) where vphi is not
// NULL, through staging tiles of ROWS rows.
template <int ROWS>
__device__ void vprime_finish(float (&vt)[1][8][4], const PassTiles &s, int bv, int grp, bf *vphi,
                              bf *vplo, long vo, int dv, int nw, bf16 *stage, int lane) {
    int ldu = ldf32(bv);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = frag_col(lane, j, e), n = frag_row(lane, e);
            vt[0][j][e] = s.u[i * ldu + 16 * grp + n] - vt[0][j][e];
        }
    if (vphi) acc_t_split<8, ROWS>(vphi, vplo, vo, vt, dv, nw, stage, lane);
}

// S^T = decay S^T + (V'^T diag(w)) K: X^T's accumulators become A fragments, K's rows B's
// (mma_rs_t's transposing loads; k at the K tile's columns of the warp's rows of S).
template <bool EXACT, int KS>
__device__ void state_update(float (&st)[1][2 * KS][4], const float (&vt)[1][8][4],
                             const ChunkDecay &d, const bf16 *k, int ld, int lane) {
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
    if (EXACT) mma_rs_t<1, 4, 2 * KS>(st, lo, k, ld, lane);
    mma_rs_t<1, 4, 2 * KS>(st, hi, k, ld, lane);
}

// Grid (dv / bv, H, B), bv = 16 x the block's column groups: the chunks of span in order (the
// header of tc_pass in gated_delta_tc.cuh), dk = 16 KS; NW the groups where the instance fixes
// them (0: any), each of SPLIT warps (the split pass: 2, each holding half of dk).
template <int KS, bool EXACT, int NW, int SPLIT = 1>
__global__ void __launch_bounds__(32 * PASS_MAX_WARPS * SPLIT, SPLIT > 1 ? 1 : 0)
    pass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, Factors f, StateBuf entry, int entry_slot, StateBuf leave,
                int leave_slot, Kept keep) {
    static_assert(SPLIT == 1 || NW == PASS_MAX_WARPS, "a split block is 4 pairs of warps");
    extern __shared__ __align__(128) unsigned char smem[];
    const int KH = KS / SPLIT, ROWS = STAGE_ROWS / SPLIT, THREADS = 32 * NW * SPLIT;
    int b = blockIdx.z, h = blockIdx.y, bv = NW ? 16 * NW : blockDim.x / 2, n0 = blockIdx.x * bv;
    int dv = a.dv, lane = threadIdx.x % 32, warp = threadIdx.x / 32, grp = warp / SPLIT;
    int kh = warp % SPLIT, nw = n0 + 16 * grp, row0 = 16 * KH * kh; // the warp's rows of S
    const int ld = ldb16(16 * KS);
    int c1 = min(span.end, counts[b]);
    if (span.begin >= c1) return; // the row has no chunk in the span
    size_t bytes;
    PassTiles tiles[2];
    bf16 *stage;
    float *decay, *xbuf;
    carve_pass(tiles, &stage, &decay, &xbuf, smem, a.dk, bv, EXACT, SPLIT, &bytes);
    if (stage) stage += warp * ROWS * STAGE_LD;
    decay += warp * DECAY_FLOATS;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    float st[1][2 * KH][4];
    state_in<2 * KH>(st, entry.p ? state_at(entry, a, b, h, entry_slot) + (long)row0 * dv : NULL,
                     dv, nw, lane);
    int t0 = row[span.begin], Lc = row[span.begin + 1] - t0;
    pass_load<KS, THREADS, 8 * SPLIT>(tiles[0], a, t, f, factor_index(a, b, h, 0), b, h, t0, Lc, n0,
                                      bv);
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
            pass_load<KS, THREADS, 8 * SPLIT>(other, a, t, f, factor_index(a, b, h, slot + 1), b, h,
                                              t1, L1, n0, bv);
            go = gdn_gate_off(&a, b, t1, h);
            next = fetch_gates(t.g + go, t.beta + go, a.H, L1);
        }
        zero_where<2 * KH>(st, starts_document(a, b, t0));
        bool keeping = keeps(keep);
        if (keeping) keep_state<2 * KH, ROWS>(keep, a, b, h, slot, st, nw, stage, lane, row0);
        ChunkDecay d = chunk_decay<false>(gates, decay, lane);
        float vt[1][8][4];
        state_times_rows<EXACT, KH>(vt, st, s.whi + row0, s.wlo ? s.wlo + row0 : NULL, ld, lane);
        if (SPLIT > 1) pair_sum(vt, xbuf, grp, kh, lane);
        long vo = factor_index(a, b, h, slot) * L * dv;
        vprime_finish<ROWS>(vt, s, bv, grp, keeping && kh == 0 ? f.vphi : NULL, f.vplo, vo, dv, nw,
                            stage, lane);
        state_update<EXACT, KH>(st, vt, d, s.k + row0, ld, lane);
    }
    if (leave.p)
        state_out<2 * KH>(state_at(leave, a, b, h, leave_slot) + (long)row0 * dv, st, dv, nw, lane);
}

// Shared-memory bytes of a pass's block at bv state columns, its warps whole or split.
size_t pass_bytes(int dk, int bv, bool exact) {
    return carve_bytes<PassTiles>(dk, bv, exact, 1);
}
size_t split_pass_bytes(int dk, int bv, bool exact) {
    return carve_bytes<PassTiles>(dk, bv, exact, 2);
}

} // namespace

int gdn_pass_forced_warps;

extern "C" void cuda_gated_delta_pass_warps(int warps) {
    bool known = warps >= 1 && warps <= 2 * PASS_MAX_WARPS && !(warps & (warps - 1));
    gdn_pass_forced_warps = known ? warps : 0;
}

void gdn::tc_pass(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                  int max_chunks, Span span, const Factors &f, StateBuf entry, int entry_slot,
                  StateBuf leave, int leave_slot, Kept keep, cudaStream_t stream) {
    bool exact = f.wlo != NULL;
    int nw = pass_warps(a, pass_bytes, exact);
    if (split_fits(a, nw, split_pass_bytes, exact))
        pass_launch(exact ? pass_kernel<8, true, 4, 2> : pass_kernel<8, false, 4, 2>, nw, 2,
                    GDN_PHASE_PASS, a, split_pass_bytes, exact, stream, *a, t, starts, counts,
                    max_chunks, span, f, entry, entry_slot, leave, leave_slot, keep);
    else
        pass_launch(PASS_INSTANCE(pass_kernel, a->dk, exact, nw), nw, 1, GDN_PHASE_PASS, a,
                    pass_bytes, exact, stream, *a, t, starts, counts, max_chunks, span, f, entry,
                    entry_slot, leave, leave_slot, keep);
}
