// Causal grouped-query flash attention (FlashAttention-2 scheme) for bf16 q, k, v.
//
// The math is exactly kernels/cpu/attention.c: scale 1/sqrt(hd) (or attn_args.scale), query head h
// reads kv head h / (H / KV), lse = natural-log log-sum-exp of each row's scaled scores. Memory is
// O(T): a CTA holds one tile of 64 or 128 query (or key) rows and streams the other side through
// shared memory; the T x T probabilities are recomputed from lse in the backward, never stored.
//
// Three paths, each checked against the CPU reference by tests/test_attention_cuda.c:
// - mma.sync (any GPU): m16n8k16 bf16 with fp32 accumulation, ldmatrix from padded shared
//   memory, cp.async double buffering. head_dim is padded up to 32, 64, 128, 192 or 256 with
//   zeros in shared memory, so every hd <= 256 that is a multiple of 4 runs on it (rows of
//   hd % 8 == 4, e.g. 100, move in 8-byte chunks). The only tensor-core path above 128 (Qwen3.5's
//   gated attention and GLM-4.7-Flash's MLA at 256, DeepSeek-V3's MLA at 192): Cfg's tiles.
// - wgmma (Hopper, sm_90a builds; attention_wgmma.cu): the same tiles' math on warpgroup MMAs
//   reading 128-byte-swizzled shared memory. Where TMA can take the rows (hd >= 64 forward,
//   > 64 backward, hd % 8 == 0: a TMA box must start on a 16-byte boundary, and hd 100's odd
//   heads do not), forward and backward are warp-specialized (attention_tma.cu,
//   attention_bwd_tma.cu). The default from head dim 64 up (forward) and above 64 (backward)
//   where it runs (see attention_path).
// - simple (MT_ATTENTION=simple, or an hd / pointer alignment the tensor paths cannot take):
//   one warp per output row, fp32 CUDA-core math, scalar loads. Slow, but easy to trust.
//
// Backward, every path: D = rowsum(dout * out) into scratch (with attention sinks, their
// gradient from D and lse), then dq by query tile and dk, dv by key tile in two separate
// kernels, where every output element has one owner; or, on Hopper, one fused kernel whose dq
// adds run in key-tile order (attention_bwd_tma.cu). Every sum runs in a fixed order, so results
// are bitwise reproducible. Sinks change no backward kernel: lse includes them, so the
// probabilities recomputed from it are the forward's.
//
// Files: attention.cuh (this family's shared pieces: PTX and warp-GEMM helpers, tile copies, the
// simple path's helpers, shapes and launch configuration), attention_mask.cuh (the keys each row
// sees: documents and sliding windows), attention_wg.cuh (the Hopper path's warpgroup pieces),
// attention_forward.cu, attention_backward.cu, attention_wgmma.cu (Hopper forward and
// backward), attention_tma.cu and attention_bwd_tma.cu (Hopper's warp-specialized forward and
// backward) with wgmma.cuh and tma.cuh. Private to kernels/cuda/; kernels_cuda.h is the interface.
#ifndef MT_ATTENTION_CUH
#define MT_ATTENTION_CUH

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A call's shape (make_dims). Outside the anonymous namespace: the family's files pass it to
// each other.
struct Dims {
    int B, T, H, KV, hd, group;
    float scale;      // 1/sqrt(hd)
    float scale_log2; // scale * log2(e): the kernels use exp2
    // Packed documents (data.pack): ds[b * T + t] is where token t's document starts in row b,
    // non-decreasing along a row and <= t; query t attends to keys ds[b * T + t] .. t only.
    // NULL: a row is one document.
    const int32_t *ds;
    // The sliding window (attn_args): query t sees no key before t - window + 1; 0: none, also
    // for a window of T or more (make_dims), which hides nothing.
    int window;
    // Attention sinks (gpt-oss): query head h's logit sinks[h] (natural-log units, like the
    // scaled scores) joins each of its rows' softmax with no value; NULL: none. Every forward
    // folds it in once its keys are done (sink_fold); every backward's probabilities come from
    // lse, which includes it, and its gradient from D (attention_backward.cu).
    const bf16 *sinks;
};

// What a kernel masks, a template choice: MASK_CAUSAL, every row's keys from 0; MASK_DOCS, from
// its document's start; MASK_WINDOW, from the later of its document's start (packed documents or
// not: d.ds says) and its sliding window's. The kernels without a window or documents are thus the
// same code, instruction for instruction, as before either existed: checks inside their loops
// cost calls without them 6-18% (docs/attention.md).
enum Mask { MASK_CAUSAL, MASK_DOCS, MASK_WINDOW };
inline Mask mask_of(const Dims &d) {
    return d.window ? MASK_WINDOW : d.ds ? MASK_DOCS : MASK_CAUSAL;
}

// attention_wgmma.cu: the Hopper path, for the other files of the family (whether it runs:
// cuda_attention_has_wgmma, kernels_cuda.h); false where it cannot take the call (packed
// documents or a window, mask_of, where the TMA kernel cannot run).
bool attention_forward_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                             const Dims &d, void *scratch, cudaStream_t stream);
// attention_tma.cu: the warp-specialized forward; false where it cannot take the call.
bool attention_forward_tma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                           const Dims &d, void *scratch, cudaStream_t stream);
// Into the scratch (attention_scratch), the padded copies (tma_padded_ld) of kv heads kv0 ..
// kv0 + kvn - 1 and their query heads: q, k, v, and dout unless it is NULL (the forward).
void copy_run_padded(void *scratch, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                     int B, int T, int H, int KV, int hd, int kv0, int kvn, cudaStream_t stream);
// attention_bwd_tma.cu: the warp-specialized fused backward; false where it cannot take the
// call. D = rowsum(dout * out) already in scratch.
bool attention_backward_tma(bf16 *dq, bf16 *dk, bf16 *dv, const float *lse, const bf16 *dout,
                            const bf16 *q, const bf16 *k, const bf16 *v, const Dims &d,
                            void *scratch, cudaStream_t stream);
// D = rowsum(dout * out) already in scratch.
void attention_backward_wgmma(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                              const float *D, const bf16 *q, const bf16 *k, const bf16 *v,
                              const Dims &d, cudaStream_t stream);

// The keys each query row sees, on the device: doc_first, first_key, key_end and the rest.
#include "kernels/cuda/attention_mask.cuh"

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr int WARPS = 4, THREADS = 32 * WARPS; // each warp owns 16*MT rows of a CTA's tile

// The bf16 and PTX helpers and the warp-level GEMM pieces: mma.cuh (included above).

// One online-softmax step (the forwards of both tensor-core paths) over a 16 x 8*NS score block
// (two rows per thread: row_lo and row_lo + 8). s holds raw scores on entry and unnormalized
// probabilities on exit; l is rescaled to the new running max m (scaled, base-2 units), and
// alpha is the factor for o, which the caller applies (the Hopper forward, once the last tile's
// P V is done). With mask set, keys after the row drop, and keys before first[r], the row's first
// key (first_key: its document's start and its window's; 0 otherwise). RANGED = false (mma.sync
// calls without packed documents or a window) compiles those checks out, first unread: see
// attn_fwd_tc.
template <int NS, bool RANGED = true>
__device__ __forceinline__ void
online_softmax(float (&s)[NS][4], float (&m)[2], float (&l)[2], float (&alpha)[2], float scale_log2,
               bool mask, int row_lo, int key0, const int (&first)[2], int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY; // of the raw scores: scale_log2 > 0 keeps the order
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = key0 + nt * 8 + 2 * (lane & 3) + e;
                if (mask && (key > row_lo + 8 * r || (RANGED && key < first[r])))
                    s[nt][2 * r + e] = -INFINITY;
                mx = fmaxf(mx, s[nt][2 * r + e]);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row keeps m = -inf until it meets a key it sees: in causal attention key 0 in the
        // first tile, with packed documents or a window possibly a later tile. Until then its
        // probabilities are exp2(-inf - 0) = 0 and alpha = 0 (o and l are still 0), never NaN.
        // Without documents mx is finite from the first tile on, so base = mx: the same bits.
        mx = fmaxf(m[r], mx * scale_log2);
        const float base = RANGED && mx == -INFINITY ? 0.0f : mx;
        alpha[r] = fast_exp2(m[r] - base);
        m[r] = mx;
        l[r] *= alpha[r];
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = fast_exp2(fmaf(s[nt][2 * r + e], scale_log2, -base));
                s[nt][2 * r + e] = p;
                l[r] += p; // this thread's partial row sum; the quad reduces it at the end
            }
        }
    }
}

template <int NO>
__device__ __forceinline__ void rescale_rows(float (&o)[NO][4], const float (&alpha)[2]) {
#pragma unroll
    for (int nt = 0; nt < NO; nt++) {
        o[nt][0] *= alpha[0];
        o[nt][1] *= alpha[0];
        o[nt][2] *= alpha[1];
        o[nt][3] *= alpha[1];
    }
}

// A row's sink (Dims.sinks), after its last key: the running max m (base-2 units) and the row's
// whole sum l (the quad's, reduced) take it in as one more score; returns the factor the row's
// unnormalized output takes for the new max (out = o * factor / l). Without sinks: 1, m and l
// untouched, so those calls keep their bits.
__device__ __forceinline__ float sink_fold(const Dims &d, int h, float &m, float &l) {
    if (!d.sinks) return 1.0f;
    const float sink = bf2f(d.sinks[h]) * LOG2E, mx = fmaxf(m, sink);
    const float alpha = fast_exp2(m - mx); // m is finite: every row sees its own key
    l = fmaf(l, alpha, fast_exp2(sink - mx));
    m = mx;
    return alpha;
}

template <int NS, int NO, bool RANGED = true>
__device__ __forceinline__ void softmax_step(float (&s)[NS][4], float (&o)[NO][4], float (&m)[2],
                                             float (&l)[2], float scale_log2, bool mask, int row_lo,
                                             int key0, const int (&first)[2], int lane) {
    float alpha[2];
    online_softmax<NS, RANGED>(s, m, l, alpha, scale_log2, mask, row_lo, key0, first, lane);
    rescale_rows<NO>(o, alpha);
}

// ---- tiles: global <-> shared ------------------------------------------------------------

// Rows [row0, row0 + ROWS) of a [T, stride] matrix (first hd columns) into shared [ROWS][LD]
// through cp.async. Rows >= T and columns in [hd, HDP) are zeroed, so that the MMAs need no
// tail cases: zero rows of q/k/v/dout give finite scores that the masks then drop, and zero
// columns add nothing to dot products. hd is a multiple of the chunk, so none straddles hd.
// A chunk is 16 bytes (uint4) when hd % 8 == 0; for hd % 8 == 4 (e.g. 100 for dim 3200 / 32
// heads) every other head starts only 8-byte aligned, so rows move in 8-byte chunks (uint2).
template <typename V> __device__ __forceinline__ void cp_async_chunk(void *dst, const void *src);
template <> __device__ __forceinline__ void cp_async_chunk<uint4>(void *dst, const void *src) {
    cp_async16(dst, src);
}
template <> __device__ __forceinline__ void cp_async_chunk<uint2>(void *dst, const void *src) {
    cp_async8(dst, src);
}

template <int HDP, int ROWS, typename V>
__device__ __forceinline__ void load_tile_chunks(bf16 *dst, const bf16 *src, int row0, int T,
                                                 long stride, int hd) {
    constexpr int LD = HDP + 8, E = sizeof(V) / sizeof(bf16), CPR = HDP / E;
    for (int c = threadIdx.x; c < ROWS * CPR; c += THREADS) {
        int r = c / CPR, col = (c % CPR) * E;
        bf16 *d = dst + r * LD + col;
        if (row0 + r < T && col < hd)
            cp_async_chunk<V>(d, src + (long)(row0 + r) * stride + col);
        else
            *(V *)d = V{};
    }
}

template <int HDP, int ROWS>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int row0, int T, long stride,
                                          int hd) {
    if ((hd & 7) == 0)
        load_tile_chunks<HDP, ROWS, uint4>(dst, src, row0, T, stride, hd);
    else
        load_tile_chunks<HDP, ROWS, uint2>(dst, src, row0, T, stride, hd);
}

// The staged rows of store_rows out to global memory, in chunks as load_tile reads them.
template <int HDP, int ROWS, typename V>
__device__ __forceinline__ void store_chunks(bf16 *dst, long stride, int row0, int T, int hd,
                                             const bf16 *stage, int lane) {
    constexpr int LD = HDP + 8, E = sizeof(V) / sizeof(bf16), CPR = HDP / E;
    for (int c = lane; c < ROWS * CPR; c += 32) {
        int r = c / CPR, col = (c % CPR) * E;
        if (row0 + r < T && col < hd)
            *(V *)(dst + (long)(row0 + r) * stride + col) = *(const V *)(stage + r * LD + col);
    }
}

// Writes a warp's MT x 16 x HDP fp32 accumulators (row r times mul[mt][r / 8]) as bf16 rows
// [row0, row0 + 16*MT) of a [T, stride] matrix, staged through the warp's own 16*MT rows of
// shared memory (stage) so that the global stores are 16-byte and coalesced.
template <int HDP, int MT>
__device__ __forceinline__ void store_rows(bf16 *dst, long stride, int row0, int T, int hd,
                                           const float (&acc)[MT][HDP / 8][4],
                                           const float (&mul)[MT][2], bf16 *stage, int lane) {
    constexpr int LD = HDP + 8;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < HDP / 8; nt++) {
            bf16 *s = stage + (mt * 16 + g) * LD + nt * 8 + 2 * t;
            *(uint32_t *)s = pack_bf16(acc[mt][nt][0] * mul[mt][0], acc[mt][nt][1] * mul[mt][0]);
            *(uint32_t *)(s + 8 * LD) =
                pack_bf16(acc[mt][nt][2] * mul[mt][1], acc[mt][nt][3] * mul[mt][1]);
        }
    }
    __syncwarp();
    if ((hd & 7) == 0)
        store_chunks<HDP, 16 * MT, uint4>(dst, stride, row0, T, hd, stage, lane);
    else
        store_chunks<HDP, 16 * MT, uint2>(dst, stride, row0, T, hd, stage, lane);
}

// The end of a key-side backward for one warp's 16 rows from row0: dk = scale * dka and
// dv = dva as bf16 rows of [T, stride] matrices, staged through the warp's `stage`.
template <int HDP>
__device__ __forceinline__ void store_key_grads(bf16 *dk, bf16 *dv, long stride, int row0,
                                                const Dims &d, const float (&dka)[HDP / 8][4],
                                                const float (&dva)[HDP / 8][4], bf16 *stage,
                                                int lane) {
    const float kmul[1][2] = {{d.scale, d.scale}}, vmul[1][2] = {{1.0f, 1.0f}};
    store_rows<HDP, 1>(dk, stride, row0, d.T, d.hd,
                       *reinterpret_cast<const float(*)[1][HDP / 8][4]>(&dka[0][0]), kmul, stage,
                       lane);
    __syncwarp(); // the stage is rewritten next
    store_rows<HDP, 1>(dv, stride, row0, d.T, d.hd,
                       *reinterpret_cast<const float(*)[1][HDP / 8][4]>(&dva[0][0]), vmul, stage,
                       lane);
}

// The end of a forward for one warp's 16 rows of an m64 tile (rows row_lo and row_lo + 8 of
// each thread, the warp's first row row0): each row's lse, and out = o / l, staged through the
// warp's own `stage` (16 x (HDP + 8) bf16) for coalesced stores. l holds this thread's partial
// row sums; the quad (4 lanes of a row) reduces them here, then the head's sink joins them.
template <int HDP>
__device__ __forceinline__ void finish_rows(bf16 *out, float *lse, const Dims &d, int b, int h,
                                            int row0, int row_lo, const float (&o)[HDP / 8][4],
                                            const float (&m)[2], const float (&l)[2], bf16 *stage,
                                            int lane) {
    float inv[1][2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float sum = l[r], mr = m[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inv[0][r] = sink_fold(d, h, mr, sum) / sum;
        const int row = row_lo + 8 * r;
        if ((lane & 3) == 0 && row < d.T)
            lse[((long)b * d.H + h) * d.T + row] = (mr + log2f(sum)) * LN2;
    }
    const long qs = (long)d.H * d.hd;
    store_rows<HDP, 1>(out + (long)b * d.T * qs + (long)h * d.hd, qs, row0, d.T, d.hd,
                       *reinterpret_cast<const float(*)[1][HDP / 8][4]>(&o[0][0]), inv, stage,
                       lane);
}

} // namespace

// The Hopper path's warpgroup pieces, here in every file of the family as before they had a
// file of their own: they build on the pieces above.
#include "kernels/cuda/attention_wg.cuh"

namespace {

// Key tiles of bc keys [0, nkt) that the query rows [q0, q0 + rows) attend to.
__device__ __forceinline__ int key_tiles(int q0, int rows, int T, int bc) {
    return (min(q0 + rows, T) - 1) / bc + 1;
}

// ---- simple path: one warp per output row, fp32 on CUDA cores -----------------------------
// Lane l scores key (or query) j0 + l of each chunk of 32; the chunk's weights are then
// broadcast by shuffles and each lane accumulates dims lane, lane + 32, ... of the row.

// 4 warps per block; hd <= 32 * MAXC, the widest head any path takes (make_dims)
constexpr int SIMPLE_WARPS = 4, MAXC = 8;

// dot(row vector in shared memory (fp32), bf16 global row)
__device__ __forceinline__ float dot_sg(const float *a, const bf16 *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * bf2f(b[i]);
    return s;
}

__device__ __forceinline__ void load_row_f32(float *dst, const bf16 *src, int n, int lane) {
    for (int i = lane; i < n; i += 32) dst[i] = bf2f(src[i]);
    __syncwarp();
}

// ---- host side -----------------------------------------------------------------------------

// Element i of a run of hn heads of `per_head` elements each, [B, T, hn, per_head] in order: its
// token row bt (b * T + t), head in the run hl and element e.
struct RunElement {
    long bt;
    int hl, e;
};
__device__ __forceinline__ RunElement run_element(long i, int hn, int per_head) {
    return RunElement{i / ((long)hn * per_head), (int)(i / per_head % hn), (int)(i % per_head)};
}

inline Dims make_dims(const attn_args &a, const bf16 *sinks) {
    const int B = a.B, T = a.T, H = a.H, KV = a.KV, hd = a.hd;
    if (B < 0 || T < 0 || H <= 0 || KV <= 0 || H % KV != 0 || hd <= 0 || hd > 32 * MAXC) {
        fprintf(stderr, "megatrain: attention: unsupported shape B=%d T=%d H=%d KV=%d hd=%d\n", B,
                T, H, KV, hd);
        exit(1);
    }
    // Grids put a sequence's 64-row tiles on y, which stops at 65,535: 4,194,240 tokens, just
    // under the config's limit on a micro-batch (MT_MAX_MICRO_BATCH_TOKENS, 2^22).
    if ((long)T > 65535l * 64) {
        fprintf(stderr, "megatrain: attention: a sequence of %d tokens is over the %ld it takes\n",
                T, 65535l * 64);
        exit(1);
    }
    if (a.window < 0) {
        fprintf(stderr, "megatrain: attention: a sliding window of %d keys\n", a.window);
        exit(1);
    }
    if (a.dv && a.dv != hd) {
        fprintf(stderr, "megatrain: attention: values of %d, not the head dim %d\n", a.dv, hd);
        exit(1);
    }
    float scale = a.scale ? a.scale : 1.0f / sqrtf((float)hd); // MLA: model_mla_softmax_scale
    const int window = a.window < T ? a.window : 0; // T or more keys: no window, the same bits
    return Dims{B, T, H, KV, hd, H / KV, scale, scale * LOG2E, a.doc_start, window, sinks};
}

// A forward's FLOPs as bench/attention_bench.c counts them: Q K^T and P V over the (query, key)
// pairs the causal mask and the window keep, attn_score_pairs (a backward counts as 2.5
// forwards; documents are not counted).
inline double attention_flops(const Dims &d) {
    return 4.0 * d.B * d.H * attn_score_pairs(d.T, d.window) * d.hd;
}

// kv heads per run of the fused backward, and the padded head width of the TMA kernels
// (kernels/scratch.h: the plan sizes the scratch by the same functions).
inline int dq_chunk_kv_heads(int B, int T, int H, int KV, int hd) {
    return cuda_attention_run_kv_heads(B, T, H, KV, hd);
}
inline int tma_padded_ld(int hd) {
    return cuda_attention_padded_ld(hd);
}

// The attention scratch's parts at base, as cuda_attention_scratch_layout sizes them. The
// forward uses only the copies of q, k and v.
struct AttnScratch {
    float *D, *dq_acc;
    unsigned *turns;
    bf16 *pq, *pdout, *pk, *pv;
    size_t dq_bytes, turn_bytes, total;
};
inline AttnScratch attention_scratch(void *base, int B, int T, int H, int KV, int hd) {
    const cuda_attention_scratch_parts parts = cuda_attention_scratch_layout(B, T, H, KV, hd);
    AttnScratch s;
    s.dq_bytes = parts.dq_bytes, s.turn_bytes = parts.turn_bytes, s.total = parts.total;
    char *p = (char *)base;
    s.D = (float *)p;
    s.dq_acc = (float *)(p += parts.d_bytes);
    s.turns = (unsigned *)(p += s.dq_bytes);
    s.pq = (bf16 *)(p += s.turn_bytes);
    s.pdout = (bf16 *)(p += parts.q_bytes);
    s.pk = (bf16 *)(p += parts.q_bytes);
    s.pv = (bf16 *)(p += parts.kv_bytes);
    return s;
}

inline bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

enum AttnPath { PATH_SIMPLE, PATH_MMA, PATH_WGMMA };

// The tensor-core paths need rows of whole 8-byte chunks (hd % 4 == 0) and 16-byte aligned
// bases for cp.async and the vector stores; anything else takes the simple path. Heads wider
// than the Hopper kernels' 128 columns (to 256) take mma.sync, whatever was asked. Otherwise, by
// measurement on the H200 (bench/RESULTS.md, 2026-12-01), wgmma from head dim `wgmma_from` up
// and mma.sync below: the forward passes 64 (its warp-specialized TMA kernel beats mma.sync
// there by 1.29x), the backward 65 (its wgmma kernels are a third faster at 128 but slower at
// 64). MT_ATTENTION=simple, mma or wgmma asks for a path (tests, comparisons); wgmma falls back
// to mma where the chip or the build lacks it. getenv on every call, so that a test can switch
// paths at run time.
inline AttnPath attention_path(int hd, const void *const *ptrs, int n, int wgmma_from) {
    const char *e = getenv("MT_ATTENTION");
    if (e && strcmp(e, "simple") == 0) return PATH_SIMPLE;
    if (hd % 4 != 0 || hd > 256) return PATH_SIMPLE; // mma.sync's tiles end at 256
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i])) return PATH_SIMPLE;
    if (hd > 128 || (e && strcmp(e, "mma") == 0)) return PATH_MMA;
    const bool wanted = (e && strcmp(e, "wgmma") == 0) || hd >= wgmma_from;
    return wanted && cuda_attention_has_wgmma() ? PATH_WGMMA : PATH_MMA;
}

// The current device's SMs: how many CTAs of one-CTA-an-SM kernels are resident at once.
inline int sm_count() {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

// The (batch row, head) pairs the TMA forward works on at once, so that about 16 CTAs of each are
// resident and share their K and V tiles in L2: sm_count() / 16 from 128 tiles of 128 rows (16k
// tokens) on, 0 (no limit) below (2026-12-02, bench/RESULTS.md and docs/attention.md). The fused
// backward's chains want more as they grow (chain_resident, attention_bwd_tma.cu).
inline int pairs_in_flight(int tiles) {
    return tiles >= 128 ? sm_count() / 16 : 0;
}

inline int padded_hd(int hd) {
    return hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : hd <= 192 ? 192 : 256;
}

// Raise the kernel's dynamic shared-memory limit (above 48 KB needs it). Cheap, and setting it
// on every launch keeps the code free of static state.
template <typename K> void set_smem_limit(K kernel, size_t smem) {
    CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

// Per padded head size, chosen by timing on an H200 (B=8, T=2048): m-tiles per warp (MT; two
// where the registers allow), key tile BC of fwd and dq (32 at hd 128 keeps MT = 2 within 255
// registers), and the dk/dv kernel's query tile BQ. Shared memory: fwd and dq hold 64*MT query
// rows (q, and dout for dq) plus two K/V stages; dk/dv holds 64*MT K and V rows plus two stages
// of BQ q and dout rows with their lse, D and document starts.
// WIDE heads (192, 256; not timed yet): a warp's 16 x HDP fp32 accumulator alone takes HDP / 2
// registers, so one m-tile a warp, and the dk/dv kernel computes dk and dv in separate CTAs
// (KV_SPLIT: both would take HDP registers); at 256 the dq and dk/dv kernels stream 16-row
// tiles, so that every kernel's shared memory stays under 113 KB: two CTAs an SM.
template <int HDP> struct Cfg {
    static constexpr bool WIDE = HDP > 128, KV_SPLIT = WIDE;
    static constexpr int LD = HDP + 8, FWD_MT = WIDE ? 1 : 2, FWD_BC = HDP <= 64 ? 64 : 32;
    static constexpr int DQ_MT = FWD_MT, DQ_BC = HDP > 192 ? 16 : FWD_BC;
    static constexpr int KV_MT = HDP <= 64 ? 2 : 1, KV_BQ = HDP > 192 ? 16 : 32;
    static constexpr size_t fwd_smem =
        (size_t)(16 * WARPS * FWD_MT + 4 * FWD_BC) * LD * sizeof(bf16);
    static constexpr size_t dq_smem =
        (size_t)(2 * 16 * WARPS * DQ_MT + 4 * DQ_BC) * LD * sizeof(bf16);
    static constexpr size_t kv_smem =
        (size_t)(2 * 16 * WARPS * KV_MT + 4 * KV_BQ) * LD * sizeof(bf16) +
        4 * KV_BQ * sizeof(float) + 2 * KV_BQ * sizeof(int);
    static_assert(fwd_smem <= 227 * 1024 && dq_smem <= 227 * 1024 && kv_smem <= 227 * 1024,
                  "a CTA's shared memory is at most 227 KB");
};

__host__ __device__ inline int cdiv(int a, int b) {
    return (a + b - 1) / b;
}

inline unsigned simple_blocks(long rows) {
    return (unsigned)((rows + SIMPLE_WARPS - 1) / SIMPLE_WARPS);
}

} // namespace

#endif
