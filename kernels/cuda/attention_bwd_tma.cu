// Flash attention backward on Hopper, warp-specialized and fused: one kernel computes dk, dv
// and dq, where the plain wgmma backward (attention_wgmma.cu) runs a second kernel for dq that
// recomputes S and dP: five tile products per (query tile, key tile) instead of seven.
//
// A CTA owns 128 keys of one kv head (two consumer warpgroups of 64 keys, K and V loaded once)
// and streams 64-query tiles of Q and dout, for every query head of the group, through a
// two-stage TMA ring fed by a producer warpgroup (as attention_tma.cu's forward). Per tile each
// consumer computes S^T and dP^T, then P^T and dS^T in registers; dV += P^T dO takes P^T as a
// register operand. dS^T goes to a shared tile, from which its own rows feed dK += dS^T Q and,
// after a barrier, all 128 rows feed dQ = dS K read transposed. The head dim's tiles are HDP =
// 128 or 64 columns (hd 33-64 pad to 64 in the TMA boxes, as 65-128 to 128). At 128 each
// warpgroup computes dQ for half of the columns; at 64 a half would be a 32-column slice of a
// swizzled panel, so instead the warpgroups take turns, each computing the whole dQ of every
// other item.
//
// dq is the one output several CTAs add to: key tile j's part of query tile i. Each consumer stages
// its half of the part (at HDP 64: the whole part, on its turn) as fp32 in shared memory, and a
// writer thread of the producer warpgroup adds it to an fp32 accumulator in global memory with one
// TMA reduce-add per 32 columns, in key-tile order: a per-(query tile, half) counter says how many
// key tiles have added, and key tile j waits for it to read j before it adds (acquire) and bumps it
// once its adds are done (release). So every run sums in the same order and dq is bitwise
// reproducible, as the rest of the attention path. Key tile 0 stores instead of adding: the
// accumulator needs no clearing. kv heads are the grid's fastest dimension, so the CTAs resident
// together hold neighbouring key tiles of several heads (key tiles fastest chains a whole head's
// tiles in one wave: 1.5x slower at 2k-16k, 2026-12-02); how many of a head's key tiles, and the
// order of each CTA's items, chain_run_kv_heads and items_reversed say. A CTA waits only on
// lower-numbered CTAs, which the hardware dispatches first: CUDA does not promise that order, but
// it holds in practice (CUB's single-pass scan relies on it the same way). A last kernel scales the
// accumulator into bf16 dq. At long context the accumulator would be large (8 GiB for a 7B at
// 524,288 tokens), so the kernel runs over a few kv heads at a time (dq_chunk_kv_heads).
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/tma.cuh"

#ifdef MT_ATTN_PROFILE
#include <vector>
#endif

namespace {

constexpr int BT_BK = 128, BT_BQ = 64, BT_STAGES = 2;
constexpr int BT_CONSUMERS = 2, BT_THREADS = (BT_CONSUMERS + 1) * WG_THREADS;
// As in attention_tma.cu: __launch_bounds__(384, 1) gives 168 registers a thread at entry,
// 64,512 in all, moved from the producer to the consumers: 128 x 32 + 256 x 232 stays within
// it. The consumers need no more than 232; the producer's index arithmetic spilled at 24 (at hd
// 64). The earlier 24/240 ran no faster (2026-12-03: hd 100's slow 131k backward was L2).
constexpr int BT_PRODUCER_REGS = 32;
constexpr int BT_CONSUMER_REGS = (168 * BT_THREADS - WG_THREADS * BT_PRODUCER_REGS) / 256 / 8 * 8;
// Named barrier 1: both consumers (the dS tile is whole).
constexpr int BAR_DS = 1;

template <int HDP> struct BtCfg {
    static constexpr int PANELS = HDP / 64;
    static constexpr int KV_BYTES = BT_BK * HDP * 2, QT_BYTES = BT_BQ * HDP * 2;
    static constexpr int DS_BYTES = BT_BK * BT_BQ * 2, LD_BYTES = 2 * BT_BQ * 4;
    static constexpr int QD_OFF = 2 * KV_BYTES; // stage s: Q, then dout
    static constexpr int DS_OFF = QD_OFF + BT_STAGES * 2 * QT_BYTES;
    static constexpr int LD_OFF = DS_OFF + 2 * DS_BYTES;         // stage s: lse, then D
    static constexpr int DQ_OFF = LD_OFF + BT_STAGES * LD_BYTES; // consumer w's dq part
    static constexpr int DQ_BYTES = BT_BQ * 64 * 4;              // two 32-column panels
    static_assert(DQ_OFF % 1024 == 0, "the dq stages are 128-byte-swizzled TMA boxes");
    // dq parts an item makes: one per warpgroup (a half of the columns each), or at HDP 64 one
    // from the warpgroup whose turn it is.
    static constexpr int PARTS = HDP == 128 ? 2 : 1;
    static constexpr int BAR_OFF = DQ_OFF + BT_CONSUMERS * DQ_BYTES;
    // full and empty per stage, kvfull, dq_full and dq_empty per consumer
    static constexpr size_t smem = BAR_OFF + 8 * (2 * BT_STAGES + 1 + 2 * BT_CONSUMERS) + 1024;
};

#ifdef MT_ATTN_PROFILE
// Profile builds only (-DMT_ATTN_PROFILE; bench/device_run.sh `bwdprof`): per CTA its SM, start
// and end (globaltimer ns); the dq writer's cycles in all, waiting for staged parts and waiting
// for its turns; the first consumer warp's cycles in its loop, waiting for the stage's tiles and
// waiting for its dq stage to be free: where a CTA's time goes when the kernel runs below its
// rate.
struct BwdProfile {
    unsigned long long sm, start, end, writer, full_wait, turn_wait, items, cons, cons_full,
        cons_empty;
};
__device__ BwdProfile *g_bwd_profile;
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ BwdProfile *cta_profile() {
    return g_bwd_profile ? g_bwd_profile + blockIdx.y * gridDim.x + blockIdx.x : nullptr;
}
#define PROF(...) __VA_ARGS__
#else
#define PROF(...)
#endif

#ifdef WGMMA_DEVICE
__device__ __forceinline__ unsigned load_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void add_release(unsigned *p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// A CTA's n items: every query tile from its keys on (qt0 .. qt0 + nqt - 1), for each query head
// of its kv head's group. Reversed (the default, items_reversed): tile by tile from the last, the
// group's heads innermost, so that every key tile of a chain reaches a query tile at the same
// position in its sequence. Else head by head, tiles ascending.
struct Items {
    int kvh, qt0, nqt, n;
    bool rev;
    __device__ int head(int it, const Dims &d) const {
        return kvh * d.group + (rev ? it % d.group : it / nqt);
    }
    __device__ int tile(int it, const Dims &d) const {
        return rev ? qt0 + nqt - 1 - it / d.group : qt0 + it % nqt;
    }
};
// A producer about to refill item it's stage waits until the consumers are done with it.
__device__ __forceinline__ void wait_stage_free(uint64_t *empty, int it) {
    if (it >= BT_STAGES) mbar_wait(&empty[it % BT_STAGES], ((it / BT_STAGES) & 1) ^ 1);
}

// The producer's two workers: one thread issues the TMA copies (K and V once, then Q and dout
// per item), and one warp copies the items' lse and D (rows past T as 0) into the stage. The
// maps' first kv head is map_kv0 (the run's first where they hold padded copies of the run).
template <int HDP>
__device__ void produce_tiles(unsigned char *smem, uint64_t *full, uint64_t *empty,
                              uint64_t *kvfull, const CUtensorMap *qmap, const CUtensorMap *dmap,
                              const CUtensorMap *kmap, const CUtensorMap *vmap, int b, int map_kv0,
                              int k0, const Items &I, const Dims &d) {
    using C = BtCfg<HDP>;
    const int kvm = I.kvh - map_kv0, hm0 = map_kv0 * d.group;
    mbar_expect_tx(kvfull, 2 * C::KV_BYTES);
    for (int p = 0; p < C::PANELS; p++) {
        tma_load_4d(smem + p * BT_BK * 128, kmap, kvfull, 64 * p, kvm, k0, b);
        tma_load_4d(smem + C::KV_BYTES + p * BT_BK * 128, vmap, kvfull, 64 * p, kvm, k0, b);
    }
    for (int it = 0; it < I.n; it++) {
        const int s = it % BT_STAGES, h = I.head(it, d), qbase = I.tile(it, d) * BT_BQ;
        wait_stage_free(empty, it);
        unsigned char *sQ = smem + C::QD_OFF + s * 2 * C::QT_BYTES, *sdO = sQ + C::QT_BYTES;
        mbar_expect_tx(&full[s], 2 * C::QT_BYTES);
        for (int p = 0; p < C::PANELS; p++) {
            tma_load_4d(sQ + p * BT_BQ * 128, qmap, &full[s], 64 * p, h - hm0, qbase, b);
            tma_load_4d(sdO + p * BT_BQ * 128, dmap, &full[s], 64 * p, h - hm0, qbase, b);
        }
    }
}

template <int HDP>
__device__ void produce_stats(unsigned char *smem, uint64_t *full, uint64_t *empty,
                              const float *lse, const float *D, int b, const Items &I,
                              const Dims &d, int lane) {
    for (int it = 0; it < I.n; it++) {
        const int s = it % BT_STAGES, h = I.head(it, d), qbase = I.tile(it, d) * BT_BQ;
        wait_stage_free(empty, it);
        float *L = (float *)(smem + BtCfg<HDP>::LD_OFF + s * BtCfg<HDP>::LD_BYTES), *Dq = L + BT_BQ;
        for (int i = lane; i < BT_BQ; i += 32) {
            const int row = qbase + i;
            const long li = ((long)b * d.H + h) * d.T + row;
            L[i] = row < d.T ? lse[li] : 0.0f;
            Dq[i] = row < d.T ? D[li] : 0.0f;
        }
        mbar_arrive(&full[s]); // release: the stores above are seen by the stage's waiters
    }
}

// dS^T (fp32 accumulators of this thread's keys key_row and key_row + 8 of the 128-key tile) as
// bf16 into the swizzled dS tile: rows = keys, 64 query columns (one 128-byte panel).
__device__ __forceinline__ void store_ds(unsigned char *sdS, const float (&ds)[8][4], int key_row,
                                         int lane) {
    const int t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) { // columns 8 nt + 2t, +1: chunk nt
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = key_row + 8 * r;
            *(uint32_t *)(sdS + swizzled_offset(BT_BK, row, nt) + 4 * t) =
                pack_bf16(ds[nt][2 * r], ds[nt][2 * r + 1]);
        }
    }
}

// This warpgroup's half of the item's dq part (64 queries x 64 columns, unscaled) into its
// stage for the writer: two 32-column panels of fp32, 128-byte swizzled as the map's box.
__device__ __forceinline__ void stage_dq(unsigned char *stage, const float (&dqa)[8][4], int row,
                                         int lane) {
    const int t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        const int c = (nt & 3) * 8 + 2 * t; // column in the panel
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int rr = row + 8 * r;
            char *p = (char *)stage + (nt >> 2) * BT_BQ * 128 + rr * 128 +
                      (((c >> 2) ^ (rr & 7)) << 4) + (c & 3) * 4;
            *(float2 *)p = make_float2(dqa[nt][2 * r], dqa[nt][2 * r + 1]);
        }
    }
}

// dQ (64 queries x 64 columns, unscaled) = dS (64 queries x 128 keys) K: dS read transposed from
// the key-major tile, and sKp's 64 columns (a K panel) MN-major. Issued, not committed.
__device__ __forceinline__ void issue_dq(float (&dqa)[8][4], const unsigned char *sdS,
                                         const unsigned char *sKp) {
    float(&dqd)[32] = *reinterpret_cast<float(*)[32]>(&dqa[0][0]);
#pragma unroll
    for (int ks = 0; ks < BT_BK / 16; ks++)
        wgmma_ss<64, 1, 1>(dqd, mnmajor_desc(sdS, BT_BK, ks), mnmajor_desc(sKp, BT_BK, ks), ks > 0);
}

// The writer: per item and part (BtCfg::PARTS), in order, waits for the staged part and for its
// turn, then stores (key tile 0) or adds it. The turn is released one part later, once the
// part's adds have completed, so that the wait for completion overlaps the next part's. With
// packed documents or a window (RANGED) the key tiles that add to query tile qt are jf .. its
// diagonal, jf the tile of its first row's first key (first_key; the keys between are all seen
// by some row of qt, and key tile j's items reach qt exactly when j >= jf, key_end): its turns
// start at jf and its accumulator at -0 (doc_turns, fill_negative_zero), and every part adds
// (-0 + x = x, the bits of a store), so the writer needs no per-part jf. The fill costs about
// 3.5% of a 2k backward, nothing measurable at 32k (2026-12-04, bench/RESULTS.md).
template <int HDP, bool RANGED>
__device__ void write_dq(unsigned char *smem, uint64_t *dq_full, uint64_t *dq_empty,
                         const CUtensorMap *accmap, unsigned *turns, int b, int h0, int j,
                         const Items &I, const Dims &d) {
    const int nqt_all = cdiv(d.T, BT_BQ);
    unsigned *pending = nullptr;
    PROF(long long w0 = clock64(), full_wait = 0, turn_wait = 0, c = 0);
    for (int it = 0; it < I.n; it++) {
        const int h = I.head(it, d), qt = I.tile(it, d);
        for (int part = 0; part < BtCfg<HDP>::PARTS; part++) {
            // The staging warpgroup, its how-many-th part this is, and the part's first column.
            const int w = HDP == 128 ? part : it & 1, nth = HDP == 128 ? it : it >> 1;
            const int col0 = HDP == 128 ? 64 * w : 0;
            unsigned *turn = turns + (((long)b * d.H + h) * nqt_all + qt) * 2 + part;
            const unsigned char *stage = smem + BtCfg<HDP>::DQ_OFF + w * BtCfg<HDP>::DQ_BYTES;
            PROF(c = clock64());
            mbar_wait(&dq_full[w], nth & 1);
            PROF(full_wait += clock64() - c; c = clock64());
            while (load_acquire(turn) != (unsigned)j) __nanosleep(64); // spare L2 the polls
            PROF(turn_wait += clock64() - c);
            fence_proxy_async_global(); // the adds below come after the acquire
            for (int p = 0; p < 2 && col0 + 32 * p < d.hd; p++) {
                const void *src = stage + p * BT_BQ * 128;
                if (!RANGED && j == 0)
                    tma_store_4d(accmap, src, col0 + 32 * p, h - h0, qt * BT_BQ, b);
                else
                    tma_reduce_add_4d(accmap, src, col0 + 32 * p, h - h0, qt * BT_BQ, b);
            }
            bulk_commit();
            bulk_wait_read<0>();
            mbar_arrive(&dq_empty[w]); // the stage may be rewritten
            if (pending) {
                bulk_wait<1>(); // the pending part's adds are done
                fence_proxy_async_global();
                add_release(pending, 1);
            }
            pending = turn;
        }
    }
    bulk_wait<0>();
    fence_proxy_async_global();
    if (pending) add_release(pending, 1);
    PROF(if (BwdProfile *r = cta_profile()) {
        r->writer = clock64() - w0, r->full_wait = full_wait, r->turn_wait = turn_wait;
        r->items = I.n;
    });
}
#endif

// M: packed documents and the sliding window (Mask); without, none of their reads is compiled in,
// and without a window the kernel is the same code as before windows.
template <int HDP, Mask M>
__global__ void __launch_bounds__(BT_THREADS, 1)
    attn_bwd_tma(bf16 *dk, bf16 *dv, unsigned *turns, const float *lse, const float *D,
                 const __grid_constant__ CUtensorMap accmap,
                 const __grid_constant__ CUtensorMap qmap, const __grid_constant__ CUtensorMap dmap,
                 const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                 int kv0, int map_kv0, int rev, Dims d) {
#ifdef WGMMA_DEVICE
    using C = BtCfg<HDP>;
    constexpr int NQ = BT_BQ / 8, NO = HDP / 8, KQ = BT_BQ / 16;
    // RANGED: the rows' first keys vary (packed documents, a window); WIN: a window
    constexpr bool RANGED = M != MASK_CAUSAL, WIN = M == MASK_WINDOW;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    unsigned char *sK = smem, *sV = smem + C::KV_BYTES;
    uint64_t *full = (uint64_t *)(smem + C::BAR_OFF), *empty = full + BT_STAGES;
    uint64_t *kvfull = empty + BT_STAGES, *dq_full = kvfull + 1;
    uint64_t *dq_empty = dq_full + BT_CONSUMERS;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // This run's kv heads kv0 .. kv0 + kvn - 1 (attention_backward_tma), the fastest dimension.
    const int kvn = gridDim.x / d.B, b = blockIdx.x / kvn, kvh = kv0 + blockIdx.x % kvn;
    const int j = blockIdx.y;
    // Query tiles from the diagonal to T, or with packed documents to the end of the document
    // of the tile's last key, and with a window to that key + W at most (key_end): O(W) queries.
    const int k0 = j * BT_BK, qt0 = k0 / BT_BQ;
    const int nqt = cdiv(key_end<WIN>(d, b, min(k0 + BT_BK, d.T) - 1), BT_BQ) - qt0;
    const Items I = {kvh, qt0, nqt, d.group * nqt, rev != 0};
    if (threadIdx.x == 0) {
        for (int s = 0; s < BT_STAGES; s++) {
            mbar_init(&full[s], 1 + 32);            // the copy thread and the stats warp
            mbar_init(&empty[s], 4 * BT_CONSUMERS); // every consumer warp
        }
        mbar_init(kvfull, 1);
        for (int w = 0; w < BT_CONSUMERS; w++) {
            mbar_init(&dq_full[w], 4); // the consumer's warps
            mbar_init(&dq_empty[w], 1);
        }
        mbar_fence_init();
    }
    __syncthreads(); // the last CTA-wide barrier
    PROF(if (BwdProfile *r = cta_profile(); r && threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        r->sm = sm, r->start = global_ns();
    });

    if (warp >= 4 * BT_CONSUMERS) {
        regs_release<BT_PRODUCER_REGS>();
        if (warp == 4 * BT_CONSUMERS && lane == 0)
            produce_tiles<HDP>(smem, full, empty, kvfull, &qmap, &dmap, &kmap, &vmap, b, map_kv0,
                               k0, I, d);
        else if (warp == 4 * BT_CONSUMERS + 1)
            produce_stats<HDP>(smem, full, empty, lse, D, b, I, d, lane);
        else if (warp == 4 * BT_CONSUMERS + 2 && lane == 0)
            write_dq<HDP, M != MASK_CAUSAL>(smem, dq_full, dq_empty, &accmap, turns, b,
                                            kv0 * d.group, j, I, d);
        return;
    }
    regs_claim<BT_CONSUMER_REGS>();

    const int wg = warp / 4, wl = threadIdx.x % WG_THREADS, wwarp = wl >> 5;
    const int wk0 = k0 + wg * 64, key_lo = wk0 + wwarp * 16 + (lane >> 2);
    float dka[NO][4] = {}, dva[NO][4] = {};
    PROF(long long cw0 = clock64(), cfull = 0, cempty = 0, cc = 0);
    mbar_wait(kvfull, 0);
    __syncwarp(); // lanes leave the wait apart; .aligned instructions follow
    for (int it = 0; it < I.n; it++) {
        const int s = it % BT_STAGES, qbase = I.tile(it, d) * BT_BQ;
        const unsigned char *sQ = smem + C::QD_OFF + s * 2 * C::QT_BYTES, *sdO = sQ + C::QT_BYTES;
        const float *L = (const float *)(smem + C::LD_OFF + s * C::LD_BYTES), *Dq = L + BT_BQ;
        // Packed documents: the tile's queries' document starts, read from global memory (L2),
        // the last one's within T (the latest: whether the tile needs masks) on every item, and
        // each query's on the tiles that do (mask_documents_t: folded into probs_and_ds_t's
        // loop, the reads cost the whole backward 15-19% at 32k, 2026-12-04). With a window,
        // the queries' first keys (first_key), the starts NULL where there are no documents.
        const int *Sq = RANGED && (!WIN || d.ds) ? d.ds + (long)b * d.T + qbase : nullptr;
        const int qlast = min(BT_BQ, d.T - qbase) - 1;
        // A window's first keys: wbase + col for the query qbase + col (0 or less: key 0).
        const int wbase = WIN ? qbase - d.window + 1 : 0;
        const int last_first = !RANGED ? 0
                               : WIN   ? max(Sq ? Sq[qlast] : 0, wbase + qlast)
                                       : Sq[qlast];
        unsigned char *sdS = smem + C::DS_OFF + (it & 1) * C::DS_BYTES;
        PROF(cc = clock64());
        mbar_wait(&full[s], (it / BT_STAGES) & 1);
        PROF(cfull += clock64() - cc);
        __syncwarp(); // lanes leave the wait apart; .aligned instructions follow

        // A warpgroup whose keys all follow the tile's queries still runs: its dS rows are then
        // zeros that the other warpgroup's dq product reads.
        float sc[NQ][4], dp[NQ][4];
        scores_and_dp<HDP, BT_BQ>(sc, dp, sK, sQ, sV, sdO, BT_BK, wg * 64);
        const bool mask = wk0 + 63 > qbase || qbase + BT_BQ > d.T;
        probs_and_ds_t<NQ>(sc, dp, L, Dq, d.scale_log2, mask, qbase, key_lo, d.T, lane);
        // Packed documents: where a query's document starts after one of these keys (the
        // tile's last query within T has the latest start).
        if (RANGED && last_first > wk0)
            mask_documents_t<NQ, WIN>(sc, dp, Sq, qbase, key_lo, d.T, wbase, lane);
        uint32_t pf[1][KQ][4];
        acc_to_a<1, KQ>(pf, *reinterpret_cast<float(*)[1][NQ][4]>(&sc[0][0]));
        store_ds(sdS, dp, wg * 64 + wwarp * 16 + (lane >> 2), lane);
        fence_proxy_async(); // the products below read the tile through the async proxy

        fence_acc(dva);
        fence_acc(dka);
        wgmma_fence();
        grad_wg<HDP, KQ>(dva, pf, sdO);
        // dS^T comes back from shared memory (K-major) rather than staying in registers, which
        // keeps the consumer within its 240. Once both warpgroups' rows are in: dK += dS^T Q,
        // and dQ (64 queries x 64 columns) = dS (queries x 128 keys) K with dS read transposed
        // and K's panel (HDP 128: panel wg, this warpgroup's half) MN-major.
        named_sync(BAR_DS, BT_CONSUMERS * WG_THREADS);
        float(&dkd)[HDP / 2] = *reinterpret_cast<float(*)[HDP / 2]>(&dka[0][0]);
#pragma unroll
        for (int ks = 0; ks < KQ; ks++)
            wgmma_ss<HDP, 0, 1>(dkd, kmajor_desc(sdS, BT_BK, wg * 64, ks),
                                mnmajor_desc(sQ, BT_BQ, ks), 1);
        float dqa[8][4];
        if (HDP == 128) issue_dq(dqa, sdS, sK + wg * BT_BK * 128);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(dva);
        fence_acc(dka);
        // At HDP 64 the warpgroups take turns at dQ: its own commit and wait keep every wgmma
        // pipeline out of the branch.
        const bool my_dq = HDP == 128 || (it & 1) == wg;
        if (HDP == 64 && my_dq) {
            wgmma_fence();
            issue_dq(dqa, sdS, sK);
            wgmma_commit();
            wgmma_wait<0>();
        }
        fence_acc(dqa);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]); // this warp is done with the stage
        if (!my_dq) continue;

        // This warpgroup's how-many-th dq part, whose stage the writer must have read before.
        const int nth = HDP == 128 ? it : it >> 1;
        unsigned char *dq_stage = smem + C::DQ_OFF + wg * C::DQ_BYTES;
        PROF(cc = clock64());
        if (nth > 0) mbar_wait(&dq_empty[wg], (nth - 1) & 1);
        PROF(cempty += clock64() - cc);
        __syncwarp();
        stage_dq(dq_stage, dqa, wwarp * 16 + (lane >> 2), lane);
        fence_proxy_async(); // the writer's TMA reads the stage through the async proxy
        __syncwarp();
        if (lane == 0) mbar_arrive(&dq_full[wg]);
    }

    // K and V are free once both warpgroups are past their last item: stage the stores there.
    PROF(if (BwdProfile *r = cta_profile(); r && threadIdx.x == 0) {
        r->cons = clock64() - cw0, r->cons_full = cfull, r->cons_empty = cempty;
    });
    named_sync(BAR_DS, BT_CONSUMERS * WG_THREADS);
    const long kvs = (long)d.KV * d.hd, kvoff = (long)b * d.T * kvs + (long)kvh * d.hd;
    store_key_grads<HDP>(dk + kvoff, dv + kvoff, kvs, wk0 + wwarp * 16, d, dka, dva,
                         (bf16 *)smem + warp * 16 * (HDP + 8), lane);
    PROF(if (BwdProfile *r = cta_profile(); r && threadIdx.x == 0) r->end = global_ns());
#else
    __trap(); // built without sm_90a: the host never launches this
#endif
}

// Packed documents or a window (write_dq): each (b, h, query tile)'s two turn counters start at
// the key tile of its first row's first key.
__global__ void doc_turns(unsigned *turns, long n, int H, int nqt_all, Dims d) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int qt = (int)(i / 2 % nqt_all), b = (int)(i / 2 / nqt_all / H);
    turns[i] = (unsigned)(visible_first(d, b, qt * BT_BQ) / BT_BK);
}

// The accumulator as -0, which every part adds to (-0 + x = x: a store's bits).
__global__ void fill_negative_zero(float4 *acc, long n4) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) acc[i] = make_float4(-0.0f, -0.0f, -0.0f, -0.0f);
}

// dq's heads h0 .. h0 + hn - 1 = scale * the accumulator ([B, T, hn, hd]), 4 elements a thread
// (hd % 4 == 0).
__global__ void dq_from_acc(bf16 *dq, const float *acc, long n4, int H, int h0, int hn, int hd,
                            float scale) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const RunElement r = run_element(i, hn, hd / 4);
    const float4 a = ((const float4 *)acc)[i];
    bf16 *out = dq + (r.bt * H + h0 + r.hl) * hd + 4 * r.e;
    *(uint2 *)out = uint2{pack_bf16(a.x * scale, a.y * scale), pack_bf16(a.z * scale, a.w * scale)};
}

#ifdef MT_ATTN_PROFILE
BwdProfile *profile_begin(int ctas) {
    BwdProfile *p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, sizeof(BwdProfile) * ctas));
    CUDA_CHECK(cudaMemset(p, 0, sizeof(BwdProfile) * ctas));
    CUDA_CHECK(cudaMemcpyToSymbol(g_bwd_profile, &p, sizeof p));
    return p;
}

// One line a run: the span, the SMs' busy share, their idle share after their last CTA (the
// tail) and the writers' shares waiting for staged parts and for turns (all CTAs, and the CTAs
// that started within 2 us of the first: the first wave, whose chains start together).
void profile_report(BwdProfile *dev, int ctas, const Dims &d, int kvn) {
    std::vector<BwdProfile> r(ctas);
    CUDA_CHECK(cudaMemcpy(r.data(), dev, sizeof(BwdProfile) * ctas, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(dev));
    BwdProfile *none = nullptr;
    CUDA_CHECK(cudaMemcpyToSymbol(g_bwd_profile, &none, sizeof none));
    unsigned long long t0 = ~0ull, t1 = 0;
    int nsm = 0;
    for (const BwdProfile &p : r) {
        t0 = p.start < t0 ? p.start : t0, t1 = p.end > t1 ? p.end : t1;
        nsm = (int)p.sm + 1 > nsm ? (int)p.sm + 1 : nsm;
    }
    std::vector<unsigned long long> last(nsm, t0);
    double busy = 0, wr[2] = {0, 0}, full[2] = {0, 0}, turn[2] = {0, 0}, cons = 0, cfull = 0,
           cempty = 0;
    for (const BwdProfile &p : r) {
        busy += (double)(p.end - p.start);
        last[p.sm] = p.end > last[p.sm] ? p.end : last[p.sm];
        for (int first = 0; first < 2; first++) {
            if (first && p.start > t0 + 2000) continue;
            wr[first] += (double)p.writer, full[first] += (double)p.full_wait;
            turn[first] += (double)p.turn_wait;
        }
        cons += (double)p.cons, cfull += (double)p.cons_full, cempty += (double)p.cons_empty;
    }
    double tail = 0;
    for (unsigned long long l : last) tail += (double)(t1 - l);
    const double span = (double)(t1 - t0), area = span * nsm;
    fprintf(stderr,
            "BWDPROF hd=%d T=%d H=%d kv_heads_in_run=%d ctas=%d sms=%d span %.3f ms: busy %.1f%% "
            "tail idle %.1f%%; writer waits for parts %.1f%%, for turns %.1f%% (first wave: "
            "%.1f%%, %.1f%%); consumer waits for tiles %.1f%%, for its dq stage %.1f%%\n",
            d.hd, d.T, d.H, kvn, ctas, nsm, span * 1e-6, 100 * busy / area, 100 * tail / area,
            100 * full[0] / wr[0], 100 * turn[0] / wr[0], 100 * full[1] / wr[1],
            100 * turn[1] / wr[1], 100 * cfull / cons, 100 * cempty / cons);
}
#endif

// Why items run reversed, and why a run takes fewer kv heads at long context. The key tiles of
// one batch row and kv head form a chain: each adds to a query tile's dq after the one before
// it. In order, key tile j + 1 reaches each query tile two items before key tile j (it starts
// two tiles further on), so tiles that start together wait for their predecessors; reversed,
// every key tile reaches a query tile at the same position, and a tile waits at most for the
// one add before it. The larger cost was L2 (2026-12-02, bench/RESULTS.md): a chain's CTAs share
// its Q, dout and dq accumulator tiles only while they run close together. With 32 kv heads in a
// run, a chain has 4 CTAs of 132 resident and at 32k-131k tokens the backward ran at 300-310
// TFLOP/s; runs of 8 kv heads, 16 CTAs a chain, ran at 410-418. Below 16k tokens (128 key
// tiles) a chain is too short for 16 of its CTAs to start together without waiting on each other
// (2k: 2x slower), so there a run takes every kv head. Longer chains want more of their CTAs
// resident, by measurement: at hd 100 with 16 resident (runs of 8 kv heads) the backward fell to
// 301 TFLOP/s at 65k, 255 at 131k and 239 at 262k, the CTAs of a chain no longer sharing (L2 hit
// rate 49% against hd 128's 94% on the same grid, Nsight Compute); why hd 100's drift apart and
// hd 128's do not is not established. A sixteenth of the chain from 256 key tiles gives 328-343
// from 32k to 512k, and hd 128 within 1% or 1-2% faster (2026-12-03, bench/RESULTS.md).
// MT_ATTN_BWD_ORDER=asc (items in order) and MT_ATTN_CHAIN_RESIDENT=N (0: no limit) override
// both, for comparisons.
int items_reversed() {
    const char *e = getenv("MT_ATTN_BWD_ORDER");
    return !(e && strcmp(e, "asc") == 0);
}

// The CTAs of a chain of `tiles` key tiles wanted resident at once (0: no limit).
int chain_resident(int tiles) {
    return tiles < 128 ? 0 : tiles / 16 > 16 ? tiles / 16 : 16;
}

int chain_run_kv_heads(int B, int T, int KV) {
    const char *e = getenv("MT_ATTN_CHAIN_RESIDENT");
    const int want = e ? atoi(e) : chain_resident(cdiv(T, BT_BK));
    if (want <= 0) return KV;
    const int n = sm_count() / want / B;
    return n < 1 ? 1 : n > KV ? KV : n;
}

// The fused backward over runs of kv heads whose dq accumulator fits its cap (all of them but at
// long context), on the tensors or on each run's copies padded to ld columns (ld != 0).
template <int HDP>
void launch_runs(bf16 *dq, bf16 *dk, bf16 *dv, const float *lse, const bf16 *dout, const bf16 *q,
                 const bf16 *k, const bf16 *v, const Dims &d, void *scratch, int ld,
                 cudaStream_t stream) {
    const int B = d.B, T = d.T, H = d.H, KV = d.KV, hd = d.hd;
    const AttnScratch sc = attention_scratch(scratch, B, T, H, KV, hd);
    CUDA_CHECK(cudaMemsetAsync(sc.turns, 0, sc.turn_bytes, stream));
    const Mask mask = mask_of(d);
    if (mask != MASK_CAUSAL) {
        const long n = (long)B * H * cdiv(T, BT_BQ) * 2;
        doc_turns<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(sc.turns, n, H, cdiv(T, BT_BQ),
                                                                   d);
        CUDA_CHECK_LAUNCH();
    }
    CUtensorMap qm, dm, km, vm;
    if (!ld) {
        qm = make_head_map(q, B, T, H, hd, BT_BQ, hd);
        dm = make_head_map(dout, B, T, H, hd, BT_BQ, hd);
        km = make_head_map(k, B, T, KV, hd, BT_BK, hd);
        vm = make_head_map(v, B, T, KV, hd, BT_BK, hd);
    }
    auto kernel = mask == MASK_WINDOW ? attn_bwd_tma<HDP, MASK_WINDOW>
                  : mask == MASK_DOCS ? attn_bwd_tma<HDP, MASK_DOCS>
                                      : attn_bwd_tma<HDP, MASK_CAUSAL>;
    set_smem_limit(kernel, BtCfg<HDP>::smem);
    const int kvm = dq_chunk_kv_heads(B, T, H, KV, hd), kvr = chain_run_kv_heads(B, T, KV);
    const int kvc = kvr < kvm ? kvr : kvm;
    const int rev = items_reversed();
    for (int kv0 = 0; kv0 < KV; kv0 += kvc) {
        const int kvn = KV - kv0 < kvc ? KV - kv0 : kvc, hn = kvn * d.group;
        if (ld) {
            copy_run_padded(scratch, q, k, v, dout, B, T, H, KV, hd, kv0, kvn, stream);
            qm = make_head_map(sc.pq, B, T, hn, ld, BT_BQ, ld);
            dm = make_head_map(sc.pdout, B, T, hn, ld, BT_BQ, ld);
            km = make_head_map(sc.pk, B, T, kvn, ld, BT_BK, ld);
            vm = make_head_map(sc.pv, B, T, kvn, ld, BT_BK, ld);
        }
        const CUtensorMap am =
            make_map(sc.dq_acc, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, B, T, hn, hd, BT_BQ, hd);
        const dim3 grid(B * kvn, cdiv(T, BT_BK));
        const long n4 = (long)B * T * hn * hd / 4;
        if (mask != MASK_CAUSAL) {
            fill_negative_zero<<<(unsigned)((n4 + 255) / 256), 256, 0, stream>>>(
                (float4 *)sc.dq_acc, n4);
            CUDA_CHECK_LAUNCH();
        }
        PROF(BwdProfile *prof = profile_begin(grid.x * grid.y));
        kernel<<<grid, BT_THREADS, BtCfg<HDP>::smem, stream>>>(
            dk, dv, sc.turns, lse, sc.D, am, qm, dm, km, vm, kv0, ld ? kv0 : 0, rev, d);
        CUDA_CHECK_LAUNCH();
        PROF(profile_report(prof, grid.x * grid.y, d, kvn));
        dq_from_acc<<<(unsigned)((n4 + 255) / 256), 256, 0, stream>>>(
            dq, sc.dq_acc, n4, H, kv0 * d.group, hn, hd, d.scale);
        CUDA_CHECK_LAUNCH();
    }
}

} // namespace

bool attention_backward_tma(bf16 *dq, bf16 *dk, bf16 *dv, const float *lse, const bf16 *dout,
                            const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                            void *scratch, cudaStream_t stream) {
    const char *e = getenv("MT_ATTENTION_TMA"); // 0: the plain wgmma backward (comparisons)
    const int hd = d.hd, ld = tma_padded_ld(hd);
    if ((e && e[0] == '0') || hd <= 32 || (hd % 8 != 0 && !ld)) return false;
    if (hd <= 64)
        launch_runs<64>(dq, dk, dv, lse, dout, q, k, v, d, scratch, 0, stream);
    else
        launch_runs<128>(dq, dk, dv, lse, dout, q, k, v, d, scratch, ld, stream);
    return true;
}
