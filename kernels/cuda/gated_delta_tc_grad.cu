// The gated delta rule's gradients a chunk at a time on tensor cores (the last kernels of
// gated_delta_tc_bwd.cu's segments), from the chunk's factors (gated_delta_tc.cu's notation:
// T, W, U, V', P, M = D KK^T), its entering state S0, its leaving state's gradient dS_e and dV'
// (the state-gradient pass's). With dO = scale dout:
//   dR = T^T dV',  dv = diag(beta) dR,  dP = dO V'^T (j <= i),  dA = -dR V'^T (j < i);
//   X = dO S0^T,  Y = dR S0^T,  Z = V' dS_e^T                              ([L, dk] each);
//   dq = diag(exp(gamma)) X + dPD K,
//   dk = diag(w) Z - diag(beta exp(gamma)) Y + (dAB + dAB^T) K + dPD^T Q,
// with dPD = dP D and dAB_ij = dA_ij beta_i D_ij;
//   dbeta_i = v_i.dR_i - exp(gamma_i) k_i.Y_i + sum_j dA_ij M_ij;
//   dgamma_i = exp(gamma_i) q_i.X_i - beta_i exp(gamma_i) k_i.Y_i - w_i k_i.Z_i
//              + sum_j (e_ij - e_ji),  e_ij = dP_ij P_ij + dA_ij beta_i M_ij,
// and on the last token exp(gamma_last) <S0, dS_e> + sum_j w_j k_j.Z_j; dg is dgamma summed from
// the chunk's end. Kernels, in call order:
// - pairs_kernel, grid (chunks, H, B): dR, dv, dPD, dAB and the rows' pair terms (the [L, dv]
//   and [L, L] products);
// - rows_kernel, grid (chunks, HK, B): for each of a key head's value heads in order, X, Y, Z,
//   dbeta and dg, and its dq and dk added to the key head's (no atomics: each element by one
//   lane, the heads in order). The kept states, V' and dR come split as the products read them
//   (gated_delta_tc.cuh).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"

namespace {

using namespace gdn;

// ---- pairs: dR, dv and the [L, L] terms --------------------------------------------------

struct PairsSmem {
    Split Vp, G, dO, T, P; // V', dV' then dR, dO [L, dv]; T, P [L, L]
    float *stage;          // [L, ldf32(128)]: dR, then dP | dA side by side
    float *gam, *beta, *eg, *w, *vdr;
};

const int STAGE_W = 128; // the stage's columns: dv, or dP and dA

__host__ __device__ PairsSmem pairs_smem(unsigned char *base, int dv, bool exact, size_t *bytes) {
    Carve cv = {base, 0};
    PairsSmem s;
    s.Vp = take_split(cv, L, dv, exact);
    s.G = take_split(cv, L, dv, exact);
    s.dO = take_split(cv, L, dv, exact);
    s.T = take_split(cv, L, L, exact);
    s.P = take_split(cv, L, L, exact);
    s.stage = cv.take<float>(L * ldf32(STAGE_W));
    float *g = cv.take<float>(5 * L);
    s.gam = g, s.beta = g + L, s.eg = g + 2 * L, s.w = g + 3 * L, s.vdr = g + 4 * L;
    *bytes = cv.off;
    return s;
}

// dP = dO V'^T into the stage's columns [0, L), dR V'^T into [L, 2L): warps 0-3 the first, 4-7
// the second, a warp a row of four tiles.
__device__ void pairs_products(const PairsSmem &s, int dv) {
    static_assert(TC_WARPS == 8 && L / 16 <= MAX_TILES, "pairs_products: two products of 4 x 4");
    int lds = ldf32(STAGE_W), w = threadIdx.x / 32;
    const Split &A = w < 4 ? s.dO : s.G;
    WarpTiles wt = {w % 4 * 16, 0, 16, L / 16};
    FragC acc[MAX_TILES];
    tiles_zero(acc);
    mma_split_tiles<row_major, col_major>(acc, wt, A.hi, A.lo, A.ld, s.Vp.hi, s.Vp.lo, s.Vp.ld, dv);
    tiles_store(s.stage + (w < 4 ? 0 : L), lds, acc, wt);
}

// From dP and dR V'^T in the stage: dPD and dAB (split, to f), and in place e_ij (columns
// [0, L)) and dA_ij M_ij (columns [L, 2L)), eight elements of a row a thread at a time (16-byte
// loads and stores). M is read where the prep left it, all of a thread's before any is used: a
// copy in shared memory would cost the block its second place on a multiprocessor.
__device__ void pairs_terms(const PairsSmem &s, const Factors &f, long idx, int Lc) {
    const int GROUPS = L * L / (8 * TC_THREADS);
    int lds = ldf32(STAGE_W);
    __align__(16) float mv[GROUPS][8];
#pragma unroll
    for (int k = 0; k < GROUPS; k++)
        row8(mv[k], f.m + idx * L * L + 8 * (threadIdx.x + k * TC_THREADS));
#pragma unroll
    for (int k = 0; k < GROUPS; k++) {
        int e0 = 8 * (threadIdx.x + k * TC_THREADS), i = e0 / L;
        float dpd[8], dab[8];
#pragma unroll
        for (int x = 0; x < 8; x++) {
            int j = e0 % L + x;
            bool lower = i < Lc && j <= i;
            float D = lower ? expf(s.gam[i] - s.gam[j]) : 0.0f;
            float *dp = s.stage + i * lds + j, *da = dp + L;
            float dpv = lower ? *dp : 0.0f, dav = lower && j < i ? -*da : 0.0f;
            float p = split_value(s.P, i, j), m = mv[k][x];
            dpd[x] = dpv * D;
            dab[x] = dav * s.beta[i] * D;
            *dp = dpv * p + dav * s.beta[i] * m;
            *da = dav * m;
        }
        split_put8(f.dpdhi, f.dpdlo, idx * L * L + e0, dpd);
        split_put8(f.dabhi, f.dablo, idx * L * L + e0, dab);
    }
}

// Each row's pair terms from the stage: sum_j (e_ij - e_ji) into f.rowg, v_i.dR_i + sum_j
// dA_ij M_ij into f.rowb; four lanes a row, their partial sums added in a fixed order.
__device__ void pairs_row_sums(const PairsSmem &s, const Factors &f, long idx, int Lc) {
    int lds = ldf32(STAGE_W), i = threadIdx.x / 4, sub = threadIdx.x % 4;
    float pg = 0.0f, pb = 0.0f;
    for (int j = sub; j < L && i < Lc; j += 4) {
        pg += s.stage[i * lds + j] - s.stage[j * lds + i];
        pb += s.stage[i * lds + L + j];
    }
    for (int o = 1; o < 4; o *= 2) {
        pg += __shfl_xor_sync(0xffffffffu, pg, o);
        pb += __shfl_xor_sync(0xffffffffu, pb, o);
    }
    if (sub == 0) {
        f.rowg[idx * L + i] = pg;
        f.rowb[idx * L + i] = i < Lc ? s.vdr[i] + pb : 0.0f;
    }
}

// The rows of v a warp's lanes read for v_i . dR_i (row warp + TC_WARPS r, columns lane + 32 c),
// fetched with the block's other loads: read where they are used, each row would wait out the
// memory's latency after the dR stores before it.
struct VRows {
    float x[L / TC_WARPS][MAX_DIM / 32];
};

__device__ VRows fetch_v_rows(const bf *v, long vs, int dv, int Lc) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    VRows o;
#pragma unroll
    for (int r = 0; r < L / TC_WARPS; r++)
#pragma unroll
        for (int c = 0; c < MAX_DIM / 32; c++) {
            int i = warp + TC_WARPS * r, n = lane + 32 * c;
            o.x[r][c] = i < Lc && n < dv ? __bfloat162float(v[i * vs + n]) : 0.0f;
        }
    return o;
}

// v_i . dR_i into s.vdr, dR in the stage: a warp a row, its lanes' products in column order.
__device__ void v_dot_dr(const PairsSmem &s, const VRows &vr, int dv, int Lc) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, lds = ldf32(STAGE_W);
#pragma unroll
    for (int r = 0; r < L / TC_WARPS; r++) {
        int i = warp + TC_WARPS * r;
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < MAX_DIM / 32; c++) {
            int n = lane + 32 * c;
            if (i < Lc && n < dv) acc += vr.x[r][c] * s.stage[i * lds + n];
        }
        acc = warp_sum(acc);
        if (lane == 0) s.vdr[i] = acc;
    }
}

// Grid (chunks of the span, H, B); DK, DV: the head dims, or 0 (dim_or, gated_delta_tc.cuh).
template <int DK, int DV>
__global__ void __launch_bounds__(TC_THREADS)
    pairs_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts,
                 int max_chunks, Span span, Factors f) {
    extern __shared__ __align__(128) unsigned char smem[];
    int slot = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0, Lc;
    if (!chunk_at(starts, counts, max_chunks, span, b, span.begin + slot, &t0, &Lc)) return;
    int dv = dim_or<DV>(a.dv), lds = ldf32(STAGE_W);
    size_t bytes;
    PairsSmem s = pairs_smem(smem, dv, f.wlo != NULL, &bytes);
    long idx = factor_index(a, b, h, slot), vs = (long)a.H * dv, go = gdn_gate_off(&a, b, t0, h);
    load_split_block(s.Vp, f.vphi, f.vplo, idx * L * dv, L, dv);
    load_split_block(s.G, f.dvphi, f.dvplo, idx * L * dv, L, dv);
    load_split_rows(s.dO, t.dout + gdn_v_off(&a, b, t0, h), vs, Lc, L, dv, NULL, a.scale);
    load_split_factor(s.T, f.thi, f.tlo, idx * L * L, L);
    load_split_factor(s.P, f.phi, f.plo, idx * L * L, L);
    load_gates_padded(s.gam, s.beta, s.eg, s.w, t.g + go, t.beta + go, a.H, Lc);
    VRows vrows = fetch_v_rows(t.v + gdn_v_off(&a, b, t0, h), vs, dv, Lc);
    loads_done();
    __syncthreads();
    { // dR = T^T dV'
        WarpTiles wt = warp_tiles(dv);
        FragC acc[MAX_TILES];
        tiles_zero(acc);
        mma_split_tiles<col_major, row_major>(acc, wt, s.T.hi, s.T.lo, s.T.ld, s.G.hi, s.G.lo,
                                              s.G.ld, L);
        tiles_store(s.stage, lds, acc, wt);
    }
    __syncthreads();
    // dR into G (the products' operand), f.dr (the rows kernel's) and dv = diag(beta) dR, 8
    // columns a thread at a time: 16-byte stores
    float *dvo = t.dv + gdn_v_off(&a, b, t0, h);
    for (int e = 8 * threadIdx.x; e < L * dv; e += 8 * blockDim.x) {
        int i = e / dv, n = e % dv;
        __align__(16) float r[8];
        row8(r, s.stage + i * lds + n);
        split_put8(s.G.hi, s.G.lo, i * s.G.ld + n, r);
        split_put8(f.drhi, f.drlo, idx * L * dv + e, r);
        if (i >= Lc) continue;
#pragma unroll
        for (int x = 0; x < 8; x++) r[x] = s.beta[i] * r[x];
        put8(dvo + i * vs + n, r);
    }
    v_dot_dr(s, vrows, dv, Lc);
    if (f.doh) store_bf16_block(f.doh + idx * L * dv, dv, s.dO.hi, L, dv); // the rows kernel's
    __syncthreads();
    pairs_products(s, dv);
    __syncthreads();
    pairs_terms(s, f, idx, Lc);
    __syncthreads();
    pairs_row_sums(s, f, idx, Lc);
}

// ---- rows: X, Y, Z, dq and dk of a key head's value heads, dbeta and dg ---------------------

// A head's operands: in the default mode each has a buffer of its own, and dO, dR and S0 are
// copied in with the head's first tiles (dO as the pairs kernel rounded it, f.doh), so that a
// head waits on the memory once (211 KB at dk = dv = 128: the block has a multiprocessor to
// itself either way), and the block runs 16 warps (ROWS_WARPS), whose tiles (tmp) lie where
// dS_e was, once <S0, dS_e> is taken: one block's 8 warps left the multiprocessor waiting on
// their chains of dependent steps. In the exact mode, whose halves would not fit, V', dO and
// dR take one buffer in turn and dS_e and S0 another, each loaded where it is needed, and the
// block runs TC_WARPS. Every choice gives the same bits (a tile's arithmetic is its own).
const int ROWS_WARPS = 16;

int forced_rows_warps; // cuda_gated_delta_rows_warps

inline int rows_warps(bool exact) {
    return exact ? TC_WARPS : forced_rows_warps ? forced_rows_warps : ROWS_WARPS;
}

struct RowsSmem {
    bf *Q, *K;        // [L, ldb16(dk)]
    Split Vp, dO, dR; // [L, dv]
    Split dSe, S0;    // [dk, dv]
    Split DPD, DAB;   // [L, L]
    float *stage;     // [L, ldf32(dk)]: diag(w) Z
    float *tmp;       // a [16, 20] tile a warp
    float *pq, *py;   // [L, 8]: the rows' dot products, a column a 16-wide tile
    float *gam, *beta, *eg, *w, *z, *nbe, *dgam, *red;
    bool ahead; // the default mode's buffers apart
    int nw;     // the block's warps
};

__host__ __device__ RowsSmem rows_smem(unsigned char *base, int dk, int dv, bool exact, int nw,
                                       size_t *bytes) {
    Carve cv = {base, 0};
    RowsSmem s;
    s.ahead = !exact;
    s.nw = nw;
    s.Q = cv.take<bf>(L * ldb16(dk));
    s.K = cv.take<bf>(L * ldb16(dk));
    s.Vp = take_split(cv, L, dv, exact);
    s.dO = s.ahead ? take_split(cv, L, dv, exact) : s.Vp;
    s.dR = s.ahead ? take_split(cv, L, dv, exact) : s.Vp;
    s.dSe = take_split(cv, dk, dv, exact);
    s.S0 = s.ahead ? take_split(cv, dk, dv, exact) : s.dSe;
    s.DPD = take_split(cv, L, L, exact);
    s.DAB = take_split(cv, L, L, exact);
    s.stage = cv.take<float>(L * ldf32(dk));
    size_t tiles = sizeof(float) * nw * 16 * TMP_LD;
    if (s.ahead && sizeof(bf) * dk * s.dSe.ld >= tiles)
        s.tmp = reinterpret_cast<float *>(s.dSe.hi);
    else
        s.tmp = cv.take<float>(tiles / sizeof(float));
    s.pq = cv.take<float>(L * 8);
    s.py = cv.take<float>(L * 8);
    float *g = cv.take<float>(7 * L + TC_THREADS);
    s.gam = g, s.beta = g + L, s.eg = g + 2 * L, s.w = g + 3 * L, s.z = g + 4 * L;
    s.nbe = g + 5 * L, s.dgam = g + 6 * L, s.red = g + 7 * L;
    *bytes = cv.off;
    return s;
}

// Where the value head's dq and dk go: the key head's rows of t.dq and t.dk.
struct RowsOut {
    float *dq, *dk;
    long stride;
    int Lc;
    bool first;
};

// The rows kernel's tiles at a time: four, with each one's sum so far, would spill registers.
const int ROWS_TILES = 2;

// A lane's elements of its tiles of dst, as its accumulator fragments hold them (FragC, in
// pairs: frag_pair_row).
struct TileSum {
    float x[8];
};

// What the lane's elements of the warp's tiles wt of dst hold before this value head adds to
// them: zero for the key head's first, or a row at or past Lc. Read before the tiles'
// products, so that the reads' latency overlaps them.
__device__ void rows_sum_so_far(TileSum (&sum)[ROWS_TILES], const float *dst, const RowsOut &out,
                                const WarpTiles &wt) {
#pragma unroll
    for (int j = 0; j < ROWS_TILES; j++)
#pragma unroll
        for (int k = 0; k < FRAG_PAIRS; k++) {
            int i = wt.m0 + frag_pair_row(k), c = tile_col(wt, j) + frag_pair_col(k);
            bool zero = j >= wt.n || out.first || i >= out.Lc;
            float2 v = zero ? make_float2(0.0f, 0.0f)
                            : *reinterpret_cast<const float2 *>(dst + i * out.stride + c);
            sum[j].x[2 * k] = v.x, sum[j].x[2 * k + 1] = v.y;
        }
}

// The warp's tiles acc of the value head's dq or dk added to dst's (sum: rows_sum_so_far's)
// from the lanes' registers: the key head's value heads add in order, each element by the same
// lane (no atomics: the same bits as each head's share summed apart).
__device__ void rows_add(float *dst, const RowsOut &out, const FragC (&acc)[ROWS_TILES],
                         const TileSum (&sum)[ROWS_TILES], const WarpTiles &wt) {
#pragma unroll
    for (int j = 0; j < ROWS_TILES; j++)
#pragma unroll
        for (int k = 0; k < FRAG_PAIRS; k++) {
            int i = wt.m0 + frag_pair_row(k), c = tile_col(wt, j) + frag_pair_col(k), x = 2 * k;
            if (j < wt.n && i < out.Lc)
                *reinterpret_cast<float2 *>(dst + i * out.stride + c) =
                    make_float2(sum[j].x[x] + acc[j].x[x], sum[j].x[x + 1] + acc[j].x[x + 1]);
        }
}

// The warp's tiles of A B^T (X, Y or Z: [L, dk], K = dv) into acc.
__device__ void rows_abt(FragC (&acc)[ROWS_TILES], const WarpTiles &wt, const Split &A,
                         const Split &B, int dv) {
    tiles_zero(acc);
    mma_split_tiles<row_major, col_major>(acc, wt, A.hi, A.lo, A.ld, B.hi, B.lo, B.ld, dv);
}

// Each row's dot product with rows m0.. of V (columns c0..), through the warp's tmp tile, into
// dots[row 8 + c0 / 16]; then acc's rows scaled by mul.
__device__ void rows_dot_scale(FragC &acc, const RowsSmem &s, const bf *V, int ldv, int m0, int c0,
                               float *dots, const float *mul) {
    float *tmp = warp_tile(s.tmp);
    int lane = threadIdx.x % 32;
    tile_stage(tmp, acc);
    if (lane < 16) {
        float d = 0.0f;
        for (int c = 0; c < 16; c++) d += f(V[(m0 + lane) * ldv + c0 + c]) * tmp[lane * TMP_LD + c];
        dots[(m0 + lane) * 8 + c0 / 16] = d;
    }
    frag_scale_rows(acc, mul + m0);
}

// The value head's dq or dk, a group of the warp's tiles at a time: their sums so far read
// first, acc = A B^T (rows_abt), then more(acc, wt) adds the rest, then acc goes onto dst's.
template <typename More>
__device__ void rows_grad(float *dst, const RowsOut &out, const Split &A, const Split &B, int dk,
                          int dv, int nw, More more) {
    WarpTiles all = warp_tiles(dk, nw);
    for (int j0 = 0; j0 < all.n; j0 += ROWS_TILES) {
        WarpTiles wt = tiles_from(all, j0, ROWS_TILES);
        TileSum sum[ROWS_TILES];
        rows_sum_so_far(sum, dst, out, wt);
        FragC acc[ROWS_TILES];
        rows_abt(acc, wt, A, B, dv);
        more(acc, wt);
        rows_add(dst, out, acc, sum, wt);
    }
}

// The value head's dq: X = dO S0^T, then diag(exp(gamma)) X + dPD K, added to out.dq.
__device__ void rows_dq(const RowsOut &out, const RowsSmem &s, int dk, int dv) {
    int ld = ldb16(dk);
    rows_grad(out.dq, out, s.dO, s.S0, dk, dv, s.nw,
              [&](FragC(&acc)[ROWS_TILES], const WarpTiles &wt) {
#pragma unroll
                  for (int j = 0; j < ROWS_TILES; j++)
                      if (j < wt.n)
                          rows_dot_scale(acc[j], s, s.Q, ld, wt.m0, tile_col(wt, j), s.pq, s.eg);
                  mma_split_tiles<row_major, row_major>(acc, wt, s.DPD.hi, s.DPD.lo, s.DPD.ld, s.K,
                                                        NULL, ld, L);
              });
}

// The value head's dk: Y = dR S0^T, then diag(w) Z - diag(beta exp(gamma)) Y + dAB K + dAB^T K
// + dPD^T Q, added to out.dk.
__device__ void rows_dk(const RowsOut &out, const RowsSmem &s, int dk, int dv) {
    int ld = ldb16(dk), lds = ldf32(dk);
    rows_grad(out.dk, out, s.dR, s.S0, dk, dv, s.nw,
              [&](FragC(&acc)[ROWS_TILES], const WarpTiles &wt) {
#pragma unroll
                  for (int j = 0; j < ROWS_TILES; j++) {
                      if (j >= wt.n) continue;
                      int c0 = tile_col(wt, j);
                      FragC wz;
                      rows_dot_scale(acc[j], s, s.K, ld, wt.m0, c0, s.py, s.nbe);
                      frag_load(wz, s.stage + wt.m0 * lds + c0, lds);
                      for (int i = 0; i < wz.num_elements; i++) acc[j].x[i] += wz.x[i];
                  }
                  mma_split_tiles<row_major, row_major>(acc, wt, s.DAB.hi, s.DAB.lo, s.DAB.ld, s.K,
                                                        NULL, ld, L);
                  mma_split_tiles<col_major, row_major>(acc, wt, s.DAB.hi, s.DAB.lo, s.DAB.ld, s.K,
                                                        NULL, ld, L);
                  mma_split_tiles<col_major, row_major>(acc, wt, s.DPD.hi, s.DPD.lo, s.DPD.ld, s.Q,
                                                        NULL, ld, L);
              });
}

// Z = V' dS_e^T into the stage; z_i = k_i.Z_i; the stage's rows scaled by w.
__device__ void rows_z(const RowsSmem &s, int dk, int dv) {
    int lds = ldf32(dk), ld = ldb16(dk), lane = threadIdx.x % 32;
    WarpTiles all = warp_tiles(dk, s.nw);
    for (int j0 = 0; j0 < all.n; j0 += ROWS_TILES) {
        WarpTiles wt = tiles_from(all, j0, ROWS_TILES);
        FragC acc[ROWS_TILES];
        rows_abt(acc, wt, s.Vp, s.dSe, dv);
        tiles_store(s.stage, lds, acc, wt);
    }
    __syncthreads();
    for (int i = threadIdx.x / 32; i < L; i += s.nw) { // a warp owns row i
        float d = 0.0f;
        for (int m = lane; m < dk; m += 32) d += f(s.K[i * ld + m]) * s.stage[i * lds + m];
        d = warp_sum(d);
        for (int m = lane; m < dk; m += 32) s.stage[i * lds + m] *= s.w[i];
        if (lane == 0) s.z[i] = d;
    }
}

// dbeta and dg of the chunk's tokens (the header's sums); sd = <S0, dS_e>.
__device__ void rows_scalars(const RowsSmem &s, const gdn_args &a, const Tensors &t,
                             const Factors &f, long idx, int b, int t0, int h, int Lc, float sd) {
    int i = threadIdx.x, nt = a.dk / 16;
    if (i < Lc) {
        float sq = 0.0f, sy = 0.0f;
        for (int c = 0; c < nt; c++) sq += s.pq[i * 8 + c], sy += s.py[i * 8 + c];
        // pq and py hold q.X and k.Y: rows_dot_scale takes the dots before it scales the rows.
        s.dgam[i] = f.rowg[idx * L + i] + s.eg[i] * sq - s.beta[i] * s.eg[i] * sy - s.w[i] * s.z[i];
        t.dbeta[gdn_gate_off(&a, b, t0 + i, h)] = f.rowb[idx * L + i] - s.eg[i] * sy;
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    // warp 0: the last token's extra term, then dg_r = sum of dgamma from r to the chunk's end
    // (a suffix scan over lanes l and l + 32), in a fixed order
    int lane = threadIdx.x;
    float wz = s.w[lane] * s.z[lane] + s.w[lane + 32] * s.z[lane + 32]; // zero past Lc
    float last = s.eg[Lc - 1] * sd + warp_sum(wz);
    float x[2];
    for (int half = 0; half < 2; half++) {
        int r = lane + 32 * half;
        x[half] = r < Lc ? s.dgam[r] + (r == Lc - 1 ? last : 0.0f) : 0.0f;
        for (int o = 1; o < 32; o *= 2) {
            float y = __shfl_down_sync(0xffffffffu, x[half], o);
            if (lane + o < 32) x[half] += y;
        }
    }
    x[0] += __shfl_sync(0xffffffffu, x[1], 0);
    for (int half = 0; half < 2; half++) {
        int r = lane + 32 * half;
        if (r < Lc) t.dg[gdn_gate_off(&a, b, t0 + r, h)] = x[half];
    }
}

// <S0, dS_e> of the two splits' values in a fixed order: strided partial sums of the first
// TC_THREADS threads (however many the block has), each warp's by a shuffle tree, then the
// warps' in order. S0 is in s.S0 already where the head's operands are
// apart (s.ahead); in the exact mode it comes from global memory (hi and lo + o) into the
// buffer that holds dS_e, each thread reading and overwriting only its own elements. Every
// thread gets the sum; ends with a barrier.
__device__ float state_dot(const RowsSmem &s, const bf *hi, const bf *lo, long o, int dk, int dv) {
    const int BATCH = 4; // loads in flight before the first is used
    int vecs = dv / 8, total = dk * vecs;
    float part = 0.0f;
    for (int e0 = threadIdx.x; threadIdx.x < TC_THREADS && e0 < total; e0 += BATCH * TC_THREADS) {
        __align__(16) bf h[BATCH][8], l[BATCH][8];
#pragma unroll
        for (int r = 0; r < BATCH; r++) {
            int e = e0 + r * TC_THREADS, i = e / vecs, m = e % vecs * 8;
            long g = o + (long)i * dv + m;
            if (e >= total) continue;
            const bf *src = s.ahead ? s.S0.hi + i * s.S0.ld + m : hi + g;
            *reinterpret_cast<uint4 *>(h[r]) = *reinterpret_cast<const uint4 *>(src);
            if (lo) *reinterpret_cast<uint4 *>(l[r]) = *reinterpret_cast<const uint4 *>(lo + g);
        }
#pragma unroll
        for (int r = 0; r < BATCH; r++) {
            int e = e0 + r * TC_THREADS, i = e / vecs, m = e % vecs * 8;
            if (e >= total) continue;
            for (int x = 0; x < 8; x++)
                part += (f(h[r][x]) + (lo ? f(l[r][x]) : 0.0f)) * split_value(s.dSe, i, m + x);
            if (s.ahead) continue;
            *reinterpret_cast<uint4 *>(s.S0.hi + i * s.S0.ld + m) =
                *reinterpret_cast<uint4 *>(h[r]);
            if (lo)
                *reinterpret_cast<uint4 *>(s.S0.lo + i * s.S0.ld + m) =
                    *reinterpret_cast<uint4 *>(l[r]);
        }
    }
    part = warp_sum(part);
    if (threadIdx.x % 32 == 0 && threadIdx.x < TC_THREADS) s.red[threadIdx.x / 32] = part;
    __syncthreads();
    float sum = 0.0f;
    for (int w = 0; w < TC_WARPS; w++) sum += s.red[w];
    return sum;
}

// One value head h of the block's chunk: dbeta and dg, and its dq and dk added to out's.
__device__ void rows_head(const RowsOut &out, const RowsSmem &s, const gdn_args &a,
                          const Tensors &t, const Factors &f, Kept states, Kept dstates, int slot,
                          int b, int h, int t0, int Lc, int dk, int dv) {
    long idx = factor_index(a, b, h, slot), go = gdn_gate_off(&a, b, t0, h);
    long so = kept_index(states, a, b, h, slot), dso = kept_index(dstates, a, b, h, slot);
    load_split_factor(s.DPD, f.dpdhi, f.dpdlo, idx * L * L, L);
    load_split_factor(s.DAB, f.dabhi, f.dablo, idx * L * L, L);
    load_split_block(s.Vp, f.vphi, f.vplo, idx * L * dv, L, dv);
    load_split_block(s.dSe, dstates.hi, dstates.lo, dso, dk, dv);
    if (s.ahead) { // the default mode: the rest of the head's operands now too
        load_split_block(s.S0, states.hi, NULL, so, dk, dv);
        load_split_block(s.dO, f.doh, NULL, idx * L * dv, L, dv);
        load_split_block(s.dR, f.drhi, NULL, idx * L * dv, L, dv);
    }
    load_gates_padded(s.gam, s.beta, s.eg, s.w, t.g + go, t.beta + go, a.H, Lc);
    for (int i = threadIdx.x; i < L && threadIdx.x < 32; i += 32) // the lane's own gates
        s.nbe[i] = -s.beta[i] * s.eg[i];
    loads_done(); // this head's tiles, and the block's Q and K for its first
    __syncthreads();
    rows_z(s, dk, dv);
    __syncthreads();
    if (!s.ahead)
        load_split_rows(s.dO, t.dout + gdn_v_off(&a, b, t0, h), (long)a.H * dv, Lc, L, dv, NULL,
                        a.scale);
    float sd = state_dot(s, states.hi, states.lo, so, dk, dv); // ends with a barrier
    rows_dq(out, s, dk, dv);
    __syncthreads();
    if (!s.ahead) {
        load_split_block(s.dR, f.drhi, f.drlo, idx * L * dv, L, dv);
        loads_done();
        __syncthreads();
    }
    rows_dk(out, s, dk, dv);
    __syncthreads();
    rows_scalars(s, a, t, f, idx, b, t0, h, Lc, sd);
}

// Grid (chunks of the span, HK, B): a key head's value heads in order, each adding its share
// of dq and dk to theirs.
template <int DK, int DV, int NW>
__global__ void __launch_bounds__(32 * NW, 1)
    rows_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, Factors f, Kept states, Kept dstates) {
    extern __shared__ __align__(128) unsigned char smem[];
    int slot = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, t0, Lc, group = a.H / a.HK;
    if (!chunk_at(starts, counts, max_chunks, span, b, span.begin + slot, &t0, &Lc)) return;
    int dk = dim_or<DK>(a.dk), dv = dim_or<DV>(a.dv);
    size_t bytes;
    RowsSmem s = rows_smem(smem, dk, dv, f.wlo != NULL, NW, &bytes);
    long qks = (long)a.HK * dk, qo = gdn_qk_off(&a, b, t0, hk);
    load_bf16_rows(s.Q, t.q + qo, qks, Lc, dk);
    load_bf16_rows(s.K, t.k + qo, qks, Lc, dk);
    RowsOut out = {t.dq + qo, t.dk + qo, qks, Lc, true};
    for (int h = hk * group; h < (hk + 1) * group; h++) {
        if (h > hk * group) __syncthreads(); // the head before is done with the tiles
        out.first = h == hk * group;
        rows_head(out, s, a, t, f, states, dstates, slot, b, h, t0, Lc, dk, dv);
    }
}

template <int DK, int DV> constexpr auto rows_8 = rows_kernel<DK, DV, 8>;
template <int DK, int DV> constexpr auto rows_16 = rows_kernel<DK, DV, 16>;

} // namespace

extern "C" void cuda_gated_delta_rows_warps(int warps) {
    forced_rows_warps = warps == 8 || warps == 16 ? warps : 0;
}

void gdn::tc_grad(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                  int max_chunks, Span span, const Factors &f, Kept states, Kept dstates,
                  cudaStream_t stream) {
    size_t pb, rb;
    bool exact = f.wlo != NULL; // the mode the factors were carved in
    pairs_smem(NULL, a->dv, exact, &pb);
    int nw = rows_warps(exact);
    rows_smem(NULL, a->dk, a->dv, exact, nw, &rb);
    auto pairs = GDN_DIMS_KERNEL(pairs_kernel, a);
    auto rows = nw == TC_WARPS ? GDN_DIMS_KERNEL(rows_8, a) : GDN_DIMS_KERNEL(rows_16, a);
    CUDA_CHECK(cudaFuncSetAttribute(pairs, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pb));
    CUDA_CHECK(cudaFuncSetAttribute(rows, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)rb));
    phase_begin(GDN_PHASE_PAIRS, stream);
    int n = span.end - span.begin;
    pairs<<<dim3(n, a->H, a->B), TC_THREADS, pb, stream>>>(*a, t, starts, counts, max_chunks, span,
                                                           f);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
    phase_begin(GDN_PHASE_GRAD, stream);
    rows<<<dim3(n, a->HK, a->B), 32 * nw, rb, stream>>>(*a, t, starts, counts, max_chunks, span, f,
                                                        states, dstates);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
}
