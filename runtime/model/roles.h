// Every tensor a decoder layer may hold, written once: its role, its field in the binding
// structs of both backends, the part of the layer it belongs to, its Hugging Face names, its
// shape and its initialization. model.c walks this table to lay out a layer's flat group (in
// the table's order, so a dense Llama layer's nine tensors come first and keep their offsets),
// and the binders of both backends (layer_params here, layer_w and layer_g on CUDA) are
// generated from it.
#ifndef MT_ROLES_H
#define MT_ROLES_H

// Which layers hold a role: every layer, or only where the layer's kinds and the model's
// options call for it (model.c's role_present).
enum {
    ROLE_ALWAYS,
    ROLE_SOFTMAX,     // the attention kind is softmax: its q, k, v and o projections
    ROLE_DENSE_MLP,   // the MLP kind is dense
    ROLE_MOE,         // the MLP kind is MoE: its router
    ROLE_EXPERTS,     // the MLP kind is MoE: one matrix per expert, expert-major
    ROLE_QKV_BIAS,    // model.qkv_bias
    ROLE_QK_NORM,     // model.qk_norm is "head" or "all"
    ROLE_SHARED,      // the MLP kind is MoE with a shared expert (model.shared_ffn_dim > 0)
    ROLE_O_BIAS,      // model.o_bias
    ROLE_SINKS,       // model.attn_sinks
    ROLE_ROUTER_BIAS, // the MLP kind is MoE with model.router_bias
    ROLE_EXPERT_BIAS, // the MLP kind is MoE with model.expert_bias: one vector per expert
    ROLE_GDN,         // the attention kind is Gated DeltaNet
    ROLE_MLA,         // the attention kind is MLA
    ROLE_MLA_Q,       // MLA without a low-rank query path (model.mla_q_rank 0): q_proj
    ROLE_MLA_QLORA,   // MLA with one (model.mla_q_rank > 0)
    ROLE_ROUTER_CORR, // the MLP kind is MoE with model.router_correction (frozen)
    ROLE_SHARED_GATE, // a shared expert with its sigmoid gate (model.shared_gate, Qwen2-MoE)
};

// How the hub's tensor holds one of ours (io/ reads and writes it): the whole tensor as it is,
// one expert's part of a fused [E, ...] tensor (under moe_names "gpt_oss"), or the same elements
// in another shape.
enum {
    HUB_PLAIN,        // the same shape and order
    HUB_GATE_UP_EVEN, // gate_up_proj [E, d, 2f]: expert e's gate [f, d] is [e, :, 0::2]^T
    HUB_GATE_UP_ODD,  // ... and its up [f, d] is [e, :, 1::2]^T
    HUB_EXPERTS_T,    // down_proj [E, f, d]: expert e's down [d, f] is [e]^T
    HUB_BIAS_EVEN,    // gate_up_proj_bias [E, 2f]: expert e's gate bias [f] is [e, 0::2]
    HUB_BIAS_ODD,     // ... and its up bias [e, 1::2]
    HUB_STACKED,      // down_proj_bias [E, d]: expert e's is [e]
    HUB_CONV1D,       // a depthwise conv1d weight [channels, 1, taps]: ours [channels, taps]
    // Qwen3-Next's fused Gated DeltaNet projections, rows grouped by key head g (io/hub_layout.c):
    // in_proj_qkvz's group g is [q_g, k_g, v_g, z_g] (k_dim, k_dim, r x v_dim, r x v_dim rows,
    // r = v_heads / k_heads), in_proj_ba's [b_g, a_g] (r rows each)
    HUB_QKVZ_QKV, // our in_proj_qkv [q | k | v], from in_proj_qkvz
    HUB_QKVZ_Z,   // our in_proj_z, from in_proj_qkvz
    HUB_BA_B,     // our in_proj_b, from in_proj_ba
    HUB_BA_A,     // our in_proj_a, from in_proj_ba
    // Experts fused as transformers 5 holds them (model.hub_experts_fused), each expert's
    // tensors whole and in our layout inside its slab
    HUB_FUSED_GATE, // gate_up_proj [E, 2f, d]: expert e's gate [f, d] is [e, :f]
    HUB_FUSED_UP,   // ... and its up [e, f:]
    HUB_FUSED_DOWN, // down_proj [E, d, f]: expert e's down [d, f] is [e]
};

// DeepSeek's names for its shared experts (moe_names "deepseek"): X(role, hub name, HUB_*
// layout).
#define MT_DEEPSEEK_SHARED_NAMES(X)                                                                \
    X(T_SH_GATE, "model.layers.%d.mlp.shared_experts.gate_proj.weight", HUB_PLAIN)                 \
    X(T_SH_UP, "model.layers.%d.mlp.shared_experts.up_proj.weight", HUB_PLAIN)                     \
    X(T_SH_DOWN, "model.layers.%d.mlp.shared_experts.down_proj.weight", HUB_PLAIN)

// The roles that are never trained (transformers' buffers): the optimizer leaves their master
// weights, m and v exactly as loaded, whatever the gradient or the weight decay, and the export
// writes them back unchanged. X(role).
#define MT_FROZEN_ROLES(X) X(T_ROUTER_CORR)

// Qwen3-Next's names for the roles its fused projections hold (model.hub_gdn_fused): X(role,
// hub name, HUB_* layout).
#define MT_GDN_FUSED_NAMES(X)                                                                      \
    X(T_LA_QKV, "model.layers.%d.linear_attn.in_proj_qkvz.weight", HUB_QKVZ_QKV)                   \
    X(T_LA_Z, "model.layers.%d.linear_attn.in_proj_qkvz.weight", HUB_QKVZ_Z)                       \
    X(T_LA_B, "model.layers.%d.linear_attn.in_proj_ba.weight", HUB_BA_B)                           \
    X(T_LA_A, "model.layers.%d.linear_attn.in_proj_ba.weight", HUB_BA_A)

// A shape's extents, resolved against the config by model.c's dim_of.
enum {
    DIM_NONE, // cols of a vector
    DIM_ONE,
    DIM_D,       // model.dim
    DIM_Q,       // heads x head_dim
    DIM_KV,      // kv_heads x head_dim
    DIM_F,       // ffn_dim
    DIM_E,       // experts
    DIM_FE,      // moe_ffn_dim
    DIM_S,       // shared_ffn_dim
    DIM_QN,      // q_norm's width: head_dim ("head") or heads x head_dim ("all")
    DIM_KN,      // k_norm's width: head_dim ("head") or kv_heads x head_dim ("all")
    DIM_H,       // heads
    DIM_QW,      // q_proj's rows: heads x head_dim, twice that with attn_output_gate
    DIM_LA_CONV, // Gated DeltaNet's q, k, v channels: 2 x k_heads x k_dim + v_heads x v_dim
    DIM_LA_V,    // its value width: v_heads x v_dim
    DIM_LA_H,    // its value heads
    DIM_LA_DV,   // its value head dim (the gated norm's width)
    DIM_LA_TAPS, // its conv1d's taps (linear_conv)
    DIM_MLA_QR,  // MLA's query rank (mla_q_rank)
    DIM_MLA_KVR, // its latent's width (mla_kv_rank)
    DIM_MLA_KVA, // kv_a_proj_with_mqa's rows: mla_kv_rank + mla_rope_dim
    DIM_MLA_Q,   // the queries: heads x (mla_nope_dim + mla_rope_dim)
    DIM_MLA_KVB, // kv_b_proj's rows: heads x (mla_nope_dim + mla_v_dim)
    DIM_MLA_O,   // the attention's output: heads x mla_v_dim
};

// X(field, ROLE, present, hub name, hub name under moe_names "block_sparse_moe" (NULL: the
// same), hub name under moe_names "gpt_oss" (NULL: the same) and the HUB_* layout of that name
// (of the only name, where the row has no gpt_oss one), rows, cols, init). "%d" is the layer's
// index, "%e" the expert's.
#define MT_LAYER_ROLES(X)                                                                          \
    X(attn_norm, T_ATTN_NORM, ROLE_ALWAYS, "model.layers.%d.input_layernorm.weight", NULL, NULL,   \
      HUB_PLAIN, DIM_D, DIM_NONE, TENSOR_NORM)                                                     \
    X(wq, T_WQ, ROLE_SOFTMAX, "model.layers.%d.self_attn.q_proj.weight", NULL, NULL, HUB_PLAIN,    \
      DIM_QW, DIM_D, TENSOR_NORMAL)                                                                \
    X(wk, T_WK, ROLE_SOFTMAX, "model.layers.%d.self_attn.k_proj.weight", NULL, NULL, HUB_PLAIN,    \
      DIM_KV, DIM_D, TENSOR_NORMAL)                                                                \
    X(wv, T_WV, ROLE_SOFTMAX, "model.layers.%d.self_attn.v_proj.weight", NULL, NULL, HUB_PLAIN,    \
      DIM_KV, DIM_D, TENSOR_NORMAL)                                                                \
    X(wo, T_WO, ROLE_SOFTMAX, "model.layers.%d.self_attn.o_proj.weight", NULL, NULL, HUB_PLAIN,    \
      DIM_D, DIM_Q, TENSOR_NORMAL)                                                                 \
    X(ffn_norm, T_FFN_NORM, ROLE_ALWAYS, "model.layers.%d.post_attention_layernorm.weight", NULL,  \
      NULL, HUB_PLAIN, DIM_D, DIM_NONE, TENSOR_NORM)                                               \
    X(w_gate, T_W_GATE, ROLE_DENSE_MLP, "model.layers.%d.mlp.gate_proj.weight", NULL, NULL,        \
      HUB_PLAIN, DIM_F, DIM_D, TENSOR_NORMAL)                                                      \
    X(w_up, T_W_UP, ROLE_DENSE_MLP, "model.layers.%d.mlp.up_proj.weight", NULL, NULL, HUB_PLAIN,   \
      DIM_F, DIM_D, TENSOR_NORMAL)                                                                 \
    X(w_down, T_W_DOWN, ROLE_DENSE_MLP, "model.layers.%d.mlp.down_proj.weight", NULL, NULL,        \
      HUB_PLAIN, DIM_D, DIM_F, TENSOR_NORMAL)                                                      \
    X(router, T_ROUTER, ROLE_MOE, "model.layers.%d.mlp.gate.weight",                               \
      "model.layers.%d.block_sparse_moe.gate.weight", "model.layers.%d.mlp.router.weight",         \
      HUB_PLAIN, DIM_E, DIM_D, TENSOR_NORMAL)                                                      \
    X(exp_gate, T_EXP_GATE, ROLE_EXPERTS, "model.layers.%d.mlp.experts.%e.gate_proj.weight",       \
      "model.layers.%d.block_sparse_moe.experts.%e.w1.weight",                                     \
      "model.layers.%d.mlp.experts.gate_up_proj", HUB_GATE_UP_EVEN, DIM_FE, DIM_D, TENSOR_NORMAL)  \
    X(exp_up, T_EXP_UP, ROLE_EXPERTS, "model.layers.%d.mlp.experts.%e.up_proj.weight",             \
      "model.layers.%d.block_sparse_moe.experts.%e.w3.weight",                                     \
      "model.layers.%d.mlp.experts.gate_up_proj", HUB_GATE_UP_ODD, DIM_FE, DIM_D, TENSOR_NORMAL)   \
    X(exp_down, T_EXP_DOWN, ROLE_EXPERTS, "model.layers.%d.mlp.experts.%e.down_proj.weight",       \
      "model.layers.%d.block_sparse_moe.experts.%e.w2.weight",                                     \
      "model.layers.%d.mlp.experts.down_proj", HUB_EXPERTS_T, DIM_D, DIM_FE, TENSOR_NORMAL)        \
    X(bq, T_BQ, ROLE_QKV_BIAS, "model.layers.%d.self_attn.q_proj.bias", NULL, NULL, HUB_PLAIN,     \
      DIM_Q, DIM_NONE, TENSOR_ZEROS)                                                               \
    X(bk, T_BK, ROLE_QKV_BIAS, "model.layers.%d.self_attn.k_proj.bias", NULL, NULL, HUB_PLAIN,     \
      DIM_KV, DIM_NONE, TENSOR_ZEROS)                                                              \
    X(bv, T_BV, ROLE_QKV_BIAS, "model.layers.%d.self_attn.v_proj.bias", NULL, NULL, HUB_PLAIN,     \
      DIM_KV, DIM_NONE, TENSOR_ZEROS)                                                              \
    X(q_norm, T_Q_NORM, ROLE_QK_NORM, "model.layers.%d.self_attn.q_norm.weight", NULL, NULL,       \
      HUB_PLAIN, DIM_QN, DIM_NONE, TENSOR_NORM)                                                    \
    X(k_norm, T_K_NORM, ROLE_QK_NORM, "model.layers.%d.self_attn.k_norm.weight", NULL, NULL,       \
      HUB_PLAIN, DIM_KN, DIM_NONE, TENSOR_NORM)                                                    \
    X(sh_gate, T_SH_GATE, ROLE_SHARED, "model.layers.%d.mlp.shared_expert.gate_proj.weight", NULL, \
      NULL, HUB_PLAIN, DIM_S, DIM_D, TENSOR_NORMAL)                                                \
    X(sh_up, T_SH_UP, ROLE_SHARED, "model.layers.%d.mlp.shared_expert.up_proj.weight", NULL, NULL, \
      HUB_PLAIN, DIM_S, DIM_D, TENSOR_NORMAL)                                                      \
    X(sh_down, T_SH_DOWN, ROLE_SHARED, "model.layers.%d.mlp.shared_expert.down_proj.weight", NULL, \
      NULL, HUB_PLAIN, DIM_D, DIM_S, TENSOR_NORMAL)                                                \
    X(sh_route, T_SH_ROUTE, ROLE_SHARED_GATE, "model.layers.%d.mlp.shared_expert_gate.weight",     \
      NULL, NULL, HUB_PLAIN, DIM_ONE, DIM_D, TENSOR_NORMAL)                                        \
    X(bo, T_BO, ROLE_O_BIAS, "model.layers.%d.self_attn.o_proj.bias", NULL, NULL, HUB_PLAIN,       \
      DIM_D, DIM_NONE, TENSOR_ZEROS)                                                               \
    X(sinks, T_SINKS, ROLE_SINKS, "model.layers.%d.self_attn.sinks", NULL, NULL, HUB_PLAIN, DIM_H, \
      DIM_NONE, TENSOR_NORMAL)                                                                     \
    X(router_b, T_ROUTER_B, ROLE_ROUTER_BIAS, "model.layers.%d.mlp.router.bias", NULL, NULL,       \
      HUB_PLAIN, DIM_E, DIM_NONE, TENSOR_NORMAL)                                                   \
    X(exp_gate_b, T_EXP_GATE_B, ROLE_EXPERT_BIAS, "model.layers.%d.mlp.experts.gate_up_proj_bias", \
      NULL, NULL, HUB_BIAS_EVEN, DIM_FE, DIM_NONE, TENSOR_ZEROS)                                   \
    X(exp_up_b, T_EXP_UP_B, ROLE_EXPERT_BIAS, "model.layers.%d.mlp.experts.gate_up_proj_bias",     \
      NULL, NULL, HUB_BIAS_ODD, DIM_FE, DIM_NONE, TENSOR_ZEROS)                                    \
    X(exp_down_b, T_EXP_DOWN_B, ROLE_EXPERT_BIAS, "model.layers.%d.mlp.experts.down_proj_bias",    \
      NULL, NULL, HUB_STACKED, DIM_D, DIM_NONE, TENSOR_ZEROS)                                      \
    X(la_qkv, T_LA_QKV, ROLE_GDN, "model.layers.%d.linear_attn.in_proj_qkv.weight", NULL, NULL,    \
      HUB_PLAIN, DIM_LA_CONV, DIM_D, TENSOR_NORMAL)                                                \
    X(la_z, T_LA_Z, ROLE_GDN, "model.layers.%d.linear_attn.in_proj_z.weight", NULL, NULL,          \
      HUB_PLAIN, DIM_LA_V, DIM_D, TENSOR_NORMAL)                                                   \
    X(la_b, T_LA_B, ROLE_GDN, "model.layers.%d.linear_attn.in_proj_b.weight", NULL, NULL,          \
      HUB_PLAIN, DIM_LA_H, DIM_D, TENSOR_NORMAL)                                                   \
    X(la_a, T_LA_A, ROLE_GDN, "model.layers.%d.linear_attn.in_proj_a.weight", NULL, NULL,          \
      HUB_PLAIN, DIM_LA_H, DIM_D, TENSOR_NORMAL)                                                   \
    X(la_conv, T_LA_CONV, ROLE_GDN, "model.layers.%d.linear_attn.conv1d.weight", NULL, NULL,       \
      HUB_CONV1D, DIM_LA_CONV, DIM_LA_TAPS, TENSOR_NORMAL)                                         \
    X(la_dt_bias, T_LA_DT_BIAS, ROLE_GDN, "model.layers.%d.linear_attn.dt_bias", NULL, NULL,       \
      HUB_PLAIN, DIM_LA_H, DIM_NONE, TENSOR_ONES)                                                  \
    X(la_a_log, T_LA_A_LOG, ROLE_GDN, "model.layers.%d.linear_attn.A_log", NULL, NULL, HUB_PLAIN,  \
      DIM_LA_H, DIM_NONE, TENSOR_A_LOG)                                                            \
    X(la_norm, T_LA_NORM, ROLE_GDN, "model.layers.%d.linear_attn.norm.weight", NULL, NULL,         \
      HUB_PLAIN, DIM_LA_DV, DIM_NONE, TENSOR_ONES)                                                 \
    X(la_out, T_LA_OUT, ROLE_GDN, "model.layers.%d.linear_attn.out_proj.weight", NULL, NULL,       \
      HUB_PLAIN, DIM_D, DIM_LA_V, TENSOR_NORMAL)                                                   \
    X(mla_q, T_MLA_Q, ROLE_MLA_Q, "model.layers.%d.self_attn.q_proj.weight", NULL, NULL,           \
      HUB_PLAIN, DIM_MLA_Q, DIM_D, TENSOR_NORMAL)                                                  \
    X(mla_q_a, T_MLA_Q_A, ROLE_MLA_QLORA, "model.layers.%d.self_attn.q_a_proj.weight", NULL, NULL, \
      HUB_PLAIN, DIM_MLA_QR, DIM_D, TENSOR_NORMAL)                                                 \
    X(mla_q_a_norm, T_MLA_Q_A_NORM, ROLE_MLA_QLORA,                                                \
      "model.layers.%d.self_attn.q_a_layernorm.weight", NULL, NULL, HUB_PLAIN, DIM_MLA_QR,         \
      DIM_NONE, TENSOR_NORM)                                                                       \
    X(mla_q_b, T_MLA_Q_B, ROLE_MLA_QLORA, "model.layers.%d.self_attn.q_b_proj.weight", NULL, NULL, \
      HUB_PLAIN, DIM_MLA_Q, DIM_MLA_QR, TENSOR_NORMAL)                                             \
    X(mla_kv_a, T_MLA_KV_A, ROLE_MLA, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", NULL, \
      NULL, HUB_PLAIN, DIM_MLA_KVA, DIM_D, TENSOR_NORMAL)                                          \
    X(mla_kv_a_norm, T_MLA_KV_A_NORM, ROLE_MLA, "model.layers.%d.self_attn.kv_a_layernorm.weight", \
      NULL, NULL, HUB_PLAIN, DIM_MLA_KVR, DIM_NONE, TENSOR_NORM)                                   \
    X(mla_kv_b, T_MLA_KV_B, ROLE_MLA, "model.layers.%d.self_attn.kv_b_proj.weight", NULL, NULL,    \
      HUB_PLAIN, DIM_MLA_KVB, DIM_MLA_KVR, TENSOR_NORMAL)                                          \
    X(mla_o, T_MLA_O, ROLE_MLA, "model.layers.%d.self_attn.o_proj.weight", NULL, NULL, HUB_PLAIN,  \
      DIM_D, DIM_MLA_O, TENSOR_NORMAL)                                                             \
    X(router_corr, T_ROUTER_CORR, ROLE_ROUTER_CORR,                                                \
      "model.layers.%d.mlp.gate.e_score_correction_bias", NULL, NULL, HUB_PLAIN, DIM_E, DIM_NONE,  \
      TENSOR_ZEROS)

// What a tensor is to the kernels: the embedding and the head's, then the layer's from the
// table above, in its order.
#define MT_ROLE_ENUM(field, role, ...) role,
enum { T_EMBED, T_FINAL_NORM, T_LM_HEAD, MT_LAYER_ROLES(MT_ROLE_ENUM) T_ROLES };
#undef MT_ROLE_ENUM
enum { T_FIRST_LAYER_ROLE = T_ATTN_NORM };

// Each binding of a template to one layer's flat weights or gradients (model.h's layer_params,
// cuda_state.h's layer_w and layer_g) lists one pointer per role through MT_LAYER_ROLES, with
// its own pointer type. MT_ROLE_BIND fills one: it expands inside a binder with `r` (the
// struct), `base` (the flat buffer) and `off` (each role's offset, UINT64_MAX where the layer
// has none) in scope.
#define MT_ROLE_BIND(field, role, ...) r->field = off[role] == UINT64_MAX ? NULL : base + off[role];

#endif
