// train.cfg: parsed with libconfig, then checked against one schema table.
//
// Order of checks, so that the first message is the most useful one:
//   1. the file opens and parses (libconfig syntax errors carry a line);
//   2. every setting in the file, in file order, is a known key of the right type and in
//      range (unknown keys get a "did you mean" when a known key is close);
//   3. required keys are present;
//   4. defaults that depend on other keys (kv_heads, min_lr, warmup, checkpoint.*);
//   5. cross-field rules (dim % heads, ...) and the data file itself.
// Every message is one line: "<file>:<line>: <key>: <problem>", or "<file>: ..." when no
// line applies (a missing key, a file that does not open).
#include "runtime/model/config_schema.h"
#include "runtime/model/config_source.h"
#include "runtime/model/model.h"
#include "runtime/base/base.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define schema config_schema

// ---- the pre-scan for wide integer literals ----

static void scan_big_literals(ctx_t *x, FILE *f) {
    int line = 1, c;
    char name[64] = "";
    while ((c = getc(f)) != EOF) {
        if (c == '\n') {
            line++;
        } else if (c == '/' || c == '#') { // comments: # ..., // ..., /* ... */
            int next = (c == '/') ? getc(f) : '/';
            if (next == '/') {
                while ((c = getc(f)) != EOF && c != '\n') {
                }
                line++;
            } else if (next == '*') {
                for (int prev = 0; (c = getc(f)) != EOF && !(prev == '*' && c == '/'); prev = c)
                    if (c == '\n') line++;
            } else if (next != EOF) {
                ungetc(next, f);
            }
        } else if (c == '"') { // a string, with escapes
            while ((c = getc(f)) != EOF && c != '"') {
                if (c == '\\') c = getc(f);
                if (c == '\n') line++;
            }
        } else if (isalpha(c) || c == '_' || c == '*') { // a name: may hold digits
            size_t n = 0;
            name[n++] = (char)c;
            while ((c = getc(f)) != EOF && (isalnum(c) || strchr("_-*", c)))
                if (n < sizeof name - 1) name[n++] = (char)c;
            name[n] = 0;
            if (c != EOF) ungetc(c, f);
        } else if (isdigit(c) || c == '-' || c == '+') {
            char tok[64];
            size_t n = 0;
            tok[n++] = (char)c;
            while ((c = getc(f)) != EOF && (isalnum(c) || strchr(".+-", c)) && n < sizeof tok - 1)
                tok[n++] = (char)c;
            tok[n] = 0;
            if (c != EOF) ungetc(c, f);
            int hex = strstr(tok, "0x") || strstr(tok, "0X");
            if (!hex && strpbrk(tok, ".eE")) continue; // a float
            errno = 0;
            long long v = strtoll(tok, NULL, hex ? 16 : 10);
            if ((errno == ERANGE || v > INT_MAX || v < INT_MIN) && x->nbig < MAX_BIG) {
                x->big[x->nbig].line = line;
                snprintf(x->big[x->nbig].name, sizeof x->big[0].name, "%s", name);
                snprintf(x->big[x->nbig].text, sizeof x->big[0].text, "%s", tok);
                x->nbig++;
            }
        }
    }
}

// ---- storing one setting ----

// Walks one group of the file (the root, or a known group) in file order.
static int walk(ctx_t *x, mt_config *cfg, const config_setting_t *group, const char *prefix) {
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        int line = (int)config_setting_source_line(s);
        x->file = config_setting_source_file(s);
        char key[128];
        snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "",
                 config_setting_name(s));
        const field_t *f = find_field(key);
        int t = config_setting_type(s);
        if (f) {
            if (source_store(x, cfg, f, s) < 0) return -1;
        } else if (is_group(key)) { // model = { rope_scaling = { ... } } nests one deeper
            if (t != CONFIG_TYPE_GROUP)
                return source_fail(x, line, key, "expected a group { ... }, got %s", type_name(t));
            if (walk(x, cfg, s, key) < 0) return -1;
        } else {
            const char *hint = suggest(key);
            if (hint) return source_fail(x, line, key, "unknown key (did you mean %s?)", hint);
            return source_fail(x, line, key, "unknown key");
        }
    }
    return 0;
}

// ---- paths ----

// The absolute folder that holds the config file.
static int config_dir(ctx_t *x, char *out, size_t n) {
    char dir[MT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", x->path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return source_fail(x, 0, NULL, "cannot resolve its folder: %s", strerror(errno));
    snprintf(out, n, "%s", real);
    return 0;
}

// ---- derived defaults and cross-field rules ----

#define SEEN(k) (x->line[find_field(k) - schema] != 0)

int config_resolve_paths(config_source *x, mt_config *cfg) {
    char dir[MT_PATH_MAX], out[MT_PATH_MAX];
    if (config_dir(x, dir, sizeof dir) < 0) return -1;

    if (cfg->data_path[0] && config_join_path(out, sizeof out, dir, cfg->data_path) < 0)
        return source_fail(x, LINE("data.path"), "data.path", "path too long");
    snprintf(cfg->data_path, sizeof cfg->data_path, "%s", out);
    if (cfg->val_path[0] && config_join_path(out, sizeof out, dir, cfg->val_path) < 0)
        return source_fail(x, LINE("data.val_path"), "data.val_path", "path too long");
    if (cfg->val_path[0]) snprintf(cfg->val_path, sizeof cfg->val_path, "%s", out);

    if (cfg->storage_dir[0]) {
        if (config_join_path(out, sizeof out, dir, cfg->storage_dir) < 0)
            return source_fail(x, LINE("storage.dir"), "storage.dir", "path too long");
        snprintf(cfg->storage_dir, sizeof cfg->storage_dir, "%s", out);
    }
    if (SEEN("checkpoint.dir")) {
        if (config_join_path(out, sizeof out, dir, cfg->checkpoint_dir) < 0)
            return source_fail(x, LINE("checkpoint.dir"), "checkpoint.dir", "path too long");
    } else { // runs/<config name>, under the folder mtrun is started from (like --out)
        char cwd[MT_PATH_MAX], name[256];
        if (!getcwd(cwd, sizeof cwd))
            return source_fail(x, 0, "checkpoint.dir", "getcwd: %s", strerror(errno));
        const char *base = strrchr(x->path, '/') ? strrchr(x->path, '/') + 1 : x->path;
        snprintf(name, sizeof name, "runs/%s", base);
        size_t len = strlen(name);
        if (len > 4 && strcmp(name + len - 4, ".cfg") == 0) name[len - 4] = 0;
        if (config_join_path(out, sizeof out, cwd, name) < 0)
            return source_fail(x, 0, "checkpoint.dir", "path too long");
    }
    snprintf(cfg->checkpoint_dir, sizeof cfg->checkpoint_dir, "%s", out);
    return 0;
}

static void apply_derived(ctx_t *x, mt_config *cfg) {
    if (!SEEN("model.kv_heads")) cfg->model.kv_heads = cfg->model.heads;
    if (!SEEN("model.moe_ffn_dim")) cfg->model.moe_ffn_dim = cfg->model.ffn_dim;
    if (!SEEN("optimizer.min_lr")) cfg->min_lr = cfg->lr / 10;
    if (!SEEN("optimizer.warmup_steps")) cfg->warmup_steps = cfg->steps / 10;
    if (!SEEN("checkpoint.interval")) cfg->checkpoint_interval = cfg->steps;
    if (cfg->val_path[0]) cfg->val_fraction = 0; // all of data.path trains
}

// model_dir's config.json supplies every model.* field. A model.* key that the file also sets
// must agree with it: a silent override would train a model that neither file describes.
// bos/eos ids that config.json does not give (-1): train.cfg may set them.
static int unset_special_id(const field_t *f, const mt_config *hf) {
    int special =
        f->off == offsetof(mt_config, model.bos_id) || f->off == offsetof(mt_config, model.eos_id);
    return special && *(const int *)((const char *)hf + f->off) < 0;
}

// Whether the load-balancing loss joins the loss, and its weight, are training choices that
// config.json records (output_router_logits, router_aux_loss_coef) but does not fix: train.cfg's
// stand where it sets them, as transformers' from_pretrained(..., output_router_logits=True).
static int training_choice(const field_t *f) {
    return f->off == offsetof(mt_config, model.router_aux) ||
           f->off == offsetof(mt_config, model.router_aux_coef);
}

int config_resolve(config_source *x, const char *key, char *path, size_t cap) {
    char dir[MT_PATH_MAX], out[MT_PATH_MAX];
    if (config_dir(x, dir, sizeof dir) < 0) return -1;
    if (config_join_path(out, sizeof out, dir, path) < 0)
        return source_fail(x, LINE(key), key, "path too long");
    snprintf(path, cap, "%s", out);
    return 0;
}

int config_apply_model_dir(config_source *x, mt_config *cfg) {
    char err[MT_PATH_MAX + 512];
    if (!cfg->model_dir[0]) return 0;
    if (config_resolve(x, "model_dir", cfg->model_dir, sizeof cfg->model_dir) < 0) return -1;
    static mt_config hf; // large (paths): not on the stack
    hf = *cfg;
    if (hf_read_config(cfg->model_dir, cfg->seq_len, &hf.model, err, sizeof err) < 0)
        return source_fail(x, LINE("model_dir"), "model_dir", "%s", err);
    for (int i = 0; i < NFIELDS; i++) {
        const field_t *f = &schema[i];
        if (strncmp(f->key, "model.", 6) != 0) continue;
        if (unset_special_id(f, &hf)) continue; // config.json has none: train.cfg's stands
        if (x->line[i] && training_choice(f)) continue;
        if (x->line[i] && memcmp((char *)cfg + f->off, (char *)&hf + f->off, f->size) != 0)
            return source_fail(x, LINE(f->key), f->key,
                               "disagrees with %s/config.json (model_dir sets it)", cfg->model_dir);
        memcpy((char *)cfg + f->off, (char *)&hf + f->off, f->size);
        if (f->kind == K_STRING || f->kind == K_ENUM)
            continue; // hf_config.c writes only known names
        double v =
            f->kind == K_FLOAT ? *(double *)((char *)cfg + f->off) : *(int *)((char *)cfg + f->off);
        if (!in_range(f, v))
            return source_fail(x, LINE("model_dir"), f->key,
                               "%s/config.json gives %g: out of range", cfg->model_dir, v);
    }
    memcpy(cfg->model.eos_more, hf.model.eos_more,
           sizeof cfg->model.eos_more); // not a key: Llama 3's eos list
    cfg->model.n_eos_more = hf.model.n_eos_more;
    cfg->model.hub_vlm = hf.model.hub_vlm, cfg->model.hub_lm_nested = hf.model.hub_lm_nested,
    cfg->model.hub_gdn_fused = hf.model.hub_gdn_fused; // the folder's layout
    return 0;
}

// Multi-head latent attention's widths: all set together, the rotated part even; none of softmax
// attention's options (biases, qk_norm, the output gate, sinks), which it does not have.
static int check_mla(ctx_t *x, const mt_model *m) {
    if (m->mla_kv_rank <= 0)
        return m->mla_q_rank <= 0 ? 0
                                  : source_fail(x, LINE("model.mla_q_rank"), "model.mla_q_rank",
                                                "needs model.mla_kv_rank > 0 (latent attention)");
    const char *keys[] = {"model.mla_nope_dim",     "model.mla_rope_dim", "model.mla_v_dim",
                          "model.qkv_bias",         "model.o_bias",       "model.qk_norm",
                          "model.attn_output_gate", "model.attn_sinks"};
    int bad[] = {
        m->mla_nope_dim <= 0,     m->mla_rope_dim <= 0, m->mla_v_dim <= 0, m->qkv_bias, m->o_bias,
        mt_qk_norm(m) != QK_NONE, m->attn_output_gate,  m->attn_sinks};
    for (int i = 0; i < 8; i++)
        if (bad[i])
            return source_fail(x, LINE(keys[i]), keys[i], "%s model.mla_kv_rank (latent attention)",
                               i < 3 ? "must be set with" : "is not for");
    if (m->mla_rope_dim % 2)
        return source_fail(x, LINE("model.mla_rope_dim"), "model.mla_rope_dim",
                           "%d must be even (RoPE rotates pairs)", m->mla_rope_dim);
    return 0;
}

// model.layer_types: one known entry a layer, a sliding one only with a window (model.c).
static int check_layer_types(ctx_t *x, const mt_model *m) {
    char why[160];
    if (model_check_layer_types(m, why, sizeof why) < 0)
        return source_fail(x, LINE("model.layer_types"), "model.layer_types", "%s", why);
    return 0;
}

static int cross_check(ctx_t *x, const mt_config *c) {
    if (check_layer_types(x, &c->model) < 0 || check_mla(x, &c->model) < 0) return -1;
    const char *ids[] = {"model.bos_token_id", "model.eos_token_id"};
    int values[] = {c->model.bos_id, c->model.eos_id};
    for (int i = 0; i < 2; i++)
        if (values[i] >= c->model.vocab)
            return source_fail(x, LINE(ids[i]), ids[i], "%d is not below model.vocab = %d",
                               values[i], c->model.vocab);
    if (!c->model.head_dim && c->model.mla_kv_rank <= 0 &&
        c->model.dim % c->model.heads) // MLA: its own widths
        return source_fail(x, LINE("model.dim"), "model.dim",
                           "%d is not divisible by model.heads = %d (or set model.head_dim)",
                           c->model.dim, c->model.heads);
    if (c->model.heads % c->model.kv_heads)
        return source_fail(x, LINE("model.kv_heads"), "model.kv_heads",
                           "%d does not divide model.heads = %d", c->model.kv_heads,
                           c->model.heads);
    if (mt_head_dim(&c->model) % 2 && c->model.mla_kv_rank <= 0)
        return source_fail(x, LINE(c->model.head_dim ? "model.head_dim" : "model.dim"),
                           c->model.head_dim ? "model.head_dim" : "model.dim",
                           "head dim %d must be even (RoPE rotates pairs)", mt_head_dim(&c->model));
    if (mt_rope_dim(&c->model) % 2 || mt_rope_dim(&c->model) < 2)
        return source_fail(x, LINE("model.partial_rotary_factor"), "model.partial_rotary_factor",
                           "%g of head dim %d turns %d elements: RoPE needs an even number, at "
                           "least 2",
                           c->model.partial_rotary_factor, mt_head_dim(&c->model),
                           mt_rope_dim(&c->model));
    if (config_check_moe(x, &c->model) < 0) return -1;
    if (c->model.linear_k_heads > 0 && c->model.linear_v_heads % c->model.linear_k_heads)
        return source_fail(x, LINE("model.linear_v_heads"), "model.linear_v_heads",
                           "%d is not a multiple of model.linear_k_heads = %d (each key head "
                           "serves as many value heads)",
                           c->model.linear_v_heads, c->model.linear_k_heads);
    if (c->model.attn_output_gate &&
        c->model.qkv_bias) // q_proj's bias would need the gates' rows too
        return source_fail(x, LINE("model.qkv_bias"), "model.qkv_bias",
                           "not with model.attn_output_gate (q_proj's bias of the gates)");
    if (c->data_format == DATA_BYTES && c->model.vocab != 256)
        return source_fail(x, LINE("model.vocab"), "model.vocab",
                           "%d, but data.format \"bytes\" needs 256", c->model.vocab);
    if (mt_packs_documents(c) && c->data_eot < 0)
        return source_fail(x, LINE("data.pack"), "data.pack",
                           "\"documents\" needs data.eot, the token id that ends a document");
    if (c->data_eot >= c->model.vocab)
        return source_fail(x, LINE("data.eot"), "data.eot", "%d is not below model.vocab = %d",
                           c->data_eot, c->model.vocab);
    if (c->min_lr > c->lr)
        return source_fail(x, LINE("optimizer.min_lr"), "optimizer.min_lr",
                           "%g is above optimizer.lr = %g", c->min_lr, c->lr);
    if (c->warmup_steps > c->steps)
        return source_fail(x, LINE("optimizer.warmup_steps"), "optimizer.warmup_steps",
                           "%d is more than steps = %d", c->warmup_steps, c->steps);
    if (c->val_path[0] && SEEN("data.val_fraction"))
        return source_fail(
            x, LINE("data.val_fraction"), "data.val_fraction",
            "not used with data.val_path (evaluation reads that; all of data.path trains)");
    if (c->val_path[0] && c->data_format == DATA_SYNTHETIC)
        return source_fail(x, LINE("data.val_path"), "data.val_path",
                           "not used with data.format \"synthetic\"");
    if (c->eval_interval > 0 && c->val_fraction == 0 && !c->val_path[0])
        return source_fail(x, LINE("eval.interval"), "eval.interval",
                           "evaluation needs data.val_fraction > 0 or data.val_path");
    // Token indices are int in places, and a micro-batch's tokens times heads (attention's
    // rows) stays far from 2^31 at this bound; at it, every element index is 64-bit.
    if ((long)c->micro_batch * c->seq_len > MT_MAX_MICRO_BATCH_TOKENS)
        return source_fail(x, LINE("batch.micro_batch"), "batch.micro_batch",
                           "%d x batch.seq_len %d = %ld tokens per micro-batch, more than %d",
                           c->micro_batch, c->seq_len, (long)c->micro_batch * c->seq_len,
                           MT_MAX_MICRO_BATCH_TOKENS);
    if (c->device_groups > c->model.layers + 1)
        return source_fail(x, LINE("optimizer.device_groups"), "optimizer.device_groups",
                           "%d is more than the embedding and model.layers = %d layers",
                           c->device_groups, c->model.layers);
    if (c->grad_slots == GRAD_SLOTS_RING && c->clip > 0)
        return source_fail(x, LINE("optimizer.grad_slots"), "optimizer.grad_slots",
                           "\"ring\" updates each group as its gradients land, which needs "
                           "optimizer.clip = 0 (clipping to %g needs every gradient first)",
                           c->clip);
    if ((c->storage_grads || c->storage_adam) && !c->storage_dir[0])
        return source_fail(x, LINE(c->storage_grads ? "storage.grads" : "storage.adam"),
                           c->storage_grads ? "storage.grads" : "storage.adam",
                           "needs storage.dir, a folder on a local disk");
    if (c->storage_master && !c->storage_adam)
        return source_fail(x, LINE("storage.master"), "storage.master",
                           "needs storage.adam = true: the master is read, updated and written "
                           "with m and v, a piece at a time");
    if (c->storage_master && c->shard_across_nodes)
        return source_fail(x, LINE("storage.master"), "storage.master",
                           "does not work with optimizer.shard_across_nodes yet (each node would "
                           "gather its parts of the master a piece at a time)");
    if (c->storage_grads && model_grad_ring_depth(c))
        return source_fail(x, LINE("storage.grads"), "storage.grads",
                           "the gradient ring (optimizer.clip = 0) keeps only 4 groups' "
                           "gradients in memory: there is nothing to move to disk");
    if (c->trace_steps[1] > c->steps)
        return source_fail(x, LINE("trace_steps"), "trace_steps", "[%d, %d] goes past steps = %d",
                           c->trace_steps[0], c->trace_steps[1], c->steps);
    return 0;
}

// Each rope_scaling key, and the rope types it goes with (bit ROPE_*): required where marked.
static const struct {
    const char *key;
    unsigned types, required;
} rope_keys[] = {
    {"model.rope_scaling.factor", 1u << ROPE_LLAMA3 | 1u << ROPE_YARN,
     1u << ROPE_LLAMA3 | 1u << ROPE_YARN},
    {"model.rope_scaling.low_freq_factor", 1u << ROPE_LLAMA3, 1u << ROPE_LLAMA3},
    {"model.rope_scaling.high_freq_factor", 1u << ROPE_LLAMA3, 1u << ROPE_LLAMA3},
    {"model.rope_scaling.original_max_position_embeddings", 1u << ROPE_LLAMA3 | 1u << ROPE_YARN,
     1u << ROPE_LLAMA3 | 1u << ROPE_YARN},
    {"model.rope_scaling.beta_fast", 1u << ROPE_YARN, 0},
    {"model.rope_scaling.beta_slow", 1u << ROPE_YARN, 0},
    {"model.rope_scaling.truncate", 1u << ROPE_YARN, 0},
    {"model.rope_scaling.attention_factor", 1u << ROPE_YARN, 0},
};

// A rope type's numbers go with it, the required ones all of them (transformers demands them
// too: a silent default would change the frequencies), and llama3's blend between the two
// wavelengths divides by high_freq_factor - low_freq_factor.
static int check_rope_scaling(ctx_t *x, const mt_config *c) {
    int llama3 = c->model.rope_type == ROPE_LLAMA3;
    const char *type = mt_choice_name(ROPE_TYPE_NAMES, c->model.rope_type);
    for (size_t i = 0; i < sizeof rope_keys / sizeof *rope_keys; i++) {
        const char *k = rope_keys[i].key;
        if (!(rope_keys[i].types >> c->model.rope_type & 1) && SEEN(k))
            return source_fail(x, LINE(k), k, "not used with model.rope_scaling.rope_type = \"%s\"",
                               type);
        if (rope_keys[i].required >> c->model.rope_type & 1 && !c->model_dir[0] && !SEEN(k))
            return source_fail(x, LINE("model.rope_scaling.rope_type"), k,
                               "missing (rope_type \"%s\" needs it)", type);
    }
    if (llama3 && !(c->model.rope_high_freq_factor > c->model.rope_low_freq_factor))
        return source_fail(x, LINE("model.rope_scaling.high_freq_factor"),
                           "model.rope_scaling.high_freq_factor",
                           "%g must be greater than low_freq_factor = %g",
                           c->model.rope_high_freq_factor, c->model.rope_low_freq_factor);
    return 0;
}

// ---- entry point ----

static void set_defaults(mt_config *cfg) {
    for (int i = 0; i < NFIELDS; i++) {
        const field_t *f = &schema[i];
        char *dst = (char *)cfg + f->off;
        switch (f->kind) {
        case K_INT:
        case K_BOOL:
        case K_ENUM:
            *(int *)dst = (int)f->def;
            break;
        case K_INT64:
            *(uint64_t *)dst = (uint64_t)f->def;
            break;
        case K_FLOAT:
            *(double *)dst = f->def;
            break;
        case K_STRING:
            snprintf(dst, f->size, "%s", f->sdef ? f->sdef : "");
            break;
        case K_RANGE: // none
            memset(dst, 0, f->size);
            break;
        }
    }
}

int config_check(config_source *x, const mt_config *cfg) {
    return cross_check(x, cfg) < 0 || check_rope_scaling(x, cfg) < 0 ? -1 : 0;
}

int config_fail(config_source *x, const char *key, const char *fmt, ...) {
    char msg[MT_PATH_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return source_fail(x, LINE(key), key, "%s", msg);
}

static int load(ctx_t *x, mt_config *cfg, config_t *lc, int n_overrides) {
    struct stat st;
    if (stat(x->path, &st) == 0 && S_ISDIR(st.st_mode))
        return source_fail(x, 0, NULL, "cannot open: %s", strerror(EISDIR));
    FILE *f = fopen(x->path, "r");
    if (!f) return source_fail(x, 0, NULL, "cannot open: %s", strerror(errno));
    scan_big_literals(x, f);
    rewind(f);
    char dir[MT_PATH_MAX];
    if (config_dir(x, dir, sizeof dir) < 0) {
        fclose(f);
        return -1;
    }
    config_set_include_dir(lc, dir); // @include "x.cfg" is relative to this file too
    int ok = config_read(lc, f);
    fclose(f);
    if (!ok) {
        const char *file = config_error_file(lc);
        if (file) { // inside an @include: name that file
            snprintf(x->err, x->errlen, "%s:%d: %s", file, config_error_line(lc),
                     config_error_text(lc));
            return -1;
        }
        const char *text = config_error_text(lc);
        const char *hint = strcmp(text, "syntax error") == 0
                               ? " (settings look like: name = value; strings need \"quotes\")"
                               : "";
        return source_fail(x, config_error_line(lc), NULL, "%s%s", text, hint);
    }

    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    snprintf(cfg->source_path, sizeof cfg->source_path, "%s", x->path);
    if (walk(x, cfg, config_root_setting(lc), NULL) < 0) return -1;
    x->file = NULL;
    if (config_apply_overrides(x, cfg, n_overrides) < 0) return -1;
    for (int i = 0; i < NFIELDS; i++)
        if ((schema[i].flags & REQUIRED) && !x->line[i] &&
            !(cfg->model_dir[0] && strncmp(schema[i].key, "model.", 6) == 0)) // model_dir sets them
            return source_fail(x, 0, schema[i].key, "missing (required)");
    apply_derived(x, cfg);
    return 0;
}

int config_parse(mt_config *cfg, const char *path, const char *const *overrides, int n,
                 config_source **src, char *err, size_t errlen) {
    ctx_t *x = calloc(1, sizeof *x);
    if (!x) mt_die("out of memory");
    x->path = path, x->err = err, x->errlen = errlen, x->overrides = overrides;
    if (errlen) err[0] = 0;
    config_init(&x->lc);
    *src = x;
    return load(x, cfg, &x->lc, n);
}

void config_source_free(config_source *x) {
    if (!x) return;
    config_destroy(&x->lc);
    free(x);
}
