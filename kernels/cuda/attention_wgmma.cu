// Flash attention on Hopper's warpgroup MMA (wgmma): forward and backward, and their launch. The
// math and the outputs are those of the mma.sync path (attention.cuh); what changes is who
// multiplies.
//
// A CTA holds 128 query rows, 64 per warpgroup, and streams 128-key K/V tiles through two
// cp.async stages in 128-byte-swizzled shared memory (wgmma.cuh). Per key tile each warpgroup
// issues S = Q K^T with both operands read by the tensor cores straight from shared memory,
// runs the online softmax on the accumulators in registers, and issues O += P V with P from
// registers and V read in place as an MN-major operand: no ldmatrix and no transposes. Every
// tile ends at a CTA barrier (all threads load), so the warpgroups run in step and the tensor
// cores idle through each softmax: this forward reaches ~300 TFLOP/s at hd 128, and is the
// fallback for shapes the warp-specialized kernels (attention_tma.cu, attention_bwd_tma.cu)
// cannot take.
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace {

constexpr int WG_ROWS = 64, WG_PER_CTA = 2, WG_BR = WG_ROWS * WG_PER_CTA, WG_BC = 128;
constexpr int WG_CTA_THREADS = WG_THREADS * WG_PER_CTA;

// Rows [row0, row0 + ROWS) of a [T, stride] bf16 matrix (first hd columns) into a swizzled
// ROWS x HDP tile, zero-filled past T and past hd, through cp.async by all NT threads. Rows of
// hd % 8 == 4 (head dim 100) are only 8-byte aligned and move as two 8-byte halves.
template <int HDP, int ROWS, int NT>
__device__ __forceinline__ void load_swizzled(bf16 *tile, const bf16 *src, int row0, int T,
                                              long stride, int hd) {
    constexpr int CPR = HDP / 8; // 16-byte chunks per row
    char *base = (char *)tile;
    for (int c = threadIdx.x; c < ROWS * CPR; c += NT) {
        const int r = c / CPR, ch = c % CPR, col = ch * 8;
        char *dst = base + swizzled_offset(ROWS, r, ch);
        const bf16 *s = src + (long)(row0 + r) * stride + col;
        const bool row_ok = row0 + r < T;
        if (row_ok && col + 8 <= hd && (hd & 7) == 0) {
            cp_async16(dst, s);
        } else if (row_ok && col < hd) { // hd % 8 == 4: 8-byte halves, the second maybe past hd
            cp_async8(dst, s);
            if (col + 8 <= hd)
                cp_async8(dst + 8, s + 4);
            else
                *(uint2 *)(dst + 8) = uint2{0, 0};
        } else {
            *(uint4 *)dst = uint4{0, 0, 0, 0};
        }
    }
}

template <int HDP> struct WgCfg {
    static constexpr int Q_BYTES = WG_BR * HDP * 2, KV_BYTES = WG_BC * HDP * 2;
    // Q, two stages of K and V, and 1 KB to align the swizzled tiles.
    static constexpr size_t fwd_smem = Q_BYTES + 4 * KV_BYTES + 1024;
};

// One CTA per (b, h, 128-query tile), the longest rows first for load balance.
template <int HDP>
__global__ void __launch_bounds__(WG_CTA_THREADS, 1)
    attn_fwd_wg(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
#ifdef WGMMA_DEVICE
    using C = WgCfg<HDP>;
    constexpr int NS = WG_BC / 8, NO = HDP / 8;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    bf16 *sQ = (bf16 *)smem;
    unsigned char *sKV = smem + C::Q_BYTES; // stage s: K at + 2 s KV_BYTES, V right after

    const int wg = threadIdx.x / WG_THREADS, wl = threadIdx.x % WG_THREADS;
    const int warp = wl >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * WG_BR;
    const int wr0 = q0 + wg * WG_ROWS, wr1 = wr0 + WG_ROWS - 1; // this warpgroup's rows
    const int nkt = key_tiles(q0, WG_BR, d.T, WG_BC);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;

    load_swizzled<HDP, WG_BR, WG_CTA_THREADS>(sQ, q + (long)b * d.T * qs + (long)h * d.hd, q0, d.T,
                                              qs, d.hd);
    load_swizzled<HDP, WG_BC, WG_CTA_THREADS>((bf16 *)sKV, kb, 0, d.T, kvs, d.hd);
    load_swizzled<HDP, WG_BC, WG_CTA_THREADS>((bf16 *)(sKV + C::KV_BYTES), vb, 0, d.T, kvs, d.hd);
    cp_async_commit();

    float o[NO][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int kt = 0; kt < nkt; kt++) {
        const unsigned char *sK = sKV + (kt & 1) * 2 * C::KV_BYTES, *sV = sK + C::KV_BYTES;
        if (kt + 1 < nkt) { // into the other stage, freed by the last iteration's barrier
            bf16 *nK = (bf16 *)(sKV + ((kt + 1) & 1) * 2 * C::KV_BYTES);
            load_swizzled<HDP, WG_BC, WG_CTA_THREADS>(nK, kb, (kt + 1) * WG_BC, d.T, kvs, d.hd);
            load_swizzled<HDP, WG_BC, WG_CTA_THREADS>((bf16 *)((char *)nK + C::KV_BYTES), vb,
                                                      (kt + 1) * WG_BC, d.T, kvs, d.hd);
        }
        cp_async_commit(); // possibly empty: keeps the wait count uniform
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        const int key0 = kt * WG_BC;
        if (key0 <= wr1) { // else every key of the tile comes after every row of the warpgroup
            float s[NS][4];
            wgmma_fence();
            scores_wg<HDP, WG_BC>(s, sQ, WG_BR, wg * WG_ROWS, sK);
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(s);
            const int whole_rows[2] = {0, 0}; // no packed documents here (the callers see to it)
            softmax_pv<HDP, WG_BC>(s, o, m, l, d.scale_log2, key0 + WG_BC - 1 > wr0,
                                   wr0 + warp * 16 + (lane >> 2), key0, whole_rows, lane, sV);
        }
        __syncthreads(); // this stage is refilled two iterations on
    }

    // The K/V stages are free after the loop's last barrier: each warp stages its 16 rows there.
    finish_rows<HDP>(out, lse, d, b, h, wr0 + warp * 16, wr0 + warp * 16 + (lane >> 2), o, m, l,
                     (bf16 *)sKV + (threadIdx.x >> 5) * 16 * (HDP + 8), lane);
#else
    __trap(); // built without sm_90a: the host never launches this
#endif
}

template <int HDP>
void forward_wg(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                cudaStream_t stream) {
    auto kernel = attn_fwd_wg<HDP>;
    dim3 grid(d.B * d.H, cdiv(d.T, WG_BR));
    set_smem_limit(kernel, WgCfg<HDP>::fwd_smem);
    kernel<<<grid, WG_CTA_THREADS, WgCfg<HDP>::fwd_smem, stream>>>(out, lse, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

// ---- backward ------------------------------------------------------------------------------
// Two kernels, as on the mma.sync path, so that every output has one owner and no atomics are
// needed: dk, dv by key tile (two warpgroups of 64 keys, 64-query tiles streamed over every
// query head of the kv head's group), then dq by query tile (two warpgroups of 64 queries,
// 64-key tiles streamed). Both recompute P from lse. Every operand is read in place from a
// swizzled tile: K, V, Q and dout K-major for the score-like products (S^T, dP^T, S, dP), and
// dout, Q and K MN-major for the gradient products (dV += P^T dO, dK += dS^T Q, dQ += dS K).

constexpr int KV_BK = WG_ROWS * WG_PER_CTA, KV_BQ = 64, DQ_BC = 64;

template <int HDP> struct WgBwdCfg {
    static constexpr int KV_BYTES = KV_BK * HDP * 2, QT_BYTES = KV_BQ * HDP * 2;
    // K, V, two stages of (q, dout) tiles with their lse and D, alignment.
    static constexpr size_t kv_smem = 2 * KV_BYTES + 4 * QT_BYTES + 4 * KV_BQ * 4 + 1024;
    static constexpr int DQ_Q_BYTES = WG_BR * HDP * 2, DQ_KV_BYTES = DQ_BC * HDP * 2;
    // q and dout of the CTA's rows, two stages of K and V, alignment.
    static constexpr size_t dq_smem = 2 * DQ_Q_BYTES + 4 * DQ_KV_BYTES + 1024;
};

template <int HDP>
__global__ void __launch_bounds__(WG_CTA_THREADS, 1)
    attn_bwd_dkdv_wg(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                     const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
#ifdef WGMMA_DEVICE
    using C = WgBwdCfg<HDP>;
    constexpr int NQ = KV_BQ / 8, NO = HDP / 8, KQ = KV_BQ / 16;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    unsigned char *sK = smem, *sV = smem + C::KV_BYTES, *sQdO = smem + 2 * C::KV_BYTES;
    float *sL = (float *)(sQdO + 4 * C::QT_BYTES), *sD = sL + 2 * KV_BQ;

    const int wg = threadIdx.x / WG_THREADS, warp = (threadIdx.x % WG_THREADS) >> 5;
    const int lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.KV, kvh = blockIdx.x % d.KV;
    const int k0 = blockIdx.y * KV_BK; // low key tiles have the most queries: they go first
    const int wk0 = k0 + wg * WG_ROWS, wk1 = wk0 + WG_ROWS - 1; // this warpgroup's keys
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long kvoff = (long)b * d.T * kvs + (long)kvh * d.hd;
    const int qt0 = k0 / KV_BQ, nqt = cdiv(d.T, KV_BQ) - qt0, items = d.group * nqt;

    // Work item it: query head kvh * group + it / nqt, query tile qt0 + it % nqt.
    auto load_item = [&](int it, int st) {
        const int h = kvh * d.group + it / nqt, qbase = (qt0 + it % nqt) * KV_BQ;
        const long qoff = (long)b * d.T * qs + (long)h * d.hd;
        unsigned char *dst = sQdO + st * 2 * C::QT_BYTES;
        load_swizzled<HDP, KV_BQ, WG_CTA_THREADS>((bf16 *)dst, q + qoff, qbase, d.T, qs, d.hd);
        load_swizzled<HDP, KV_BQ, WG_CTA_THREADS>((bf16 *)(dst + C::QT_BYTES), dout + qoff, qbase,
                                                  d.T, qs, d.hd);
        for (int i = threadIdx.x; i < KV_BQ; i += WG_CTA_THREADS) {
            const int row = qbase + i;
            const long li = ((long)b * d.H + h) * d.T + row;
            float *l = sL + st * KV_BQ + i, *dd = sD + st * KV_BQ + i;
            if (row < d.T) {
                cp_async4(l, lse + li);
                cp_async4(dd, D + li);
            } else {
                *l = *dd = 0.0f;
            }
        }
    };

    load_swizzled<HDP, KV_BK, WG_CTA_THREADS>((bf16 *)sK, k + kvoff, k0, d.T, kvs, d.hd);
    load_swizzled<HDP, KV_BK, WG_CTA_THREADS>((bf16 *)sV, v + kvoff, k0, d.T, kvs, d.hd);
    load_item(0, 0);
    cp_async_commit();

    float dka[NO][4] = {}, dva[NO][4] = {};
    for (int it = 0; it < items; it++) {
        const int st = it & 1;
        if (it + 1 < items) load_item(it + 1, st ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        const int qbase = (qt0 + it % nqt) * KV_BQ;
        const unsigned char *sQ = sQdO + st * 2 * C::QT_BYTES, *sdO = sQ + C::QT_BYTES;
        const float *L = sL + st * KV_BQ, *Dq = sD + st * KV_BQ;
        if (qbase + KV_BQ - 1 >= wk0) { // else every query of the tile precedes these keys
            float s[NQ][4], dp[NQ][4];
            scores_and_dp<HDP, KV_BQ>(s, dp, sK, sQ, sV, sdO, KV_BK, wg * WG_ROWS);
            const bool mask = wk1 > qbase || qbase + KV_BQ > d.T;
            probs_and_ds_t<NQ>(s, dp, L, Dq, d.scale_log2, mask, qbase,
                               wk0 + warp * 16 + (lane >> 2), d.T, lane);
            uint32_t pf[1][KQ][4], dsf[1][KQ][4];
            acc_to_a<1, KQ>(pf, *reinterpret_cast<float(*)[1][NQ][4]>(&s[0][0]));
            acc_to_a<1, KQ>(dsf, *reinterpret_cast<float(*)[1][NQ][4]>(&dp[0][0]));
            fence_acc(dva);
            fence_acc(dka);
            wgmma_fence();
            grad_wg<HDP, KQ>(dva, pf, sdO);
            grad_wg<HDP, KQ>(dka, dsf, sQ);
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(dva);
            fence_acc(dka);
        }
        __syncthreads(); // this stage is refilled two iterations on
    }
    // The q/dout stages are free after the loop's last barrier: each warp stages its rows there.
    bf16 *stage = (bf16 *)sQdO + (threadIdx.x >> 5) * 16 * (HDP + 8);
    store_key_grads<HDP>(dk + kvoff, dv + kvoff, kvs, wk0 + warp * 16, d, dka, dva, stage, lane);
#else
    __trap();
#endif
}

template <int HDP>
__global__ void __launch_bounds__(WG_CTA_THREADS, 1)
    attn_bwd_dq_wg(bf16 *dq, const bf16 *dout, const float *lse, const float *D, const bf16 *q,
                   const bf16 *k, const bf16 *v, Dims d) {
#ifdef WGMMA_DEVICE
    using C = WgBwdCfg<HDP>;
    constexpr int NS = DQ_BC / 8, NO = HDP / 8, KC = DQ_BC / 16;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem = align1024(smem_raw);
    unsigned char *sQ = smem, *sdO = smem + C::DQ_Q_BYTES, *sKV = smem + 2 * C::DQ_Q_BYTES;

    const int wg = threadIdx.x / WG_THREADS, warp = (threadIdx.x % WG_THREADS) >> 5;
    const int lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * WG_BR;
    const int wr0 = q0 + wg * WG_ROWS, wr1 = wr0 + WG_ROWS - 1;
    const int nkt = key_tiles(q0, WG_BR, d.T, DQ_BC);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const long qoff = (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;

    load_swizzled<HDP, WG_BR, WG_CTA_THREADS>((bf16 *)sQ, q + qoff, q0, d.T, qs, d.hd);
    load_swizzled<HDP, WG_BR, WG_CTA_THREADS>((bf16 *)sdO, dout + qoff, q0, d.T, qs, d.hd);
    load_swizzled<HDP, DQ_BC, WG_CTA_THREADS>((bf16 *)sKV, kb, 0, d.T, kvs, d.hd);
    load_swizzled<HDP, DQ_BC, WG_CTA_THREADS>((bf16 *)(sKV + C::DQ_KV_BYTES), vb, 0, d.T, kvs,
                                              d.hd);
    cp_async_commit();

    // Rows past T: zero q and dout make dS = 1 * (0 - 0) = 0, and they are never stored.
    const int row_lo = wr0 + warp * 16 + (lane >> 2);
    float lse2[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + 8 * r;
        const long li = ((long)b * d.H + h) * d.T + row;
        lse2[r] = row < d.T ? lse[li] * LOG2E : 0.0f;
        Dr[r] = row < d.T ? D[li] : 0.0f;
    }

    float dqa[NO][4] = {};
    for (int kt = 0; kt < nkt; kt++) {
        const unsigned char *sK = sKV + (kt & 1) * 2 * C::DQ_KV_BYTES, *sV = sK + C::DQ_KV_BYTES;
        if (kt + 1 < nkt) {
            unsigned char *nK = sKV + ((kt + 1) & 1) * 2 * C::DQ_KV_BYTES;
            load_swizzled<HDP, DQ_BC, WG_CTA_THREADS>((bf16 *)nK, kb, (kt + 1) * DQ_BC, d.T, kvs,
                                                      d.hd);
            load_swizzled<HDP, DQ_BC, WG_CTA_THREADS>((bf16 *)(nK + C::DQ_KV_BYTES), vb,
                                                      (kt + 1) * DQ_BC, d.T, kvs, d.hd);
        }
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async();
        __syncthreads();
        const int key0 = kt * DQ_BC;
        if (key0 <= wr1) {
            float s[NS][4], dp[NS][4];
            scores_and_dp<HDP, DQ_BC>(s, dp, sQ, sK, sdO, sV, WG_BR, wg * WG_ROWS);
            const bool mask = key0 + DQ_BC - 1 > wr0;
#pragma unroll
            for (int nt = 0; nt < NS; nt++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int key = key0 + nt * 8 + 2 * (lane & 3) + (i & 1);
                    const int row = row_lo + 8 * (i >> 1);
                    float p = fast_exp2(fmaf(s[nt][i], d.scale_log2, -lse2[i >> 1]));
                    if (mask && key > row) p = 0.0f;
                    dp[nt][i] = p * (dp[nt][i] - Dr[i >> 1]);
                }
            }
            uint32_t dsf[1][KC][4];
            acc_to_a<1, KC>(dsf, *reinterpret_cast<float(*)[1][NS][4]>(&dp[0][0]));
            fence_acc(dqa);
            wgmma_fence();
            grad_wg<HDP, KC>(dqa, dsf, sK);
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(dqa);
        }
        __syncthreads();
    }
    bf16 *stage = (bf16 *)sKV + (threadIdx.x >> 5) * 16 * (HDP + 8);
    const float qmul[1][2] = {{d.scale, d.scale}};
    store_rows<HDP, 1>(dq + qoff, qs, wr0 + warp * 16, d.T, d.hd,
                       *reinterpret_cast<float(*)[1][NO][4]>(&dqa[0][0]), qmul, stage, lane);
#else
    __trap();
#endif
}

template <int HDP>
void backward_wg(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse, const float *D,
                 const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d, cudaStream_t stream) {
    using C = WgBwdCfg<HDP>;
    // dk and dv first: they read every row of q, which dq may overwrite.
    auto kv_kernel = attn_bwd_dkdv_wg<HDP>;
    set_smem_limit(kv_kernel, C::kv_smem);
    kv_kernel<<<dim3(d.B * d.KV, cdiv(d.T, KV_BK)), WG_CTA_THREADS, C::kv_smem, stream>>>(
        dk, dv, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();
    auto dq_kernel = attn_bwd_dq_wg<HDP>;
    set_smem_limit(dq_kernel, C::dq_smem);
    dq_kernel<<<dim3(d.B * d.H, cdiv(d.T, WG_BR)), WG_CTA_THREADS, C::dq_smem, stream>>>(
        dq, dout, lse, D, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

} // namespace

extern "C" int cuda_attention_has_wgmma(void) {
#ifdef MT_CUDA_WGMMA
    int dev = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
#else
    return 0;
#endif
}

bool attention_forward_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                             const Dims &d, void *scratch, cudaStream_t stream) {
    if (attention_forward_tma(out, lse, q, k, v, d, scratch, stream)) return true;
    if (mask_of(d) != MASK_CAUSAL) return false; // no document or window masks here
    if (d.hd <= 64)
        forward_wg<64>(out, lse, q, k, v, d, stream);
    else
        forward_wg<128>(out, lse, q, k, v, d, stream);
    return true;
}

void attention_backward_wgmma(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                              const float *D, const bf16 *q, const bf16 *k, const bf16 *v,
                              const Dims &d, cudaStream_t stream) {
    if (d.hd <= 64)
        backward_wg<64>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
    else
        backward_wg<128>(dq, dk, dv, dout, lse, D, q, k, v, d, stream);
}
