// One attention call's shape and the keys each query sees: the same description for the CPU
// reference (kernels/cpu/attention.c) and the CUDA kernels (kernels/cuda/attention*.cu). The
// tensors come in each backend's own struct (attn_tensors, fp32, kernels_cpu.h;
// cuda_attn_tensors, bf16, kernels_cuda.h).
//
// Causal grouped-query attention, scale 1/sqrt(hd) (or `scale`): q [B, T, H, hd], k [B, T, KV,
// hd]; v [B, T, KV, dv], out [B, T, H, dv] (dv: hd unless set; multi-head latent attention's values
// are narrower than its queries and keys; the CPU reference takes any dv, the CUDA kernels dv = hd
// only); lse [B, H, T]; query head h reads kv head h / (H / KV). Query t of row b sees the keys
// first .. t, where first is the later of
// - the start of its document, doc_start[b * T + t] (packed documents, data.pack), non-decreasing
//   along a row and <= t; NULL: every row is one document from 0. On CUDA a device pointer;
// - with a sliding window of `window` keys (0: none), t - window + 1: transformers'
//   sliding-window causal mask, kv_idx > q_idx - sliding_window (masking_utils.py).
// So first is non-decreasing in t, and the queries that see key j are j .. some end: contiguous.
#ifndef MT_ATTENTION_ARGS_H
#define MT_ATTENTION_ARGS_H

#include <stdint.h>

typedef struct {
    int B, T, H, KV, hd;
    const int32_t *doc_start; // [B, T], or NULL
    int window;               // the most keys a query sees, itself included; 0: no limit
    int dv;                   // the values' and the output's head dim; 0: hd
    float scale;              // the scores' scale; 0: 1/sqrt(hd)
} attn_args;

// RoPE of q and k before attention, the same on both sides (kernels/cpu/rope.c,
// kernels/cuda/rope.cu): in each head of x [B, T, heads, hd], the first rot elements turn
// (rotate_half: element i pairs with i + rot/2, i < rot/2) and the rest pass unchanged
// (transformers' partial_rotary_factor: rot = hd x factor; rot = hd turns all of it). Row (b, t)
// turns by the angle (float)pos * inv_freq[i], pos = t, or with packed documents
// t - doc_start[b * T + t]. cos and sin are multiplied by scale, as transformers does with
// YaRN's attention factor (1: none, exactly the plain rotation). Multi-head latent attention
// turns the last rot elements of a head instead: they start at `off` (0: the first), and with
// `interleave` (DeepSeek's rope_interleave) element 2i pairs with 2i + 1, rather than i with
// i + rot/2. transformers' interleaved rotation also de-interleaves its output (evens, then odds);
// the order within the rotated part is the same for q and k, so their dot products, and all that
// attention computes from them, do not depend on it: ours keeps the pairs in place.
typedef struct {
    const float *inv_freq; // [rot / 2]; on CUDA a device pointer
    float scale;
    int B, T, hd, rot;        // rot: even, 2 <= rot <= hd - off
    const int32_t *doc_start; // [B, T], or NULL; on CUDA a device pointer
    int off, interleave;      // the rotated part's first element; pairs (2i, 2i + 1)
} rope_args;

#ifdef __CUDACC__
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

// The first key query t may see under the sliding window (0: none), documents aside.
static inline ATTN_HOST_DEVICE int attn_window_first(int t, int window) {
    return window > 0 && t >= window ? t - window + 1 : 0;
}

// (query, key) pairs of one (b, h) that the mask keeps, documents aside, as FLOP counts take
// them: T^2 / 2 causal, T W - W^2 / 2 with a window of W < T (the same at W = T).
static inline double attn_score_pairs(int T, int window) {
    const double t = T, w = window > 0 && window < T ? window : T;
    return t * w - w * w / 2.0;
}

#endif
