// Rotary position embedding, Hugging Face "rotate_half" convention like kernels/cpu/rope.c:
// element i < rot/2 of each head is paired with element i + rot/2 (not its neighbour; the
// elements from rot on pass unchanged: partial rotary), and row (b, t)
// is rotated by the angle (float)pos * inv_freq[i], pos = t, or with packed documents
// t - doc_start[b * T + t] (positions restart at each document, as transformers' position_ids
// do). The backward rotates by -angle (the rotation is orthogonal). Math in fp32, one rounding
// to bf16 per element. The rotated part may start at rope_args' off and pair (2i, 2i + 1)
// (interleave): multi-head latent attention's last mla_rope_dim of a head.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256, MAX_HALF = 64; // hd <= 128

// One block per token row (b, t): the row's cos and sin, one per i < hd/2, go to shared memory
// once and serve every head, and each thread rotates two adjacent pairs (i, i + 1) with 4-byte
// loads of both halves. sincosf, not __sincosf: the fast version loses accuracy for the large
// angles of long contexts (t up to ~1e5 rad). The same math per element as one pair per thread.
__global__ void rope_kernel(__nv_bfloat162 *x, const float *inv_freq, const int32_t *doc_start,
                            int T, int heads, int hd, int rot, float sign, float scale, int off) {
    __shared__ float cs[MAX_HALF], sn[MAX_HALF];
    const int half = rot / 2;
    const int t = (int)(blockIdx.x % T) - (doc_start ? doc_start[blockIdx.x] : 0);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf((float)t * inv_freq[i], &s, &c);
        cs[i] = c * scale;
        sn[i] = s * scale * sign;
    }
    __syncthreads();
    const int pairs2 = half / 2; // bf16x2 words per half-head
    __nv_bfloat162 *row = x + (long)blockIdx.x * heads * (hd / 2);
    for (int w = threadIdx.x; w < heads * pairs2; w += blockDim.x) {
        const int h = w / pairs2, i = 2 * (w % pairs2);
        __nv_bfloat162 *x1 = row + h * (hd / 2) + off / 2 + i / 2,
                       *x2 = x1 + half / 2; // rot % 4 == 0
        const float2 a = __bfloat1622float2(*x1), b = __bfloat1622float2(*x2);
        const float c0 = cs[i], c1 = cs[i + 1], s0 = sn[i], s1 = sn[i + 1];
        *x1 = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
        *x2 = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
    }
}

// Odd half-rotations (rot % 4 == 2), x not 4-byte aligned, an odd offset or interleaved pairs
// (multi-head latent attention: rope_args' off and interleave): one element pair per thread.
__global__ void rope_kernel_odd(__nv_bfloat16 *x, const float *inv_freq, const int32_t *doc_start,
                                long pairs, int T, int heads, int hd, int rot, float sign,
                                float scale, int off, int interleave) {
    int half = rot / 2, step = interleave ? 2 : 1, partner = interleave ? 1 : half;
    long stride = (long)gridDim.x * blockDim.x;
    for (long p = (long)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += stride) {
        int i = (int)(p % half);
        long head_row = p / half; // (b * T + t) * heads + h
        const long bt = head_row / heads;
        int t = (int)(bt % T) - (doc_start ? doc_start[bt] : 0);
        __nv_bfloat16 *x1 = x + head_row * hd + off + i * step, *x2 = x1 + partner;
        float s, c;
        sincosf((float)t * inv_freq[i], &s, &c);
        c *= scale;
        s *= scale * sign;
        float a = __bfloat162float(*x1), b = __bfloat162float(*x2);
        *x1 = __float2bfloat16(a * c - b * s);
        *x2 = __float2bfloat16(b * c + a * s);
    }
}

void rope_launch(bf16 *x, int heads, const rope_args *r, float sign, cudaStream_t stream) {
    const float *inv_freq = r->inv_freq;
    const int32_t *doc_start = r->doc_start;
    const int T = r->T, hd = r->hd, rot = r->rot;
    const float scale = r->scale;
    const long rows = (long)r->B * T;
    if (rows <= 0 || rot < 2) return;
    if (rot % 4 == 0 && rot / 2 <= MAX_HALF && ((uintptr_t)x & 3) == 0 && r->off % 2 == 0 &&
        !r->interleave) {
        rope_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(reinterpret_cast<__nv_bfloat162 *>(x),
                                                            inv_freq, doc_start, T, heads, hd, rot,
                                                            sign, scale, r->off);
    } else {
        long pairs = rows * heads * (rot / 2), blocks = (pairs + THREADS - 1) / THREADS;
        rope_kernel_odd<<<(unsigned)(blocks < 65535 ? blocks : 65535), THREADS, 0, stream>>>(
            reinterpret_cast<__nv_bfloat16 *>(x), inv_freq, doc_start, pairs, T, heads, hd, rot,
            sign, scale, r->off, r->interleave);
    }
    CUDA_CHECK_LAUNCH();
}

} // namespace

extern "C" void cuda_rope_forward(bf16 *x, int heads, const rope_args *r, cudaStream_t stream) {
    KtScope kt(stream, KT_ROPE);
    kt_work(stream, KT_ROPE, 0, 4.0 * r->B * r->T * heads * r->rot, "rope heads %d", heads);
    rope_launch(x, heads, r, 1.0f, stream);
}

extern "C" void cuda_rope_backward(bf16 *dx, int heads, const rope_args *r, cudaStream_t stream) {
    KtScope kt(stream, KT_ROPE);
    kt_work(stream, KT_ROPE, 0, 4.0 * r->B * r->T * heads * r->rot, "rope heads %d", heads);
    rope_launch(dx, heads, r, -1.0f, stream);
}
