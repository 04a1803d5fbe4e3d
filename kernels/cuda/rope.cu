// Rotary position embedding, Hugging Face "rotate_half" convention like kernels/cpu/rope.c:
// element i of each head is paired with element i + hd/2 (not its neighbour), and row (b, t)
// is rotated by the angle (float)t * inv_freq[i]. The backward rotates by -angle (the rotation
// is orthogonal). Math in fp32, one rounding to bf16 per element.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256;
const long MAX_BLOCKS = 65535;

// One thread per (row, head, i < hd/2) pair, grid-stride. Adjacent threads take adjacent i, so
// both halves are read and written coalesced. sincosf, not __sincosf: the fast version loses
// accuracy for the large angles of long contexts (t up to ~1e5 rad).
__global__ void rope_kernel(__nv_bfloat16 *x, const float *inv_freq, long pairs, int T, int heads,
                            int hd, float sign) {
    int half = hd / 2;
    long stride = (long)gridDim.x * blockDim.x;
    for (long p = (long)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += stride) {
        int i = (int)(p % half);
        long head_row = p / half; // (b * T + t) * heads + h
        int t = (int)((head_row / heads) % T);
        __nv_bfloat16 *x1 = x + head_row * hd + i, *x2 = x1 + half;
        float s, c;
        sincosf((float)t * inv_freq[i], &s, &c);
        s *= sign;
        float a = __bfloat162float(*x1), b = __bfloat162float(*x2);
        *x1 = __float2bfloat16(a * c - b * s);
        *x2 = __float2bfloat16(b * c + a * s);
    }
}

void rope_launch(bf16 *x, const float *inv_freq, int B, int T, int heads, int hd, float sign,
                 cudaStream_t stream) {
    long pairs = (long)B * T * heads * (hd / 2);
    if (pairs <= 0) return;
    long blocks = (pairs + THREADS - 1) / THREADS;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    rope_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(reinterpret_cast<__nv_bfloat16 *>(x),
                                                          inv_freq, pairs, T, heads, hd, sign);
    CUDA_CHECK_LAUNCH();
}

} // namespace

extern "C" void cuda_rope_forward(bf16 *x, const float *inv_freq, int B, int T, int heads, int hd,
                                  cudaStream_t stream) {
    KtScope kt(stream, KT_ROPE);
    rope_launch(x, inv_freq, B, T, heads, hd, 1.0f, stream);
}

extern "C" void cuda_rope_backward(bf16 *dx, const float *inv_freq, int B, int T, int heads, int hd,
                                   cudaStream_t stream) {
    KtScope kt(stream, KT_ROPE);
    rope_launch(dx, inv_freq, B, T, heads, hd, -1.0f, stream);
}
