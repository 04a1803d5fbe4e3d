// The scratch the CUDA kernels ask their callers for, sized in plain C (no CUDA types): the CUDA
// backend allocates by these functions, the plan (runtime/plan, built without CUDA) counts by
// them, and the kernels lay their scratch out by them, so each size is written once.
#ifndef MT_KERNELS_SCRATCH_H
#define MT_KERNELS_SCRATCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_RMSNORM_SLAB 128   // rmsnorm.cu: tokens per partial dw sum
#define MT_BIAS_SLABS 64      // bias.cu: row slabs of the backward's first pass
#define MT_DISPATCH_TILE 2048 // moe.cu: (token, slot) pairs per dispatch tile
#define MT_SCRATCH_ALIGN 256  // each part of a scratch starts on this boundary

// rmsnorm.cu's backward: a partial weight gradient [slabs of n tokens, dim].
size_t cuda_rmsnorm_scratch_floats(int n, int dim);
// bias.cu's backward: partial column sums [MT_BIAS_SLABS, cols].
size_t cuda_bias_scratch_floats(int cols);
// moe.cu's dispatch: an int32 count per expert for each tile of (token, slot) pairs.
long cuda_moe_dispatch_tiles(int n, int k);
size_t cuda_moe_dispatch_scratch_bytes(int n, int E, int k);
// The classifier's chunk (classifier.cu) holds at most this many tokens. Each chunk reads and
// writes the weight gradient in fp32 (vocab x dim x 8 bytes: 10 GB at Qwen3.5's 248,320 x 5,120)
// and reads the weights twice; from about this many rows its products take longer than that
// traffic. Its logits then take vocab x 6 bytes a row: 3 GB at 248,320 words, 0.4 GB at 32,000.
#define MT_CLASSIFIER_ROWS 2048
// classifier.cu: a chunk's fp32 logits and bf16 dlogits, rows padded to 8 columns, each part
// MT_SCRATCH_ALIGN-aligned.
long cuda_classifier_padded_vocab(int vocab);
size_t cuda_classifier_logits_bytes(int chunk, int vocab);
size_t cuda_classifier_scratch_bytes(int chunk, int dim, int vocab);

// The attention scratch (attention.cuh's attention_scratch lays it out): D = rowsum(dout * out)
// [B, H, T], then the fused backward's fp32 dq accumulator [B, T, heads of a run, hd] and its
// turn counters, two per (b, h, 64-query tile), then where cuda_attention_padded_ld asks for
// them the padded copies of a run's q and dout [B, T, heads of the run, ld] and k and v
// [B, T, kv heads of the run, ld]; each part MT_SCRATCH_ALIGN-aligned.
typedef struct {
    size_t d_bytes, dq_bytes, turn_bytes, q_bytes, kv_bytes, total;
} cuda_attention_scratch_parts;
// The fused backward's fp32 dq accumulator holds at most this many bytes (a sequence of 512k
// tokens of a 7B would need 8 GiB): beyond, it runs over kv heads a few at a time.
#define MT_DQ_ACC_CAP (1ull << 30)
// kv heads per run of the fused backward: as many as keep the accumulator within the cap.
// MT_ATTN_DQ_CAP=BYTES sets another cap (tests: 1 makes a run of every kv head).
int cuda_attention_run_kv_heads(int B, int T, int H, int KV, int hd);
// The Hopper TMA kernels read heads that start on 16-byte boundaries. Head dims of 8k + 4 (100:
// the 3.4B's 3200 / 32) do not: they run on copies of a run of heads zero-padded to ld = 128
// elements, the hd 128 kernels' tiles. (ld = hd + 4 would do for TMA, but boxes over rows that
// are not 128-byte aligned, and past the end of the head, ran at half the speed: 2026-12-02,
// commit f516f4f, bench/RESULTS.md.) 0 where no copy is needed.
int cuda_attention_padded_ld(int hd);
cuda_attention_scratch_parts cuda_attention_scratch_layout(int B, int T, int H, int KV, int hd);
size_t cuda_attention_scratch_bytes(int B, int T, int H, int KV, int hd);

#ifdef __cplusplus
}
#endif

#endif
