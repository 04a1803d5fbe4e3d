// Flash attention forward on Hopper, warp-specialized (FlashAttention-3's structure): a
// producer warpgroup (one thread of it) feeds K/V tiles through the copy engine (TMA) into a
// two-stage ring of 128-byte-swizzled shared memory, K and V of each stage guarded by "full"
// mbarriers (the copies' bytes have landed) and "empty" ones (both consumers are done with it);
// two consumer warpgroups of 64 query rows each run S = Q K^T, the online softmax and O += P V
// on wgmma. The consumers never meet at a CTA barrier, and two named barriers make them take
// turns issuing their GEMMs, so that one warpgroup's softmax runs while the other's GEMMs keep
// the tensor cores busy; within a warpgroup the softmax of one tile overlaps the P V of the one
// before. Same math, tiles and outputs as attention_wgmma.cu's plain forward, which stays the
// path where this one cannot run (hd < 64, or no scratch for the padded copies that head dims
// of 8k + 4 need: tma_padded_ld).
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/tma.cuh"

namespace {

constexpr int TMA_BR = 128, TMA_BC = 128, TMA_STAGES = 2;
// Two consumer warpgroups and a producer warpgroup, of which one thread works: the producer
// gives its registers to the consumers. __launch_bounds__(384, 1) gives each thread 168 at
// entry (384 x 168 = 64,512 of the SM's 65,536); 128 x 40 + 256 x 232 is the same 64,512, so
// the consumers' setmaxnreg.inc finds the registers the producer's .dec freed (ptxas -v shows
// the 168; should it ever show fewer, these two numbers must shrink with it, or .inc waits).
constexpr int TMA_CONSUMERS = 2, TMA_THREADS = (TMA_CONSUMERS + 1) * WG_THREADS;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

template <int HDP> struct TmaCfg {
    static constexpr int PANELS = HDP / 64;
    static constexpr int Q_BYTES = TMA_BR * HDP * 2, KV_BYTES = TMA_BC * HDP * 2;
    static constexpr int STAGE_OUT = 16 * (HDP + 8) * 2; // one warp's rows, staged for storing
    static constexpr int OUT_OFF = Q_BYTES + 2 * TMA_STAGES * KV_BYTES;
    static constexpr int BAR_OFF = OUT_OFF + 8 * STAGE_OUT;
    // per stage: K full, V full, K empty, V empty; and Q full
    static constexpr size_t smem = BAR_OFF + 8 * (4 * TMA_STAGES + 1) + 1024;
};

// A CTA's (batch row, head) pair and first query row. The grid is pairs x query tiles, dispatched
// pairs fastest; `group` pairs at a time take every query tile, longest rows first, before the
// next group starts (fwd_group says why).
struct FwdTile {
    int pair, q0;
};
__device__ __forceinline__ FwdTile fwd_tile(int group) {
    const int pairs = gridDim.x, ntile = gridDim.y;
    const long lin = (long)blockIdx.y * pairs + blockIdx.x, per_group = (long)group * ntile;
    const int g = (int)(lin / per_group), rem = (int)(lin - g * per_group);
    const int gp = pairs - g * group < group ? pairs - g * group : group;
    return {g * group + rem % gp, (ntile - 1 - rem / gp) * TMA_BR};
}

// SPLIT_KV: K and V of a stage have barriers of their own, so that a stage's K is refilled as
// soon as both warpgroups' scores are in, without waiting for the P V that reads its V: the next
// K then lands well before its turn. 550 against 435 TFLOP/s at hd 128 and 32k tokens in one
// run (bench/RESULTS.md, 2026-12-02, commit 7e102fb); the shipped variant. WIN: a sliding window
// (d.window), which moves each row's first key up to its window's (first_key), a template choice so
// that the kernel without one is the same code as before windows.
template <int HDP, bool SPLIT_KV, bool WIN>
__global__ void __launch_bounds__(TMA_THREADS, 1)
    attn_fwd_tma(bf16 *out, float *lse, const __grid_constant__ CUtensorMap qmap,
                 const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                 int h0, int hn, int group, Dims d) {
#ifdef WGMMA_DEVICE
    using C = TmaCfg<HDP>;
    constexpr int NS = TMA_BC / 8, NO = HDP / 8;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    unsigned char *sQ = smem, *sKV = smem + C::Q_BYTES; // stage s: K, then V
    // Without SPLIT_KV, kfull and kempty guard both K and V of a stage.
    uint64_t *kfull = (uint64_t *)(smem + C::BAR_OFF), *vfull = kfull + TMA_STAGES;
    uint64_t *kempty = vfull + TMA_STAGES, *vempty = kempty + TMA_STAGES;
    uint64_t *qfull = vempty + TMA_STAGES;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // The run's heads h0 .. h0 + hn - 1; the maps hold just those (their kv heads' from 0).
    const FwdTile tile = fwd_tile(group);
    const int b = tile.pair / hn, hl = tile.pair % hn, h = h0 + hl, kvl = hl / d.group;
    const int q0 = tile.q0;
    // Key tiles kt0 .. kt0 + nkt - 1: with packed documents or a window the first holds the
    // first row's first key (tiles before it hold no key any row attends to). Stages and barrier
    // phases count from kt0. A window of W keys: about (TMA_BR + W) / TMA_BC tiles, O(T W).
    const int kt0 = first_key<WIN>(d, b, q0) / TMA_BC;
    const int nkt = key_tiles(q0, TMA_BR, d.T, TMA_BC) - kt0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < TMA_STAGES; s++) {
            mbar_init(&kfull[s], 1);
            mbar_init(&vfull[s], 1);
            mbar_init(&kempty[s], TMA_CONSUMERS);
            mbar_init(&vempty[s], TMA_CONSUMERS);
        }
        mbar_init(qfull, 1);
        mbar_fence_init();
    }
    __syncthreads(); // the last CTA-wide barrier: from here on the roles only meet at mbarriers

    if (warp >= 4 * TMA_CONSUMERS) { // the producer warpgroup: one thread issues every copy
        regs_release<PRODUCER_REGS>();
        if (threadIdx.x != 4 * TMA_CONSUMERS * 32) return;
        mbar_expect_tx(qfull, C::Q_BYTES);
        for (int p = 0; p < C::PANELS; p++)
            tma_load_4d(sQ + p * TMA_BR * 128, &qmap, qfull, 64 * p, hl, q0, b);
        for (int kt = 0; kt < nkt; kt++) {
            const int s = kt % TMA_STAGES, free_parity = ((kt / TMA_STAGES) & 1) ^ 1;
            unsigned char *sK = sKV + s * 2 * C::KV_BYTES, *sV = sK + C::KV_BYTES;
            uint64_t *vbar = SPLIT_KV ? &vfull[s] : &kfull[s];
            if (kt >= TMA_STAGES) mbar_wait(&kempty[s], free_parity);
            mbar_expect_tx(&kfull[s], SPLIT_KV ? C::KV_BYTES : 2 * C::KV_BYTES);
            for (int p = 0; p < C::PANELS; p++)
                tma_load_4d(sK + p * TMA_BC * 128, &kmap, &kfull[s], 64 * p, kvl,
                            (kt0 + kt) * TMA_BC, b);
            if (SPLIT_KV) {
                if (kt >= TMA_STAGES) mbar_wait(&vempty[s], free_parity);
                mbar_expect_tx(vbar, C::KV_BYTES);
            }
            for (int p = 0; p < C::PANELS; p++)
                tma_load_4d(sV + p * TMA_BC * 128, &vmap, vbar, 64 * p, kvl, (kt0 + kt) * TMA_BC,
                            b);
        }
        return;
    }
    regs_claim<CONSUMER_REGS>();

    const int wg = warp / 4, wl = threadIdx.x % WG_THREADS, wwarp = wl >> 5;
    const int wr0 = q0 + wg * 64, row_lo = wr0 + wwarp * 16 + (lane >> 2);
    // Packed documents and windows: a tile is masked where it crosses the diagonal or a row's
    // first key (the warpgroup's last row has the latest); first: this thread's rows' first keys.
    // Both warpgroups stream every tile of the CTA and mask the keys their rows do not see (with
    // a window, much of the first tile for the second warpgroup).
    const int first[2] = {first_key<WIN>(d, b, row_lo), first_key<WIN>(d, b, row_lo + 8)};
    const int wlast = first_key<WIN>(d, b, wr0 + 63);
    auto masked = [&](int key0) { return key0 + TMA_BC - 1 > wr0 || key0 < wlast; };
    // Turns: warpgroup w issues its Q K^T after named barrier 1 + w, which the other opens.
    const int my_turn = 1 + wg, other_turn = 2 - wg, turn_threads = TMA_CONSUMERS * WG_THREADS;
    if (wg == 1) named_arrive(other_turn, turn_threads); // warpgroup 0 goes first
    float o[NO][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float(&od)[HDP / 2] = *reinterpret_cast<float(*)[HDP / 2]>(&o[0][0]);
    uint32_t pf[1][TMA_BC / 16][4]; // the last tile's probabilities, bf16: P V's A operand
    uint32_t(&pflat)[TMA_BC / 4] = *reinterpret_cast<uint32_t(*)[TMA_BC / 4]>(&pf[0][0][0]);
    mbar_wait(qfull, 0);
    // Within a warpgroup too, the softmax overlaps the tensor cores: tile kt's Q K^T and tile
    // kt - 1's P V go out together, the softmax of kt runs once its scores are in, while P V still
    // runs, and o takes kt's rescaling after P V is done (the same operations on o, in the same
    // order, as one tile at a time). Tile 0 is peeled off so that the loop has no branch between
    // an MMA's issue and its wait, which would make ptxas serialize them.
    // The waits come before the turn, none between an MMA's issue and its wait: tile kt's K
    // and (SPLIT_KV) tile kt - 1's V, which the P V issued with these scores reads.
    auto k_tile = [&](int t) { return sKV + (t % TMA_STAGES) * 2 * C::KV_BYTES; };
    auto v_tile = [&](int t) { return k_tile(t) + C::KV_BYTES; };
    auto issue_scores = [&](float(&sc)[NS][4], int kt) {
        mbar_wait(&kfull[kt % TMA_STAGES], (kt / TMA_STAGES) & 1);
        if (SPLIT_KV && kt > 0)
            mbar_wait(&vfull[(kt - 1) % TMA_STAGES], ((kt - 1) / TMA_STAGES) & 1);
        named_sync(my_turn, turn_threads);
        wgmma_fence();
        scores_wg<HDP, TMA_BC>(sc, sQ, TMA_BR, wg * 64, k_tile(kt));
        wgmma_commit();
    };
    // key0 <= wr1 holds for every tile while BR = BC (the last one starts at q0 <= wr1)
    {
        const int key0 = kt0 * TMA_BC;
        float sc[NS][4], alpha[2];
        issue_scores(sc, 0);
        if (wg == 0 || 1 < nkt) named_arrive(other_turn, turn_threads); // balanced turns
        wgmma_wait<0>();
        fence_acc(sc);
        if (SPLIT_KV) mbar_arrive_if(&kempty[0], wl == 0);
        online_softmax<NS>(sc, m, l, alpha, d.scale_log2, masked(key0), row_lo, key0, first, lane);
        acc_to_a<1, TMA_BC / 16>(pf, *reinterpret_cast<float(*)[1][NS][4]>(&sc[0][0]));
    }
    for (int kt = 1; kt < nkt; kt++) {
        const int key0 = (kt0 + kt) * TMA_BC, last = (kt - 1) % TMA_STAGES;
        float sc[NS][4], alpha[2];
        fence_regs(od); // the rescaled o and the new P are written before the MMAs take them
        fence_regs(pflat);
        issue_scores(sc, kt);
        issue_pv<HDP, TMA_BC>(od, pf[0], v_tile(kt - 1));
        if (wg == 0 || kt + 1 < nkt) named_arrive(other_turn, turn_threads);
        wgmma_wait<1>(); // the scores; P V may still run
        fence_acc(sc);
        if (SPLIT_KV) mbar_arrive_if(&kempty[kt % TMA_STAGES], wl == 0);
        online_softmax<NS>(sc, m, l, alpha, d.scale_log2, masked(key0), row_lo, key0, first, lane);
        wgmma_wait<0>();
        fence_regs(od);
        fence_regs(pflat);
        // this warpgroup is done with tile kt - 1 (with its V: SPLIT_KV)
        mbar_arrive_if(SPLIT_KV ? &vempty[last] : &kempty[last], wl == 0);
        rescale_rows<NO>(o, alpha);
        acc_to_a<1, TMA_BC / 16>(pf, *reinterpret_cast<float(*)[1][NS][4]>(&sc[0][0]));
    }
    { // the last tile's P V
        if (SPLIT_KV) mbar_wait(&vfull[(nkt - 1) % TMA_STAGES], ((nkt - 1) / TMA_STAGES) & 1);
        __syncwarp(); // lanes leave the wait apart; .aligned wgmma follows
        fence_regs(od);
        fence_regs(pflat);
        wgmma_fence();
        issue_pv<HDP, TMA_BC>(od, pf[0], v_tile(nkt - 1));
        wgmma_wait<0>();
        fence_regs(od);
        fence_regs(pflat);
    }

    finish_rows<HDP>(out, lse, d, b, h, wr0 + wwarp * 16, row_lo, o, m, l,
                     (bf16 *)(smem + C::OUT_OFF + warp * C::STAGE_OUT), lane);
#else
    __trap(); // built without sm_90a: the host never launches this
#endif
}

// (batch row, head) pairs that take all their query tiles before the next ones start. A head's
// CTAs read the same K and V tiles; they share them in L2 only while they run close together.
// With 32 heads at a time, 4 of a head's CTAs are resident (of 132), and at 65k-131k tokens the
// forward ran at 481-508 TFLOP/s (hd 128, 2026-12-02); from 16k tokens pairs go
// pairs_in_flight at a time (8 on an H200). MT_ATTN_FWD_GROUP=N overrides it (0: all at once).
static int fwd_group(int pairs, int T) {
    const char *e = getenv("MT_ATTN_FWD_GROUP");
    const int group = e ? atoi(e) : pairs_in_flight(cdiv(T, TMA_BR));
    return group <= 0 || group > pairs ? pairs : group;
}

// Heads h0 .. h0 + hn - 1 (whole kv-head groups) of q, k, v, whose heads have cols columns
// (hd, or ld on padded copies) and lie ld apart.
template <int HDP>
void forward_tma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int h0, int hn,
                 int cols, int ld, const Dims &d, cudaStream_t stream) {
    const int kvn = hn / d.group;
    const CUtensorMap qm = make_head_map(q, d.B, d.T, hn, cols, TMA_BR, ld);
    const CUtensorMap km = make_head_map(k, d.B, d.T, kvn, cols, TMA_BC, ld);
    const CUtensorMap vm = make_head_map(v, d.B, d.T, kvn, cols, TMA_BC, ld);
    // MT_ATTN_SPLIT_KV=0: one barrier for a stage's K and V, 1.24-1.27x slower (comparisons)
    const char *e = getenv("MT_ATTN_SPLIT_KV");
    // A window runs the shipped variant only.
    auto kernel = d.window           ? attn_fwd_tma<HDP, true, true>
                  : e && e[0] == '0' ? attn_fwd_tma<HDP, false, false>
                                     : attn_fwd_tma<HDP, true, false>;
    set_smem_limit(kernel, TmaCfg<HDP>::smem);
    dim3 grid(d.B * hn, cdiv(d.T, TMA_BR));
    kernel<<<grid, TMA_THREADS, TmaCfg<HDP>::smem, stream>>>(out, lse, qm, km, vm, h0, hn,
                                                             fwd_group(grid.x, d.T), d);
    CUDA_CHECK_LAUNCH();
}

// [B, T, heads, hd] heads h0 .. h0 + hn - 1 into [B, T, hn, ld], columns past hd zero, 4
// elements (8 bytes) a thread.
__global__ void pad_heads(bf16 *dst, const bf16 *src, long n4, int heads, int h0, int hn, int hd,
                          int ld) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const RunElement r = run_element(i, hn, ld / 4);
    const int c = 4 * r.e;
    *(uint2 *)(dst + (r.bt * hn + r.hl) * ld + c) =
        c < hd ? *(const uint2 *)(src + (r.bt * heads + h0 + r.hl) * hd + c) : uint2{0, 0};
}

} // namespace

// [B, T, heads, hd] heads h0 .. h0 + hn - 1 into [B, T, hn, ld].
static void copy_heads_padded(bf16 *dst, const bf16 *src, int B, int T, int heads, int h0, int hn,
                              int hd, int ld, cudaStream_t stream) {
    const long n4 = (long)B * T * hn * (ld / 4);
    pad_heads<<<(unsigned)((n4 + 255) / 256), 256, 0, stream>>>(dst, src, n4, heads, h0, hn, hd,
                                                                ld);
    CUDA_CHECK_LAUNCH();
}

void copy_run_padded(void *scratch, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                     int B, int T, int H, int KV, int hd, int kv0, int kvn, cudaStream_t stream) {
    const AttnScratch sc = attention_scratch(scratch, B, T, H, KV, hd);
    const int ld = tma_padded_ld(hd), group = H / KV;
    copy_heads_padded(sc.pq, q, B, T, H, kv0 * group, kvn * group, hd, ld, stream);
    if (dout) copy_heads_padded(sc.pdout, dout, B, T, H, kv0 * group, kvn * group, hd, ld, stream);
    copy_heads_padded(sc.pk, k, B, T, KV, kv0, kvn, hd, ld, stream);
    copy_heads_padded(sc.pv, v, B, T, KV, kv0, kvn, hd, ld, stream);
}

bool attention_forward_tma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                           const Dims &d, void *scratch, cudaStream_t stream) {
    const char *e = getenv("MT_ATTENTION_TMA"); // 0: the plain wgmma forward (comparisons)
    const int B = d.B, T = d.T, H = d.H, KV = d.KV, hd = d.hd, ld = tma_padded_ld(hd);
    if ((e && e[0] == '0') || hd < 64 || (hd % 8 != 0 && (!ld || !scratch))) return false;
    if (!ld) {
        (hd == 64 ? forward_tma<64> : forward_tma<128>)(out, lse, q, k, v, 0, H, hd, hd, d, stream);
        return true;
    }
    // Runs of kv heads as the backward's, so that the copies fit the scratch.
    const AttnScratch sc = attention_scratch(scratch, B, T, H, KV, hd);
    const int kvc = dq_chunk_kv_heads(B, T, H, KV, hd);
    for (int kv0 = 0; kv0 < KV; kv0 += kvc) {
        const int kvn = KV - kv0 < kvc ? KV - kv0 : kvc, hn = kvn * d.group;
        copy_run_padded(scratch, q, k, v, NULL, B, T, H, KV, hd, kv0, kvn, stream);
        forward_tma<128>(out, lse, sc.pq, sc.pk, sc.pv, kv0 * d.group, hn, ld, ld, d, stream);
    }
    return true;
}
