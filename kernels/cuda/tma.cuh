// Hopper's bulk tensor copies (TMA) and the shared-memory barriers (mbarrier) that count their
// bytes: the pieces of a producer/consumer pipeline. A tensor map (made on the host with the
// driver's cuTensorMapEncodeTiled, passed to the kernel as a __grid_constant__ parameter)
// describes a global tensor and a box; one thread copies a box into shared memory, in the
// 128-byte swizzle wgmma.cuh's descriptors read, and the copy's completion lands on an mbarrier.
//
// Private to kernels/cuda/; the device functions are only valid in an sm_90a pass (WGMMA_DEVICE).
#ifndef MT_TMA_CUH
#define MT_TMA_CUH

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/wgmma.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>

// The driver API's check: CUresult, reported with the call and the place.
#define CU_CHECK(call)                                                                             \
    do {                                                                                           \
        CUresult cu_rc_ = (call);                                                                  \
        if (cu_rc_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "megatrain: %s:%d: %s: CUDA driver error %d\n", __FILE__, __LINE__,    \
                    #call, (int)cu_rc_);                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

namespace {

#ifdef WGMMA_DEVICE
__device__ __forceinline__ uint32_t shared_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_addr(bar)), "r"(count));
}
// Makes the initialized barriers visible to the copy engine (then a CTA barrier).
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of copies to come before the phase can complete.
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_addr(bar)) : "memory");
}
// Arrives where pred holds, without a branch (one between a wgmma's issue and its wait makes
// ptxas serialize the wgmmas).
__device__ __forceinline__ void mbar_arrive_if(uint64_t *bar, bool pred) {
    asm volatile("{\n.reg .pred P;\nsetp.ne.u32 P, %1, 0;\n"
                 "@P mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(shared_addr(bar)),
                 "r"((uint32_t)pred)
                 : "memory");
}
// Waits until the barrier's phase of this parity (0, 1, 0, ...: the n-th completion has parity
// n & 1) has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile("{\n.reg .pred P1;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@P1 bra DONE_%=;\nbra WAIT_%=;\nDONE_%=:\n}\n" ::"r"(shared_addr(bar)),
                 "r"(parity)
                 : "memory");
}

// Box (c0, c1, c2, c3) of a 4-D tensor map into shared memory; completes on bar.
__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(shared_addr(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_addr(bar))
                 : "memory");
}

// Shared -> global: box (c0, c1, c2, c3) of a 4-D map stored, or added (fp32 add at L2), from
// shared memory, as a bulk async-group of the issuing thread.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, const void *src, int c0,
                                             int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], "
                 "[%5];\n" ::"l"((uint64_t)map),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_addr(src))
                 : "memory");
}
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap *map, const void *src, int c0,
                                                  int c1, int c2, int c3) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group "
                 "[%0, {%1, %2, %3, %4}], [%5];\n" ::"l"((uint64_t)map),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_addr(src))
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until at most N of this thread's bulk groups are still reading shared memory / in flight.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy global accesses with its async-proxy (TMA) ones.
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Hands registers between warpgroups (the whole warpgroup executes it): a producer that needs
// few gives them to the consumers. Needs a register cap at entry (__launch_bounds__(n, 1)).
template <int N> __device__ __forceinline__ void regs_release() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_claim() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Named barriers 1..15 (0 is __syncthreads'): `threads` of the CTA meet; arrive does not wait.
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif

// The driver's encoder, looked up once: a process-wide constant (the runtime links no libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult found;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode,
                                                    12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !encode) {
            fprintf(stderr, "megatrain: the CUDA driver has no cuTensorMapEncodeTiled\n");
            exit(1);
        }
    }
    return encode;
}

// A [B, T, heads, hd] tensor of `elem`-byte elements as a 4-D map (hd, heads, T, B) whose box is
// 128 bytes of columns of one head for `rows` tokens, 128-byte swizzled; columns past hd and
// tokens past T read as zeros (and are skipped by stores). Heads lie ld >= hd elements apart;
// ld * elem % 16 == 0 (16-byte strides) and a 16-byte aligned base are needed.
inline CUtensorMap make_map(const void *base, CUtensorMapDataType type, int elem, int B, int T,
                            int heads, int hd, int rows, int ld) {
    CUtensorMap map;
    const cuuint64_t row = (cuuint64_t)ld * elem;
    const cuuint64_t dims[4] = {(cuuint64_t)hd, (cuuint64_t)heads, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[3] = {row, heads * row, (cuuint64_t)T * heads * row};
    const cuuint32_t box[4] = {(cuuint32_t)(128 / elem), 1, (cuuint32_t)rows, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    CU_CHECK(tensor_map_encoder()(&map, type, 4, (void *)base, dims, strides, box, unit,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

// bf16 q, k, v, dout, heads ld elements apart: boxes of 64 columns.
inline CUtensorMap make_head_map(const void *base, int B, int T, int heads, int hd, int rows,
                                 int ld) {
    return make_map(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, B, T, heads, hd, rows, ld);
}

} // namespace

#endif
