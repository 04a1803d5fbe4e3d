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

// Attention's part: forward fills s->att (and what its backward needs) for the whole
// micro-batch from x, the first norm included; have_att: s->att is at hand, only what the
// backward needs is redone. backward: from s->d_att, dx = s->d_h + the part's gradient (the
// first norm's included), weight gradients into dw.
typedef struct {
    void (*forward)(const layer_call *k, int have_att);
    void (*backward)(const layer_call *k, float *dx);
} attn_part;

// The MLP part, for the chunk of `rows` tokens at t0: forward writes out = MLP(s->n2);
// backward adds d_n2 += its gradient from dout, weight gradients into dw.
typedef struct {
    void (*forward)(const layer_call *k, float *out, int t0, int rows);
    void (*backward)(const layer_call *k, const float *dout, int t0, int rows);
} mlp_part;

extern const attn_part attn_softmax_cpu; // attn_cpu.c
extern const mlp_part mlp_dense_cpu;     // mlp_cpu.c
extern const mlp_part mlp_moe_cpu;       // mlp_cpu.c, on moe_mlp.c

#endif
