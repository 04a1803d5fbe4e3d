// AdamW over one contiguous shard, with exactly PyTorch's semantics (torch.optim.AdamW,
// single-tensor path): decoupled weight decay, then the moment updates, then the bias-corrected
// step. The gradient is first scaled by the clip coefficient of clip_grad_norm_.
//
// Three implementations of the same per-element arithmetic: a portable scalar one, AVX2 and
// AVX-512 (picked at run time). Every path does the same float operations in the same order,
// with no FMA contraction anywhere, and sqrt/div are correctly rounded on every path, so all
// paths give the same bits. The result of an element depends on nothing but that element's
// inputs, which makes it independent of the ISA, the thread count, the chunking and the number
// of optimizer processes (the shard boundaries).
#ifndef MT_ADAMW_H
#define MT_ADAMW_H

#include "kernels/bf16.h"
#include <stddef.h>

#ifdef __cplusplus
extern "C" { // kernels/cuda/kernels_cuda.h takes adamw_consts from here
#endif

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;         // 1-based step count t, for bias correction
    float grad_scale; // clip coefficient (1 when not clipping)
} adamw_params;

// One fused pass: reads p, m, v, g; writes p, m, v and, when wire is not NULL, a bf16 copy of p
// (round-to-nearest-even). OpenMP threads, each on its own contiguous chunk (adamw_chunk),
// the best ISA of this machine (adamw_isa_default) and the default store policy. Everywhere
// below, a NULL wire means no bf16 copy.
void adamw_update(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                  const adamw_params *hp);
// The same from bf16 gradients (widened exactly: the bits are adamw_update's on the widened g).
void adamw_update_bf16_grads(float *p, float *m, float *v, bf16 *wire, const bf16 *g, size_t n,
                             const adamw_params *hp);

// The clip coefficient of torch.nn.utils.clip_grad_norm_(max_norm) for a total norm.
float clip_coefficient(double total_norm, double max_norm);

// The step's clip coefficient from every group's squared gradient norm (1 when max_norm <= 0).
// Summed in group order, so every rank that computes it gets the same bits.
float clip_scale_of_groups(const double *group_sumsq, int n_groups, double max_norm);

// Sum of squares in double, in index order (deterministic).
double sum_of_squares(const float *x, size_t n);

// ---- Paths, store policies and chunking (for the optimizer loop, tests and benches) ----

typedef enum {
    ADAMW_ISA_SCALAR = 0,
    ADAMW_ISA_AVX2 = 1,
    ADAMW_ISA_AVX512 = 2,
    ADAMW_ISA_COUNT
} adamw_isa;

// Non-temporal (streaming) stores: none, only the write-only bf16 wire copy, or every output.
// They change no result, only how the lines travel to memory.
typedef enum { ADAMW_NT_NONE = 0, ADAMW_NT_WIRE = 1, ADAMW_NT_ALL = 2, ADAMW_NT_COUNT } adamw_nt;

const char *adamw_isa_name(adamw_isa isa);
const char *adamw_nt_name(adamw_nt nt);
int adamw_isa_available(adamw_isa isa); // compiled in and supported by this CPU
// The best available ISA, unless MT_ADAMW_ISA=scalar|avx2|avx512 asks for another one.
adamw_isa adamw_isa_default(void);
// ADAMW_NT_WIRE, unless MT_ADAMW_NT=none|wire|all says otherwise.
adamw_nt adamw_nt_default(void);

// The per-step scalars, computed once as torch does: bias corrections in double (Python floats),
// then cast to float; the element-wise math in float.
typedef struct {
    float step_size; // (float)(lr / (1 - beta1^t))
    float bc2_sqrt;  // (float)sqrt(1 - beta2^t)
    float decay;     // (float)(1 - (double)lr * wd)
    float one_minus_b1, one_minus_b2, beta2, eps, grad_scale;
} adamw_consts;
void adamw_consts_init(adamw_consts *k, const adamw_params *hp);

// adamw_update with an explicit path and store policy (an unavailable ISA falls back to scalar).
void adamw_update_ex(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                     const adamw_params *hp, adamw_isa isa, adamw_nt nt);

// One thread's serial pass over [0, n): what each thread of adamw_update_ex runs on its chunk.
// Any alignment of any pointer is accepted.
void adamw_kernel(adamw_isa isa, adamw_nt nt, float *p, float *m, float *v, bf16 *wire,
                  const float *g, size_t n, const adamw_consts *k);

// Below this many elements adamw_update runs on the calling thread alone.
#define ADAMW_PARALLEL_MIN ((size_t)1 << 15)
// The threads adamw_update uses for n elements when OpenMP offers `max_threads`.
int adamw_threads_for(size_t n, int max_threads);
// Thread t's chunk [lo, hi) of an array of n elements starting at p, out of nthreads: contiguous,
// balanced to within 16 elements, and every boundary inside the array on a 64-byte line of p.
void adamw_chunk(const void *p, size_t n, int nthreads, int t, size_t *lo, size_t *hi);
// Zeroes x[0, n) with the same threads and the same chunks as adamw_update on an array at x, so
// that each page is first touched (and placed) by the thread that will stream it.
void adamw_first_touch(float *x, size_t n);

// The bf16 wire conversion of one path, over a whole array (the tests check the SIMD ones
// against bf16_from_float on the edge cases).
void adamw_to_bf16(adamw_isa isa, bf16 *dst, const float *src, size_t n);

// Per-ISA entry points, defined in adamw_avx2.c / adamw_avx512.c (x86-64 GCC/Clang only).
void adamw_kernel_scalar(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                         size_t n, const adamw_consts *k);
void adamw_kernel_avx2(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                       size_t n, const adamw_consts *k);
void adamw_kernel_avx512(adamw_nt nt, float *p, float *m, float *v, bf16 *wire, const float *g,
                         size_t n, const adamw_consts *k);
void adamw_to_bf16_avx2(bf16 *dst, const float *src, size_t n);
void adamw_to_bf16_avx512(bf16 *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
