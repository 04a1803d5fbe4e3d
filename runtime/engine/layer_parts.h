// The parts of a decoder layer on the CPU backend, one row of functions per kind: layer.c runs
// norm -> attention part -> residual -> norm -> MLP part -> residual, and takes each part's
// functions from the row of the layer's kind (model.h's mt_layer_kind). A new attention or MLP
// kind is a new row here and its file (attn_cpu.c, mlp_cpu.c).
#ifndef MT_LAYER_PARTS_H
#define MT_LAYER_PARTS_H

#include "runtime/engine/layer_scratch.h"

// One call of a layer: its config and kinds, weights (and gradients, in a backward), working
// set and input; chunk: the tokens of each chunk of its token-wise work (mt_chunk_of).
typedef struct {
    const mt_config *c;
    const mt_layer_kind *kind;
    const layer_params *w, *dw;
    layer_scratch *s;
    const float *x;
    int chunk;
} layer_call;

// The softmax kernels' tensors in the working set: q, k, v, the output and its statistics, their
// gradients, and the sinks where the layer has them (softmax attention and MLA alike).
static inline attn_tensors layer_attn_tensors(const layer_call *k) {
    const layer_scratch *s = k->s;
    return (attn_tensors){.q = s->q,
                          .k = s->k,
                          .v = s->v,
                          .out = s->att,
                          .lse = s->lse,
                          .dout = s->d_att,
                          .dq = s->d_q,
                          .dk = s->d_k,
                          .dv = s->d_v,
                          .sinks = k->w->sinks,
                          .dsinks = k->dw ? k->dw->sinks : NULL};
}

// The output projection the skeleton runs on the attention part's output, by chunks (o_proj, or
// Gated DeltaNet's out_proj): its input [n, width] and that input's gradient, its weight and
// bias (NULL: none) and their gradients (in a backward).
typedef struct {
    float *in, *d_in;
    const float *w, *b;
    float *dw, *db;
    int width;
} attn_out;

// Attention's part: forward fills s->att (and what its backward needs) for the whole
// micro-batch from x, the first norm included, and the output projection's input; have_att:
// s->att is at hand, only what the backward needs is redone. backward: from the projection
// input's gradient, dx = s->d_h + the part's gradient (the first norm's included), weight
// gradients into dw. out: the part's output projection.
typedef struct {
    void (*forward)(const layer_call *k, int have_att);
    void (*backward)(const layer_call *k, float *dx);
    attn_out (*out)(const layer_call *k);
} attn_part;

// The MLP part, for the chunk of `rows` tokens at t0: forward writes out = MLP(s->n2);
// backward adds d_n2 += its gradient from dout, weight gradients into dw.
typedef struct {
    void (*forward)(const layer_call *k, float *out, int t0, int rows);
    void (*backward)(const layer_call *k, const float *dout, int t0, int rows);
} mlp_part;

extern const attn_part attn_softmax_cpu; // attn_cpu.c
extern const attn_part attn_gdn_cpu;     // attn_gdn_cpu.c
extern const attn_part attn_mla_cpu;     // attn_mla_cpu.c
extern const mlp_part mlp_dense_cpu;     // mlp_cpu.c
extern const mlp_part mlp_moe_cpu;       // mlp_cpu.c, on moe_mlp.c

#endif
