// The parts of a decoder layer on the GPU, one row of functions per kind, as layer_parts.h is
// on the CPU: layer_cuda.c runs the skeleton and takes each part's functions from the row of
// the layer's kind. A new attention or MLP kind is a new row here and its file (attn_cuda.c,
// mlp_cuda.c).
#ifndef MT_LAYER_PARTS_CUDA_H
#define MT_LAYER_PARTS_CUDA_H

#include "runtime/engine/cuda_state.h"

// One call of a layer: layer l on micro-batch m, its weights (and gradients, in a backward)
// bound, its input x, and the internals it works in: a kept slot's (keep >= 0), else the
// working set's, with an attention slot's output and statistics when att has one.
typedef struct {
    backend *b;
    int l, m, keep;
    att_ref att;
    const layer_w *w;
    const layer_g *g;
    const float *x;
    layer_saved *a;
} cu_layer_call;

// The chunks of a micro-batch: [t0, t0 + rows) for t0 = 0, seq_chunk, ...
#define FOR_CHUNKS(b, t0, rows)                                                                    \
    for (int t0 = 0, rows = mt_chunk_rows(tokens(b), 0, (b)->seq_chunk); t0 < tokens(b);           \
         t0 += (b)->seq_chunk, rows = mt_chunk_rows(tokens(b), t0, (b)->seq_chunk))

// Whether attention's output for this pass is at hand in its attention slot.
static inline int att_ready(int keep, att_ref att) {
    return keep < 0 && att.slot >= 0 && att.ready;
}

// The output projection the skeleton runs on the attention part's output, for a chunk: its
// input's rows of the chunk (bf16), weight and bias (NULL: none) and their gradients, its width;
// d_in: where the input's gradient goes over the micro-batch, fp32 when d_f32, else bf16.
typedef struct {
    const bf16 *in, *w, *bias;
    float *dw, *dbias;
    void *d_in;
    int d_f32, width;
} cu_attn_out;

// Micro-batch m's document starts (data.pack "documents", device), or NULL: one document a row,
// also where packing found no second document in any row of it (all starts 0: the same bits).
static inline const int32_t *cu_doc_starts(const backend *b, int m) {
    return b->doc_start && b->has_docs[m] ? b->doc_start + (size_t)m * tokens(b) : NULL;
}

// Attention's part. forward: its output a->att (and what its backward needs, and the output
// projection's input) for the whole micro-batch, the first norm included; with run_attention
// 0, the output is at hand: only what the backward and the projection's input need. prepare:
// before the MLP's backward, what the part's backward needs again (recomputed, or the first
// norm alone for a kept pass). backward: from the projection input's gradient (out's d_in), dx
// (holding the residual path) gains the part's gradient, weight gradients into g. out: the
// output projection for the chunk of `rows` tokens at t0.
typedef struct {
    void (*forward)(const cu_layer_call *k, int run_attention);
    void (*prepare)(const cu_layer_call *k);
    void (*backward)(const cu_layer_call *k, float *dx);
    cu_attn_out (*out)(const cu_layer_call *k, int t0, int rows);
} cu_attn_part;

// The MLP part, for the chunk of `rows` tokens at t0, with a->h (the residual stream after
// attention) and b->n2 (its norm) at hand. forward: out's chunk = h + MLP(n2), its internals in
// a's chunk buffers. backward: b->d_n2 = its gradient from dout's chunk, weight gradients into g
// (kept: a holds the pass's own internals; else they are recomputed).
typedef struct {
    void (*forward)(const cu_layer_call *k, float *out, int t0, int rows);
    void (*backward)(const cu_layer_call *k, const float *dout, int t0, int rows);
} cu_mlp_part;

// Refuses (one line, exit 2) a model the layer parts on the GPU cannot run: multi-head latent
// attention's values wider than its q and k heads, or heads over the attention kernels' 256
// (attn_mla_cuda.c).
void cu_layers_check(const mt_model *m);

extern const cu_attn_part attn_softmax_cuda; // attn_cuda.c
extern const cu_attn_part attn_gdn_cuda;     // attn_gdn_cuda.c
extern const cu_attn_part attn_mla_cuda;     // attn_mla_cuda.c
extern const cu_mlp_part mlp_dense_cuda;     // mlp_cuda.c
extern const cu_mlp_part mlp_moe_cuda;       // mlp_cuda.c, on moe_cuda.c

#endif
