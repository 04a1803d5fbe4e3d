// AdamW on the GPU, bit for bit the CPU reference (adamw_kernel_scalar in kernels/adamw.c).
// The compute rank updates some parameter groups itself; their bits must be the ones the
// optimizer processes would have written, or a run would depend on where each group lives.
//
// Every operation is an explicitly rounded intrinsic, in the reference's order: nvcc would
// otherwise contract a*b+c into an FMA (one rounding instead of two). Subnormals are kept:
// never build this with --use_fast_math or -ftz=true, which flush them even in the _rn forms.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

namespace {

const int THREADS = 256;
const long MAX_BLOCKS = 4096; // grid-stride beyond this: enough to fill an H200

// A NaN result with the CPU's bits. The GPU returns its canonical NaN (0x7fffffff); the CPU
// returns its first NaN operand, quieted, or its default NaN when no operand was NaN (0 * inf,
// inf / inf). With two different NaN operands the CPU's answer depends on the operand order
// the C compiler chose, so no kernel can match it; one NaN operand is always matched.
#if defined(__aarch64__)
const unsigned DEFAULT_NAN = 0x7fc00000u;
#else
const unsigned DEFAULT_NAN = 0xffc00000u; // x86 SSE/AVX "indefinite"
#endif
__device__ __forceinline__ float cpu_nan(float r, float a, float b) {
    if (!isnan(r)) return r;
    if (isnan(a)) return __uint_as_float(__float_as_uint(a) | 0x00400000u);
    if (isnan(b)) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
    return __uint_as_float(DEFAULT_NAN);
}
__device__ __forceinline__ float rn_mul(float a, float b) {
    return cpu_nan(__fmul_rn(a, b), a, b);
}
__device__ __forceinline__ float rn_add(float a, float b) {
    return cpu_nan(__fadd_rn(a, b), a, b);
}
__device__ __forceinline__ float rn_sub(float a, float b) {
    return cpu_nan(__fsub_rn(a, b), a, b);
}
__device__ __forceinline__ float rn_div(float a, float b) {
    return cpu_nan(__fdiv_rn(a, b), a, b);
}
__device__ __forceinline__ float rn_sqrt(float a) {
    return cpu_nan(__fsqrt_rn(a), a, a);
}

// bf16_from_float (kernels/bf16.h) in integers: CUDA's own conversion gives NaN other bits.
__device__ __forceinline__ bf16 to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x0040u);
    return (bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void adamw_update_kernel(float *p, float *m, float *v, bf16 *out, const float *g, long n,
                                    adamw_consts k) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float mo = m[i];
        float grad = rn_mul(g[i], k.grad_scale);
        float param = rn_mul(p[i], k.decay);
        float mi = rn_add(mo, rn_mul(k.one_minus_b1, rn_sub(grad, mo)));
        float vi = rn_add(rn_mul(v[i], k.beta2), rn_mul(rn_mul(k.one_minus_b2, grad), grad));
        float denom = rn_add(rn_div(rn_sqrt(vi), k.bc2_sqrt), k.eps);
        param = rn_sub(param, rn_mul(k.step_size, rn_div(mi, denom)));
        p[i] = param;
        m[i] = mi;
        v[i] = vi;
        out[i] = to_bf16(param);
    }
}

} // namespace

extern "C" void cuda_adamw(float *p, float *m, float *v, bf16 *out, const float *g, long n,
                           const adamw_consts *k, cudaStream_t stream) {
    if (n <= 0) return;
    long blocks = (n + THREADS - 1) / THREADS;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    adamw_update_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(p, m, v, out, g, n, *k);
    CUDA_CHECK_LAUNCH();
}
