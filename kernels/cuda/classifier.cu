// Fused classifier + cross-entropy over chunks of tokens, like kernels/cpu/classifier.c; only a
// [chunk, vocab] block of logits ever exists. Per chunk:
//   logits  = x_chunk . w^T                        (fp32, cuBLASLt)
//   losses  = lse - logit[target]                   (one block per row)
//   dlogits = (softmax - onehot(target)) * dloss    (bf16, same kernel, backward only)
//   dx_chunk += dlogits . w,  dw += dlogits^T . x_chunk   (fp32, beta = 1)
// A negative target (e.g. -100) is ignored: loss 0 and a zero dlogits row. A target >= vocab is
// a caller bug: its loss is NaN so that it cannot go unnoticed.
//
// The scratch rows are padded to a multiple of 8 elements so that every bf16 row of dlogits
// starts 16-byte aligned, which keeps cuBLASLt on its fast kernels whatever the vocab size.
// Chunks run in token order and every kernel is deterministic, so dw is summed in a fixed order.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>
#include <math.h>

namespace {

const int THREADS = 512;
const int WARPS = THREADS / 32;

long padded_vocab(int vocab) {
    return cuda_classifier_padded_vocab(vocab);
}
size_t logits_bytes(int chunk, int vocab) { // the scratch's first part; the dlogits follow
    return cuda_classifier_logits_bytes(chunk, vocab);
}

// (m, s) represents sum_i exp(z_i) = s * exp(m). Merging two such pairs; m = -inf means empty.
__device__ void lse_merge(float &m, float &s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2, s = s2;
        return;
    }
    float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

// Log-sum-exp of one row, by the whole block: an online (single-pass) max and sum per
// thread, then a fixed-shape tree over lanes and warps, so the result is deterministic.
__device__ float block_lse(const float *z, int vocab) {
    __shared__ float sm[WARPS], ss[WARPS];
    __shared__ float lse;
    float m = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < vocab; v += THREADS) lse_merge(m, s, z[v], 1.0f);
    for (int o = 16; o > 0; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) sm[warp] = m, ss[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = sm[0], bs = ss[0];
        for (int w = 1; w < WARPS; w++) lse_merge(bm, bs, sm[w], ss[w]);
        lse = bm + logf(bs);
    }
    __syncthreads();
    return lse;
}

// One block per row of the chunk. dlogits == NULL: forward only.
__global__ void cross_entropy_kernel(float *losses, __nv_bfloat16 *dlogits, const float *logits,
                                     const int32_t *targets, int vocab, long ld, float dloss) {
    const float *z = logits + blockIdx.x * ld;
    int y = targets[blockIdx.x];
    float lse = block_lse(z, vocab);
    if (threadIdx.x == 0) losses[blockIdx.x] = y < 0 ? 0.0f : (y < vocab ? lse - z[y] : NAN);
    if (!dlogits) return;
    __nv_bfloat16 *d = dlogits + blockIdx.x * ld;
    for (int v = threadIdx.x; v < vocab; v += THREADS) {
        float p = y < 0 ? 0.0f : expf(z[v] - lse) * dloss;
        if (v == y) p -= dloss;
        d[v] = __float2bfloat16(p);
    }
}

} // namespace

extern "C" void cuda_classifier(cuda_gemm *g, float *losses, float *dx, float *dw, const bf16 *x,
                                const bf16 *w, const int32_t *targets, int n, int dim, int vocab,
                                float dloss, void *scratch, int chunk, cudaStream_t stream) {
    KtScope kt(stream, KT_CLASSIFIER);
    if (n <= 0) return;
    if (chunk <= 0 || dim <= 0 || vocab <= 0) {
        fprintf(stderr, "megatrain: cuda_classifier: bad sizes chunk=%d dim=%d vocab=%d\n", chunk,
                dim, vocab);
        exit(1);
    }
    long ld = padded_vocab(vocab);
    float *logits = (float *)scratch;
    bool backward = dx || dw;
    bf16 *dlogits = backward ? (bf16 *)((char *)scratch + logits_bytes(chunk, vocab)) : NULL;
    for (int t0 = 0; t0 < n; t0 += chunk) {
        int cn = n - t0 < chunk ? n - t0 : chunk;
        const bf16 *xc = x + (long)t0 * dim;
        // logits[cn, vocab] = x_chunk[cn, dim] . (w[vocab, dim])^T
        cuda_gemm_rowmajor(g, logits, 1, ld, 0.0f, xc, dim, 0, w, dim, 1, cn, vocab, dim, stream);
        cross_entropy_kernel<<<cn, THREADS, 0, stream>>>(losses + t0,
                                                         reinterpret_cast<__nv_bfloat16 *>(dlogits),
                                                         logits, targets + t0, vocab, ld, dloss);
        CUDA_CHECK_LAUNCH();
        // dx_chunk[cn, dim] += dlogits[cn, vocab] . w[vocab, dim]
        if (dx)
            cuda_gemm_rowmajor(g, dx + (long)t0 * dim, 1, dim, 1.0f, dlogits, ld, 0, w, dim, 0, cn,
                               dim, vocab, stream);
        // dw[vocab, dim] += (dlogits[cn, vocab])^T . x_chunk[cn, dim]
        if (dw)
            cuda_gemm_rowmajor(g, dw, 1, dim, 1.0f, dlogits, ld, 1, xc, dim, 0, vocab, dim, cn,
                               stream);
    }
}
