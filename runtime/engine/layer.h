// The decoder-layer template: the kernel sequence of one layer, its attention and MLP parts
// chosen by the layer's kinds (layer_parts.h), stateless apart from the weight pointers bound
// per call. Forward and backward side by side; the backward recomputes the layer's internals
// from its boundary activation.
#ifndef MT_LAYER_H
#define MT_LAYER_H

#include "runtime/engine/layer_scratch.h"

// out = layer(x); the internals stay in s for a backward that follows. have_att: s->att and
// s->lse already hold attention's output for this x and w, and the attention kernel is skipped.
// l: the layer's index, whose kinds (mt_layer_kind_of) pick the parts it runs.
void layer_forward(const mt_config *c, int l, const layer_params *w, layer_scratch *s,
                   const float *x, float *out, int have_att);
// Given dout, accumulates the weight gradients into dw and writes dx (overwritten). Expects s
// to hold the internals of layer_forward on the same x and w.
void layer_backward(const mt_config *c, int l, const layer_params *w, const layer_params *dw,
                    layer_scratch *s, const float *x, const float *dout, float *dx);

#endif
