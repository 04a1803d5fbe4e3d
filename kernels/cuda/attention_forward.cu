// Flash attention, forward: the tensor-core kernel and the simple path, and their launch
// (attention.cuh says how the family works).
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/ktime.cuh"

namespace {

// ---- tensor-core forward -----------------------------------------------------------------

// One CTA per (b, h, 64*MT-query tile); each warp owns 16*MT query rows and streams the
// BC-key K/V tiles up to its diagonal through a two-stage cp.async pipeline. With packed
// documents the stream starts at the tile that holds the first row's document start, a warp
// skips the tiles before its own rows' documents, and tiles that cross a row's document start
// are masked; a sliding window (MASK_WINDOW) is the same with each row's first key moved up to
// its window's (first_key), so a query tile streams about (its rows + W) / BC tiles: O(T W) in
// all. M (Mask): without documents or a window every such quantity is a constant (kt0 = wfirst =
// wlast = 0) and no read or check is compiled in, the same code as before packed documents
// (3c0c020): paying for the checks made calls without documents 6-18% slower, forward and
// backward (H200, hd 64 and 128, 2k and 8k tokens).
template <int HDP, int MT, int BC, Mask M>
__global__ void __launch_bounds__(THREADS)
    attn_fwd_tc(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, Dims d) {
    constexpr int LD = HDP + 8, KS = HDP / 16, NO = HDP / 8, NS = BC / 8, BR = 16 * WARPS * MT;
    // RANGED: the rows' first keys vary (packed documents, a window); WIN: a window
    constexpr bool RANGED = M != MASK_CAUSAL, WIN = M == MASK_WINDOW;
    constexpr bool QREG = HDP <= 64; // q's A fragments stay in registers when they fit
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem;
    bf16 *sKV = sQ + BR * LD; // stage s: K at sKV + 2*s*BC*LD, V right after it

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / d.H, h = blockIdx.x % d.H, kvh = h / d.group;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR; // the longest rows first: load balance
    const int wr0 = q0 + warp * 16 * MT, wr1 = wr0 + 16 * MT - 1; // this warp's rows
    const int kt0 = RANGED ? first_key<WIN>(d, b, q0) / BC : 0, nkt = key_tiles(q0, BR, d.T, BC);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const bf16 *qb = q + (long)b * d.T * qs + (long)h * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)kvh * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)kvh * d.hd;
    bf16 *sQw = sQ + warp * 16 * MT * LD;
    // The first keys of this warp's first and last rows (a thread's own rows' are read on masked
    // tiles only: kept in registers, they made the loop spill).
    const int wfirst = RANGED ? first_key<WIN>(d, b, wr0) : 0;
    const int wlast = RANGED ? first_key<WIN>(d, b, wr1) : 0;

    load_tile<HDP, BR>(sQ, qb, q0, d.T, qs, d.hd);
    load_tile<HDP, BC>(sKV, kb, kt0 * BC, d.T, kvs, d.hd);
    load_tile<HDP, BC>(sKV + BC * LD, vb, kt0 * BC, d.T, kvs, d.hd);
    cp_async_commit();

    uint32_t qf[MT][KS][4];
    float o[MT][NO][4] = {}, m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
    for (int kt = kt0; kt < nkt; kt++) {
        const bf16 *sK = sKV + ((kt - kt0) & 1) * 2 * BC * LD, *sV = sK + BC * LD;
        if (kt + 1 < nkt) { // prefetch into the other stage, freed by the last barrier
            bf16 *nK = sKV + ((kt + 1 - kt0) & 1) * 2 * BC * LD;
            load_tile<HDP, BC>(nK, kb, (kt + 1) * BC, d.T, kvs, d.hd);
            load_tile<HDP, BC>(nK + BC * LD, vb, (kt + 1) * BC, d.T, kvs, d.hd);
        }
        cp_async_commit(); // possibly empty: keeps the wait count uniform
        cp_async_wait<1>();
        __syncthreads();
        if constexpr (QREG) {
            if (kt == kt0)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int ks = 0; ks < KS; ks++)
                        load_a(qf[mt][ks], sQw + mt * 16 * LD, LD, ks, lane);
        }
        const int key0 = kt * BC;
        // Else every key of the tile comes after every row of this warp, or before its documents.
        if (key0 <= wr1 && (!RANGED || key0 + BC > wfirst)) {
            float s[MT][NS][4] = {};
            if constexpr (QREG)
                mma_rs_nt<MT, KS, NS>(s, qf, sK, LD, lane);
            else
                mma_ss_nt<MT, KS, NS>(s, sQw, sK, LD, lane);
            const bool mask = key0 + BC - 1 > wr0 || (RANGED && key0 < wlast);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int row_lo = wr0 + mt * 16 + (lane >> 2);
                int first[2] = {0, 0};
                if (RANGED && mask && wlast > 0)
                    first[0] = first_key<WIN>(d, b, row_lo),
                    first[1] = first_key<WIN>(d, b, row_lo + 8);
                softmax_step<NS, NO, RANGED>(s[mt], o[mt], m[mt], l[mt], d.scale_log2, mask, row_lo,
                                             key0, first, lane);
            }
            uint32_t pf[MT][BC / 16][4];
            acc_to_a<MT, BC / 16>(pf, s);
            mma_rs_t<MT, BC / 16, NO>(o, pf, sV, LD, lane);
        }
        __syncthreads(); // this stage is refilled two iterations on
    }

    float inv[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float sum = l[mt][r], mr = m[mt][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            inv[mt][r] = sink_fold(d, h, mr, sum) / sum; // the head's sink, if any, joins the sum
            int row = wr0 + mt * 16 + (lane >> 2) + 8 * r;
            if ((lane & 3) == 0 && row < d.T)
                lse[((long)b * d.H + h) * d.T + row] = (mr + log2f(sum)) * LN2;
        }
    }
    // Each warp only ever read its own rows of sQ, so it can reuse them as staging.
    store_rows<HDP, MT>(out + (long)b * d.T * qs + (long)h * d.hd, qs, wr0, d.T, d.hd, o, inv, sQw,
                        lane);
}

// ---- simple path (helpers in attention.cuh) ------------------------------------------------

__global__ void attn_fwd_simple(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                Dims d) {
    __shared__ float sq[SIMPLE_WARPS][32 * MAXC];
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    long row = (long)blockIdx.x * SIMPLE_WARPS + w; // (b, h, i) with i fastest
    if (row >= (long)d.B * d.H * d.T) return;
    const int i = (int)(row % d.T), h = (int)(row / d.T % d.H), b = (int)(row / d.T / d.H);
    const long qs = (long)d.H * d.hd, kvs = (long)d.KV * d.hd;
    const bf16 *kb = k + (long)b * d.T * kvs + (long)(h / d.group) * d.hd;
    const bf16 *vb = v + (long)b * d.T * kvs + (long)(h / d.group) * d.hd;
    load_row_f32(sq[w], q + ((long)b * d.T + i) * qs + (long)h * d.hd, d.hd, lane);

    // Keys first .. i: the row's document (packed documents) and window, else the causal prefix.
    const int first = visible_first(d, b, i);
    float m = -INFINITY, l = 0.0f, acc[MAXC] = {};
    for (int j0 = first & ~31; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        const bool valid = j >= first && j <= i;
        float s = valid ? dot_sg(sq[w], kb + (long)j * kvs, d.hd) * d.scale : -INFINITY;
        float mx = s;
        for (int off = 16; off > 0; off >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        mx = fmaxf(mx, m); // every chunk holds a key in first .. i, so mx is finite
        float alpha = expf(m - mx), p = valid ? expf(s - mx) : 0.0f, ps = p;
        for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
        l = l * alpha + ps;
        m = mx;
        int n = min(32, i + 1 - j0);
#pragma unroll
        for (int c = 0; c < MAXC; c++) acc[c] *= alpha;
        for (int jj = 0; jj < n; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
            const bf16 *vj = vb + (long)(j0 + jj) * kvs;
#pragma unroll
            for (int c = 0; c < MAXC; c++)
                if (lane + 32 * c < d.hd) acc[c] += pj * bf2f(vj[lane + 32 * c]);
        }
    }
    float keep = 1.0f; // the head's sink (Dims.sinks), as sink_fold in natural-log units
    if (d.sinks) {
        const float sink = bf2f(d.sinks[h]), mx = fmaxf(m, sink);
        keep = expf(m - mx);
        l = l * keep + expf(sink - mx);
        m = mx;
    }
    bf16 *o = out + ((long)b * d.T + i) * qs + (long)h * d.hd;
#pragma unroll
    for (int c = 0; c < MAXC; c++)
        if (lane + 32 * c < d.hd) o[lane + 32 * c] = f2bf(acc[c] * keep / l);
    if (lane == 0) lse[((long)b * d.H + h) * d.T + i] = m + logf(l);
}

// ---- host side -----------------------------------------------------------------------------

template <int HDP>
void forward_tc(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                cudaStream_t stream) {
    using C = Cfg<HDP>;
    const Mask mask = mask_of(d);
    auto kernel = mask == MASK_WINDOW ? attn_fwd_tc<HDP, C::FWD_MT, C::FWD_BC, MASK_WINDOW>
                  : mask == MASK_DOCS ? attn_fwd_tc<HDP, C::FWD_MT, C::FWD_BC, MASK_DOCS>
                                      : attn_fwd_tc<HDP, C::FWD_MT, C::FWD_BC, MASK_CAUSAL>;
    dim3 grid(d.B * d.H, cdiv(d.T, 16 * WARPS * C::FWD_MT));
    set_smem_limit(kernel, C::fwd_smem);
    kernel<<<grid, THREADS, C::fwd_smem, stream>>>(out, lse, q, k, v, d);
    CUDA_CHECK_LAUNCH();
}

} // namespace

extern "C" void cuda_attention_forward(const attn_args *args, const cuda_attn_tensors *t,
                                       void *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_ATTENTION);
    const Dims d = make_dims(*args, t->sinks);
    const int B = d.B, T = d.T, H = d.H, hd = d.hd;
    bf16 *out = t->out;
    float *lse = t->lse;
    const bf16 *q = t->q, *k = t->k, *v = t->v;
    if (B == 0 || T == 0) return;
    kt_work(stream, KT_ATTENTION, attention_flops(d), 0, "attention forward hd %d T %d", hd, T);
    const void *ptrs[] = {out, q, k, v};
    switch (attention_path(hd, ptrs, 4, 64)) {
    case PATH_SIMPLE:
        attn_fwd_simple<<<simple_blocks((long)B * H * T), 32 * SIMPLE_WARPS, 0, stream>>>(
            out, lse, q, k, v, d);
        CUDA_CHECK_LAUNCH();
        return;
    case PATH_WGMMA:
        // The plain wgmma forward has no document or window masks: packed documents and
        // windows where the TMA kernel cannot run take mma.sync.
        if (attention_forward_wgmma(out, lse, q, k, v, d, scratch, stream)) return;
        break;
    case PATH_MMA:
        break;
    }
    switch (padded_hd(hd)) {
    case 32:
        forward_tc<32>(out, lse, q, k, v, d, stream);
        break;
    case 64:
        forward_tc<64>(out, lse, q, k, v, d, stream);
        break;
    case 128:
        forward_tc<128>(out, lse, q, k, v, d, stream);
        break;
    case 192:
        forward_tc<192>(out, lse, q, k, v, d, stream);
        break;
    default:
        forward_tc<256>(out, lse, q, k, v, d, stream);
        break;
    }
}
