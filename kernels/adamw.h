// AdamW over one contiguous shard, with exactly PyTorch's semantics (torch.optim.AdamW,
// single-tensor path): decoupled weight decay, then the moment updates, then the bias-corrected
// step. The gradient is first scaled by the clip coefficient of clip_grad_norm_.
#ifndef MT_ADAMW_H
#define MT_ADAMW_H

#include "kernels/bf16.h"
#include <stddef.h>

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;         // 1-based step count t, for bias correction
    float grad_scale; // clip coefficient (1 when not clipping)
} adamw_params;

// One fused pass: reads p, m, v, g; writes p, m, v and the bf16 wire copy of p.
void adamw_update(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                  const adamw_params *hp);

// The clip coefficient of torch.nn.utils.clip_grad_norm_(max_norm) for a total norm.
float clip_coefficient(double total_norm, double max_norm);

// Sum of squares in double, in index order (deterministic).
double sum_of_squares(const float *x, size_t n);

#endif
