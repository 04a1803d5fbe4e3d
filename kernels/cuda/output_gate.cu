// The gated attention's elementwise ops (attn_output_gate: Qwen3.5, Qwen3-Next), as
// runtime/engine/attn_cpu.c computes them. q_proj's output holds per head the query's hd values,
// then the gate's hd (transformers' view(..., heads, 2 hd) then chunk):
//   split     qg [rows, heads, 2, hd] (fp32) -> q [rows, heads, hd] (fp32 or bf16), gate (fp32)
//   join      dq (bf16), dgate (fp32) -> dqg [rows, heads, 2, hd] (bf16, q_proj's GEMM operand)
//   forward   out = att * sigmoid(gate)
//   backward  datt = d * s, dgate = d * att * s * (1 - s), s = sigmoid(gate); in place allowed
//             (datt may be d, dgate may be gate: each element is read before it is written)
// expf, not __expf: these kernels are memory-bound, so the accurate version is free.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256;
const long MAX_BLOCKS = 4096;

unsigned blocks_for(long n) {
    long b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

__device__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// Element i of a [rows x heads, hd] tensor sits at (2 (i / hd) + half) hd + i % hd in qg.
__device__ long qg_index(long i, int hd, int half) {
    return (2 * (i / hd) + half) * hd + i % hd;
}

template <bool F32>
__global__ void split_kernel(void *q, float *gate, const float *qg, long n, int hd) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = qg[qg_index(i, hd, 0)];
        if (F32)
            static_cast<float *>(q)[i] = v;
        else
            static_cast<__nv_bfloat16 *>(q)[i] = __float2bfloat16(v);
        gate[i] = qg[qg_index(i, hd, 1)];
    }
}

__global__ void join_kernel(__nv_bfloat16 *dqg, const __nv_bfloat16 *dq, const float *dgate, long n,
                            int hd) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dqg[qg_index(i, hd, 0)] = dq[i];
        dqg[qg_index(i, hd, 1)] = __float2bfloat16(dgate[i]);
    }
}

__global__ void forward_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *att, const float *gate,
                               long n) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = __float2bfloat16(__bfloat162float(att[i]) * sigmoid(gate[i]));
}

__global__ void backward_kernel(__nv_bfloat16 *datt, float *dgate, const __nv_bfloat16 *dout,
                                const __nv_bfloat16 *att, const float *gate, long n) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = sigmoid(gate[i]), d = __bfloat162float(dout[i]);
        float a = __bfloat162float(att[i]);
        datt[i] = __float2bfloat16(d * s);
        dgate[i] = d * a * s * (1.0f - s);
    }
}

} // namespace

extern "C" void cuda_output_gate_split(void *q, int q_f32, float *gate, const float *qg, long rows,
                                       int heads, int hd, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = rows * heads * hd;
    if (n <= 0) return;
    if (q_f32)
        split_kernel<true><<<blocks_for(n), THREADS, 0, stream>>>(q, gate, qg, n, hd);
    else
        split_kernel<false><<<blocks_for(n), THREADS, 0, stream>>>(q, gate, qg, n, hd);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_output_gate_join(bf16 *dqg, const bf16 *dq, const float *dgate, long rows,
                                      int heads, int hd, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = rows * heads * hd;
    if (n <= 0) return;
    join_kernel<<<blocks_for(n), THREADS, 0, stream>>>(reinterpret_cast<__nv_bfloat16 *>(dqg),
                                                       reinterpret_cast<const __nv_bfloat16 *>(dq),
                                                       dgate, n, hd);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_output_gate_forward(bf16 *out, const bf16 *att, const float *gate, long n,
                                         cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    if (n <= 0) return;
    forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out), reinterpret_cast<const __nv_bfloat16 *>(att), gate,
        n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_output_gate_backward(bf16 *datt, float *dgate, const bf16 *dout,
                                          const bf16 *att, const float *gate, long n,
                                          cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    if (n <= 0) return;
    backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(datt), dgate,
        reinterpret_cast<const __nv_bfloat16 *>(dout), reinterpret_cast<const __nv_bfloat16 *>(att),
        gate, n);
    CUDA_CHECK_LAUNCH();
}
