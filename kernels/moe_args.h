// The choices of a MoE layer that both backends' kernels take (kernels/cpu/moe.c,
// swiglu_clamped.c and their CUDA twins): plain C, shared by the C and CUDA headers.
#ifndef MT_MOE_ARGS_H
#define MT_MOE_ARGS_H

// The most experts a MoE layer may have (model.experts), for both backends' fixed arrays: the
// CPU's per-token stack arrays, the CUDA router's per-lane registers (one per 32 experts) and its
// shared-memory rows. 512: Qwen3.5-397B-A17B's and Qwen3-Next-80B-A3B's experts.
#define MOE_MAX_EXPERTS 512

// How a token's k weights come from its router logits; the first two pick the k most probable
// experts, the last the k largest logits (the same k but for near-ties).
enum {
    MOE_WEIGHTS_PROBS,  // their probabilities in the softmax over every expert
    MOE_WEIGHTS_RENORM, // those divided by their sum (norm_topk_prob)
    MOE_WEIGHTS_TOP_K,  // the softmax over the k chosen logits alone (gpt-oss's router)
};

// DeepSeek-V3's sigmoid router (kernels/moe_router.h says what it computes).
typedef struct {
    const float *correction; // [E] e_score_correction_bias, for the choice only (NULL: none)
    int groups, topk_groups; // the experts' groups, of which the best topk_groups are kept
    int renorm;              // norm_topk_prob: the k weights divided by their sum (+ 1e-20)
    float scale;             // routed_scaling_factor: the weights' factor
} moe_sigmoid_route;

// gpt-oss's experts' clamped SwiGLU on de-interleaved gate and up:
// out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = clamp(gate, max = limit).
typedef struct {
    float alpha, limit; // config.json's swiglu_alpha (gpt-oss: 1.702) and swiglu_limit (7.0)
} swiglu_clamp;

#endif
