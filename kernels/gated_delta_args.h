// One gated delta rule call's shape (Qwen3.5 / Qwen3-Next linear attention, transformers'
// torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule): the same description for
// every backend. The tensors come in each backend's own struct (gdn_tensors, fp32,
// kernels/cpu/kernels_gdn.h).
//
// q, k [B, T, HK, dk]; v, out [B, T, H, dv]; g, beta [B, T, H]. Grouped value attention: v head
// h reads q/k head h / (H / HK), transformers' repeat_interleave of q and k. Per (b, h) the state
// S [dk, dv] starts at 0 and for each token t
//   S = exp(g_t) S;  delta = beta_t (v_t - S^T k_t);  S += k_t delta^T;  out_t = scale S^T q_t.
// With packed documents the state is reset to 0 before each document's first token: token t
// starts a document when doc_start[b * T + t] == t (doc_start as in kernels/attention_args.h).
#ifndef MT_GATED_DELTA_ARGS_H
#define MT_GATED_DELTA_ARGS_H

#include <stdint.h>

typedef struct {
    int B, T, H, HK, dk, dv;  // H value heads, HK query/key heads, H % HK == 0
    const int32_t *doc_start; // [B, T], or NULL: every row is one document from 0
    float scale;              // the query's scale: Qwen3.5 and Qwen3-Next 1 / sqrt(dk)
} gdn_args;

// Tokens per chunk of the chunked form (transformers' chunk_size). The chunks of a document
// start at its first token, so that a document's result does not depend on where it is packed.
#define GDN_CHUNK 64

// The offsets are shared with the CUDA kernels (kernels/cuda/gated_delta.cu).
#ifdef __CUDACC__
#define GDN_HOST_DEVICE __host__ __device__
#else
#define GDN_HOST_DEVICE
#endif

static inline GDN_HOST_DEVICE long gdn_qk_off(const gdn_args *a, int b, int t, int hk) {
    return (((long)b * a->T + t) * a->HK + hk) * a->dk;
}
static inline GDN_HOST_DEVICE long gdn_v_off(const gdn_args *a, int b, int t, int h) {
    return (((long)b * a->T + t) * a->H + h) * a->dv;
}
static inline GDN_HOST_DEVICE long gdn_gate_off(const gdn_args *a, int b, int t, int h) {
    return ((long)b * a->T + t) * a->H + h;
}

// Whether token t of row b starts a document (the state is reset before it).
static inline int gdn_starts_document(const gdn_args *a, int b, int t) {
    return t == 0 || (a->doc_start && a->doc_start[(long)b * a->T + t] == t);
}

// The end (exclusive) of the chunk of row b that starts at t0: at most GDN_CHUNK tokens, the
// row's end, or the next document's first token, whichever comes first.
static inline int gdn_chunk_end(const gdn_args *a, int b, int t0) {
    int end = t0 + GDN_CHUNK < a->T ? t0 + GDN_CHUNK : a->T;
    for (int t = t0 + 1; t < end; t++)
        if (gdn_starts_document(a, b, t)) return t;
    return end;
}

#endif
