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
    int window; // how sliding_window is read (sliding_window() below)
    // 1: q/k/v biases fixed by the architecture; 2: its qkv_bias key, default on; 3: its
    // attention_bias key, on q, k and v only (GLM-4.5)
    int qkv_bias;
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
    int moe_names;      // MOE_NAMES_MLP, MOE_NAMES_BLOCK_SPARSE, _GPT_OSS or _DEEPSEEK
    double aux_coef_default;
    // gpt-oss: attention sinks, the router's bias and softmax over the top k, the experts'
    // biases and clamped SwiGLU, YaRN when config.json names no rope, MXFP4 experts allowed
    int oss;
    // Qwen3.5 / Qwen3-Next (hf_family_gdn.c): Gated DeltaNet layers beside gated softmax ones,
    // zero-centred norms; gdn_fused: Qwen3-Next's fused in_proj_qkvz and in_proj_ba; vlm: a
    // ConditionalGeneration checkpoint, its language model in text_config (model_type is
    // text_config's) and under model.language_model.
    int gdn, gdn_fused, vlm;
    // sigmoid_router (hf_family_mla.c): the MoE of DeepSeek-V3 and its kin, n_shared_experts
    // ungated, dense layers first (first_k_dense_replace; dense_list: mlp_layer_types instead),
    // the sigmoid router with its correction bias, groups and scale; mla: multi-head latent
    // attention; qk_norm_key: the keys use_qk_norm and partial_rotary_factor (0.5 when left out).
    int sigmoid_router, dense_list, mla, qk_norm_key;
    int dense_first_default; // first_k_dense_replace left out: this
    int groups_default, topk_groups_default;
    double scale_default;                        // routed_scaling_factor left out: this
    int q_rank_default, nope_default, v_default; // q_lora_rank, qk_nope_head_dim, v_head_dim
} family;

// The DeepSeek-like families' keys (hf_family_mla.c), after the shape and the experts are read;
// sigmoid_moe_write: the same keys written back, and whether m's fields fit row f (its dense layers
// first, its shared experts whole multiples of an expert).
int sigmoid_moe_read(const json_ctx *j, const family *f, mt_model *m);
void sigmoid_moe_write(cJSON *r, const family *f, const mt_model *m);
int sigmoid_moe_matches(const family *f, const mt_model *m);

#endif
