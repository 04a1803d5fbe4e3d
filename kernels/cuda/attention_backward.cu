// Flash attention, backward: D = rowsum(dout * out) (and from it and lse the sinks' gradient),
// then dq by query tile and dk, dv by key tile, on tensor cores or the simple path, and their
// launch (attention.cuh says how the family works).
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/ktime.cuh"

namespace {

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

// The tensor-core path's rows (hd % 8 == 0, 16-byte aligned): 16 lanes per row, 16-byte chunks
// c, c + 16 of dout and out in lane c (the second above 128 columns), so that this memory-bound
// pass runs at full bandwidth.
__global__ void attn_bwd_rowdot16(float *D, const bf16 *dout, const bf16 *out, Dims d) {
    long row = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 16;
    int c = threadIdx.x & 15;
    bool valid = row < (long)d.B * d.T * d.H; // no early return: the shuffles need all lanes
    float s = 0.0f;
    for (int col = c * 8; valid && col < d.hd; col += 16 * 8) {
        uint4 g = *(const uint4 *)(dout + row * d.hd + col);
        uint4 o = *(const uint4 *)(out + row * d.hd + col);
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

// ---- backward: the sinks' gradient ----------------------------------------------------------

constexpr int SINK_THREADS = 256;

// dsinks[h] -= sum over head h's rows (b, t) of exp(sinks[h] - lse) * D: the softmax's gradient
// for a score with no value, whose probability is exp(sink - lse) (lse includes the sink). One
// block a head; thread i sums rows i, i + SINK_THREADS, ... in order, then a tree over the
// threads in a fixed order: the same bits on every run, no atomics.
__global__ void __launch_bounds__(SINK_THREADS)
    attn_bwd_sinks(float *dsinks, const bf16 *sinks, const float *lse, const float *D, Dims d) {
    __shared__ double part[SINK_THREADS];
    const int h = blockIdx.x;
    const float sink = bf2f(sinks[h]);
    double sum = 0.0;
    for (long r = threadIdx.x; r < (long)d.B * d.T; r += SINK_THREADS) {
        const long i = (r / d.T * d.H + h) * d.T + r % d.T; // [B, H, T], as lse and D
        sum += (double)expf(sink - lse[i]) * D[i];
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int half = SINK_THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) dsinks[h] -= (float)part[0];
}

// ---- tensor-core backward: dq --------------------------------------------------------------

// One CTA per (b, h, 64*MT-query tile) streaming BC-key tiles, the forward's shape: dq = scale *
// sum_j dS_ij k_j with dS = P * (dout . v_j - D). q and dout stay in shared memory (re-read each
// key tile) to keep registers for the three accumulators (S, dP, dq). M: packed documents and
// the sliding window, compiled in only where there are some, as in the forward (attn_fwd_tc).
template <int HDP, int MT, int BC, Mask M>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dq_tc(bf16 *dq, const bf16 *dout, const float *lse, const float *D, const bf16 *q,
                   const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NS = BC / 8, BR = 16 * WARPS * MT;
    // RANGED: the rows' first keys vary (packed documents, a window); WIN: a window
    constexpr bool RANGED = M != MASK_CAUSAL, WIN = M == MASK_WINDOW;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem, *sdO = sQ + BR * LD, *sKV = sdO + BR * LD;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const int wr0 = q0 + warp * 16 * MT, wr1 = wr0 + 16 * MT - 1;
    // Key tiles kt0 .. nkt - 1, and the rows' first keys, as in the forward (attn_fwd_tc).
    const int kt0 = RANGED ? first_key<WIN>(d, b, q0) / BC : 0, nkt = key_tiles(q0, BR, d.T, BC);
    const int wfirst = RANGED ? first_key<WIN>(d, b, wr0) : 0;
    const int wlast = RANGED ? first_key<WIN>(d, b, wr1) : 0;
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long qoff = (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;
    bf16 *sQw = sQ + warp * 16 * MT * LD, *sdOw = sdO + warp * 16 * MT * LD;

    load_tile<HDP, BR>(sQ, q + qoff, q0, d.T, qs, d.hd);
    load_tile<HDP, BR>(sdO, dout + qoff, q0, d.T, qs, d.hd);
    load_tile<HDP, BC>(sKV, kb, kt0 * BC, d.T, kvs, d.hd);
    load_tile<HDP, BC>(sKV + BC * LD, vb, kt0 * BC, d.T, kvs, d.hd);
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
    for (int kt = kt0; kt < nkt; kt++) {
        const bf16 *sK = sKV + ((kt - kt0) & 1) * 2 * BC * LD, *sV = sK + BC * LD;
        if (kt + 1 < nkt) {
            bf16 *nK = sKV + ((kt + 1 - kt0) & 1) * 2 * BC * LD;
            load_tile<HDP, BC>(nK, kb, (kt + 1) * BC, d.T, kvs, d.hd);
            load_tile<HDP, BC>(nK + BC * LD, vb, (kt + 1) * BC, d.T, kvs, d.hd);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int key0 = kt * BC;
        if (key0 <= wr1 && (!RANGED || key0 + BC > wfirst)) {
            float s[MT][NS][4] = {}, dp[MT][NS][4] = {};
            mma_ss_nt<MT, KS, NS>(s, sQw, sK, LD, lane);
            mma_ss_nt<MT, KS, NS>(dp, sdOw, sV, LD, lane);
            const bool mask = key0 + BC - 1 > wr0 || (RANGED && key0 < wlast);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                // The rows' first keys, read on masked tiles only (registers, as forward)
                int first[2] = {0, 0};
                const int row_lo = wr0 + mt * 16 + (lane >> 2);
                if (RANGED && mask && wlast > 0)
                    first[0] = first_key<WIN>(d, b, row_lo),
                    first[1] = first_key<WIN>(d, b, row_lo + 8);
#pragma unroll
                for (int nt = 0; nt < NS; nt++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int r = i >> 1, key = key0 + nt * 8 + 2 * (lane & 3) + (i & 1);
                        int row = row_lo + 8 * r;
                        float p = fast_exp2(s[mt][nt][i] * d.scale_log2 - lse2[mt][r]);
                        if (mask && (key > row || (RANGED && key < first[r]))) p = 0.0f;
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
// two-stage pipeline, from the diagonal to T (packed documents: to the end of the last key's
// document; with a sliding window: to key + W at most, key_end). Computing S^T = K Q^T directly
// puts the keys on the MMA rows, so dv += P^T dout and dk += dS^T q need no cross-warp reduction.
// M: packed documents and the window, compiled in only where there are some, as in the forward
// (attn_fwd_tc): without, sS is never touched. SPLIT (Cfg::KV_SPLIT, wide heads): a CTA keeps
// one of the two in registers, dk (blockIdx.z 0) or dv (1), each recomputing P: 5 GEMMs a tile
// pair for the two CTAs instead of 4, and twice the CTAs.
template <int HDP, int MT, int BQ, Mask M, bool SPLIT>
__global__ void __launch_bounds__(THREADS)
    attn_bwd_dkdv_tc(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                     const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NQ = BQ / 8, KQ = BQ / 16;
    // RANGED: the rows' first keys vary (packed documents, a window); WIN: a window
    constexpr bool RANGED = M != MASK_CAUSAL, WIN = M == MASK_WINDOW;
    constexpr int BK = 16 * WARPS * MT, STAGE = 2 * BQ * LD; // STAGE: q then dout, in bf16 elements
    static_assert(BK % BQ == 0, "query tiles must start on the key tile's first row");
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = (bf16 *)smem, *sV = sK + BK * LD, *sQdO = sV + BK * LD;
    float *sL = (float *)(sQdO + 2 * STAGE), *sD = sL + 2 * BQ; // lse, D: [stage][BQ]
    int *sS = (int *)(sD + 2 * BQ); // packed documents: the queries' document starts, [stage][BQ]

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.KV, kvh = blockIdx.x % d.KV;
    const int k0 = blockIdx.y * BK; // low key tiles have the most queries: they go first
    const int wk0 = k0 + warp * 16 * MT, wk1 = wk0 + 16 * MT - 1; // this warp's keys
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long kvoff = (long)b * d.T * kvs + (long)kvh * d.hd;
    const int qt0 = k0 / BQ, items_end = RANGED ? key_end<WIN>(d, b, min(k0 + BK, d.T) - 1) : d.T;
    const int nqt = (items_end + BQ - 1) / BQ - qt0, items = d.group * nqt;
    const bool want_dk = !SPLIT || blockIdx.z == 0, want_dv = !SPLIT || blockIdx.z == 1;

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
            int *ds = sS + st * BQ + i;
            if (row < d.T) {
                cp_async4(l, lse + li);
                cp_async4(dd, D + li);
                if (RANGED && (!WIN || d.ds)) // a window alone: starts 0, windows on reading
                    cp_async4(ds, d.ds + (long)b * d.T + row);
                else if (RANGED)
                    *ds = 0;
            } else {
                *l = *dd = 0.0f;
                if (RANGED) *ds = 0;
            }
        }
    };

    load_tile<HDP, BK>(sK, k + kvoff, k0, d.T, kvs, d.hd);
    if (want_dk) load_tile<HDP, BK>(sV, v + kvoff, k0, d.T, kvs, d.hd); // for dP
    load_item(0, 0);
    cp_async_commit();

    // With SPLIT, dka holds whichever of dk and dv this CTA computes, and dva is unused.
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
        const int *Sq = sS + st * BQ;
        // The first key query qbase + col sees: its document's start, and its window's.
        auto qfirst = [&](int col) {
            return WIN ? max(Sq[col], attn_window_first(qbase + col, d.window)) : Sq[col];
        };
        // Else every query of the tile precedes this warp's keys, or its first key follows them
        // (rows past T hold start 0, so the last row within T decides).
        const int qlast = min(BQ, d.T - qbase) - 1;
        if (qbase + BQ - 1 >= wk0 && (!RANGED || qfirst(0) <= wk1)) {
            float s[MT][NQ][4] = {}, dp[MT][NQ][4] = {};
            mma_ss_nt<MT, KS, NQ>(s, sKw, sQ, LD, lane);
            if (want_dk) mma_ss_nt<MT, KS, NQ>(dp, sVw, sdO, LD, lane);
            const bool mask = wk1 > qbase || qbase + BQ > d.T || (RANGED && qfirst(qlast) > wk0);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int nt = 0; nt < NQ; nt++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int col = nt * 8 + 2 * (lane & 3) + (i & 1), row = qbase + col;
                        int key = wk0 + mt * 16 + (lane >> 2) + 8 * (i >> 1);
                        float p = fast_exp2(fmaf(s[mt][nt][i], d.scale_log2, -L[col] * LOG2E));
                        if (mask && (row >= d.T || key > row || (RANGED && qfirst(col) > key)))
                            p = 0.0f;
                        const float ds = p * (dp[mt][nt][i] - Dq[col]);
                        if (SPLIT) // s: the operand of this CTA's gradient, dS or P
                            s[mt][nt][i] = want_dk ? ds : p;
                        else
                            s[mt][nt][i] = p, dp[mt][nt][i] = ds;
                    }
                }
            }
            if constexpr (SPLIT) {
                uint32_t af[MT][KQ][4];
                acc_to_a<MT, KQ>(af, s);
                mma_rs_t<MT, KQ, NO>(dka, af, want_dk ? sQ : sdO, LD, lane);
            } else {
                uint32_t pf[MT][KQ][4], dsf[MT][KQ][4];
                acc_to_a<MT, KQ>(pf, s);
                acc_to_a<MT, KQ>(dsf, dp);
                mma_rs_t<MT, KQ, NO>(dva, pf, sdO, LD, lane);
                mma_rs_t<MT, KQ, NO>(dka, dsf, sQ, LD, lane);
            }
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
    if (want_dk) store_rows<HDP, MT>(dk + kvoff, kvs, wk0, d.T, d.hd, dka, kmul, sKw, lane);
    if (want_dv)
        store_rows<HDP, MT>(dv + kvoff, kvs, wk0, d.T, d.hd, SPLIT ? dka : dva, vmul, sVw, lane);
}

// ---- simple path (helpers in attention.cuh) ------------------------------------------------

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

    const int first = visible_first(d, b, i); // keys first .. i (its document's and window's)
    float acc[MAXC] = {};
    for (int j0 = first & ~31; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        float ds = 0.0f;
        if (j >= first && j <= i) {
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

    const int end = visible_end(d, b, j); // queries j .. end - 1 attend to key j
    float acck[MAXC] = {}, accv[MAXC] = {};
    for (int h = kvh * d.group; h < (kvh + 1) * d.group; h++) {
        const bf16 *qb = q + (long)b * d.T * qs + (long)h * d.hd;
        const bf16 *gb = dout + (long)b * d.T * qs + (long)h * d.hd;
        const long lo = ((long)b * d.H + h) * d.T;
        for (int i0 = j; i0 < end; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < end) {
                p = expf(dot_sg(sk[w], qb + (long)i * qs, d.hd) * d.scale - lse[lo + i]);
                ds = p * (dot_sg(sv[w], gb + (long)i * qs, d.hd) - D[lo + i]);
            }
            int n = min(32, end - i0);
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

template <int HDP>
void backward_tc(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                 const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d, cudaStream_t stream) {
    using C = Cfg<HDP>;
    // dk and dv first: they read every row of q, which dq may overwrite (dq == q is allowed:
    // the dq kernel reads only the q rows it writes, all before it writes them).
    const Mask mask = mask_of(d);
    constexpr bool SP = C::KV_SPLIT;
    auto kv_kernel =
        mask == MASK_WINDOW ? attn_bwd_dkdv_tc<HDP, C::KV_MT, C::KV_BQ, MASK_WINDOW, SP>
        : mask == MASK_DOCS ? attn_bwd_dkdv_tc<HDP, C::KV_MT, C::KV_BQ, MASK_DOCS, SP>
                            : attn_bwd_dkdv_tc<HDP, C::KV_MT, C::KV_BQ, MASK_CAUSAL, SP>;
    dim3 gk(d.B * d.KV, cdiv(d.T, 16 * WARPS * C::KV_MT), SP ? 2 : 1); // z: dk, dv with SPLIT
    set_smem_limit(kv_kernel, C::kv_smem);
    kv_kernel<<<gk, THREADS, C::kv_smem, stream>>>(dk, dv, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();

    auto dq_kernel = mask == MASK_WINDOW ? attn_bwd_dq_tc<HDP, C::DQ_MT, C::DQ_BC, MASK_WINDOW>
                     : mask == MASK_DOCS ? attn_bwd_dq_tc<HDP, C::DQ_MT, C::DQ_BC, MASK_DOCS>
                                         : attn_bwd_dq_tc<HDP, C::DQ_MT, C::DQ_BC, MASK_CAUSAL>;
    dim3 gq(d.B * d.H, cdiv(d.T, 16 * WARPS * C::DQ_MT));
    set_smem_limit(dq_kernel, C::dq_smem);
    dq_kernel<<<gq, THREADS, C::dq_smem, stream>>>(dq, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

} // namespace

extern "C" void cuda_attention_backward(const attn_args *args, const cuda_attn_tensors *t,
                                        void *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_ATTENTION);
    const Dims d = make_dims(*args, t->sinks);
    const int B = d.B, T = d.T, H = d.H, KV = d.KV, hd = d.hd;
    bf16 *dq = t->dq, *dk = t->dk, *dv = t->dv;
    const bf16 *dout = t->dout, *out = t->out, *q = t->q, *k = t->k, *v = t->v;
    const float *lse = t->lse;
    if (B == 0 || T == 0) return;
    kt_work(stream, KT_ATTENTION, 2.5 * attention_flops(d), 0, "attention backward hd %d T %d", hd,
            T);
    float *D = (float *)scratch;
    const long qrows = (long)B * T * H;
    const void *ptrs[] = {dq, dk, dv, dout, out, q, k, v};
    // From hd 33 the fused TMA backward (attention_bwd_tma.cu) where it runs; without it, hd 64
    // and under run faster on mma.sync than on the plain wgmma kernels (2026-12-01).
    const AttnPath path = attention_path(hd, ptrs, 8, 33);
    if (path != PATH_SIMPLE && hd % 8 == 0)
        attn_bwd_rowdot16<<<(unsigned)((qrows + 15) / 16), 256, 0, stream>>>(D, dout, out, d);
    else
        attn_bwd_rowdot<<<(unsigned)((qrows + 7) / 8), 256, 0, stream>>>(D, dout, out, d);
    CUDA_CHECK_LAUNCH();
    if (t->sinks) {
        attn_bwd_sinks<<<H, SINK_THREADS, 0, stream>>>(t->dsinks, t->sinks, lse, D, d);
        CUDA_CHECK_LAUNCH();
    }
    if (path == PATH_SIMPLE) {
        attn_bwd_dkdv_simple<<<simple_blocks((long)B * KV * T), 32 * SIMPLE_WARPS, 0, stream>>>(
            dk, dv, dout, lse, D, q, k, v, d); // before dq, which may overwrite q
        CUDA_CHECK_LAUNCH();
        attn_bwd_dq_simple<<<simple_blocks(qrows), 32 * SIMPLE_WARPS, 0, stream>>>(dq, dout, lse, D,
                                                                                   q, k, v, d);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (path == PATH_WGMMA) {
        if (attention_backward_tma(dq, dk, dv, lse, dout, q, k, v, d, scratch, stream)) return;
        // Without the fused kernel, the plain wgmma kernels from hd 65 or when asked for; they
        // have no document or window masks, so packed documents and windows take mma.sync.
        if (mask_of(d) == MASK_CAUSAL && attention_path(hd, ptrs, 8, 65) == PATH_WGMMA) {
            attention_backward_wgmma(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
            return;
        }
    }
    switch (padded_hd(hd)) {
    case 32:
        backward_tc<32>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    case 64:
        backward_tc<64>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    case 128:
        backward_tc<128>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    case 192:
        backward_tc<192>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    default:
        backward_tc<256>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
        break;
    }
}
