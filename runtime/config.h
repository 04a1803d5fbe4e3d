// train.cfg: the job description, parsed with libconfig and checked against a schema.
// Every problem is reported as one line naming the file, the line and the key.
#ifndef MT_CONFIG_H
#define MT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define MT_PATH_MAX 4096

typedef struct {
    // model
    int dim, layers, heads, kv_heads, ffn_dim, vocab;
    double rope_theta, norm_eps;
    int tied_embeddings;
    int qkv_bias; // biases on the q, k and v projections (Qwen2); not on o
    // Special token ids, -1 for none: they change no math, but sampling stops at an eos and an
    // export writes them back. Llama 3 lists several eos ids: the first in eos_id, the rest here.
    int bos_id, eos_id;
    int eos_more[7], n_eos_more;
    // model.rope_scaling: rope_type "none", or "llama3" (Llama 3.1) with its four parameters
    char rope_type[16];
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos; // original_max_position_embeddings
    // data: path is resolved relative to the config file's folder
    char data_path[MT_PATH_MAX];
    char data_format[16];       // "bytes": raw text, one token per byte (vocab 256)
    double val_fraction;        // tail of the data held out for eval (0 with val_path)
    char val_path[MT_PATH_MAX]; // evaluation's own file(s), same format; "": the tail above
    // batch
    int micro_batch, micro_batches, seq_len;
    // optimizer: AdamW + clip_grad_norm_, warmup then cosine to min_lr
    double lr, min_lr, beta1, beta2, eps, weight_decay, clip;
    int warmup_steps;
    int device_groups; // groups 0..N-1 updated on the compute rank's device; -1: auto
    // run
    int steps;
    uint64_t seed;
    char checkpoint_dir[MT_PATH_MAX]; // resolved relative to the config file's folder
    int checkpoint_interval;
    int checkpoint_keep; // keep the newest K step_NNNNNN folders; 0: all
    int eval_interval, eval_batches;
    int sample_tokens;            // tokens of text generated at the end (0: none)
    char backend[16];             // "auto", "cpu" or "cuda"
    char recompute[16];           // "auto": keep layer internals where memory allows; "always"
    char offload_activations[16]; // "auto" (when they don't fit the device), "never", "always"
    // trace_steps = [a, b]: 1-based inclusive steps written to trace.json; {0, 0}: none
    int trace_steps[2];
    // Hugging Face folders, resolved relative to the config file's folder ("": none).
    // model_dir's config.json supplies the model.* fields; export_dir receives the weights.
    char model_dir[MT_PATH_MAX], export_dir[MT_PATH_MAX];
    char export_dtype[16]; // "float32" (the master weights, bitwise) or "bfloat16"
    // where it came from
    char source_path[MT_PATH_MAX];
} mt_config;

// Loads and validates path. Returns 0, or -1 with a one-line message in err:
// "<file>:<line>: <key>: <problem>" (or "<file>: <problem>" when no line applies).
int mt_config_load(mt_config *cfg, const char *path, char *err, size_t errlen);

// Derived quantities.
static inline int mt_head_dim(const mt_config *c) {
    return c->dim / c->heads;
}
static inline long mt_tokens_per_step(const mt_config *c) {
    return (long)c->micro_batch * c->micro_batches * c->seq_len;
}

#endif
