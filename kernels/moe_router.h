// DeepSeek-V3's router for one token (transformers' DeepseekV3TopkRouter and Glm4MoeTopkRouter),
// written once for both backends: kernels/cpu/moe_sigmoid.c runs it per token on the CPU and
// kernels/cuda/moe_sigmoid.cu per thread on the GPU, so that both choose by the same rules.
//
// Forward: s = sigmoid(z) in fp32; the choice ranks c = s + correction (the bias changes the
// choice only). With groups > 1 the E experts fall in `groups` groups of E / groups, each
// scored by the sum of its two largest c; the topk_groups best groups are kept and the others'
// experts can not be chosen (transformers fills them with -inf). The k largest c among the kept
// experts are chosen; equal values go to the lower index (group or expert), where torch.topk
// leaves the order unspecified. Their weights are their plain scores s, divided by their sum +
// 1e-20 with renorm (norm_topk_prob), times scale (routed_scaling_factor).
// Backward: the gradient of the weights reaches the k chosen logits through s' = s (1 - s);
// none reaches the correction bias, the choice or the unchosen logits.
#ifndef MT_MOE_ROUTER_H
#define MT_MOE_ROUTER_H

#include "kernels/moe_args.h"

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif

#ifndef MOE_MAX_EXPERTS
#define MOE_MAX_EXPERTS 256
#endif

// The largest of v[0..n) whose flag in `taken` is clear (ties to the lower index).
static inline MOE_HD int moe_best_untaken(const float *v, const unsigned char *taken, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

// taken[e] = 1 for the experts outside the topk_groups best groups of c (none with one group).
static inline MOE_HD void moe_mask_groups(unsigned char *taken, const float *c, int E,
                                          const moe_sigmoid_route *r) {
    for (int e = 0; e < E; e++) taken[e] = 0;
    if (r->groups <= 1) return;
    int per = E / r->groups;
    float score[MOE_MAX_EXPERTS];
    unsigned char kept[MOE_MAX_EXPERTS];
    for (int g = 0; g < r->groups; g++) { // the sum of the group's top 2, as topk(2).sum()
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            if (c[e] > a)
                b = a, a = c[e];
            else if (c[e] > b)
                b = c[e];
        }
        score[g] = a + b, kept[g] = 0;
    }
    unsigned char seen[MOE_MAX_EXPERTS] = {0};
    for (int j = 0; j < r->topk_groups; j++) {
        int g = moe_best_untaken(score, seen, r->groups);
        seen[g] = kept[g] = 1;
    }
    for (int e = 0; e < E; e++) taken[e] = !kept[e / per];
}

static inline MOE_HD float moe_sigmoid_of(float z) {
    return 1.0f / (1.0f + expf(-z));
}

// s[E] = the token's scores, idx[k] the chosen experts (best first), w[k] their weights.
static inline MOE_HD void moe_sigmoid_route_token(float *s, int32_t *idx, float *w, const float *z,
                                                  int E, int k, const moe_sigmoid_route *r) {
    float c[MOE_MAX_EXPERTS];
    unsigned char taken[MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) {
        s[e] = moe_sigmoid_of(z[e]);
        c[e] = r->correction ? s[e] + r->correction[e] : s[e];
    }
    moe_mask_groups(taken, c, E, r);
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int e = moe_best_untaken(c, taken, E);
        taken[e] = 1, idx[j] = e;
        sum += w[j] = s[e];
    }
    for (int j = 0; j < k; j++) {
        if (r->renorm) w[j] /= sum + 1e-20f;
        w[j] *= r->scale;
    }
}

// dz[E] += the token's logit gradients from dw[k], its weights' gradients.
static inline MOE_HD void moe_sigmoid_route_token_backward(float *dz, const float *dw,
                                                           const float *s, const int32_t *idx,
                                                           int k, const moe_sigmoid_route *r) {
    float sum = 0.0f, dot = 0.0f;
    for (int j = 0; j < k; j++) sum += s[idx[j]], dot += dw[j] * s[idx[j]];
    float den = sum + 1e-20f;
    for (int j = 0; j < k; j++) {
        float sj = s[idx[j]], ds = r->renorm ? (dw[j] - dot / den) / den : dw[j];
        dz[idx[j]] += r->scale * ds * sj * (1.0f - sj);
    }
}

#endif
