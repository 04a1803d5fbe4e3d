// Flash attention forward on Hopper, warp-specialized (FlashAttention-3's structure): a
// producer warpgroup (one thread of it) feeds K/V tiles through the copy engine (TMA) into a
// two-stage ring of 128-byte-swizzled shared memory, each stage guarded by a "full" mbarrier (the
// copies' bytes have landed) and an "empty" one (both consumers are done with it); two consumer
// warpgroups of 64 query rows each run S = Q K^T, the online softmax and O += P V on wgmma. The
// consumers never meet at a CTA barrier, and two named barriers make them take turns issuing their
// Q K^T, so that one warpgroup's softmax runs while the other's GEMMs keep the tensor cores
// busy. Same math, tiles and outputs as attention_wgmma.cu's plain forward, which stays the
// path where this one cannot run (hd < 64; hd % 8 != 0, where heads do not all start on the
// 16-byte boundary a TMA box needs: hd 100 tried row-cut boxes, and odd heads faulted).
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
    static constexpr size_t smem = BAR_OFF + 8 * (2 * TMA_STAGES + 1) + 1024;
};

template <int HDP>
__global__ void __launch_bounds__(TMA_THREADS, 1)
    attn_fwd_tma(bf16 *out, float *lse, const __grid_constant__ CUtensorMap qmap,
                 const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                 Dims d) {
#ifdef WGMMA_DEVICE
    using C = TmaCfg<HDP>;
    constexpr int NS = TMA_BC / 8, NO = HDP / 8;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    unsigned char *sQ = smem, *sKV = smem + C::Q_BYTES; // stage s: K, then V
    uint64_t *full = (uint64_t *)(smem + C::BAR_OFF), *empty = full + TMA_STAGES;
    uint64_t *qfull = empty + TMA_STAGES;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * TMA_BR; // the longest rows first
    const int nkt = key_tiles(q0, TMA_BR, d.T, TMA_BC);
    if (threadIdx.x == 0) {
        for (int s = 0; s < TMA_STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], TMA_CONSUMERS);
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
            tma_load_4d(sQ + p * TMA_BR * 128, &qmap, qfull, 64 * p, h, q0, b);
        for (int kt = 0; kt < nkt; kt++) {
            const int s = kt % TMA_STAGES;
            if (kt >= TMA_STAGES) mbar_wait(&empty[s], ((kt / TMA_STAGES) & 1) ^ 1);
            unsigned char *sK = sKV + s * 2 * C::KV_BYTES, *sV = sK + C::KV_BYTES;
            mbar_expect_tx(&full[s], 2 * C::KV_BYTES);
            for (int p = 0; p < C::PANELS; p++) {
                tma_load_4d(sK + p * TMA_BC * 128, &kmap, &full[s], 64 * p, kvh, kt * TMA_BC, b);
                tma_load_4d(sV + p * TMA_BC * 128, &vmap, &full[s], 64 * p, kvh, kt * TMA_BC, b);
            }
        }
        return;
    }
    regs_claim<CONSUMER_REGS>();

    const int wg = warp / 4, wl = threadIdx.x % WG_THREADS, wwarp = wl >> 5;
    const int wr0 = q0 + wg * 64, wr1 = wr0 + 63, row_lo = wr0 + wwarp * 16 + (lane >> 2);
    // Turns: warpgroup w issues its Q K^T after named barrier 1 + w, which the other opens.
    const int my_turn = 1 + wg, other_turn = 2 - wg, turn_threads = TMA_CONSUMERS * WG_THREADS;
    if (wg == 1) named_arrive(other_turn, turn_threads); // warpgroup 0 goes first
    float o[NO][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    mbar_wait(qfull, 0);
    for (int kt = 0; kt < nkt; kt++) {
        const int s = kt % TMA_STAGES, key0 = kt * TMA_BC;
        const unsigned char *sK = sKV + s * 2 * C::KV_BYTES, *sV = sK + C::KV_BYTES;
        mbar_wait(&full[s], (kt / TMA_STAGES) & 1);
        named_sync(my_turn, turn_threads);
        float sc[NS][4];
        // Always true while BR = BC (the last tile starts at q0 <= wr1); kept for other shapes.
        const bool active = key0 <= wr1;
        if (active) {
            wgmma_fence();
            scores_wg<HDP, TMA_BC>(sc, sQ, TMA_BR, wg * 64, sK);
            wgmma_commit();
        }
        if (wg == 0 || kt + 1 < nkt) named_arrive(other_turn, turn_threads); // balanced turns
        if (active) {
            wgmma_wait<0>();
            fence_acc(sc);
            softmax_pv<HDP, TMA_BC>(sc, o, m, l, d.scale_log2, key0 + TMA_BC - 1 > wr0, row_lo,
                                    key0, lane, sV);
        }
        if (wl == 0) mbar_arrive(&empty[s]); // this warpgroup's reads of the stage are done
    }

    finish_rows<HDP>(out, lse, d, b, h, wr0 + wwarp * 16, row_lo, o, m, l,
                     (bf16 *)(smem + C::OUT_OFF + warp * C::STAGE_OUT), lane);
#else
    __trap(); // built without sm_90a: the host never launches this
#endif
}

template <int HDP>
void forward_tma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                 cudaStream_t stream) {
    const CUtensorMap qm = make_head_map(q, d.B, d.T, d.H, d.hd, TMA_BR);
    const CUtensorMap km = make_head_map(k, d.B, d.T, d.KV, d.hd, TMA_BC);
    const CUtensorMap vm = make_head_map(v, d.B, d.T, d.KV, d.hd, TMA_BC);
    auto kernel = attn_fwd_tma<HDP>;
    set_smem_limit(kernel, TmaCfg<HDP>::smem);
    dim3 grid(d.B * d.H, cdiv(d.T, TMA_BR));
    kernel<<<grid, TMA_THREADS, TmaCfg<HDP>::smem, stream>>>(out, lse, qm, km, vm, d);
    CUDA_CHECK_LAUNCH();
}

} // namespace

bool attention_forward_tma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                           int B, int T, int H, int KV, int hd, cudaStream_t stream) {
    const char *e = getenv("MT_ATTENTION_TMA"); // 0: the plain wgmma forward (comparisons)
    if ((e && e[0] == '0') || hd % 8 != 0 || hd < 64) return false;
    Dims d = make_dims(B, T, H, KV, hd);
    if (hd == 64)
        forward_tma<64>(out, lse, q, k, v, d, stream);
    else
        forward_tma<128>(out, lse, q, k, v, d, stream);
    return true;
}
