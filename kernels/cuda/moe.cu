// Mixture-of-Experts routing on the GPU, like kernels/cpu/moe.c: the router's softmax and top-k,
// the dispatch of (token, slot) pairs to expert-sorted rows, the gather before the experts'
// GEMMs, the combine after them, their backwards, and the load-balancing loss's statistics.
//
// Determinism: every output element has one owner and every sum runs in a fixed order (warp
// butterflies and block trees of a fixed shape), so a rerun gives the same bits. The dispatch is
// integers and must equal the CPU's exactly: per-tile counts, a scan in (expert, tile) order,
// then each tile ranks its pairs in pair order, so an expert's rows keep (token, slot) order.
// Unlike the CPU reference, the outputs that feed GEMMs (d_logits, d_yp, dy, d_gate_logit) are
// WRITTEN in bf16; the fp32 activations (out, dx) accumulate.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>
#include <limits.h>

namespace {

typedef __nv_bfloat16 bf;
const unsigned FULL = 0xffffffffu;
const int THREADS = 256;
const long MAX_BLOCKS = 4096;
const int WARPS = 8;                  // warps per block of the warp-per-token kernels
const int EPL = MOE_MAX_EXPERTS / 32; // router: experts per lane
const int TILE = MT_DISPATCH_TILE;    // dispatch: (token, slot) pairs per warp tile
const int DWARPS = 4;                 // dispatch: tiles (warps) per block
const int VEC = 8;                    // 16 bytes of bf16

struct alignas(16) bf16x8 {
    bf v[VEC];
};

__device__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

__device__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

__device__ float sigmoid(float g) {
    return 1.0f / (1.0f + expf(-g));
}

// 8 fp32 values from 16-byte aligned memory, and back.
__device__ void load8(float *d, const float *p) {
    float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w, d[4] = b.x, d[5] = b.y, d[6] = b.z, d[7] = b.w;
}
__device__ void store8(float *p, const float *d) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(d[0], d[1], d[2], d[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(d[4], d[5], d[6], d[7]);
}

// ---- router: one warp per token, lane l holding experts l, l + 32, ... ----------------------

__global__ void route_forward_kernel(float *probs, int32_t *expert, float *weight,
                                     const float *logits, int n, int E, int k, int weights) {
    __shared__ float sw[WARPS][MOE_MAX_EXPERTS];
    __shared__ int32_t si[WARPS][MOE_MAX_EXPERTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long t = (long)blockIdx.x * WARPS + warp;
    if (t >= n) return; // the whole warp: no block-wide barrier follows
    const float *z = logits + t * E;
    const bool top_k_softmax = weights == MOE_WEIGHTS_TOP_K;
    float p[EPL], v[EPL], mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        int e = lane + 32 * i;
        v[i] = p[i] = e < E ? z[e] : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    mx = warp_max(mx);
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        p[i] = lane + 32 * i < E ? expf(p[i] - mx) : 0.0f;
        sum += p[i];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        int e = lane + 32 * i;
        p[i] = p[i] / sum; // a division, as the CPU does: the same rounding for the same sum
        if (e < E) probs[t * E + e] = p[i];
        // the candidates: the logits (-inf past E already) or the probabilities, -inf past E
        // (below every probability: never chosen)
        if (!top_k_softmax) v[i] = e < E ? p[i] : -INFINITY;
    }
    // Top-k: k rounds of a warp argmax, larger value first, equal values to the lower index
    // (the CPU's stable order); the winner is struck out with -inf.
    float s = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = INT_MAX;
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (v[i] > bv) bv = v[i], bi = lane + 32 * i; // increasing e: ties keep the lower
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(FULL, bv, o);
            int oi = __shfl_xor_sync(FULL, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (lane + 32 * i == bi) v[i] = -INFINITY;
        s += bv; // every lane, in j order like the CPU
        if (lane == 0) sw[warp][j] = bv, si[warp][j] = bi;
    }
    __syncwarp();
    if (top_k_softmax) { // the softmax over the k chosen logits, less the first (the largest)
        s = 0.0f;
        for (int j = 0; j < k; j++) s += expf(sw[warp][j] - sw[warp][0]);
    }
    for (int j = lane; j < k; j += 32) {
        expert[t * k + j] = si[warp][j];
        float w = top_k_softmax ? expf(sw[warp][j] - sw[warp][0]) : sw[warp][j];
        weight[t * k + j] = weights != MOE_WEIGHTS_PROBS ? w / s : w;
    }
}

__global__ void route_backward_kernel(bf *d_logits, const float *d_weight, const float *probs,
                                      const int32_t *expert, const float *weight,
                                      const float *aux_g, int n, int E, int k, int weights) {
    __shared__ float sdp[WARPS][MOE_MAX_EXPERTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long t = (long)blockIdx.x * WARPS + warp;
    if (t >= n) return;
    const float *p = probs + t * E, *dw = d_weight + t * k;
    const int32_t *idx = expert + t * k;
    float *dp = sdp[warp];
    for (int e = lane; e < E; e += 32) dp[e] = aux_g ? aux_g[e] : 0.0f;
    __syncwarp();
    if (weights != MOE_WEIGHTS_TOP_K) {
        // The chosen probabilities' sum and dw . p over the k in j order, as the CPU sums them
        // (every lane the same; k is small).
        float s = 0.0f, dot_w = 0.0f;
        for (int j = 0; j < k; j++) {
            float pj = p[idx[j]];
            s += pj;
            dot_w += dw[j] * pj;
        }
        // w_j = p_j / s: dp_j = (dw_j - sum_i dw_i w_i) / s. The k experts differ: one writer
        // each.
        bool renorm = weights == MOE_WEIGHTS_RENORM;
        for (int j = lane; j < k; j += 32) dp[idx[j]] += renorm ? (dw[j] - dot_w / s) / s : dw[j];
        __syncwarp();
    }
    float dot_p = 0.0f;
    for (int e = lane; e < E; e += 32) dot_p += p[e] * dp[e];
    dot_p = warp_sum(dot_p);
    for (int e = lane; e < E; e += 32) dp[e] = p[e] * (dp[e] - dot_p); // now d_logits
    __syncwarp();
    if (weights == MOE_WEIGHTS_TOP_K) {
        // The softmax over the k chosen logits: dz_j += w_j (dw_j - sum_i dw_i w_i), the sum
        // in j order on every lane.
        const float *w = weight + t * k;
        float dot_w = 0.0f;
        for (int j = 0; j < k; j++) dot_w += dw[j] * w[j];
        for (int j = lane; j < k; j += 32) dp[idx[j]] += w[j] * (dw[j] - dot_w);
        __syncwarp();
    }
    for (int e = lane; e < E; e += 32) d_logits[t * E + e] = __float2bfloat16(dp[e]);
}

// ---- dispatch: one warp per tile of TILE pairs ----------------------------------------------

// Per (tile, expert) counts. Lanes holding the same expert find each other with a match; the
// group's lowest lane adds the group's size (integers: the order of the adds cannot matter).
__global__ void dispatch_count_kernel(int32_t *tile_counts, const int32_t *expert, long pairs,
                                      int E, long tiles) {
    __shared__ int32_t cnt[DWARPS][MOE_MAX_EXPERTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long tile = (long)blockIdx.x * DWARPS + warp;
    if (tile >= tiles) return;
    int32_t *c = cnt[warp];
    for (int e = lane; e < E; e += 32) c[e] = 0;
    __syncwarp();
    long lo = tile * TILE, hi = lo + TILE < pairs ? lo + TILE : pairs;
    for (long base = lo; base < hi; base += 32) {
        long i = base + lane;
        int e = i < hi ? expert[i] : -1;
        unsigned same = __match_any_sync(FULL, e);
        if (i < hi && lane == __ffs(same) - 1) c[e] += __popc(same);
        __syncwarp();
    }
    for (int e = lane; e < E; e += 32) tile_counts[tile * E + e] = c[e];
}

// One block: each expert's tiles in order give each (tile, expert) its base within the expert
// (in place over the counts), then the experts in order give offsets.
__global__ void dispatch_scan_kernel(int32_t *counts, int32_t *offsets, int32_t *tile_base, int E,
                                     long tiles) {
    __shared__ int32_t total[MOE_MAX_EXPERTS];
    const int e = threadIdx.x;
    if (e < E) {
        int32_t run = 0;
        for (long tile = 0; tile < tiles; tile++) {
            int32_t c = tile_base[tile * E + e];
            tile_base[tile * E + e] = run;
            run += c;
        }
        total[e] = counts[e] = run;
    }
    __syncthreads();
    if (e == 0) {
        int32_t acc = 0;
        for (int x = 0; x < E; x++) offsets[x] = acc, acc += total[x];
        offsets[E] = acc;
    }
}

// Each tile walks its pairs in order, 32 at a time: a pair's row is its expert's next free row
// in the tile plus the number of earlier lanes with the same expert.
__global__ void dispatch_permute_kernel(int32_t *row_of, int32_t *token_of, const int32_t *expert,
                                        const int32_t *tile_base, const int32_t *offsets,
                                        long pairs, int E, int k, long tiles) {
    __shared__ int32_t next[DWARPS][MOE_MAX_EXPERTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long tile = (long)blockIdx.x * DWARPS + warp;
    if (tile >= tiles) return;
    int32_t *nx = next[warp];
    for (int e = lane; e < E; e += 32) nx[e] = offsets[e] + tile_base[tile * E + e];
    __syncwarp();
    const unsigned below = (1u << lane) - 1;
    long lo = tile * TILE, hi = lo + TILE < pairs ? lo + TILE : pairs;
    for (long base = lo; base < hi; base += 32) {
        long i = base + lane;
        int e = i < hi ? expert[i] : -1;
        unsigned same = __match_any_sync(FULL, e);
        if (i < hi) {
            int32_t r = nx[e] + __popc(same & below);
            row_of[i] = r;
            token_of[r] = (int32_t)(i / k);
        }
        __syncwarp();
        if (i < hi && lane == __ffs(same) - 1) nx[e] += __popc(same);
        __syncwarp();
    }
}

// ---- row copies and sums ----------------------------------------------------------------------

// xp[r] = x[token_of[r]]: 16-byte copies when vec, else bf16 elements.
__global__ void gather_kernel(bf *xp, const bf *x, const int32_t *token_of, long rows, int D,
                              bool vec) {
    long stride = (long)gridDim.x * blockDim.x, id = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int nv = D / VEC;
        for (long i = id; i < rows * nv; i += stride) {
            long r = i / nv, c = i % nv;
            reinterpret_cast<uint4 *>(xp)[i] =
                reinterpret_cast<const uint4 *>(x)[(long)token_of[r] * nv + c];
        }
    } else {
        for (long i = id; i < rows * D; i += stride) xp[i] = x[(long)token_of[i / D] * D + i % D];
    }
}

// out[t] += sum_j w[t, j] * yp[row_of[t, j]], j in order (w NULL: 1, the scatter-add).
__global__ void combine_kernel(float *out, const bf *yp, const int32_t *row_of, const float *weight,
                               long n, int k, int D, bool vec) {
    long stride = (long)gridDim.x * blockDim.x, id = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int nv = D / VEC;
        for (long i = id; i < n * nv; i += stride) {
            long t = i / nv, c = i % nv;
            float acc[VEC];
            load8(acc, out + i * VEC);
            for (int j = 0; j < k; j++) {
                float w = weight ? weight[t * k + j] : 1.0f;
                bf16x8 y = reinterpret_cast<const bf16x8 *>(yp)[(long)row_of[t * k + j] * nv + c];
#pragma unroll
                for (int q = 0; q < VEC; q++) acc[q] += w * __bfloat162float(y.v[q]);
            }
            store8(out + i * VEC, acc);
        }
    } else {
        for (long i = id; i < n * D; i += stride) {
            long t = i / D, d = i % D;
            float acc = out[i];
            for (int j = 0; j < k; j++) {
                float w = weight ? weight[t * k + j] : 1.0f;
                acc += w * __bfloat162float(yp[(long)row_of[t * k + j] * D + d]);
            }
            out[i] = acc;
        }
    }
}

// One block per token, one warp per slot j: d_yp[row] = w * dout[t] (bf16) and
// d_weight[t, j] = dout[t] . yp[row], each lane's part in a fixed order, then a warp butterfly.
__global__ void combine_backward_kernel(bf *d_yp, float *d_weight, const float *dout, const bf *yp,
                                        const int32_t *row_of, const float *weight, int k, int D,
                                        bool vec) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const long t = blockIdx.x;
    const float *g = dout + t * D;
    for (int j = warp; j < k; j += nw) {
        long r = row_of[t * k + j];
        float w = weight[t * k + j], s = 0.0f;
        const bf *y = yp + r * D;
        bf *dy = d_yp + r * D;
        if (vec) {
            for (int c = lane; c < D / VEC; c += 32) {
                float gv[VEC];
                load8(gv, g + c * VEC);
                bf16x8 yv = reinterpret_cast<const bf16x8 *>(y)[c], o;
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    o.v[q] = __float2bfloat16(w * gv[q]);
                    s += gv[q] * __bfloat162float(yv.v[q]);
                }
                reinterpret_cast<bf16x8 *>(dy)[c] = o;
            }
        } else {
            for (int d = lane; d < D; d += 32) {
                dy[d] = __float2bfloat16(w * g[d]);
                s += g[d] * __bfloat162float(y[d]);
            }
        }
        s = warp_sum(s);
        if (lane == 0) d_weight[t * k + j] = s;
    }
}

// ---- load-balancing statistics --------------------------------------------------------------

const int PS_COLS = 8, PS_ROWS = 128; // prob_sums: experts per block, token lanes per expert

// Block of PS_ROWS x PS_COLS threads over PS_COLS experts: each thread sums its strided tokens
// in double (rows of 8 adjacent probabilities: whole 32-byte sectors), then a fixed tree.
__global__ void prob_sums_kernel(float *psum, const float *probs, int n, int E, int accumulate) {
    __shared__ double part[PS_ROWS][PS_COLS];
    const int c = threadIdx.x % PS_COLS, row = threadIdx.x / PS_COLS;
    const int e = blockIdx.x * PS_COLS + c;
    double s = 0.0;
    if (e < E)
        for (long t = row; t < n; t += PS_ROWS) s += probs[t * E + e];
    part[row][c] = s;
    __syncthreads();
    for (int h = PS_ROWS / 2; h > 0; h >>= 1) {
        if (row < h) part[row][c] += part[row + h][c];
        __syncthreads();
    }
    if (row == 0 && e < E) psum[e] = (float)(accumulate ? psum[e] + part[0][c] : part[0][c]);
}

// One block, a thread per expert; the loss's sum over experts in order, as the CPU does.
__global__ void aux_loss_kernel(float *aux_g, float *loss, const int32_t *counts, const float *psum,
                                int layers, int n, int E, float scale) {
    __shared__ double term[MOE_MAX_EXPERTS];
    const int e = threadIdx.x;
    const double tokens = (double)layers * n;
    if (e < E) {
        double c = 0.0, p = 0.0;
        for (int l = 0; l < layers; l++) c += counts[(long)l * E + e], p += psum[(long)l * E + e];
        term[e] = (c / tokens) * (p / tokens);
        if (aux_g) aux_g[e] = (float)(scale * E * c / (tokens * tokens)); // the CPU's expression
    }
    __syncthreads();
    if (e == 0) {
        double sum = 0.0;
        for (int x = 0; x < E; x++) sum += term[x];
        *loss = (float)(sum * E);
    }
}

// ---- shared expert's gate -------------------------------------------------------------------

__global__ void gate_forward_kernel(float *out, const bf *y, const float *gate_logit, long n, int D,
                                    bool vec) {
    long stride = (long)gridDim.x * blockDim.x, id = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        int nv = D / VEC;
        for (long i = id; i < n * nv; i += stride) {
            float s = gate_logit ? sigmoid(gate_logit[i / nv]) : 1.0f, acc[VEC];
            bf16x8 yv = reinterpret_cast<const bf16x8 *>(y)[i];
            load8(acc, out + i * VEC);
#pragma unroll
            for (int q = 0; q < VEC; q++) acc[q] += s * __bfloat162float(yv.v[q]);
            store8(out + i * VEC, acc);
        }
    } else {
        for (long i = id; i < n * D; i += stride)
            out[i] += (gate_logit ? sigmoid(gate_logit[i / D]) : 1.0f) * __bfloat162float(y[i]);
    }
}

// One warp per token (no gate_logit: s = 1, DeepSeek's ungated shared experts, and no
// d_gate_logit): dy = s * dout (bf16); d_gate_logit = (dout . y) s (1 - s), a fixed-order
// warp reduction.
__global__ void gate_backward_kernel(bf *dy, bf *d_gate_logit, const float *dout, const bf *y,
                                     const float *gate_logit, int n, int D, bool vec) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long t = (long)blockIdx.x * WARPS + warp;
    if (t >= n) return;
    const float s = gate_logit ? sigmoid(gate_logit[t]) : 1.0f, *g = dout + t * D;
    const bf *yt = y + t * D;
    bf *dyt = dy + t * D;
    float dot = 0.0f;
    if (vec) {
        for (int c = lane; c < D / VEC; c += 32) {
            float gv[VEC];
            load8(gv, g + c * VEC);
            bf16x8 yv = reinterpret_cast<const bf16x8 *>(yt)[c], o;
#pragma unroll
            for (int q = 0; q < VEC; q++) {
                o.v[q] = __float2bfloat16(s * gv[q]);
                dot += gv[q] * __bfloat162float(yv.v[q]);
            }
            reinterpret_cast<bf16x8 *>(dyt)[c] = o;
        }
    } else {
        for (int d = lane; d < D; d += 32) {
            dyt[d] = __float2bfloat16(s * g[d]);
            dot += g[d] * __bfloat162float(yt[d]);
        }
    }
    dot = warp_sum(dot);
    if (lane == 0 && d_gate_logit) d_gate_logit[t] = __float2bfloat16(dot * s * (1.0f - s));
}

bool aligned16(const void *p) {
    return (uintptr_t)p % 16 == 0;
}

unsigned grid_for(long work) {
    long b = (work + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

unsigned warp_blocks(long items, int per_block) {
    return (unsigned)((items + per_block - 1) / per_block);
}

long dispatch_tiles(int n, int k) {
    return cuda_moe_dispatch_tiles(n, k);
}

void check_experts(const char *fn, int E, int k) {
    if (E < 1 || E > MOE_MAX_EXPERTS || k < 1 || k > E) {
        fprintf(stderr, "megatrain: %s: E = %d, k = %d outside 1 <= k <= E <= %d\n", fn, E, k,
                MOE_MAX_EXPERTS);
        exit(1);
    }
}

} // namespace

extern "C" void cuda_moe_route_forward(float *probs, int32_t *expert, float *weight,
                                       const float *logits, int n, int E, int k, int weights,
                                       cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    check_experts("cuda_moe_route_forward", E, k);
    if (n <= 0) return;
    kt_work(stream, KT_MOE, 0, 8.0 * n * E + 8.0 * n * k, "moe route forward E %d k %d", E, k);
    route_forward_kernel<<<warp_blocks(n, WARPS), WARPS * 32, 0, stream>>>(
        probs, expert, weight, logits, n, E, k, weights);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_route_backward(bf16 *d_logits, const float *d_weight, const float *probs,
                                        const int32_t *expert, const float *weight,
                                        const float *aux_g, int n, int E, int k, int weights,
                                        cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    check_experts("cuda_moe_route_backward", E, k);
    if (n <= 0) return;
    kt_work(stream, KT_MOE, 0, 6.0 * n * E + 8.0 * n * k, "moe route backward E %d k %d", E, k);
    route_backward_kernel<<<warp_blocks(n, WARPS), WARPS * 32, 0, stream>>>(
        (bf *)d_logits, d_weight, probs, expert, weight, aux_g, n, E, k, weights);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_dispatch(int32_t *counts, int32_t *offsets, int32_t *row_of,
                                  int32_t *token_of, const int32_t *expert, int n, int E, int k,
                                  void *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    check_experts("cuda_moe_dispatch", E, k);
    long pairs = (long)(n > 0 ? n : 0) * k, tiles = dispatch_tiles(n, k);
    int32_t *tile_counts = (int32_t *)scratch;
    kt_work(stream, KT_MOE, 0, 12.0 * pairs + 8.0 * tiles * E, "moe dispatch E %d k %d", E, k);
    unsigned blocks = warp_blocks(tiles, DWARPS);
    dispatch_count_kernel<<<blocks, DWARPS * 32, 0, stream>>>(tile_counts, expert, pairs, E, tiles);
    CUDA_CHECK_LAUNCH();
    dispatch_scan_kernel<<<1, MOE_MAX_EXPERTS, 0, stream>>>(counts, offsets, tile_counts, E, tiles);
    CUDA_CHECK_LAUNCH();
    if (pairs == 0) return;
    dispatch_permute_kernel<<<blocks, DWARPS * 32, 0, stream>>>(
        row_of, token_of, expert, tile_counts, offsets, pairs, E, k, tiles);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_gather(bf16 *xp, const bf16 *x, const int32_t *token_of, int rows, int D,
                                cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (rows <= 0 || D <= 0) return;
    kt_work(stream, KT_MOE, 0, 4.0 * rows * D + 4.0 * rows, "moe gather D %d", D);
    bool vec = D % VEC == 0 && aligned16(xp) && aligned16(x);
    gather_kernel<<<grid_for((long)rows * (vec ? D / VEC : D)), THREADS, 0, stream>>>(
        (bf *)xp, (const bf *)x, token_of, rows, D, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_combine(float *out, const bf16 *yp, const int32_t *row_of,
                                 const float *weight, int n, int k, int D, cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0 || D <= 0) return;
    kt_work(stream, KT_MOE, 0, 8.0 * n * D + 2.0 * n * k * D, "moe combine k %d D %d", k, D);
    bool vec = D % VEC == 0 && aligned16(out) && aligned16(yp);
    combine_kernel<<<grid_for((long)n * (vec ? D / VEC : D)), THREADS, 0, stream>>>(
        out, (const bf *)yp, row_of, weight, n, k, D, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_combine_backward(bf16 *d_yp, float *d_weight, const float *dout,
                                          const bf16 *yp, const int32_t *row_of,
                                          const float *weight, int n, int k, int D,
                                          cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0) return;
    kt_work(stream, KT_MOE, 0, 4.0 * n * D + 4.0 * n * k * D, "moe combine backward k %d D %d", k,
            D);
    bool vec = D % VEC == 0 && aligned16(d_yp) && aligned16(dout) && aligned16(yp);
    int warps = k < WARPS ? k : WARPS; // one warp per slot, up to a block of WARPS
    combine_backward_kernel<<<n, warps * 32, 0, stream>>>(
        (bf *)d_yp, d_weight, dout, (const bf *)yp, row_of, weight, k, D, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_scatter_add(float *dx, const bf16 *d_xp, const int32_t *row_of, int n,
                                     int k, int D, cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0 || D <= 0) return;
    kt_work(stream, KT_MOE, 0, 8.0 * n * D + 2.0 * n * k * D, "moe scatter-add k %d D %d", k, D);
    bool vec = D % VEC == 0 && aligned16(dx) && aligned16(d_xp);
    combine_kernel<<<grid_for((long)n * (vec ? D / VEC : D)), THREADS, 0, stream>>>(
        dx, (const bf *)d_xp, row_of, NULL, n, k, D, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_prob_sums(float *psum, const float *probs, int n, int E, int accumulate,
                                   cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (E <= 0) return;
    kt_work(stream, KT_MOE, 0, 4.0 * n * E, "moe prob sums E %d", E);
    prob_sums_kernel<<<(E + PS_COLS - 1) / PS_COLS, PS_ROWS * PS_COLS, 0, stream>>>(
        psum, probs, n > 0 ? n : 0, E, accumulate);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_aux_loss(float *aux_g, float *loss, const int32_t *counts,
                                  const float *psum, int layers, int n, int E, float scale,
                                  cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    check_experts("cuda_moe_aux_loss", E, 1);
    aux_loss_kernel<<<1, MOE_MAX_EXPERTS, 0, stream>>>(aux_g, loss, counts, psum, layers, n, E,
                                                       scale);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_gate_scale_forward(float *out, const bf16 *y, const float *gate_logit,
                                            int n, int D, cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0 || D <= 0) return;
    kt_work(stream, KT_MOE, 0, 10.0 * n * D, "moe gate forward D %d", D);
    bool vec = D % VEC == 0 && aligned16(out) && aligned16(y);
    gate_forward_kernel<<<grid_for((long)n * (vec ? D / VEC : D)), THREADS, 0, stream>>>(
        out, (const bf *)y, gate_logit, n, D, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_gate_scale_backward(bf16 *dy, bf16 *d_gate_logit, const float *dout,
                                             const bf16 *y, const float *gate_logit, int n, int D,
                                             cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0 || D <= 0) return;
    kt_work(stream, KT_MOE, 0, 8.0 * n * D, "moe gate backward D %d", D);
    bool vec = D % VEC == 0 && aligned16(dy) && aligned16(dout) && aligned16(y);
    gate_backward_kernel<<<warp_blocks(n, WARPS), WARPS * 32, 0, stream>>>(
        (bf *)dy, (bf *)d_gate_logit, dout, (const bf *)y, gate_logit, n, D, vec);
    CUDA_CHECK_LAUNCH();
}
