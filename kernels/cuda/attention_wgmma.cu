// Flash attention on Hopper's warpgroup MMA (wgmma): the forward, and its launch. The math
// and the outputs are those of the mma.sync path (attention.cuh); what changes is who multiplies.
//
// A CTA holds 128 query rows, 64 per warpgroup, and streams 128-key K/V tiles through two
// cp.async stages in 128-byte-swizzled shared memory (wgmma.cuh). Per key tile each warpgroup
// issues S = Q K^T with both operands read by the tensor cores straight from shared memory,
// runs the online softmax on the accumulators in registers, and issues O += P V with P from
// registers and V read in place as an MN-major operand: no ldmatrix and no transposes. The two
// warpgroups interleave on the SM, one's softmax hiding under the other's MMAs.
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

__device__ __forceinline__ unsigned char *align1024(unsigned char *p) {
    return (unsigned char *)(((uintptr_t)p + 1023) & ~(uintptr_t)1023);
}

// One CTA per (b, h, 128-query tile), the longest rows first for load balance.
template <int HDP>
__global__ void __launch_bounds__(WG_CTA_THREADS, 1)
    attn_fwd_wg(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
#ifdef WGMMA_DEVICE
    using C = WgCfg<HDP>;
    constexpr int NS = WG_BC / 8, NO = HDP / 8, KS = HDP / 16, PS = WG_BC / 16;
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
            float(&sd)[WG_BC / 2] = *reinterpret_cast<float(*)[WG_BC / 2]>(&s[0][0]);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
                wgmma_ss<WG_BC>(sd, kmajor_desc(sQ, WG_BR, wg * WG_ROWS, ks),
                                kmajor_desc(sK, WG_BC, 0, ks), ks > 0);
            wgmma_commit();
            wgmma_wait<0>();
            const bool mask = key0 + WG_BC - 1 > wr0;
            softmax_step<NS, NO>(s, o, m, l, d.scale_log2, mask, wr0 + warp * 16 + (lane >> 2),
                                 key0, lane);
            uint32_t pf[1][PS][4];
            acc_to_a<1, PS>(pf, *reinterpret_cast<float(*)[1][NS][4]>(&s[0][0]));
            float(&od)[HDP / 2] = *reinterpret_cast<float(*)[HDP / 2]>(&o[0][0]);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < PS; ks++)
                wgmma_rs_t<HDP>(od, pf[0][ks], mnmajor_desc(sV, WG_BC, ks), 1);
            wgmma_commit();
            wgmma_wait<0>();
        }
        __syncthreads(); // this stage is refilled two iterations on
    }

    float inv[1][2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float sum = l[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inv[0][r] = 1.0f / sum;
        int row = wr0 + warp * 16 + (lane >> 2) + 8 * r;
        if ((lane & 3) == 0 && row < d.T)
            lse[((long)b * d.H + h) * d.T + row] = (m[r] + log2f(sum)) * LN2;
    }
    // The K/V stages are free after the loop's last barrier: each warp stages its 16 rows there.
    bf16 *stage = (bf16 *)sKV + (threadIdx.x >> 5) * 16 * (HDP + 8);
    store_rows<HDP, 1>(out + (long)b * d.T * qs + (long)h * d.hd, qs, wr0 + warp * 16, d.T, d.hd,
                       *reinterpret_cast<float(*)[1][NO][4]>(&o[0][0]), inv, stage, lane);
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

} // namespace

bool attention_wgmma_available(void) {
#ifdef MT_CUDA_WGMMA
    int dev = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
#else
    return false;
#endif
}

void attention_forward_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                             int B, int T, int H, int KV, int hd, cudaStream_t stream) {
    Dims d = make_dims(B, T, H, KV, hd);
    if (hd <= 64)
        forward_wg<64>(out, lse, q, k, v, d, stream);
    else
        forward_wg<128>(out, lse, q, k, v, d, stream);
}
