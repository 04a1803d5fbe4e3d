// A MoE MLP on the GPU (moe_cuda.c), as the CUDA layer template calls it: its input is the
// second norm's output in b->n2 for a chunk of `rows` tokens at token t0 of micro-batch m.
#ifndef MT_MOE_CUDA_H
#define MT_MOE_CUDA_H

#include "runtime/engine/cuda_state.h"

void cu_moe_alloc(backend *b); // the working set of one chunk and the routing statistics
// out[rows, D] += the MoE MLP of n2 (the routed experts and the shared one); records layer l's
// routing statistics for micro-batch m.
void cu_moe_forward(backend *b, int l, int m, const layer_w *w, float *out, int t0, int rows);
// d_n2[rows, D] = its gradient from dy (the MLP output's), recomputing the routing and the
// experts' internals (the chunk's forward must have run this step: its counts are reused); the
// weight gradients accumulate into g.
void cu_moe_backward(backend *b, int l, int m, const layer_w *w, const layer_g *g, const float *dy,
                     float *d_n2, int t0, int rows);
// After micro-batch m's forward: its load-balancing loss (summed for cu_moe_take_aux) and its
// gradient, daux times that of the loss, for its backwards.
void cu_moe_head(backend *b, int m, float daux);
// backend_ops.set_frozen: layer l's frozen image (its correction bias) onto the device.
void cu_moe_set_frozen(backend *b, int l, const float *image);
double cu_moe_take_aux(backend *b, int64_t *load);

#endif
