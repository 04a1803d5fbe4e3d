// The chunked gated delta rule's state-gradient pass (tc_dpass; gated_delta_tc_bwd.cu has its
// math), on the scheme of the forward's pass (gated_delta_pass.cu's header).
#include "kernels/cuda/gated_delta_pass.cuh"

namespace {

//
// The same scheme for dpass (gated_delta_tc_bwd.cu has the math): a warp keeps 16 columns of
// dS^T, the gradient of the state leaving the chunk, in accumulators, and walks the span's
// chunks back:
//   dV'^T = (dS^T K^T) diag(w) + dO^T P
//   dS^T  = decay dS^T + (dO^T diag(exp(gamma))) Q - dV'^T W   (zero before a document's start)
// with dO = scale dout read from the block's fp32 tile straight into A fragments. The split pass
// (SPLIT 2, as the forward's) gives each 16 columns two warps, each holding half of dk: the pair
// adds its partial dS^T K^T through shared memory, each computes dO^T P whole (the same sums in
// both), and each updates its half of dS^T.

// One chunk's tiles: W (hi, lo), K and Q [L, ldb16(dk)], P (hi, lo) [L, ldb16(L)] bf16 (the lo
// halves in the exact mode only), and the block's columns of dout, [L, ldf32(bv)] fp32.
struct DpassTiles {
    bf16 *whi, *wlo, *k, *q, *phi, *plo;
    float *dout;
    __host__ __device__ void take(Carve &cv, int dk, int bv, bool exact) {
        whi = cv.take<bf16>(L * ldb16(dk));
        wlo = exact ? cv.take<bf16>(L * ldb16(dk)) : NULL;
        k = cv.take<bf16>(L * ldb16(dk));
        q = cv.take<bf16>(L * ldb16(dk));
        phi = cv.take<bf16>(L * ldb16(L));
        plo = exact ? cv.take<bf16>(L * ldb16(L)) : NULL;
        dout = cv.take<float>(L * ldf32(bv));
    }
};

template <int KS, int THREADS, int STEP>
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
    copy_cols_async<false, STEP>(s.dout, t.dout + gdn_v_off(&a, b, t0, h) + n0, (long)a.H * a.dv,
                                 Lc, bv);
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
template <bool EXACT, int KS, int SPLIT>
__device__ void dvprime(float (&dvt)[1][8][4], const float (&ds)[1][2 * KS / SPLIT][4],
                        const DpassTiles &s, const ChunkDecay &d, int bv, int grp, int kh,
                        float *xbuf, float scale, bf *dvphi, bf *dvplo, long vo, int dv, int nw,
                        bf16 *stage, int lane) {
    const int KH = KS / SPLIT, row0 = 16 * KH * kh;
    int ld = ldb16(KS * 16);
    state_times_rows<EXACT, KH>(dvt, ds, s.k + row0, NULL, ld, lane);
    if (SPLIT > 1) pair_sum(dvt, xbuf, grp, kh, lane);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dvt[0][j][e] *= d.w[j][e & 1];
    uint32_t hi[1][4][4], lo[1][4][4];
    dout_split_a<EXACT>(hi, lo, s.dout, ldf32(bv), 16 * grp, NULL, scale, lane);
    rows_times<EXACT, 8>(dvt, hi, lo, s.phi, s.plo, ldb16(L), lane);
    if (kh == 0) acc_t_split<8, STAGE_ROWS / SPLIT>(dvphi, dvplo, vo, dvt, dv, nw, stage, lane);
}

// dS^T = decay dS^T + (dO^T diag(exp(gamma))) Q - dV'^T W, or zero where the chunk starts a
// document.
template <bool EXACT, int KS, int SPLIT>
__device__ void dstate_update(float (&ds)[1][2 * KS / SPLIT][4], float (&dvt)[1][8][4],
                              const DpassTiles &s, const ChunkDecay &d, int bv, int grp, int kh,
                              float scale, bool reset, int lane) {
    const int KH = KS / SPLIT, row0 = 16 * KH * kh;
    int ld = ldb16(KS * 16);
#pragma unroll
    for (int j = 0; j < 2 * KH; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) ds[0][j][e] *= d.last;
    uint32_t hi[1][4][4], lo[1][4][4];
    dout_split_a<EXACT>(hi, lo, s.dout, ldf32(bv), 16 * grp, d.eg, scale, lane);
    rows_times<EXACT, 2 * KH>(ds, hi, lo, s.q + row0, NULL, ld, lane);
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dvt[0][j][e] = -dvt[0][j][e];
    rows_split_a<EXACT>(hi, lo, dvt);
    rows_times<EXACT, 2 * KH>(ds, hi, lo, s.whi + row0, s.wlo ? s.wlo + row0 : NULL, ld, lane);
    zero_where<2 * KH>(ds, reset);
}

// Grid (dv / bv, H, B): walks the chunks of span back with dS^T (carry holds dS for the span's
// last chunk on entry, [B, H, dk, dv], and gets it for the chunk before the span on return),
// keeping it in slot c - span.begin of keep and each chunk's dV' in f.dvphi (and f.dvplo).
template <int KS, bool EXACT, int NW, int SPLIT = 1>
__global__ void __launch_bounds__(32 * PASS_MAX_WARPS * SPLIT, SPLIT > 1 ? 1 : 0)
    dpass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts,
                 int max_chunks, Span span, Factors f, float *carry, Kept keep) {
    static_assert(SPLIT == 1 || NW == PASS_MAX_WARPS, "a split block is 4 pairs of warps");
    extern __shared__ __align__(128) unsigned char smem[];
    const int KH = KS / SPLIT, ROWS = STAGE_ROWS / SPLIT, THREADS = 32 * NW * SPLIT;
    int b = blockIdx.z, h = blockIdx.y, bv = NW ? 16 * NW : blockDim.x / 2, n0 = blockIdx.x * bv;
    int dv = a.dv, lane = threadIdx.x % 32, warp = threadIdx.x / 32, grp = warp / SPLIT;
    int kh = warp % SPLIT, nw = n0 + 16 * grp, row0 = 16 * KH * kh; // the warp's rows of dS
    int c1 = min(span.end, counts[b]);
    if (span.begin >= c1) return; // the row has no chunk in the span: carry stays
    size_t bytes;
    DpassTiles tiles[2];
    bf16 *stage;
    float *decay, *xbuf;
    carve_pass(tiles, &stage, &decay, &xbuf, smem, a.dk, bv, EXACT, SPLIT, &bytes);
    if (stage) stage += warp * ROWS * STAGE_LD;
    decay += warp * DECAY_FLOATS;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    float *carry_bh = carry + ((long)b * a.H + h) * a.dk * dv + (long)row0 * dv;
    float ds[1][2 * KH][4];
    state_in<2 * KH>(ds, carry_bh, dv, nw, lane);
    int t0 = row[c1 - 1], Lc = row[c1] - t0;
    dpass_load<KS, THREADS, 8 * SPLIT>(
        tiles[0], a, t, f, factor_index(a, b, h, c1 - 1 - span.begin), b, h, t0, Lc, n0, bv);
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
            dpass_load<KS, THREADS, 8 * SPLIT>(other, a, t, f, factor_index(a, b, h, slot - 1), b,
                                               h, tp, Lp, n0, bv);
            go = gdn_gate_off(&a, b, tp, h);
            next = fetch_gates(t.g + go, t.beta + go, a.H, Lp);
        }
        keep_state<2 * KH, ROWS>(keep, a, b, h, slot, ds, nw, stage, lane, row0);
        ChunkDecay d = chunk_decay<true>(gates, decay, lane);
        float dvt[1][8][4];
        long vo = factor_index(a, b, h, slot) * L * dv;
        dvprime<EXACT, KS, SPLIT>(dvt, ds, s, d, bv, grp, kh, xbuf, a.scale, f.dvphi, f.dvplo, vo,
                                  dv, nw, stage, lane);
        dstate_update<EXACT, KS, SPLIT>(ds, dvt, s, d, bv, grp, kh, a.scale,
                                        starts_document(a, b, t0), lane);
    }
    state_out<2 * KH>(carry_bh, ds, dv, nw, lane);
}

// Shared-memory bytes of a dpass's block at bv state columns, its warps whole or split.
size_t dpass_bytes(int dk, int bv, bool exact) {
    return carve_bytes<DpassTiles>(dk, bv, exact, 1);
}
size_t split_dpass_bytes(int dk, int bv, bool exact) {
    return carve_bytes<DpassTiles>(dk, bv, exact, 2);
}

} // namespace

void gdn::tc_dpass(const gdn_args *a, const Tensors &t, const int32_t *starts,
                   const int32_t *counts, int max_chunks, Span span, const Factors &f, float *carry,
                   Kept keep, cudaStream_t stream) {
    bool exact = f.wlo != NULL;
    int nw = pass_warps(a, dpass_bytes, exact);
    if (!exact && split_fits(a, nw, split_dpass_bytes, exact)) // the exact one's need 242 KB
        pass_launch(dpass_kernel<8, false, 4, 2>, nw, 2, GDN_PHASE_DPASS, a, split_dpass_bytes,
                    exact, stream, *a, t, starts, counts, max_chunks, span, f, carry, keep);
    else
        pass_launch(PASS_INSTANCE(dpass_kernel, a->dk, exact, nw), nw, 1, GDN_PHASE_DPASS, a,
                    dpass_bytes, exact, stream, *a, t, starts, counts, max_chunks, span, f, carry,
                    keep);
}
