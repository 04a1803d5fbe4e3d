// The schema of train.cfg, and the lookups that turn a user's key into its field (or into a
// "did you mean" when it is misspelled).
#include "runtime/model/config_schema.h"
#include <float.h>
#include <libconfig.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NOLIMIT DBL_MAX
#define F_(k, kind, fld, lo, hi, fl, d, sd, nm)                                                    \
    { k, kind, lo, hi, fl, d, sd, offsetof(mt_config, fld), sizeof(((mt_config *)0)->fld), nm }
#define INT(k, fld, lo, hi, fl, d) F_(k, K_INT, fld, lo, hi, fl, d, NULL, NULL)
#define FLT(k, fld, lo, hi, fl, d) F_(k, K_FLOAT, fld, lo, hi, fl, d, NULL, NULL)
#define BOOL(k, fld, d) F_(k, K_BOOL, fld, 0, 1, 0, d, NULL, NULL)
#define STR(k, fld, fl, sd) F_(k, K_STRING, fld, 0, 0, fl, 0, sd, NULL)
// a choice among names, stored as its index; d: the default's index
#define ENUM(k, fld, d, nm) F_(k, K_ENUM, fld, 0, 0, 0, d, NULL, nm)

const field_t config_schema[] = {
    INT("model.dim", model.dim, 1, 65536, REQUIRED, 0),
    INT("model.layers", model.layers, 1, 4096, REQUIRED, 0),
    INT("model.heads", model.heads, 1, 1024, REQUIRED, 0),
    INT("model.kv_heads", model.kv_heads, 1, 1024, DERIVED, 0), // default: heads (no GQA)
    INT("model.ffn_dim", model.ffn_dim, 1, 1 << 20, REQUIRED, 0),
    INT("model.vocab", model.vocab, 2, 1 << 24, 0, 256),
    FLT("model.rope_theta", model.rope_theta, 0, 1e12, MIN_OPEN, 10000),
    FLT("model.norm_eps", model.norm_eps, 0, 1, MIN_OPEN, 1e-5),
    BOOL("model.tied_embeddings", model.tied_embeddings, 1),
    BOOL("model.qkv_bias", model.qkv_bias, 0), // Qwen2: biases on q, k, v
    BOOL("model.o_bias", model.o_bias, 0),     // on o_proj too (Llama's attention_bias sets both)
    BOOL("model.attn_sinks", model.attn_sinks,
         0), // gpt-oss: a learned logit per head in the softmax
    BOOL("model.attn_output_gate", model.attn_output_gate,
         0), // Qwen3.5: sigmoid(gate) on the output
    BOOL("model.norm_zero_centered", model.norm_zero_centered, 0), // Qwen3.5: RMSNorm by (1 + w)
    // multi-head latent attention (DeepSeek-V3, Kimi K2, GLM-4.7-Flash): kv_rank > 0 turns it on
    INT("model.mla_q_rank", model.mla_q_rank, 0, 1 << 16, 0,
        0), // 0: q_proj, no low-rank query path
    INT("model.mla_kv_rank", model.mla_kv_rank, 0, 1 << 16, 0, 0),
    INT("model.mla_nope_dim", model.mla_nope_dim, 0, 1024, 0, 0),
    INT("model.mla_rope_dim", model.mla_rope_dim, 0, 1024, 0, 0),
    INT("model.mla_v_dim", model.mla_v_dim, 0, 1024, 0, 0),
    BOOL("model.rope_interleave", model.rope_interleave,
         0), // RoPE on pairs (x0, x1), (x2, x3), ...
    // Gated DeltaNet, the layers layer_types names linear_attention (Qwen3.5, Qwen3-Next)
    INT("model.linear_k_heads", model.linear_k_heads, 0, 1024, 0, 0),
    INT("model.linear_v_heads", model.linear_v_heads, 0, 1024, 0, 0),
    INT("model.linear_k_dim", model.linear_k_dim, 0, 1024, 0, 0),
    INT("model.linear_v_dim", model.linear_v_dim, 0, 1024, 0, 0),
    INT("model.linear_conv", model.linear_conv, 1, 64, 0, 4),
    INT("model.head_dim", model.head_dim, 0, 1024, 0, 0), // 0: dim / heads
    // RoPE turns this share of each head (Qwen3.5: 0.25), the rest passes
    FLT("model.partial_rotary_factor", model.partial_rotary_factor, 0, 1, MIN_OPEN, 1),
    // RMSNorm on q and k before RoPE: per head (Qwen3) or over the whole projection (OLMoE)
    ENUM("model.qk_norm", model.qk_norm, QK_NONE, QK_NORM_NAMES),
    // Mixture of Experts (docs/moe.md): 0 experts is a dense model
    INT("model.experts", model.experts, 0, MOE_MAX_EXPERTS, 0, 0),
    INT("model.top_k", model.top_k, 1, MOE_MAX_EXPERTS, 0, 2),
    INT("model.moe_ffn_dim", model.moe_ffn_dim, 1, 1 << 20, DERIVED, 0), // default: ffn_dim
    BOOL("model.norm_topk_prob", model.norm_topk_prob, 1),
    INT("model.shared_ffn_dim", model.shared_ffn_dim, 0, 1 << 20, 0, 0), // 0: no shared expert
    INT("model.moe_every", model.moe_every, 1, 4096, 0, 1), // layer l is MoE when (l + 1) % it == 0
    // sliding-window attention: the keys a query of a sliding layer sees (0: none), and which
    // layers slide ("": every layer; else "full_attention,sliding_attention,...")
    INT("model.sliding_window", model.sliding_window, 0, 1 << 30, 0, 0),
    STR("model.layer_types", model.layer_types, 0, ""),
    STR("model.dense_layers", model.dense_layers, 0, ""), // "0,5": these layers' MLPs are dense
    // the load-balancing loss joins the loss (as transformers' output_router_logits)
    BOOL("model.router_aux", model.router_aux, 0),
    FLT("model.router_aux_coef", model.router_aux_coef, 0, 1e6, 0, 0.001),
    ENUM("model.moe_names", model.moe_names, MOE_NAMES_MLP, MOE_NAMES_NAMES),
    // gpt-oss's router and experts: the softmax over the top k logits, a bias on the router's
    // logits and on each expert's projections, the clamped SwiGLU (0: plain SwiGLU)
    ENUM("model.router_softmax", model.router_softmax, ROUTER_SOFTMAX_ALL, ROUTER_SOFTMAX_NAMES),
    BOOL("model.router_bias", model.router_bias, 0),
    BOOL("model.expert_bias", model.expert_bias, 0),
    FLT("model.swiglu_limit", model.swiglu_limit, 0, 1e6, 0, 0),
    // DeepSeek-V3's router: sigmoid scores, a frozen correction bias for the choice, groups
    ENUM("model.router_score", model.router_score, ROUTER_SCORE_SOFTMAX, ROUTER_SCORE_NAMES),
    BOOL("model.router_correction", model.router_correction, 0),
    INT("model.router_groups", model.router_groups, 0, 1024, 0, 0), // 0, 1: no group limit
    INT("model.router_topk_groups", model.router_topk_groups, 0, 1024, 0, 0), // of router_groups
    FLT("model.router_scale", model.router_scale, 0, 1e6, MIN_OPEN, 1),
    BOOL("model.shared_gate", model.shared_gate, 1), // 0: DeepSeek's shared experts, ungated
    INT("model.bos_token_id", model.bos_id, -1, 1 << 24, 0, -1), // -1: none
    INT("model.eos_token_id", model.eos_id, -1, 1 << 24, 0, -1),
    // Llama 3.1's RoPE rescaling, transformers' names; the four numbers are required with llama3
    // (the defaults here are Llama 3.1's, kept only so that every field is in range)
    ENUM("model.rope_scaling.rope_type", model.rope_type, ROPE_PLAIN, ROPE_TYPE_NAMES),
    FLT("model.rope_scaling.factor", model.rope_factor, 1, 1e6, 0, 8),
    FLT("model.rope_scaling.low_freq_factor", model.rope_low_freq_factor, 0, 1e6, MIN_OPEN, 1),
    FLT("model.rope_scaling.high_freq_factor", model.rope_high_freq_factor, 0, 1e6, MIN_OPEN, 4),
    INT("model.rope_scaling.original_max_position_embeddings", model.rope_original_max_pos, 1,
        1 << 30, 0, 8192),
    // YaRN's (rope_type "yarn"), with factor and original_max_position_embeddings above;
    // attention_factor 0: 0.1 ln(factor) + 1
    FLT("model.rope_scaling.beta_fast", model.rope_beta_fast, 0, 1e6, MIN_OPEN, 32),
    FLT("model.rope_scaling.beta_slow", model.rope_beta_slow, 0, 1e6, MIN_OPEN, 1),
    BOOL("model.rope_scaling.truncate", model.rope_truncate, 1),
    FLT("model.rope_scaling.attention_factor", model.rope_attention_factor, 0, 1e6, 0, 0),
    FLT("model.rope_scaling.mscale", model.rope_mscale, 0, 1e6, 0, 0),
    FLT("model.rope_scaling.mscale_all_dim", model.rope_mscale_all_dim, 0, 1e6, 0, 0),
    // required unless data.format is "synthetic"; for "tokens", a glob(3) pattern or a folder
    STR("data.path", data_path, 0, ""),
    ENUM("data.format", data_format, DATA_BYTES, DATA_FORMAT_NAMES),
    FLT("data.val_fraction", val_fraction, 0, 1, MAX_OPEN, 0.1),
    // evaluation reads this file (glob, folder) in data.format instead of data.path's tail
    STR("data.val_path", val_path, 0, ""),
    // "documents": the windows are cut into documents at data.eot; each attends only to itself
    // and its RoPE positions start at 0 (docs/data-format.md)
    ENUM("data.pack", data_pack, PACK_NONE, DATA_PACK_NAMES),
    INT("data.eot", data_eot, -1, 1 << 24, 0, -1), // the token that ends a document; -1: none
    INT("batch.micro_batch", micro_batch, 1, 1 << 20, REQUIRED, 0),
    INT("batch.micro_batches", micro_batches, 1, 1 << 20, REQUIRED, 0),
    INT("batch.seq_len", seq_len, 1, 1 << 21, REQUIRED, 0), // the kernels' grids allow 4M
    // tokens per chunk of a layer's token-wise work (norms, projections, MLP, head) on the GPU,
    // so its working set is a chunk's, not a micro-batch's; 0: auto (at most 16384)
    INT("batch.seq_chunk", seq_chunk, 0, 1 << 22, 0, 0),
    FLT("optimizer.lr", lr, 0, 10, REQUIRED | MIN_OPEN, 0),
    FLT("optimizer.min_lr", min_lr, 0, 10, DERIVED, 0), // default: lr / 10
    FLT("optimizer.beta1", beta1, 0, 1, MAX_OPEN, 0.9),
    FLT("optimizer.beta2", beta2, 0, 1, MAX_OPEN, 0.95),
    FLT("optimizer.eps", eps, 0, 1, MIN_OPEN, 1e-8),
    FLT("optimizer.weight_decay", weight_decay, 0, 10, 0, 0.1),
    FLT("optimizer.clip", clip, 0, NOLIMIT, 0, 1.0), // max global grad norm; 0: no clipping
    // the first N parameter groups (embedding, layer 0, 1, ...) are updated by the compute rank
    // on its device; -1: auto (on a GPU the embedding and ceil(layers / 8) layers that fit in
    // an eighth of its free memory; none on the CPU backend)
    INT("optimizer.device_groups", device_groups, -1, 1 << 20, 0, -1),
    // the host's gradient slots: "fp32" (4 B/param), "bf16" (2 B/param, rounded once from the
    // GPU's fp32 sums; the norm is still the fp32 one), "auto": fp32 when the job fits with it
    ENUM("optimizer.grad_dtype", grad_dtype, GRAD_DTYPE_AUTO, GRAD_DTYPE_NAMES),
    // the host's gradient slots: "all" (one per group: global-norm clipping needs every gradient
    // before the first update), "ring" (a ring of 4 groups' slots, each group updated as soon as
    // its gradients land: optimizer.clip = 0 only), "auto": the ring when optimizer.clip = 0
    ENUM("optimizer.grad_slots", grad_slots, GRAD_SLOTS_AUTO, GRAD_SLOTS_NAMES),
    // over several nodes: each node's optimizer ranks keep m and v of a 1/nodes part of their
    // shards, update it, and gather the others' updated weights (host bytes per node: 4 + 8 /
    // nodes per parameter for the state, instead of 12); one node: no effect
    BOOL("optimizer.shard_across_nodes", shard_across_nodes, 0),
    // a step whose gradient norm is not finite changes nothing; this many in a row end the job
    // with a checkpoint of the last good state
    INT("optimizer.max_bad_steps", max_bad_steps, 1, INT_MAX, 0, 5),
    // the NVMe tier: a folder on a local filesystem (not tmpfs, not a network filesystem), and
    // what lives there instead of host memory: the gradient slots of exact clipping (grads), and
    // Adam's m and v (adam), each moved with io_uring a few groups ahead of the optimizer
    STR("storage.dir", storage_dir, 0, ""),
    BOOL("storage.grads", storage_grads, 0),
    BOOL("storage.adam", storage_adam, 0),
    BOOL("storage.master", storage_master, 0),
    INT("optimizer.warmup_steps", warmup_steps, 0, INT_MAX, DERIVED, 0), // default: steps / 10
    INT("steps", steps, 1, INT_MAX, REQUIRED, 0),
    F_("seed", K_INT64, seed, 0, (double)UINT64_MAX, 0, 1337, NULL, NULL),
    ENUM("backend", backend, BACKEND_AUTO, BACKEND_NAMES),
    // a rank that hears nothing from the ranks it waits on for this long (or 3 steps' time,
    // when longer) ends the job, naming the rank it waited for
    INT("watchdog_s", watchdog_s, 1, INT_MAX, 0, 600),
    ENUM("recompute", recompute, RECOMPUTE_AUTO, RECOMPUTE_NAMES),
    ENUM("offload_activations", offload_activations, OFFLOAD_AUTO, OFFLOAD_NAMES),
    // keep every k-th layer boundary activation on the device and recompute the others,
    // segment by segment, in the backward (1: keep them all); 0: auto, the plan's choice
    INT("boundary_every", boundary_every, 0, 1 << 20, 0, 0),
    // the attention outputs (and softmax statistics) of this many recomputed layer x
    // micro-batch passes stay on the device from the forward, so the backward's recompute (and a
    // segment's redo) skips the attention kernel; -1: auto, as many as the device memory left
    // holds when no layer's internals are kept whole; 0: none
    INT("keep_attention", keep_attention, -1, 1 << 20, 0, -1),
    // streaming layer buffers on the device: 2 lets the next layer's weights arrive while a layer
    // computes; 1 takes half the room and leaves the copies in line with the compute (a layer
    // too large for two); 0: auto, 2 unless they leave no room for the activations
    INT("layer_buffers", layer_buffers, 0, 2, 0, 0),
    STR("checkpoint.dir", checkpoint_dir, DERIVED, NULL), // default: runs/<cfg name>
    // default: steps (one checkpoint, at the end); 0: never (benchmarks)
    INT("checkpoint.interval", checkpoint_interval, 0, INT_MAX, DERIVED, 0),
    INT("checkpoint.keep", checkpoint_keep, 0, INT_MAX, 0, 0), // newest K step folders; 0: all
    INT("eval.interval", eval_interval, 0, INT_MAX, 0, 0),     // 0: no evaluation
    INT("eval.batches", eval_batches, 1, 1 << 20, 0, 4),
    INT("sample_tokens", sample_tokens, 0, 1 << 20, 0, 0),
    F_("trace_steps", K_RANGE, trace_steps, 1, INT_MAX, 0, 0, NULL, NULL), // [a, b]; none
    STR("model_dir", model_dir, 0, ""),   // a Hugging Face folder: sets model.*
    STR("export_dir", export_dir, 0, ""), // write a Hugging Face folder at the end
    ENUM("export_dtype", export_dtype, EXPORT_FLOAT32, EXPORT_DTYPE_NAMES),
};
_Static_assert(sizeof config_schema / sizeof config_schema[0] == CONFIG_FIELDS,
               "CONFIG_FIELDS must count config_schema's entries");
enum { NFIELDS = CONFIG_FIELDS };
#define schema config_schema

// ---- schema lookups and suggestions ----

const field_t *find_field(const char *key) {
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(schema[i].key, key) == 0) return &schema[i];
    return NULL;
}

int is_group(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < NFIELDS; i++)
        if (strncmp(schema[i].key, name, n) == 0 && schema[i].key[n] == '.') return 1;
    return 0;
}

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64];
    for (size_t j = 0; j <= lb; j++) d[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = d[0];
        d[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = d[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (d[j - 1] + 1 < best) best = d[j - 1] + 1;
            d[j] = best;
            diag = up;
        }
    }
    return d[lb];
}

static const char *leaf(const char *key) {
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

// The closest known key or group, or NULL. A known name in the wrong group ("lr" at the
// top level) is the likeliest slip, so an exact leaf match wins.
const char *suggest(const char *key) {
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(leaf(schema[i].key), leaf(key)) == 0) return schema[i].key;
    size_t n = strlen(leaf(key)); // "warmup" -> "optimizer.warmup_steps"
    for (int i = 0; i < NFIELDS && n >= 4; i++)
        if (strncmp(leaf(schema[i].key), leaf(key), n) == 0) return schema[i].key;
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i < NFIELDS; i++) {
        int d = edit_distance(key, schema[i].key);
        if (d < bestd) bestd = d, best = schema[i].key;
    }
    static char group[32];
    for (int i = 0; i < NFIELDS; i++) { // group names: "optimiser" -> "optimizer"
        const char *dot = strchr(schema[i].key, '.');
        if (!dot || (size_t)(dot - schema[i].key) >= sizeof group) continue;
        snprintf(group, sizeof group, "%.*s", (int)(dot - schema[i].key), schema[i].key);
        int d = edit_distance(key, group);
        if (d < bestd) return group;
    }
    return best;
}

const char *type_name(int t) {
    switch (t) {
    case CONFIG_TYPE_GROUP:
        return "a group { ... }";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a number";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array [ ... ]";
    case CONFIG_TYPE_LIST:
        return "a list ( ... )";
    default:
        return "nothing";
    }
}

// "[1, 65536]", "(0, 1]", ">= 0".
void range_text(const field_t *f, char *out, size_t n) {
    const char *fmt = (f->kind == K_FLOAT) ? "%.10g" : "%.0f";
    char lo[48], hi[48];
    snprintf(lo, sizeof lo, fmt, f->min);
    snprintf(hi, sizeof hi, fmt, f->kind == K_INT ? fmin(f->max, INT_MAX) : f->max);
    if (f->kind == K_INT64 && f->max >= (double)UINT64_MAX) // a double would print 2^64
        snprintf(hi, sizeof hi, "%" PRIu64, UINT64_MAX);
    int unbounded = f->max == NOLIMIT && f->kind == K_FLOAT; // an integer's C type bounds it
    if (unbounded)
        snprintf(out, n, "must be %s %s", (f->flags & MIN_OPEN) ? ">" : ">=", lo);
    else
        snprintf(out, n, "must be in %c%s, %s%c", (f->flags & MIN_OPEN) ? '(' : '[', lo, hi,
                 (f->flags & MAX_OPEN) ? ')' : ']');
}

int in_range(const field_t *f, double v) {
    if (v < f->min || ((f->flags & MIN_OPEN) && v == f->min)) return 0;
    if (v > f->max || ((f->flags & MAX_OPEN) && v == f->max)) return 0;
    return 1;
}
