// The small ops around Gated DeltaNet's delta rule, each the twin of its CPU reference
// (kernels/cpu/causal_conv1d.c, l2norm.c, gdn_gates.c, rmsnorm_gated.c) with fp32 math on bf16
// storage (kernels_gdn_cuda.h says which tensor is which). All are memory-bound: one thread an
// element or a warp a row, the SiLU and softplus pre-activations recomputed in the backward
// rather than stored. Weight gradients are summed per slab of SLAB rows into scratch, then over
// the slabs in order: no atomics, the same bits on every run.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/kernels_gdn_cuda.h"
#include "kernels/cuda/ktime.cuh"

#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

typedef __nv_bfloat16 bf;

const int THREADS = 256;
const long MAX_BLOCKS = 8192;
const int SLAB = 256; // rows (tokens, or tokens x heads) per partial weight-gradient sum
const int MAX_TAPS = 8;
const int SOFTPLUS_THRESHOLD = 20; // torch's F.softplus default: x itself above it

__device__ float f(bf x) {
    return __bfloat162float(x);
}
__device__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}
// d silu(p) / dp
__device__ float silu_grad(float p) {
    float s = sigmoid(p);
    return s * (1.0f + p * (1.0f - s));
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

int grid_for(long n) {
    long blocks = (n + THREADS - 1) / THREADS;
    return (int)(blocks < MAX_BLOCKS ? (blocks > 0 ? blocks : 1) : MAX_BLOCKS);
}
long slabs_of(long rows) {
    return (rows + SLAB - 1) / SLAB;
}

// dst[i] += partial[0, i] + partial[1, i] + ..., slabs in order (partial's rows `stride` apart).
__global__ void slab_reduce_kernel(float *dst, const float *partial, long slabs, int width,
                                   long stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= width) return;
    float acc = 0.0f;
    for (long s = 0; s < slabs; s++) acc += partial[s * stride + i];
    dst[i] += acc;
}

void slab_reduce_rows(float *dst, const float *partial, long slabs, int width, long stride,
                      cudaStream_t stream) {
    slab_reduce_kernel<<<(width + THREADS - 1) / THREADS, THREADS, 0, stream>>>(dst, partial, slabs,
                                                                                width, stride);
    CUDA_CHECK_LAUNCH();
}

void slab_reduce(float *dst, const float *partial, long slabs, int width, cudaStream_t stream) {
    slab_reduce_rows(dst, partial, slabs, width, width, stream);
}

// ---- causal depthwise conv1d + SiLU --------------------------------------------------------

// The pre-activation of (b, t, c), the taps in the CPU's order.
__device__ float conv_pre(const conv1d_args &a, const bf *x, const bf *w, int b, int t, int c) {
    int first = a.doc_start ? a.doc_start[(long)b * a.T + t] : 0;
    float s = 0.0f;
    for (int j = 0; j < a.K; j++) {
        int src = t - (a.K - 1) + j;
        if (src >= first) s += f(w[(long)c * a.K + j]) * f(x[((long)b * a.T + src) * a.C + c]);
    }
    return s;
}

// The gradient of (b, t, c)'s pre-activation.
__device__ float conv_dpre(const conv1d_args &a, const float *dout, const bf *x, const bf *w, int b,
                           int t, int c) {
    return dout[((long)b * a.T + t) * a.C + c] * silu_grad(conv_pre(a, x, w, b, t, c));
}

__global__ void conv_forward_kernel(bf *out, const bf *x, const bf *w, conv1d_args a) {
    long n = (long)a.B * a.T * a.C;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x) {
        int c = (int)(e % a.C);
        long row = e / a.C;
        float p = conv_pre(a, x, w, (int)(row / a.T), (int)(row % a.T), c);
        out[e] = __float2bfloat16(p * sigmoid(p));
    }
}

// dx[b, s, c] = sum over the outputs t = s .. s + K - 1 whose document holds s of
// dpre[t] w[c, s - t + K - 1].
__global__ void conv_dx_kernel(bf *dx, const float *dout, const bf *x, const bf *w, conv1d_args a) {
    long n = (long)a.B * a.T * a.C;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x) {
        int c = (int)(e % a.C);
        long row = e / a.C;
        int b = (int)(row / a.T), s = (int)(row % a.T);
        float acc = 0.0f;
        for (int j = a.K - 1; j >= 0; j--) {
            int t = s + (a.K - 1) - j;
            if (t >= a.T) continue;
            int first = a.doc_start ? a.doc_start[(long)b * a.T + t] : 0;
            if (s < first) continue;
            acc += conv_dpre(a, dout, x, w, b, t, c) * f(w[(long)c * a.K + j]);
        }
        dx[e] = __float2bfloat16(acc);
    }
}

// partial[slab, c, j] = sum over the slab's rows t (in order) of dpre[t, c] x[t - K + 1 + j, c].
__global__ void conv_dw_partial_kernel(float *partial, const float *dout, const bf *x, const bf *w,
                                       conv1d_args a, long slabs) {
    long n = slabs * a.C;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x) {
        int c = (int)(e % a.C);
        long slab = e / a.C, r1 = min((slab + 1) * SLAB, (long)a.B * a.T);
        float acc[MAX_TAPS] = {0};
        for (long row = slab * SLAB; row < r1; row++) {
            int b = (int)(row / a.T), t = (int)(row % a.T);
            int first = a.doc_start ? a.doc_start[row] : 0;
            float d = conv_dpre(a, dout, x, w, b, t, c);
            for (int j = 0; j < a.K; j++) {
                int src = t - (a.K - 1) + j;
                if (src >= first) acc[j] += d * f(x[((long)b * a.T + src) * a.C + c]);
            }
        }
        for (int j = 0; j < a.K; j++) partial[e * a.K + j] = acc[j];
    }
}

void check_taps(const conv1d_args *a) {
    if (a->K < 1 || a->K > MAX_TAPS) {
        fprintf(stderr, "megatrain: gdn_ops.cu: conv1d taps %d: need 1 .. %d\n", a->K, MAX_TAPS);
        exit(2);
    }
}

// ---- l2norm ---------------------------------------------------------------------------------

__global__ void l2norm_forward_kernel(bf *out, float *rnorm, const bf *x, long rows, int dim,
                                      float eps) {
    int lane = threadIdx.x % 32;
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (r >= rows) return; // whole warps leave together
    const bf *xr = x + r * dim;
    float ss = 0.0f;
    for (int i = lane; i < dim; i += 32) ss += f(xr[i]) * f(xr[i]);
    float inv = 1.0f / sqrtf(warp_sum(ss) + eps);
    for (int i = lane; i < dim; i += 32) out[r * dim + i] = __float2bfloat16(f(xr[i]) * inv);
    if (lane == 0) rnorm[r] = inv;
}

// dx = r dout - r^3 x (x . dout)
__global__ void l2norm_backward_kernel(float *dx, const float *dout, const bf *x,
                                       const float *rnorm, long rows, int dim) {
    int lane = threadIdx.x % 32;
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (r >= rows) return;
    const bf *xr = x + r * dim;
    const float *gr = dout + r * dim;
    float xg = 0.0f;
    for (int i = lane; i < dim; i += 32) xg += f(xr[i]) * gr[i];
    float inv = rnorm[r], k = inv * inv * inv * warp_sum(xg);
    for (int i = lane; i < dim; i += 32) dx[r * dim + i] = inv * gr[i] - k * f(xr[i]);
}

int warp_blocks(long rows) {
    return (int)((rows + THREADS / 32 - 1) / (THREADS / 32));
}

// ---- the gates --------------------------------------------------------------------------------

__device__ float softplus(float x) {
    return x > SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}
__device__ float softplus_grad(float x) {
    if (x > SOFTPLUS_THRESHOLD) return 1.0f;
    float z = expf(x);
    return z / (z + 1.0f);
}

struct Gates {
    const bf *a, *b, *A_log, *dt_bias;
    float *g, *beta;
    const float *dg, *dbeta;
    bf *da, *db;
};

__global__ void gates_forward_kernel(Gates t, long n, int H) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n * H;
         i += (long)gridDim.x * blockDim.x) {
        int h = (int)(i % H);
        t.g[i] = -expf(f(t.A_log[h])) * softplus(f(t.a[i]) + f(t.dt_bias[h]));
        t.beta[i] = sigmoid(f(t.b[i]));
    }
}

// da, db, and the slab partials of dA_log (partial[slab, 0, h]) and dt_bias (partial[slab,
// 1, h]): one thread per (slab, h), the slab's rows in order.
// dg/dA_log = g; dg/da = dg/ddt_bias = -exp(A_log) softplus'(a + dt_bias).
__global__ void gates_backward_kernel(Gates t, float *partial, long n, int H, long slabs) {
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < slabs * H;
         e += (long)gridDim.x * blockDim.x) {
        int h = (int)(e % H);
        long slab = e / H, r1 = min((slab + 1) * SLAB, n);
        float A = expf(f(t.A_log[h])), bias = f(t.dt_bias[h]), dA = 0.0f, dbias = 0.0f;
        for (long r = slab * SLAB; r < r1; r++) {
            long i = r * H + h;
            float x = f(t.a[i]) + bias, dx = -A * softplus_grad(x) * t.dg[i];
            dA += t.dg[i] * (-A * softplus(x));
            dbias += dx;
            t.da[i] = __float2bfloat16(dx);
            float sg = sigmoid(f(t.b[i]));
            t.db[i] = __float2bfloat16(t.dbeta[i] * sg * (1.0f - sg));
        }
        partial[(slab * 2) * H + h] = dA;
        partial[(slab * 2 + 1) * H + h] = dbias;
    }
}

// ---- the gated RMSNorm ------------------------------------------------------------------------

// out = (x rstd) w silu(z), a warp a row.
__global__ void rmsnorm_gated_forward_kernel(bf *out, float *rstd, const bf *x, const bf *z,
                                             const bf *w, int n, int dim, float eps) {
    int lane = threadIdx.x % 32;
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (r >= n) return;
    const bf *xr = x + r * dim, *zr = z + r * dim;
    float ss = 0.0f;
    for (int i = lane; i < dim; i += 32) ss += f(xr[i]) * f(xr[i]);
    float rs = 1.0f / sqrtf(warp_sum(ss) / (float)dim + eps);
    for (int i = lane; i < dim; i += 32) {
        float zi = f(zr[i]);
        out[r * dim + i] = __float2bfloat16((f(xr[i]) * rs) * f(w[i]) * (zi * sigmoid(zi)));
    }
    if (lane == 0) rstd[r] = rs;
}

// With y = (x rstd) w and dy = dout silu(z): dz = dout y silu'(z),
// dx = rstd w dy - rstd^3 / dim x sum_j(dy_j w_j x_j), a warp a row.
__global__ void rmsnorm_gated_dx_kernel(float *dx, bf *dz, const float *dout, const bf *x,
                                        const bf *z, const bf *w, const float *rstd, int n,
                                        int dim) {
    int lane = threadIdx.x % 32;
    long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (r >= n) return;
    long o = r * dim;
    float rs = rstd[r], c = 0.0f;
    for (int i = lane; i < dim; i += 32) {
        float zi = f(z[o + i]), xi = f(x[o + i]), wi = f(w[i]), g = dout[o + i];
        float dy = g * (zi * sigmoid(zi));
        c += dy * wi * xi;
        dz[o + i] = __float2bfloat16(g * ((xi * rs) * wi) * silu_grad(zi));
    }
    float k = rs * rs * rs * warp_sum(c) / (float)dim;
    for (int i = lane; i < dim; i += 32) {
        float zi = f(z[o + i]), dy = dout[o + i] * (zi * sigmoid(zi));
        dx[o + i] = rs * f(w[i]) * dy - k * f(x[o + i]);
    }
}

// partial[slab, i] = sum over the slab's rows (in order) of dy[r, i] (x[r, i] rstd[r]).
__global__ void rmsnorm_gated_dw_kernel(float *partial, const float *dout, const bf *x, const bf *z,
                                        const float *rstd, int n, int dim, long slabs) {
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < slabs * dim;
         e += (long)gridDim.x * blockDim.x) {
        int i = (int)(e % dim);
        long slab = e / dim, r1 = min((slab + 1) * SLAB, (long)n);
        float acc = 0.0f;
        for (long r = slab * SLAB; r < r1; r++) {
            long o = r * dim + i;
            float zi = f(z[o]);
            acc += dout[o] * (zi * sigmoid(zi)) * (f(x[o]) * rstd[r]);
        }
        partial[e] = acc;
    }
}

Gates gates_of(const cuda_gdn_gate_tensors *t) {
    return Gates{reinterpret_cast<const bf *>(t->a),
                 reinterpret_cast<const bf *>(t->b),
                 reinterpret_cast<const bf *>(t->A_log),
                 reinterpret_cast<const bf *>(t->dt_bias),
                 t->g,
                 t->beta,
                 t->dg,
                 t->dbeta,
                 reinterpret_cast<bf *>(t->da),
                 reinterpret_cast<bf *>(t->db)};
}

const bf *B(const bf16 *p) {
    return reinterpret_cast<const bf *>(p);
}

} // namespace

extern "C" size_t cuda_conv1d_scratch_floats(const conv1d_args *a) {
    return (size_t)slabs_of((long)a->B * a->T) * a->C * a->K;
}

extern "C" void cuda_causal_conv1d_silu_forward(bf16 *out, const bf16 *x, const bf16 *w,
                                                const conv1d_args *a, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = (long)a->B * a->T * a->C;
    if (n <= 0) return;
    check_taps(a);
    kt_work(stream, KT_ELEMENTWISE, 0, 4.0 * n, "gdn conv1d forward C %d", a->C);
    conv_forward_kernel<<<grid_for(n), THREADS, 0, stream>>>(reinterpret_cast<bf *>(out), B(x),
                                                             B(w), *a);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_causal_conv1d_silu_backward(bf16 *dx, float *dw, const float *dout,
                                                 const bf16 *x, const bf16 *w, const conv1d_args *a,
                                                 float *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = (long)a->B * a->T * a->C, slabs = slabs_of((long)a->B * a->T);
    if (n <= 0) return;
    check_taps(a);
    kt_work(stream, KT_ELEMENTWISE, 0, 14.0 * n, "gdn conv1d backward C %d", a->C);
    conv_dx_kernel<<<grid_for(n), THREADS, 0, stream>>>(reinterpret_cast<bf *>(dx), dout, B(x),
                                                        B(w), *a);
    CUDA_CHECK_LAUNCH();
    conv_dw_partial_kernel<<<grid_for(slabs * a->C), THREADS, 0, stream>>>(scratch, dout, B(x),
                                                                           B(w), *a, slabs);
    CUDA_CHECK_LAUNCH();
    slab_reduce(dw, scratch, slabs, a->C * a->K, stream);
}

extern "C" void cuda_l2norm_forward(bf16 *out, float *rnorm, const bf16 *x, long rows, int dim,
                                    float eps, cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (rows <= 0) return;
    kt_work(stream, KT_NORM, 0, 4.0 * rows * dim, "gdn l2norm forward dim %d", dim);
    l2norm_forward_kernel<<<warp_blocks(rows), THREADS, 0, stream>>>(reinterpret_cast<bf *>(out),
                                                                     rnorm, B(x), rows, dim, eps);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_l2norm_backward(float *dx, const float *dout, const bf16 *x,
                                     const float *rnorm, long rows, int dim, cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (rows <= 0) return;
    kt_work(stream, KT_NORM, 0, 10.0 * rows * dim, "gdn l2norm backward dim %d", dim);
    l2norm_backward_kernel<<<warp_blocks(rows), THREADS, 0, stream>>>(dx, dout, B(x), rnorm, rows,
                                                                      dim);
    CUDA_CHECK_LAUNCH();
}

extern "C" size_t cuda_gdn_gates_scratch_floats(long n, int H) {
    return (size_t)slabs_of(n) * 2 * H;
}

extern "C" void cuda_gdn_gates_forward(const cuda_gdn_gate_tensors *t, long n, int H,
                                       cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    if (n <= 0) return;
    kt_work(stream, KT_ELEMENTWISE, 0, 12.0 * n * H, "gdn gates forward H %d", H);
    gates_forward_kernel<<<grid_for(n * H), THREADS, 0, stream>>>(gates_of(t), n, H);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_gdn_gates_backward(const cuda_gdn_gate_tensors *t, long n, int H,
                                        float *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    if (n <= 0) return;
    kt_work(stream, KT_ELEMENTWISE, 0, 20.0 * n * H, "gdn gates backward H %d", H);
    long slabs = slabs_of(n);
    gates_backward_kernel<<<grid_for(slabs * H), THREADS, 0, stream>>>(gates_of(t), scratch, n, H,
                                                                       slabs);
    CUDA_CHECK_LAUNCH();
    // The partials' rows alternate dA_log and dt_bias: reduce each as a strided [slabs, H].
    slab_reduce_rows(t->dA_log, scratch, slabs, H, 2L * H, stream);
    slab_reduce_rows(t->ddt_bias, scratch + H, slabs, H, 2L * H, stream);
}

extern "C" size_t cuda_rmsnorm_gated_scratch_floats(int n, int dim) {
    return (size_t)slabs_of(n) * dim;
}

extern "C" void cuda_rmsnorm_gated_forward(bf16 *out, float *rstd, const bf16 *x, const bf16 *z,
                                           const bf16 *weight, int n, int dim, float eps,
                                           cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (n <= 0) return;
    kt_work(stream, KT_NORM, 0, 6.0 * n * dim, "gdn gated rmsnorm forward dim %d", dim);
    rmsnorm_gated_forward_kernel<<<warp_blocks(n), THREADS, 0, stream>>>(
        reinterpret_cast<bf *>(out), rstd, B(x), B(z), B(weight), n, dim, eps);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_rmsnorm_gated_backward(float *dx, bf16 *dz, float *dweight, const float *dout,
                                            const bf16 *x, const bf16 *z, const bf16 *weight,
                                            const float *rstd, int n, int dim, float *scratch,
                                            cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (n <= 0) return;
    kt_work(stream, KT_NORM, 0, 18.0 * n * dim, "gdn gated rmsnorm backward dim %d", dim);
    rmsnorm_gated_dx_kernel<<<warp_blocks(n), THREADS, 0, stream>>>(
        dx, reinterpret_cast<bf *>(dz), dout, B(x), B(z), B(weight), rstd, n, dim);
    CUDA_CHECK_LAUNCH();
    long slabs = slabs_of(n);
    rmsnorm_gated_dw_kernel<<<grid_for(slabs * dim), THREADS, 0, stream>>>(
        scratch, dout, B(x), B(z), rstd, n, dim, slabs);
    CUDA_CHECK_LAUNCH();
    slab_reduce(dweight, scratch, slabs, dim, stream);
}
