// A decoder layer and the head on the GPU (layer_cuda.c), as the CUDA backend's operations
// call them.
#ifndef MT_LAYER_CUDA_H
#define MT_LAYER_CUDA_H

#include "runtime/engine/cuda_state.h"

void cu_layer_forward(backend *b, int l, int m, const void *wbuf, const float *x, float *out,
                      int keep, att_ref att);
void cu_layer_backward(backend *b, int l, int m, const void *wbuf, float *dwbuf, const float *x,
                       const float *dout, float *dx, int keep, att_ref att);
void cu_head(backend *b, const void *head_w, const void *cls_w, float *head_g, float *cls_g,
             const float *x, float *dx, int m, float dloss);

#endif
