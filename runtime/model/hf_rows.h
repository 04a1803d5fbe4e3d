// A Hugging Face architecture as a data row (hf_family.c's table), private to runtime/model/:
// the columns, read by hf_family.c and by the parts of the reader and writer in files of their
// own (hf_window.c).
#ifndef MT_HF_ROWS_H
#define MT_HF_ROWS_H

#include "runtime/model/hf_json.h"

enum { WINDOW_NONE, WINDOW_MISTRAL, WINDOW_FLAG, WINDOW_PLAIN, WINDOW_OSS };

typedef struct {
    const char *arch, *model_type;
    int kv_default;       // num_key_value_heads left out: this many (0: the heads)
    int head_dim_default; // head_dim left out: this (0: hidden_size / num_attention_heads)
    double eps_default, theta_default;
    int window;   // how sliding_window is read (sliding_window() below)
    int qkv_bias; // 1: q/k/v biases fixed by the architecture; 2: its qkv_bias key, default on
    int attention_bias; // its attention_bias key puts biases on q, k, v and o_proj (Llama)
    int bias_default;   // ... and is on when left out (gpt-oss)
    int qk_norm;        // QK_NONE, QK_HEAD or QK_ALL
    // Mixture of Experts: NULL for a dense family. Its key for the number of experts, the other
    // name its config class's attribute_map gives it (NULL: none), the experts' width, whether the
    // chosen weights are always renormalised (else norm_topk_prob), whether it has a shared expert
    // and sparse steps (decoder_sparse_step, mlp_only_layers), and how the hub names the tensors.
    const char *experts_key, *experts_alias, *expert_ffn_key;
    int always_renorm, shared, sparse_steps;
    int renorm_default; // norm_topk_prob left out: this
    int shared_default; // shared_expert_intermediate_size left out: this
    int no_ffn_key;     // no intermediate_size (every layer MoE): ffn_dim is the experts'
    int moe_names;      // MOE_NAMES_MLP, MOE_NAMES_BLOCK_SPARSE or MOE_NAMES_GPT_OSS
    double aux_coef_default;
    // gpt-oss: attention sinks, the router's bias and softmax over the top k, the experts'
    // biases and clamped SwiGLU, YaRN when config.json names no rope, MXFP4 experts allowed
    int oss;
    // Qwen3.5 / Qwen3-Next (hf_family_gdn.c): Gated DeltaNet layers beside gated softmax ones,
    // zero-centred norms; gdn_fused: Qwen3-Next's fused in_proj_qkvz and in_proj_ba; vlm: a
    // ConditionalGeneration checkpoint, its language model in text_config (model_type is
    // text_config's) and under model.language_model.
    int gdn, gdn_fused, vlm;
} family;

#endif
