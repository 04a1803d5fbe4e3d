// RMSNorm (Llama), fp32 statistics like kernels/cpu/rmsnorm.c; the _offset pair applies the
// weight as (off + w) (off 1: zero-centred weights, Qwen3.5; the weight's gradient is the same):
//   forward   out = bf16((x * rstd) * w), rstd = 1 / sqrt(mean(x^2) + eps)
//   backward  dx += rstd * w * g - rstd^3 / dim * x * sum_j(g_j * w_j * x_j)   (g = dout)
//             dw += sum_t g[t] * (x[t] * rstd[t])
// The dw reduction is deterministic: per-slab partial sums into scratch, then a fixed-order
// column sum, so no atomics anywhere.
//
// Both directions are bound by memory traffic, so each tensor is moved once where the row fits
// in registers (dim % 4 == 0, aligned rows; up to 16384 forward, 8192 backward):
// - The forward holds a row of x in registers between the sum of squares and the scaling:
//   reading x again missed L1 and made the kernel move its 6 bytes an element at 2.38 TB/s.
// - The backward is one kernel: a row's dout and x stay in registers for both dx and the
//   row's share of the slab's dw partial, so it moves 16 bytes an element (dout, x, dx in, dx
//   out) where separate dx and dw kernels moved 24 (dout and x read twice).
// Wider or unaligned rows take the two-pass kernels (rmsnorm_forward_kernel, rmsnorm_dx_kernel
// and rmsnorm_dw_partial_kernel).
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int ROW_WARPS = 8; // two-pass kernels: one warp per row; register forward: at least this
// Tokens per partial dw sum (cuda_rmsnorm_scratch_floats, kernels/scratch.h): the register backward
// runs a block a slab, so 16384 tokens make 128 blocks, about one for each SM.
const int SLAB = MT_RMSNORM_SLAB;
const int COL_THREADS = 256;
const int BWD_WARPS = 16; // register backward: 16 warps a block, one block per SM at <= 128 regs

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Four bf16 move as the 8 bytes they occupy (uint2), so each takes one memory access. A bf16 is
// the high half of an fp32, so widening is exact as a shift.
__device__ float4 to_float4(uint2 u) {
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

__device__ unsigned bf16x2_bits(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return __bfloat16_as_ushort(h.x) | (unsigned)__bfloat16_as_ushort(h.y) << 16;
}

// bf16(a * r * w), the forward's output for four columns.
__device__ uint2 scale_bf16x4(float4 a, float r, float4 w) {
    return make_uint2(bf16x2_bits((a.x * r) * w.x, (a.y * r) * w.y),
                      bf16x2_bits((a.z * r) * w.z, (a.w * r) * w.w));
}

// A weight's four columns as the norm applies them: off + w (off 1 for zero-centred weights).
__device__ float4 offset4(float4 w, float off) {
    return make_float4(w.x + off, w.y + off, w.z + off, w.w + off);
}

__device__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// Four consecutive elements: fp32 from x-like arrays, bf16 from w-like arrays.
__device__ float4 load4(const float *p, int i) {
    return reinterpret_cast<const float4 *>(p)[i];
}
__device__ float4 load4(const __nv_bfloat16 *p, int i) {
    return to_float4(reinterpret_cast<const uint2 *>(p)[i]);
}

// ---- register kernels ---------------------------------------------------------------------
// A row belongs to a row group of W warps; thread t of the group holds the row's float4 chunks
// t, t + 32 W, ..., V of them, so each load of the group is coalesced. Chunks past the row's end
// and rows past n read as zeros, which leave the sums unchanged.

template <int V, int W, typename T>
__device__ void load_row(T (&v)[V], const T *row, int t, int chunks, bool live) {
#pragma unroll
    for (int j = 0; j < V; j++) {
        int i = t + 32 * W * j;
        v[j] = live && i < chunks ? row[i] : T{};
    }
}

// Sum of v over a row group, in a fixed order: each warp's butterfly, then the group's warps
// in order through red (a slot per warp of the block). With W > 1 it holds a block barrier,
// so every thread of the block calls it.
template <int W> __device__ float group_sum(float v, float *red) {
    v = warp_sum(v);
    if (W == 1) return v;
    int warp = threadIdx.x / 32, first = warp / W * W;
    if (threadIdx.x % 32 == 0) red[warp] = v;
    __syncthreads();
    float s = red[first];
    for (int q = 1; q < W; q++) s += red[first + q];
    return s;
}

__host__ __device__ constexpr int fwd_warps(int W) {
    return W > ROW_WARPS ? W : ROW_WARPS;
}

// One row a row group; the block holds fwd_warps(W) / W rows. With W == 1 the sum of squares
// is added in the two-pass kernel's order; with W > 1 in another fixed order.
template <int V, int W>
__global__ void __launch_bounds__(fwd_warps(W) * 32)
    rmsnorm_forward_reg_kernel(__nv_bfloat16 *out, float *rstd, const float *x,
                               const __nv_bfloat16 *w, float woff, int n, int dim, float eps) {
    __shared__ float red[fwd_warps(W)];
    int t = threadIdx.x % (32 * W), row = blockIdx.x * (fwd_warps(W) / W) + threadIdx.x / (32 * W);
    int chunks = dim / 4;
    bool live = row < n;
    long off = live ? (long)row * dim : 0;
    float4 v[V];
    load_row<V, W>(v, reinterpret_cast<const float4 *>(x + off), t, chunks, live);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < V; j++)
        ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    float r = 1.0f / sqrtf(group_sum<W>(ss, red) / (float)dim + eps);
    if (!live) return; // after group_sum's barrier
    uint2 *orow = reinterpret_cast<uint2 *>(out + off);
#pragma unroll
    for (int j = 0; j < V; j++) {
        int i = t + 32 * W * j;
        if (i >= chunks) break;
        orow[i] = scale_bf16x4(v[j], r, offset4(load4(w, i), woff));
    }
    if (t == 0) rstd[row] = r;
}

// One row of the backward for a row group: dx for the row, and g * (x * rstd) into the
// thread's dw sums (acc, its chunks' columns). The row's dx is loaded with dout and x, so the
// three loads' latencies overlap.
template <int V, int W>
__device__ void backward_row(float4 (&acc)[V], float *dx, const float *dout, const float *x,
                             const uint2 (&wr)[V], float woff, const float *rstd, int row, int n,
                             int dim, int t, float *red) {
    int chunks = dim / 4;
    bool live = row < n;
    long off = live ? (long)row * dim : 0;
    float4 g[V], v[V], d[V];
    load_row<V, W>(g, reinterpret_cast<const float4 *>(dout + off), t, chunks, live);
    load_row<V, W>(v, reinterpret_cast<const float4 *>(x + off), t, chunks, live);
    load_row<V, W>(d, reinterpret_cast<const float4 *>(dx + off), t, chunks, live);
    float r = live ? rstd[row] : 0.0f, c = 0.0f;
#pragma unroll
    for (int j = 0; j < V; j++) {
        float4 wv = offset4(to_float4(wr[j]), woff);
        c += g[j].x * wv.x * v[j].x + g[j].y * wv.y * v[j].y + g[j].z * wv.z * v[j].z +
             g[j].w * wv.w * v[j].w;
    }
    float k = r * r * r * group_sum<W>(c, red) / (float)dim;
    if (!live) return; // after group_sum's barrier
    float4 *dxr = reinterpret_cast<float4 *>(dx + off);
#pragma unroll
    for (int j = 0; j < V; j++) {
        int i = t + 32 * W * j;
        if (i >= chunks) break;
        float4 wv = offset4(to_float4(wr[j]), woff);
        d[j].x += r * wv.x * g[j].x - k * v[j].x;
        d[j].y += r * wv.y * g[j].y - k * v[j].y;
        d[j].z += r * wv.z * g[j].z - k * v[j].z;
        d[j].w += r * wv.w * g[j].w - k * v[j].w;
        dxr[i] = d[j];
        acc[j].x += g[j].x * (v[j].x * r);
        acc[j].y += g[j].y * (v[j].y * r);
        acc[j].z += g[j].z * (v[j].z * r);
        acc[j].w += g[j].w * (v[j].w * r);
    }
}

// The block's dw partial into sums (indexed by chunk): the row groups' register sums added in
// group order, so the result does not depend on timing.
template <int V, int W>
__device__ void block_dw_sums(float4 *sums, const float4 (&acc)[V], int group, int t) {
    for (int q = 0; q < BWD_WARPS / W; q++) {
        if (group == q) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                float4 &s = sums[t + 32 * W * j];
                s = q == 0 ? acc[j] : add4(s, acc[j]);
            }
        }
        __syncthreads();
    }
}

// partial (the slab's row of scratch) = the block's sums (after block_dw_sums' last barrier).
__device__ void write_slab_partial(float *partial, const float4 *sums, int chunks) {
    float4 *p = reinterpret_cast<float4 *>(partial);
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) p[i] = sums[i];
}

// dx and the slab partials of dw in one pass, a block a slab: row group `group` takes rows
// group, group + G, ... of the slab, and each thread keeps its columns' dw sums in registers
// across those rows.
template <int V, int W>
__global__ void __launch_bounds__(BWD_WARPS * 32, 1)
    rmsnorm_backward_kernel(float *dx, float *partial, const float *dout, const float *x,
                            const __nv_bfloat16 *w, float woff, const float *rstd, int n, int dim) {
    const int G = BWD_WARPS / W;        // row groups a block
    __shared__ float red[2][BWD_WARPS]; // by row parity: one barrier a row is enough
    __shared__ float4 sums[V * 32 * W];
    int t = threadIdx.x % (32 * W), group = threadIdx.x / (32 * W);
    int slab = blockIdx.x, chunks = dim / 4, row0 = slab * SLAB + group;
    uint2 wr[V];
    load_row<V, W>(wr, reinterpret_cast<const uint2 *>(w), t, chunks, true);
    float4 acc[V];
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k = 0; k < SLAB / G; k++)
        backward_row<V, W>(acc, dx, dout, x, wr, woff, rstd, row0 + k * G, n, dim, t, red[k & 1]);
    block_dw_sums<V, W>(sums, acc, group, t);
    write_slab_partial(partial + (long)slab * dim, sums, chunks);
}

// Launch tables, ordered by float4 chunks a row held: layout l holds 32 << l. Forward: one
// warp and V = 1, 2, 4, 8, then V = 8 and W = 2, 4, 8, 16 (32 registers of x a thread).
// Backward: V = 1, 2, 4, then V = 4 and W = 2, 4, 8, 16 (dout, x, dx and the dw sums, 64
// registers a thread, within the 128 that one 512-thread block an SM allows).
typedef void (*ForwardLaunch)(__nv_bfloat16 *, float *, const float *, const __nv_bfloat16 *, float,
                              int, int, float, cudaStream_t);
typedef void (*BackwardLaunch)(float *, float *, const float *, const float *,
                               const __nv_bfloat16 *, float, const float *, int, int, cudaStream_t);

template <int V, int W>
void forward_reg(__nv_bfloat16 *out, float *rstd, const float *x, const __nv_bfloat16 *w,
                 float woff, int n, int dim, float eps, cudaStream_t stream) {
    const int rows = fwd_warps(W) / W;
    rmsnorm_forward_reg_kernel<V, W><<<(n + rows - 1) / rows, fwd_warps(W) * 32, 0, stream>>>(
        out, rstd, x, w, woff, n, dim, eps);
}

template <int V, int W>
void backward_reg(float *dx, float *partial, const float *dout, const float *x,
                  const __nv_bfloat16 *w, float woff, const float *rstd, int n, int dim,
                  cudaStream_t stream) {
    rmsnorm_backward_kernel<V, W><<<(n + SLAB - 1) / SLAB, BWD_WARPS * 32, 0, stream>>>(
        dx, partial, dout, x, w, woff, rstd, n, dim);
}

const ForwardLaunch FORWARD_REG[] = {forward_reg<1, 1>, forward_reg<2, 1>, forward_reg<4, 1>,
                                     forward_reg<8, 1>, forward_reg<8, 2>, forward_reg<8, 4>,
                                     forward_reg<8, 8>, forward_reg<8, 16>};
const BackwardLaunch BACKWARD_REG[] = {backward_reg<1, 1>, backward_reg<2, 1>, backward_reg<4, 1>,
                                       backward_reg<4, 2>, backward_reg<4, 4>, backward_reg<4, 8>,
                                       backward_reg<4, 16>};

// The smallest layout of a table of `layouts` that holds dim / 4 chunks, or -1.
int layout(int dim, int layouts) {
    int l = 0;
    while (l < layouts && (32 << l) < dim / 4) l++;
    return l < layouts ? l : -1;
}

// ---- two-pass kernels: unaligned rows, odd or wide dims -----------------------------------

// One warp per row. VEC: dim % 4 == 0 and every row start 16-byte (fp32) / 8-byte (bf16)
// aligned, so each lane moves 4 columns per step.
template <bool VEC>
__global__ void rmsnorm_forward_kernel(__nv_bfloat16 *out, float *rstd, const float *x,
                                       const __nv_bfloat16 *w, float woff, int n, int dim,
                                       float eps) {
    int row = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return; // the whole warp leaves together
    const float *xr = x + (long)row * dim;
    __nv_bfloat16 *orow = out + (long)row * dim;
    float ss = 0.0f;
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 v = load4(xr, i);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = lane; i < dim; i += 32) ss += xr[i] * xr[i];
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / (float)dim + eps);
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32)
            reinterpret_cast<uint2 *>(orow)[i] =
                scale_bf16x4(load4(xr, i), r, offset4(load4(w, i), woff));
    } else {
        for (int i = lane; i < dim; i += 32)
            orow[i] = __float2bfloat16((xr[i] * r) * (__bfloat162float(w[i]) + woff));
    }
    if (lane == 0) rstd[row] = r;
}

// dx, one warp per row (same VEC contract as the forward).
template <bool VEC>
__global__ void rmsnorm_dx_kernel(float *dx, const float *dout, const float *x,
                                  const __nv_bfloat16 *w, float woff, const float *rstd, int n,
                                  int dim) {
    int row = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return;
    long off = (long)row * dim;
    const float *xr = x + off, *gr = dout + off;
    float *dxr = dx + off;
    float c = 0.0f;
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 g = load4(gr, i), wv = offset4(load4(w, i), woff), v = load4(xr, i);
            c += g.x * wv.x * v.x + g.y * wv.y * v.y + g.z * wv.z * v.z + g.w * wv.w * v.w;
        }
    } else {
        for (int i = lane; i < dim; i += 32) c += gr[i] * (__bfloat162float(w[i]) + woff) * xr[i];
    }
    float r = rstd[row];
    float k = r * r * r * warp_sum(c) / (float)dim;
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 g = load4(gr, i), wv = offset4(load4(w, i), woff), v = load4(xr, i),
                   d = load4(dxr, i);
            d.x += r * wv.x * g.x - k * v.x;
            d.y += r * wv.y * g.y - k * v.y;
            d.z += r * wv.z * g.z - k * v.z;
            d.w += r * wv.w * g.w - k * v.w;
            reinterpret_cast<float4 *>(dxr)[i] = d;
        }
    } else {
        for (int i = lane; i < dim; i += 32)
            dxr[i] += r * (__bfloat162float(w[i]) + woff) * gr[i] - k * xr[i];
    }
}

// partial[s, c] = sum over the tokens of slab s of dout[t, c] * (x[t, c] * rstd[t]), in token
// order; one thread per (slab, column), rows read coalesced across the threads of a block.
__global__ void rmsnorm_dw_partial_kernel(float *partial, const float *dout, const float *x,
                                          const float *rstd, int n, int dim, int slabs) {
    int c = blockIdx.x * COL_THREADS + threadIdx.x;
    if (c >= dim) return;
    for (int s = blockIdx.y; s < slabs; s += gridDim.y) {
        int t1 = min(n, (s + 1) * SLAB);
        float acc = 0.0f;
#pragma unroll 8
        for (int t = s * SLAB; t < t1; t++) {
            long i = (long)t * dim + c;
            acc += dout[i] * (x[i] * rstd[t]);
        }
        partial[(long)s * dim + c] = acc;
    }
}

// dw[c] += partial[0, c] + partial[1, c] + ..., slabs in order.
__global__ void rmsnorm_dw_reduce_kernel(float *dw, const float *partial, int dim, int slabs) {
    int c = blockIdx.x * COL_THREADS + threadIdx.x;
    if (c >= dim) return;
    float acc = 0.0f;
    for (int s = 0; s < slabs; s++) acc += partial[(long)s * dim + c];
    dw[c] += acc;
}

bool vec_ok(int dim, const float *a, const float *b, const void *bf) {
    return dim % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 &&
           (uintptr_t)bf % 8 == 0;
}

int row_blocks(int n) {
    return (n + ROW_WARPS - 1) / ROW_WARPS;
}

void forward_two_pass(__nv_bfloat16 *out, float *rstd, const float *x, const __nv_bfloat16 *w,
                      float woff, int n, int dim, float eps, bool vec, cudaStream_t stream) {
    if (vec)
        rmsnorm_forward_kernel<true>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(out, rstd, x, w, woff, n, dim, eps);
    else
        rmsnorm_forward_kernel<false>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(out, rstd, x, w, woff, n, dim, eps);
}

// dx, then the slab partials of dw from dout and x read again.
void backward_two_pass(float *dx, float *partial, const float *dout, const float *x,
                       const __nv_bfloat16 *w, float woff, const float *rstd, int n, int dim,
                       bool vec, cudaStream_t stream) {
    if (vec)
        rmsnorm_dx_kernel<true>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(dx, dout, x, w, woff, rstd, n, dim);
    else
        rmsnorm_dx_kernel<false>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(dx, dout, x, w, woff, rstd, n, dim);
    CUDA_CHECK_LAUNCH();
    int slabs = (n + SLAB - 1) / SLAB, col_blocks = (dim + COL_THREADS - 1) / COL_THREADS;
    dim3 grid(col_blocks, slabs < 65535 ? slabs : 65535); // grid.y is capped; the kernel strides
    rmsnorm_dw_partial_kernel<<<grid, COL_THREADS, 0, stream>>>(partial, dout, x, rstd, n, dim,
                                                                slabs);
}

} // namespace

extern "C" void cuda_rmsnorm_offset_forward(bf16 *out, float *rstd, const float *x, const bf16 *w,
                                            float off, int n, int dim, float eps,
                                            cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (n <= 0 || dim <= 0) return;
    // x in (fp32), out (bf16); w and rstd are small.
    kt_work(stream, KT_NORM, 0, 6.0 * n * dim, "rmsnorm forward dim %d", dim);
    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(out);
    const __nv_bfloat16 *wb = reinterpret_cast<const __nv_bfloat16 *>(w);
    // out is bf16, so its rows need 8-byte alignment like w's.
    bool vec = vec_ok(dim, x, x, w) && (uintptr_t)out % 8 == 0;
    int l = vec ? layout(dim, sizeof FORWARD_REG / sizeof *FORWARD_REG) : -1;
    if (l >= 0)
        FORWARD_REG[l](o, rstd, x, wb, off, n, dim, eps, stream);
    else
        forward_two_pass(o, rstd, x, wb, off, n, dim, eps, vec, stream);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_rmsnorm_forward(bf16 *out, float *rstd, const float *x, const bf16 *w, int n,
                                     int dim, float eps, cudaStream_t stream) {
    cuda_rmsnorm_offset_forward(out, rstd, x, w, 0.0f, n, dim, eps, stream);
}

extern "C" void cuda_rmsnorm_offset_backward(float *dx, float *dw, const float *dout,
                                             const float *x, const bf16 *w, float off,
                                             const float *rstd, int n, int dim, float *scratch,
                                             cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (n <= 0 || dim <= 0) return;
    const __nv_bfloat16 *wb = reinterpret_cast<const __nv_bfloat16 *>(w);
    bool vec = vec_ok(dim, x, dout, w) && (uintptr_t)dx % 16 == 0;
    // The register kernel writes the partials a float4 at a time.
    int l = vec && (uintptr_t)scratch % 16 == 0
                ? layout(dim, sizeof BACKWARD_REG / sizeof *BACKWARD_REG)
                : -1;
    // dout, x and dx in, dx out (fp32 all); the two-pass kernels read dout and x again for dw.
    kt_work(stream, KT_NORM, 0, (l >= 0 ? 16.0 : 24.0) * n * dim, "rmsnorm backward dim %d", dim);
    if (l >= 0)
        BACKWARD_REG[l](dx, scratch, dout, x, wb, off, rstd, n, dim, stream);
    else
        backward_two_pass(dx, scratch, dout, x, wb, off, rstd, n, dim, vec, stream);
    CUDA_CHECK_LAUNCH();
    int slabs = (n + SLAB - 1) / SLAB, col_blocks = (dim + COL_THREADS - 1) / COL_THREADS;
    rmsnorm_dw_reduce_kernel<<<col_blocks, COL_THREADS, 0, stream>>>(dw, scratch, dim, slabs);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                                      const bf16 *w, const float *rstd, int n, int dim,
                                      float *scratch, cudaStream_t stream) {
    cuda_rmsnorm_offset_backward(dx, dw, dout, x, w, 0.0f, rstd, n, dim, scratch, stream);
}
