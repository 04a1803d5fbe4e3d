// The model and its training description: train.cfg (mt_config: the model, an mt_model, and the
// run's settings), the parameter groups that stream and shard as units, the tensors inside them,
// Hugging Face's config.json, and the learning-rate schedule. Group 0 is the token embedding,
// groups 1..L the decoder layers, group L+1 the head (final norm, plus lm_head when untied).
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include "kernels/adamw.h"
#include "kernels/cpu/kernels_cpu.h" // MOE_MAX_EXPERTS
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// ---- train.cfg: the job description, parsed with libconfig and checked against a schema ----

#define MT_PATH_MAX 4096
#define MT_MAX_OVERRIDES 32
#define MT_OVERRIDE_MAX 256 // one key=value, its terminator included

// ---- the choices of train.cfg's string settings, parsed once at load ----
// Each enum's values are in the order of its names, which config_schema.c gives the schema.
enum { QK_NONE, QK_HEAD, QK_ALL }; // model.qk_norm
#define QK_NORM_NAMES ((const char *const[]){"none", "head", "all", NULL})
enum { MOE_NAMES_MLP, MOE_NAMES_BLOCK_SPARSE, MOE_NAMES_GPT_OSS, MOE_NAMES_DEEPSEEK }; // moe_names
#define MOE_NAMES_NAMES                                                                            \
    ((const char *const[]){"mlp", "block_sparse_moe", "gpt_oss", "deepseek", NULL})
enum { ROUTER_SOFTMAX_ALL, ROUTER_SOFTMAX_TOP_K }; // model.router_softmax
#define ROUTER_SOFTMAX_NAMES ((const char *const[]){"all", "top_k", NULL})
enum { ROUTER_SCORE_SOFTMAX, ROUTER_SCORE_SIGMOID }; // model.router_score
#define ROUTER_SCORE_NAMES ((const char *const[]){"softmax", "sigmoid", NULL})
enum { ROPE_PLAIN, ROPE_LLAMA3, ROPE_YARN }; // model.rope_scaling.rope_type
#define ROPE_TYPE_NAMES ((const char *const[]){"none", "llama3", "yarn", NULL})
enum { DATA_BYTES, DATA_TOKENS, DATA_SYNTHETIC }; // data.format
#define DATA_FORMAT_NAMES ((const char *const[]){"bytes", "tokens", "synthetic", NULL})
enum { PACK_NONE, PACK_DOCUMENTS }; // data.pack
#define DATA_PACK_NAMES ((const char *const[]){"none", "documents", NULL})
enum { GRAD_DTYPE_AUTO, GRAD_DTYPE_FP32, GRAD_DTYPE_BF16 }; // optimizer.grad_dtype
#define GRAD_DTYPE_NAMES ((const char *const[]){"auto", "fp32", "bf16", NULL})
enum { GRAD_SLOTS_AUTO, GRAD_SLOTS_RING, GRAD_SLOTS_ALL }; // optimizer.grad_slots
#define GRAD_SLOTS_NAMES ((const char *const[]){"auto", "ring", "all", NULL})
enum { BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA }; // backend
#define BACKEND_NAMES ((const char *const[]){"auto", "cpu", "cuda", NULL})
enum { RECOMPUTE_AUTO, RECOMPUTE_ALWAYS }; // recompute
#define RECOMPUTE_NAMES ((const char *const[]){"auto", "always", NULL})
enum { OFFLOAD_AUTO, OFFLOAD_NEVER, OFFLOAD_ALWAYS }; // offload_activations
#define OFFLOAD_NAMES ((const char *const[]){"auto", "never", "always", NULL})
enum { EXPORT_FLOAT32, EXPORT_BFLOAT16 }; // export_dtype
#define EXPORT_DTYPE_NAMES ((const char *const[]){"float32", "bfloat16", NULL})
// The name of choice v in names (one of the lists above), for messages and files; "?" when out
// of range.
const char *mt_choice_name(const char *const *names, int v);
// The index of name in names, or -1.
int mt_choice_index(const char *const *names, const char *name);

// ---- layer kinds ----
// A decoder layer is norm -> attention part -> residual -> norm -> MLP part -> residual, and
// each part is a kind (docs/architecture.md). The model description lists every layer's kinds
// once, at load (model_describe_layers); the rest of the system asks it, never a family's name.
// softmax attention (GQA/MHA), with its options; Gated DeltaNet linear attention (Qwen3.5's and
// Qwen3-Next's linear_attention layers); multi-head latent attention (DeepSeek-V3, Kimi K2,
// GLM-4.7-Flash: every softmax layer of a model with model.mla_kv_rank > 0)
enum { ATTN_SOFTMAX, ATTN_GDN, ATTN_MLA, ATTN_KINDS };
enum { MLP_DENSE, MLP_MOE, MLP_KINDS }; // a SwiGLU; E experts behind a router
typedef struct {
    unsigned char attention, mlp;
    unsigned char sinks; // a learned logit per head joins the softmax's denominator (gpt-oss)
    int window; // the keys a query sees, itself included, as a sliding window; 0: all before it
} mt_layer_kind;
#define MT_MAX_LAYERS 4096 // model.layers' bound in the schema

// The model (train.cfg's model.* keys, or model_dir's config.json): its shape, its layers' kinds
// and options, its special tokens and how the hub lays it out; all that a layer's math, its
// tensors and config.json depend on, and nothing of a run. Code that needs only the model takes
// a const mt_model *, and so cannot read the run's settings.
typedef struct {
    int dim, layers, heads, kv_heads, ffn_dim, vocab;
    double rope_theta, norm_eps;
    int tied_embeddings;
    int qkv_bias; // biases on the q, k and v projections (Qwen2); not on o
    int o_bias;   // a bias on the attention's output projection too (Llama's attention_bias)
    // Attention sinks (gpt-oss): one learned logit per query head joins each softmax's
    // denominator and takes a share of the probability that no value carries.
    int attn_sinks;
    // Qwen3.5 / Qwen3-Next's gated attention: q_proj emits each head's query and as many gate
    // values ([q_h, gate_h] per head), and the attention output is multiplied by sigmoid(gate)
    // before o_proj.
    int attn_output_gate;
    // RMSNorm weights stored zero-centred, applied as (1 + w) and initialised to 0 (Qwen3.5's
    // Qwen3_5RMSNorm, Gemma's): the layers' two norms, the final norm, q_norm and k_norm; not
    // the Gated DeltaNet's own gated norm, whose weight is plain.
    int norm_zero_centered;
    // Gated DeltaNet (layer_types "linear_attention"): key heads of linear_k_dim, value heads of
    // linear_v_dim (linear_v_heads a multiple of linear_k_heads: each key head serves as many
    // value heads, GVA), a causal depthwise conv1d of linear_conv taps over q, k and v.
    int linear_k_heads, linear_v_heads, linear_k_dim, linear_v_dim, linear_conv;
    // Multi-head latent attention (the kind ATTN_MLA, every attention layer when mla_kv_rank >
    // 0; transformers' DeepseekV3Attention): the queries from q_proj, or (mla_q_rank > 0) through
    // q_a_proj -> RMSNorm -> q_b_proj; kv_a_proj_with_mqa gives a latent of mla_kv_rank, which an
    // RMSNorm and kv_b_proj turn into each head's key part of mla_nope_dim and its value of
    // mla_v_dim, and one key part of mla_rope_dim shared by the heads, which RoPE turns (as it
    // turns each query's last mla_rope_dim). q and k are mla_nope_dim + mla_rope_dim wide, the
    // values mla_v_dim; o_proj maps heads x mla_v_dim back to dim.
    int mla_q_rank, mla_kv_rank, mla_nope_dim, mla_rope_dim, mla_v_dim;
    // RoPE turns interleaved pairs (x0, x1), (x2, x3), ... (DeepSeek's rope_interleave) rather
    // than the two halves of the rotated part
    int rope_interleave;
    // Attention's width: q and o map dim to heads x head_dim and back (0: dim / heads). Qwen3
    // and Mistral-Nemo give one that differs from dim / heads.
    int head_dim;
    // RoPE turns the first head_dim x partial_rotary_factor elements of each head (rounded down,
    // as transformers' int(); even), the rest pass unchanged (Qwen3.5: 0.25)
    double partial_rotary_factor;
    // RMSNorm on q and k before RoPE: "none", "head" (over each head's head_dim, one weight of
    // head_dim shared by the heads: Qwen3) or "all" (over the whole projection: OLMoE)
    int qk_norm;
    // Sliding-window attention: a query of a sliding layer sees itself and the sliding_window - 1
    // keys before it (transformers' sliding_attention), the others every key before them (0: no
    // layer slides). layer_types: "full_attention,sliding_attention,linear_attention,...", one
    // entry a layer (linear_attention: a Gated DeltaNet layer); "" makes every layer sliding when
    // sliding_window > 0 (Mistral).
    int sliding_window;
    char layer_types[4096];
    // Mixture of Experts (docs/moe.md). experts = 0: every layer's MLP is dense. Otherwise layer
    // l's MLP is E expert SwiGLUs of moe_ffn_dim behind a router (softmax, top_k, renormalised
    // over the k with norm_topk_prob), when (l + 1) % moe_every == 0 and l is not listed in
    // dense_layers ("0,5": comma-separated layer indices); the other layers are dense SwiGLUs
    // of ffn_dim. shared_ffn_dim > 0 adds a shared expert with a sigmoid gate (Qwen2-MoE).
    int experts, top_k, moe_ffn_dim, norm_topk_prob, shared_ffn_dim, moe_every;
    char dense_layers[256];
    // gpt-oss's router and experts: router_softmax "top_k" takes the top k of the router's
    // logits and a softmax over those k ("all": the softmax over every expert first);
    // router_bias adds a bias to the logits; expert_bias a bias to each expert's gate, up and
    // down projections; swiglu_limit > 0 makes the experts' activation the clamped SwiGLU
    // (gate clamped above, up to +-limit, gate * sigmoid(1.702 gate) * (up + 1)).
    int router_softmax, router_bias, expert_bias;
    double swiglu_limit;
    // DeepSeek-V3's router (DeepseekV3TopkRouter, Glm4MoeTopkRouter): router_score "sigmoid"
    // scores each expert by sigmoid(logit) in fp32 ("softmax": the softmax of router_softmax);
    // router_correction adds a per-expert bias (e_score_correction_bias, a frozen buffer: never
    // updated) to the scores for the choice only; with router_groups > 1 the experts fall in that
    // many groups, each scored by the sum of its top 2, and only the best router_topk_groups
    // groups' experts may be chosen; the k chosen scores (renormalised with norm_topk_prob) are
    // multiplied by router_scale (routed_scaling_factor).
    int router_score, router_groups, router_topk_groups, router_correction;
    double router_scale;
    // The shared expert's sigmoid gate (shared_expert_gate, Qwen2-MoE); 0: the shared experts
    // add ungated (DeepSeek's n_shared_experts, their widths summed in shared_ffn_dim)
    int shared_gate;
    // The load-balancing loss (transformers' load_balancing_loss_func, pooled over the MoE
    // layers) joins the loss with weight router_aux_coef when router_aux is set (config.json's
    // output_router_logits); it is reported either way.
    int router_aux;
    double router_aux_coef;
    // How the hub names a layer's MoE tensors: "mlp" (mlp.gate, mlp.experts.N.gate_proj/up_proj/
    // down_proj), "block_sparse_moe" (block_sparse_moe.gate, ...experts.N.w1/w3/w2) or
    // "gpt_oss" (mlp.router, and the experts fused: mlp.experts.gate_up_proj [E, d, 2f] with gate
    // and up interleaved, mlp.experts.down_proj [E, f, d], and their biases) or "deepseek" (as
    // "mlp", the shared experts as mlp.shared_experts.*: roles.h's MT_DEEPSEEK_SHARED_NAMES)
    int moe_names;
    // Special token ids, -1 for none: they change no math, but sampling stops at an eos and an
    // export writes them back. Llama 3 lists several eos ids: the first in eos_id, the rest here.
    int bos_id, eos_id;
    int eos_more[7], n_eos_more;
    // model.rope_scaling: rope_type "none", "llama3" (Llama 3.1) with its four parameters, or
    // "yarn" (gpt-oss) with factor, original_max_position_embeddings, beta_fast, beta_slow,
    // truncate and attention_factor (0: 0.1 ln(factor) + 1), as transformers'
    // _compute_yarn_parameters; DeepSeek's mscale and mscale_all_dim (0: none) make the attention
    // factor mscale(mscale) / mscale(mscale_all_dim), and multiply MLA's softmax scale by
    // mscale(mscale_all_dim)^2 (yarn_apply_mscale)
    int rope_type;
    double rope_mscale, rope_mscale_all_dim;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos; // original_max_position_embeddings
    double rope_beta_fast, rope_beta_slow, rope_attention_factor;
    int rope_truncate;
    // How model_dir's folder lays the model out, read from its config.json (not train.cfg keys;
    // config_apply_model_dir copies them): hub_vlm, a ConditionalGeneration checkpoint (Qwen3.5's
    // VLMs), whose language model's tensors are under "model.language_model." (lm_head.weight
    // stays at the top) and whose config.json nests them in text_config; hub_gdn_fused,
    // Qwen3-Next's Gated DeltaNet projections fused per key-head group (in_proj_qkvz, in_proj_ba).
    int hub_vlm, hub_gdn_fused;
    // hub_experts_fused: each MoE layer's experts in two tensors, mlp.experts.gate_up_proj
    // [E, 2f, d] (expert e's gate rows, then its up rows) and down_proj [E, d, f], as Qwen3.5-MoE's
    // hub checkpoints store them (transformers 5's in-memory layout); told from the folder's
    // tensor names (io's hf_index_layout), as config.json does not say.
    int hub_experts_fused;
    // hub_lm_nested: the language model's tensors under "model.language_model." (lm_head.weight
    // at the top): a VLM's (hub_vlm), and a Qwen3.5 text class's that transformers saved after
    // loading it from a VLM checkpoint (its conversion mapping for qwen3_5_text and
    // qwen3_5_moe_text keeps the nesting, and loads either); told from the tensor names too.
    int hub_lm_nested;
    // each layer's kinds, from the fields above (model_describe_layers); n_described: the
    // layers described, so that a model used before its description fails loudly
    mt_layer_kind layer_kind[MT_MAX_LAYERS];
    int n_described;
} mt_model;

// A job: its model, and the run's settings (how to train it).
typedef struct {
    mt_model model;
    // data: path is resolved relative to the config file's folder
    char data_path[MT_PATH_MAX];
    int data_format;            // "bytes": raw text, one token per byte (vocab 256)
    double val_fraction;        // tail of the data held out for eval (0 with val_path)
    char val_path[MT_PATH_MAX]; // evaluation's own file(s), same format; "": the tail above
    int data_pack;              // "documents": document-masked attention, positions per document
    int data_eot;               // the token that ends a document (data.pack); -1: none
    // batch
    int micro_batch, micro_batches, seq_len;
    int seq_chunk; // tokens per chunk of a layer's token-wise work on the GPU; 0: auto
    // optimizer: AdamW + clip_grad_norm_, warmup then cosine to min_lr
    double lr, min_lr, beta1, beta2, eps, weight_decay, clip;
    int warmup_steps;
    int device_groups;      // groups 0..N-1 updated on the compute rank's device; -1: auto
    int grad_dtype;         // host gradient slots: "auto", "fp32" or "bf16"
    int grad_slots;         // "auto", "ring" (updates as gradients arrive) or "all"
    int max_bad_steps;      // non-finite gradient norms in a row that end the job
    int shard_across_nodes; // data parallel: each node keeps Adam's m and v of 1/nodes
    // the NVMe tier: its folder (resolved relative to the config file's), and whether the
    // gradient slots (grads) and Adam's m and v (adam) live in files there
    char storage_dir[MT_PATH_MAX];
    int storage_grads, storage_adam, storage_master; // storage_master: the fp32 master too
    // run
    int steps;
    uint64_t seed;
    char checkpoint_dir[MT_PATH_MAX]; // resolved relative to the config file's folder
    int checkpoint_interval;
    int checkpoint_keep; // keep the newest K step_NNNNNN folders; 0: all
    int eval_interval, eval_batches;
    int sample_tokens;       // tokens of text generated at the end (0: none)
    int backend;             // "auto", "cpu" or "cuda"
    int watchdog_s;          // seconds without a word from the ranks waited on
    int recompute;           // "auto": keep layer internals where memory allows; "always"
    int offload_activations; // "auto" (when they don't fit the device), "never", "always"
    int boundary_every;      // keep boundaries 0, k, 2k, ... (and recompute the rest); 0: auto
    int keep_attention; // recomputed passes whose attention output stays on the device; -1: auto
    int layer_buffers;  // streaming layers on the device at once, 1 or 2; 0: auto
    // trace_steps = [a, b]: 1-based inclusive steps written to trace.json; {0, 0}: none
    int trace_steps[2];
    // Hugging Face folders, resolved relative to the config file's folder ("": none).
    // model_dir's config.json supplies the model.* fields; export_dir receives the weights.
    char model_dir[MT_PATH_MAX], export_dir[MT_PATH_MAX];
    int export_dtype; // "float32" (the master weights, bitwise) or "bfloat16"
    // where it came from: the file, and the key=value settings given after it on the command
    // line (mtrun ... CONFIG optimizer.lr=1e-4), applied over the file in order; a checkpoint
    // records them, so that its resume trains on with them
    char source_path[MT_PATH_MAX];
    char overrides[MT_MAX_OVERRIDES][MT_OVERRIDE_MAX];
    int n_overrides;
} mt_config;

// Loading train.cfg, in the order of its checks, so that the first message is the most useful
// one. io/'s mt_config_load runs them all, with the checks of the files the config names in
// between (model_dir's weights, data, export_dir): those are io/'s to read. Each returns 0, or -1
// with one line in the err that config_parse was given: "<file>:<line>: <key>: <problem>" (or
// "<file>: <problem>" when no line applies).
typedef struct config_source config_source; // where each key was set, for those messages

// Parses path (syntax, known keys, types and ranges, required keys, derived defaults), then
// applies the n overrides ("group.key=value", value in the file's syntax; a string may go
// unquoted) with the same checks, as if the file ended with them. *src is set even on failure:
// free it with config_source_free. A message about an override names it: "<file>: override
// <key=value>: <key>: <problem>".
int config_parse(mt_config *cfg, const char *path, const char *const *overrides, int n,
                 config_source **src, char *err, size_t errlen);
// path (key's value) made absolute, relative to the config file's folder.
int config_resolve(config_source *src, const char *key, char *path, size_t cap);
// model_dir's config.json supplies the model.* fields; a key train.cfg also sets must agree.
int config_apply_model_dir(config_source *src, mt_config *cfg);
int config_check(config_source *src, const mt_config *cfg); // the rules between fields
// data.path, data.val_path and checkpoint.dir (default runs/<config name>) made absolute.
int config_resolve_paths(config_source *src, mt_config *cfg);
// The one-line message for key, at the line that set it; returns -1.
int config_fail(config_source *src, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void config_source_free(config_source *src);
// Data parallel over `nodes`: 0, or -1 with one line in err naming the file and field. The
// config's micro-batches must split evenly; the CUDA backend updates no group on the compute
// rank. mtrun and the ranks (started by plain mpirun too) check the same.
int mt_config_check_micro_split(const mt_config *c, int nodes, char *err, size_t n);
int mt_config_check_cuda_nodes(const mt_config *c, int nodes, char *err, size_t n);

// Reads dir/config.json into *model (shape, kinds and options, special tokens) and describes its
// layers; seq_len is checked against a sliding window. Returns 0, or -1 with one line in err
// naming the file and the problem.
int hf_read_config(const char *dir, int seq_len, mt_model *model, char *err, size_t errlen);
// The architecture's keys of m's config.json (architectures, model_type, intermediate_size, the
// window's, bias and MoE keys) added to r; -1 when no architecture we read back has m's fields.
// The architecture is model_dir's config.json's class when that has m's fields (model_dir: the
// job's, or NULL), else the first that has them.
struct cJSON;
int hf_write_family(struct cJSON *r, const mt_model *m, const char *model_dir);
// key = v as a JSON float that reads back to the same bits and never as an int ("0.0", not "0"):
// transformers 5 refuses an int where its config declares a float.
void hf_add_float(struct cJSON *obj, const char *key, double v);

// Derived quantities.
// data.pack "documents": document-masked attention and per-document positions.
static inline int mt_packs_documents(const mt_config *c) {
    return c->data_pack == PACK_DOCUMENTS;
}

static inline int mt_head_dim(const mt_model *m) {
    return m->head_dim ? m->head_dim : m->dim / m->heads;
}
// Multi-head latent attention's norms of its query rank and latent (q_a_layernorm,
// kv_a_layernorm): transformers builds them with DeepseekV3RMSNorm's default eps, not
// config.rms_norm_eps (the decoder's norms take that).
#define MT_MLA_LATENT_NORM_EPS 1e-6f
// Multi-head latent attention's query and key head width (mla_nope_dim + mla_rope_dim).
static inline int mt_mla_qk_dim(const mt_model *m) {
    return m->mla_nope_dim + m->mla_rope_dim;
}
// The elements of a head RoPE turns (MLA: mla_rope_dim, the last of q's and k's heads): head_dim x
// partial_rotary_factor, rounded down (a config built by hand, with 0 there, turns the whole head).
static inline int mt_rope_dim(const mt_model *m) {
    if (m->mla_kv_rank > 0) return m->mla_rope_dim; // MLA: the rotated part of q and k
    double f = m->partial_rotary_factor > 0 ? m->partial_rotary_factor : 1.0;
    return (int)(mt_head_dim(m) * f);
}
// What the RMSNorms' weights are applied with, (offset + w): 1 for zero-centred weights
// (model.norm_zero_centered), else 0. The layers' norms, the final norm, q_norm and k_norm.
static inline float mt_norm_offset(const mt_model *m) {
    return m->norm_zero_centered ? 1.0f : 0.0f;
}
// Gated DeltaNet's widths: its q (and k) channels, key heads x key dim; its value channels.
static inline int mt_gdn_key_width(const mt_model *m) {
    return m->linear_k_heads * m->linear_k_dim;
}
static inline int mt_gdn_value_width(const mt_model *m) {
    return m->linear_v_heads * m->linear_v_dim;
}
// model.qk_norm: QK_NONE, QK_HEAD or QK_ALL.
static inline int mt_qk_norm(const mt_model *m) {
    return m->qk_norm;
}
// model.layer_types: 0, or -1 with the reason in why (an entry neither full_attention nor
// sliding_attention, the wrong count, a sliding layer without a window). config.c's check.
int model_check_layer_types(const mt_model *m, char *why, size_t n);
// Lists each layer's kinds in m->layer_kind from the model fields (moe_every, dense_layers,
// sliding_window, layer_types);
// config loading calls it once the fields are final, and so must a caller that sets them.
void model_describe_layers(mt_model *m);
// Layer l's kinds (dies on a model not described since its layers were set).
const mt_layer_kind *mt_layer_kind_of(const mt_model *m, int l);
// Whether layer l's MLP is a Mixture of Experts.
static inline int mt_layer_is_moe(const mt_model *m, int l) {
    return mt_layer_kind_of(m, l)->mlp == MLP_MOE;
}
// The MoE layers (the load-balancing loss pools over them).
int mt_moe_layers(const mt_model *m);
// The Gated DeltaNet layers (attention kind ATTN_GDN).
int mt_gdn_layers(const mt_model *m);
// At most this many tokens in one micro-batch (micro_batch x seq_len): 4M, 8x the longest
// context we train, and under every kernel's grid and 32-bit limits.
#define MT_MAX_MICRO_BATCH_TOKENS (1 << 22)

// Tokens per chunk of a layer's token-wise work on the GPU (batch.seq_chunk): a whole
// micro-batch up to 16384 tokens, where chunks would only add launches, else 16384.
static inline int mt_seq_chunk(const mt_config *c) {
    long n = (long)c->micro_batch * c->seq_len;
    long chunk = c->seq_chunk > 0 ? c->seq_chunk : 16384;
    return (int)(chunk < n ? chunk : n);
}

// The chunk for n tokens, the micro-batch as it runs (a sampled sequence may be shorter):
// mt_seq_chunk, or n itself when that is larger or 0 (a config without a batch: tests of one
// layer). Both backends chunk with it.
static inline int mt_chunk_of(const mt_config *c, int n) {
    int chunk = mt_seq_chunk(c);
    return chunk > 0 && chunk < n ? chunk : n;
}
// The rows of the chunk that starts at token t0 of n (the last one may be short).
static inline int mt_chunk_rows(int n, int t0, int chunk) {
    return n - t0 < chunk ? n - t0 : chunk;
}

static inline long mt_tokens_per_step(const mt_config *c) {
    return (long)c->micro_batch * c->micro_batches * c->seq_len;
}

// ---- parameter groups and tensors ----

// How a tensor is initialized: N(0, 0.02); ones; zeros; an RMSNorm's weight (ones, or zeros
// when model.norm_zero_centered); Gated DeltaNet's A_log, the log of U(1, 16) (transformers
// draws from U(0, 16), which the log cannot take at 0).
enum { TENSOR_NORMAL, TENSOR_ONES, TENSOR_ZEROS, TENSOR_NORM, TENSOR_A_LOG };

#include "runtime/model/roles.h" // T_* roles, the layer's role table

typedef struct {
    const char *name; // Hugging Face name pattern, "%d" for the layer index, "%e" the expert's
    uint64_t offset, numel;
    int rows, cols; // cols == 0 for vectors
    int init;
    int role;
    int expert;     // an expert's matrix: its index (the role's block holds experts 0..E-1 in turn)
    int hub_layout; // how the hub's tensor `name` holds this one (roles.h's HUB_*)
    int lm_nested;  // its "model." is "model.language_model." in the hub folder (hub_lm_nested)
} tensor_info;

// A layer group lists each expert's tensors apart (its three matrices and, with expert_bias,
// three biases).
#define MODEL_MAX_TENSORS (32 + 6 * MOE_MAX_EXPERTS)

static inline int model_group_count(const mt_model *m) {
    return m->layers + 2;
}
static inline int model_head_group(const mt_model *m) {
    return m->layers + 1;
}
static inline int model_layer_group(int layer) {
    return layer + 1;
}

// The order in which a step's gradients leave the compute rank, the backward's: the head, layers
// L-1 .. 0, the embedding. order[model_group_count(m)].
void model_grad_order(const mt_model *m, int *order);

// The host's gradient slots (optimizer.grad_slots): 0 for one slot per group, which global-norm
// clipping needs (it waits for every gradient before the first update), or the depth of a ring
// the groups take turns in, each updated as soon as its gradients land. "auto" is the ring when
// optimizer.clip = 0. Four entries: one the compute rank fills, one in flight over PCIe, one
// the optimizer ranks update, one spare for a late optimizer rank, so that the backward waits
// only when the optimizer ranks fall a whole group behind.
#define MODEL_GRAD_RING_DEPTH 4
int model_grad_ring_depth(const mt_config *c);
// Whether the optimizer ranks update the ring's landed groups by urgency, a piece at a time,
// the group the next forward needs first (runtime/optimizer/receive.c), rather than whole in
// arrival order; what the ring leaves at the backward's end then overlaps the next forward.
// Not with the state split over `nodes` (the groups' gathers pair up in arrival order), nor
// with gradients or moments in the NVMe tier (its windows read ahead in arrival order), nor
// where MT_RING_ORDER is "arrival" (for benchmarks that compare the two).
int model_ring_by_urgency(const mt_config *c, int nodes);

// The order in which the optimizer ranks update their groups, which the NVMe tier's windows pass
// over too (runtime/plan/plan.c counts their buffers by it): as the gradients land with the ring,
// else by group; the first `first` groups (updated on the GPU) left out. Returns how many;
// order[model_group_count(&c->model)].
int model_update_order(const mt_config *c, int first, int *order);

// The NVMe tier (storage.*, runtime/optimizer/storage.c; the plan counts the same): the pieces
// (at most MT_STATE_PIECE floats of a group) each of an optimizer rank's windows holds in host
// memory (the one updated, the one written back behind it, two read ahead), and the alignment of
// its O_DIRECT transfers and file areas.
#define MT_STORAGE_WINDOW 4
#define MT_STORAGE_ALIGN 4096

// The state of the groups the compute rank updates moves between it and the optimizer ranks (at
// start, saves and exports) in pieces of this many floats (64 MiB), never whole in host memory.
#define MT_STATE_PIECE ((size_t)1 << 24)
// The NVMe tier's piece in floats (optimizer/storage.c, job.c's region layout, the plan):
// MT_STATE_PIECE, or for tests MT_TEST_PIECE_FLOATS rounded up to whole O_DIRECT blocks of
// floats, so that a small model's groups cross piece boundaries. Read once.
uint64_t model_state_piece(void);

// Fills tensors[] for group g and returns how many; *numel gets the group's total size.
int model_group_tensors(const mt_model *m, int g, tensor_info *tensors, uint64_t *numel);
uint64_t model_group_numel(const mt_model *m, int g);
// The parameters of groups [0, groups): the embedding and the first layers (those updated on
// the GPU, optimizer.device_groups).
uint64_t model_lead_numel(const mt_model *m, int groups);
uint64_t model_param_count(const mt_model *m);
// The largest decoder layer's parameters: a streaming buffer's size (MoE models mix layers).
uint64_t model_largest_layer(const mt_model *m);
// A tensor's Hugging Face name: its pattern with "%d" replaced by the layer, "%e" its expert.
void model_tensor_name(char *out, size_t cap, const tensor_info *t, int layer);
// Where each role starts in layer l's group (the first expert's, for an expert block), or
// UINT64_MAX where the layer has no such tensor.
void model_layer_offsets(const mt_model *m, int layer, uint64_t off[T_ROLES]);

// The frozen tensors of group g (roles.h's MT_FROZEN_ROLES: never trained) as element ranges
// [lo[i], hi[i]) in order; returns how many. model_frozen_run: the run of [at, end) that starts
// at `at`, wholly frozen or wholly trained (*frozen says which); returns where it ends.
#define MODEL_MAX_FROZEN 8
int model_frozen_spans(const mt_model *m, int g, uint64_t lo[MODEL_MAX_FROZEN],
                       uint64_t hi[MODEL_MAX_FROZEN]);
uint64_t model_frozen_run(const uint64_t *lo, const uint64_t *hi, int spans, uint64_t at,
                          uint64_t end, int *frozen);
// Layer l's frozen image: its frozen tensors' values one after another, in the spans' order,
// which the compute rank gets in fp32 at the start (engine/frozen.c). The layers' images lie one
// after another. Layer l's image's length, where it starts among them, and where role `role`
// starts in it (-1: the layer has no such frozen tensor); layer_params_bind_frozen points a
// layer's frozen roles into its image.
uint64_t model_frozen_numel(const mt_model *m, int layer);
uint64_t model_frozen_base(const mt_model *m, int layer);
int64_t model_frozen_at(const mt_model *m, int layer, int role);

// Initial value of element i of group g: N(0, 0.02) for matrices, ones for norm weights and
// zeros for biases, as transformers initializes Llama and Qwen2. It is a pure function of
// (seed, g, i), so every optimizer rank initializes its own slice and any sharding gives the
// same model.
void model_init_slice(const mt_config *c, int g, uint64_t lo, uint64_t len, float *out);

// Pointers into one decoder layer's flat weights (or gradients): the binding of a template,
// one per role of roles.h (model_layer_offsets); NULL where the layer has no such tensor. An
// expert block holds E matrices in turn: expert e's gate is exp_gate + e * moe_ffn_dim * dim.
typedef struct {
#define MT_PARAM_FIELD(field, ...) float *field;
    MT_LAYER_ROLES(MT_PARAM_FIELD)
#undef MT_PARAM_FIELD
} layer_params;

void layer_params_bind(layer_params *p, const mt_model *m, int layer, float *flat);
void layer_params_bind_frozen(layer_params *p, const mt_model *m, int layer, float *image);

// The head group: final norm and, when untied, the classifier.
typedef struct {
    float *final_norm, *lm_head;
} head_params;

void head_params_bind(head_params *p, const mt_model *m, float *flat);

// RoPE's inv_freq[mt_rope_dim(m) / 2] for m: rope_theta's plain table, rescaled when
// model.rope_scaling asks for it, or YaRN's. Returns the factor cos and sin are multiplied by
// (YaRN's attention factor; 1 otherwise). Both backends take their table from here.
float model_rope_inv_freq(const mt_model *m, float *inv_freq);
// Multi-head latent attention's softmax scale: mt_mla_qk_dim^-0.5, times mscale(mscale_all_dim)^2
// with rope_scaling (transformers' yarn_apply_mscale), in double as their Python, then float.
float model_mla_softmax_scale(const mt_model *m);

// ---- the schedule ----

// Learning rate for 0-based step s: linear warmup to lr, then cosine decay to min_lr.
double lr_at_step(const mt_config *c, int s);

// AdamW's hyperparameters for 0-based step s, with the step's clip coefficient: the optimizer
// ranks and the compute rank (for the groups it updates itself) use the very same values.
// skipped: the steps before s that were skipped (a non-finite norm); like torch's, the bias
// correction counts the updates made, while the learning rate follows the step.
adamw_params adamw_params_at_step(const mt_config *c, int s, int skipped, float grad_scale);

// Whether a step's gradients are unusable: their total squared norm (the sum of every group's,
// in group order, as the clip takes it) is not finite. Every rank sees the same per-group
// values, so every rank reaches the same verdict.
int step_is_bad(const double *group_sumsq, int n_groups);

#endif
