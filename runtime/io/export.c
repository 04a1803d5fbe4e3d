// Hugging Face weights out: config.json, safetensors shards and their index, written by the
// optimizer ranks in parallel into a temporary folder that is renamed into place at the end.
// gpt-oss's fused expert tensors (hub_layout.h) hold several of our tensors each: a writer
// stages its slices in our layout inside them, and once all are written each slab is permuted
// into the hub's order by one writer (hf_export_assemble).
#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include "runtime/io/export_carry.h"
#include "runtime/io/hf_index.h"
#include "runtime/io/hub_layout.h"
#include "kernels/bf16.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// One hub tensor: the first of our tensors it holds (g, k) and where its bytes go.
typedef struct {
    int g, k, shard;
    uint64_t rel; // byte offset in its shard's data
} plan_entry;

typedef struct {
    int n, n_shards;
    plan_entry *e;
    uint64_t *data_start, *data_bytes; // per shard
} export_plan;

// export_dtype "bfloat16" halves the files; the default keeps the fp32 master bits.
static int export_bf16(const mt_config *cfg) {
    return cfg->export_dtype == EXPORT_BFLOAT16;
}

int hf_export_fp32(const mt_model *m, const tensor_info *t) {
    return t->role == T_ROUTER_CORR || (t->role == T_ROUTER && m->moe_names == MOE_NAMES_DEEPSEEK);
}

// Bytes an element of t takes in the export: bf16 ones but where transformers keeps fp32.
static uint64_t export_size(const mt_config *cfg, const tensor_info *t) {
    return export_bf16(cfg) && !hf_export_fp32(&cfg->model, t) ? 2 : 4;
}

static void shard_file(char *out, size_t cap, int s, int n) {
    snprintf(out, cap, "model-%05d-of-%05d.safetensors", s + 1, n);
}

// Groups in order, tensors in order; a shard closes when the next tensor would overflow it.
static void plan_tensors(const mt_config *cfg, uint64_t max, export_plan *p) {
    int cap = 0;
    uint64_t used = 0;
    memset(p, 0, sizeof *p);
    for (int g = 0; g < model_group_count(&cfg->model); g++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        uint64_t numel;
        int n = model_group_tensors(&cfg->model, g, ti, &numel);
        for (int k = 0; k < n; k++) {
            if (!hub_first(&ti[k])) continue; // in the hub tensor of an earlier one
            uint64_t bytes = hub_place_of(&cfg->model, &ti[k]).numel * export_size(cfg, &ti[k]);
            if (p->n == 0 || (used > 0 && used + bytes > max)) p->n_shards++, used = 0;
            if (p->n == cap && !(p->e = realloc(p->e, (cap = cap ? 2 * cap : 64) * sizeof *p->e)))
                mt_die("out of memory");
            p->e[p->n++] = (plan_entry){g, k, p->n_shards - 1, used};
            used += bytes;
        }
    }
}

static const tensor_info *entry_info(const mt_model *m, const plan_entry *e, tensor_info *ti,
                                     char *name, size_t cap) {
    uint64_t numel;
    model_group_tensors(m, e->g, ti, &numel);
    // A text class's tensors go out as model.*, however the folder nested them: transformers
    // and every vLLM load that (older vLLMs' Qwen3_5ForCausalLM only that); a VLM's stay nested.
    ti[e->k].lm_nested = ti[e->k].lm_nested && m->hub_vlm;
    model_tensor_name(name, cap, &ti[e->k], e->g - 1);
    return &ti[e->k];
}

// The JSON header of shard s, padded with spaces to a multiple of 8 (aligned data).
static char *shard_header(const mt_config *cfg, const export_plan *p, int s, uint64_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    for (int i = 0; i < p->n; i++) {
        if (p->e[i].shard != s) continue;
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256];
        const tensor_info *t = entry_info(&cfg->model, &p->e[i], ti, name, sizeof name);
        cJSON *o = cJSON_AddObjectToObject(root, name);
        cJSON_AddStringToObject(o, "dtype", export_size(cfg, t) == 2 ? "BF16" : "F32");
        cJSON *shape = cJSON_AddArrayToObject(o, "shape"), *offs;
        hub_place hub = hub_place_of(&cfg->model, t);
        for (int d = 0; d < hub.ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)hub.dims[d]));
        offs = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)p->e[i].rel));
        uint64_t end = p->e[i].rel + hub.numel * export_size(cfg, t);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)end));
    }
    return safetensors_header_text(root, len);
}

static void make_plan(const mt_config *cfg, uint64_t max, export_plan *p) {
    plan_tensors(cfg, max, p);
    p->data_start = calloc(p->n_shards, sizeof *p->data_start);
    p->data_bytes = calloc(p->n_shards, sizeof *p->data_bytes);
    if (!p->data_start || !p->data_bytes) mt_die("out of memory");
    for (int s = 0; s < p->n_shards; s++) {
        uint64_t hlen;
        free(shard_header(cfg, p, s, &hlen));
        p->data_start[s] = 8 + hlen;
    }
    for (int i = 0; i < p->n; i++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256];
        const tensor_info *t = entry_info(&cfg->model, &p->e[i], ti, name, sizeof name);
        uint64_t end = p->e[i].rel + hub_place_of(&cfg->model, t).numel * export_size(cfg, t);
        p->data_bytes[p->e[i].shard] = end;
    }
}

static void free_plan(export_plan *p) {
    free(p->e);
    free(p->data_start);
    free(p->data_bytes);
}

static void write_all(int fd, const void *buf, size_t n, off_t at, const char *path) {
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const char *)buf + done, n - done, at + (off_t)done);
        if (w < 0) mt_die("%s: write failed: %s", path, strerror(errno));
        done += (size_t)w;
    }
}

static void write_json(const char *dir, const char *file, cJSON *root) {
    char path[PATH_MAX], *text = cJSON_Print(root);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open_nofollow(path, "x");
    if (fd < 0 || !text) mt_die("%s: %s", path, fd < 0 ? strerror(errno) : "out of memory");
    write_all(fd, text, strlen(text), 0, path);
    write_all(fd, "\n", 1, (off_t)strlen(text), path);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
    free(text);
    cJSON_Delete(root);
}

// rope_scaling as transformers reads it back: null (or the family's own, hf_write_family's),
// llama3's object or yarn's.
static void add_rope_scaling(cJSON *r, const mt_model *m) {
    if (cJSON_GetObjectItemCaseSensitive(r, "rope_scaling")) return;
    if (m->rope_type == ROPE_PLAIN) {
        cJSON_AddNullToObject(r, "rope_scaling");
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(r, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", mt_choice_name(ROPE_TYPE_NAMES, m->rope_type));
    hf_add_float(rs, "factor", m->rope_factor);
    if (m->rope_type == ROPE_LLAMA3) {
        hf_add_float(rs, "low_freq_factor", m->rope_low_freq_factor);
        hf_add_float(rs, "high_freq_factor", m->rope_high_freq_factor);
    } else {
        hf_add_float(rs, "beta_fast", m->rope_beta_fast);
        hf_add_float(rs, "beta_slow", m->rope_beta_slow);
        cJSON_AddBoolToObject(rs, "truncate", m->rope_truncate);
        if (m->rope_attention_factor > 0)
            hf_add_float(rs, "attention_factor", m->rope_attention_factor);
        if (m->rope_mscale > 0) hf_add_float(rs, "mscale", m->rope_mscale);
        if (m->rope_mscale_all_dim > 0) hf_add_float(rs, "mscale_all_dim", m->rope_mscale_all_dim);
    }
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", m->rope_original_max_pos);
}

// The model's keys: the architecture whose fields are m's (model_dir's class first; a Mistral
// input comes out as Llama: the same math within its window), then the shape every family
// shares. NULL when no architecture has m's fields.
static cJSON *model_config_json(const mt_model *m, const char *model_dir) {
    cJSON *r = cJSON_CreateObject();
    if (hf_write_family(r, m, model_dir) < 0) return cJSON_Delete(r), NULL;
    cJSON_AddNumberToObject(r, "hidden_size", m->dim);
    cJSON_AddNumberToObject(r, "num_hidden_layers", m->layers);
    cJSON_AddNumberToObject(r, "num_attention_heads", m->heads);
    cJSON_AddNumberToObject(r, "num_key_value_heads", m->kv_heads);
    if (!cJSON_GetObjectItemCaseSensitive(r, "head_dim")) // MLA's is its rotated width
        cJSON_AddNumberToObject(r, "head_dim", mt_head_dim(m));
    cJSON_AddNumberToObject(r, "vocab_size", m->vocab);
    // transformers 5's rope_parameters (the Gated DeltaNet families') carry rope_theta
    if (!cJSON_GetObjectItemCaseSensitive(r, "rope_parameters")) {
        cJSON_AddNumberToObject(r, "rope_theta", m->rope_theta); // prints doubles round-trip
        add_rope_scaling(r, m);
    }
    cJSON_AddNumberToObject(r, "rms_norm_eps", m->norm_eps);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", m->tied_embeddings);
    if (m->bos_id >= 0) cJSON_AddNumberToObject(r, "bos_token_id", m->bos_id);
    if (m->eos_id >= 0 && m->n_eos_more == 0) cJSON_AddNumberToObject(r, "eos_token_id", m->eos_id);
    if (m->eos_id >= 0 && m->n_eos_more > 0) {
        cJSON *eos = cJSON_AddArrayToObject(r, "eos_token_id");
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(m->eos_id));
        for (int i = 0; i < m->n_eos_more; i++)
            cJSON_AddItemToArray(eos, cJSON_CreateNumber(m->eos_more[i]));
    }
    cJSON_AddNumberToObject(r, "attention_dropout", 0);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    return r;
}

// The model's keys, then the run's: the context it trained for, the dtype it is written in.
static void write_config(const mt_config *c, const char *dir) {
    cJSON *r = model_config_json(&c->model, c->model_dir);
    if (!r)
        mt_die("%s: no Hugging Face architecture has this model's fields (qk_norm %s, experts %d)",
               dir, mt_choice_name(QK_NORM_NAMES, c->model.qk_norm), c->model.experts);
    // llama3 and yarn scaling exist to reach past the original context: transformers expects
    // more (and warns when yarn's factor is not that ratio)
    int ctx = c->seq_len;
    if (c->model.rope_type != ROPE_PLAIN &&
        c->model.rope_factor * c->model.rope_original_max_pos > ctx)
        ctx = (int)fmin(c->model.rope_factor * c->model.rope_original_max_pos, INT_MAX);
    cJSON_AddNumberToObject(r, "max_position_embeddings", ctx);
    cJSON_AddNumberToObject(r, "initializer_range", 0.02);
    cJSON_AddNumberToObject(r, "pretraining_tp", 1);
    cJSON_AddBoolToObject(r, "use_cache", 1);
    cJSON_AddStringToObject(r, "torch_dtype", export_bf16(c) ? "bfloat16" : "float32");
    write_json(dir, "config.json", hf_export_config(c, r));
}

// The index, with the carried tensors (copied here into their own shards) after ours.
static void write_index(const mt_config *cfg, const export_plan *p, const char *dir, uint64_t max) {
    cJSON *r = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(r, "metadata");
    cJSON *map = cJSON_AddObjectToObject(r, "weight_map");
    double total = 0;
    for (int s = 0; s < p->n_shards; s++) total += (double)p->data_bytes[s];
    cJSON_AddNumberToObject(meta, "total_size", total);
    for (int i = 0; i < p->n; i++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256], file[64];
        entry_info(&cfg->model, &p->e[i], ti, name, sizeof name);
        shard_file(file, sizeof file, p->e[i].shard, p->n_shards);
        cJSON_AddStringToObject(map, name, file);
    }
    total += hf_export_carry(cfg, dir, max, map);
    cJSON_ReplaceItemInObject(meta, "total_size", cJSON_CreateNumber(total));
    write_json(dir, "model.safetensors.index.json", r);
}

void hf_export_prepare(const mt_config *cfg, const char *tmp_dir, uint64_t max) {
    export_plan p;
    make_plan(cfg, max, &p);
    char err[PATH_MAX + 256], parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", tmp_dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) *slash = 0, make_dirs(parent);
    // mtrun checked the folders at the start; one made since by another user is caught here.
    if (path_trust_check(slash ? parent : ".", 1, err, sizeof err) < 0)
        mt_refuse("export_dir: %s: another user could take or swap the export; nothing was "
                  "exported",
                  err);
    // a crashed earlier export's folder: ours to clear, a link is not
    if (remove_stale_temp(tmp_dir, err, sizeof err) < 0) mt_die("export: %s", err);
    if (mkdir(tmp_dir, 0755) != 0) mt_die("export: mkdir %s: %s", tmp_dir, strerror(errno));
    write_config(cfg, tmp_dir);
    write_index(cfg, &p, tmp_dir, max);
    for (int s = 0; s < p.n_shards; s++) {
        char file[64], path[PATH_MAX];
        shard_file(file, sizeof file, s, p.n_shards);
        snprintf(path, sizeof path, "%s/%s", tmp_dir, file);
        int fd = open_nofollow(path, "x");
        if (fd < 0) mt_die("%s: %s", path, strerror(errno));
        uint64_t hlen;
        char *h = shard_header(cfg, &p, s, &hlen);
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
        write_all(fd, len8, 8, 0, path);
        write_all(fd, h, hlen, 8, path);
        free(h);
        SYS_CHECK(ftruncate(fd, (off_t)(p.data_start[s] + p.data_bytes[s])));
        SYS_CHECK(fsync(fd));
        SYS_CHECK(close(fd));
    }
    free_plan(&p);
}

// fp32 as is (es 4), or rounded to bf16 (nearest even, as torch) a bounded chunk at a time.
static void write_values(uint64_t es, int fd, const float *v, uint64_t n, off_t at,
                         const char *path) {
    if (es == 4) {
        write_all(fd, v, n * 4, at, path);
        return;
    }
    enum { CHUNK = 1 << 16 };
    static __thread bf16 buf[CHUNK];
    for (uint64_t done = 0; done < n;) {
        size_t m = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
        for (size_t i = 0; i < m; i++) buf[i] = bf16_from_float(v[done + i]);
        write_all(fd, buf, m * 2, at + (off_t)(done * 2), path);
        done += m;
    }
}

// The plan entry of the hub tensor that holds group g's tensor ti[k]: its own, or a fused one's
// (of the same name: a per-expert tensor's pattern is the same for every expert, "%e").
static const plan_entry *entry_of(const export_plan *p, int g, const tensor_info *ti, int k) {
    const tensor_info *t = &ti[k];
    for (int i = 0; i < p->n; i++)
        if (p->e[i].g == g && (p->e[i].k == k || (t->hub_layout != HUB_PLAIN &&
                                                  !strcmp(ti[p->e[i].k].name, t->name))))
            return &p->e[i];
    mt_die("internal: group %d's tensor %s is in no export shard", g, t->name);
}

static int open_shard(const export_plan *p, int shard, const char *tmp_dir, char *path,
                      size_t cap) {
    char file[64];
    shard_file(file, sizeof file, shard, p->n_shards);
    snprintf(path, cap, "%s/%s", tmp_dir, file);
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    return fd;
}

void hf_export_write_slice(const mt_config *cfg, const char *tmp_dir, uint64_t max, int g,
                           uint64_t lo, uint64_t len, const float *data) {
    export_plan p;
    make_plan(cfg, max, &p);
    tensor_info ti[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(&cfg->model, g, ti, &numel);
    for (int k = 0; k < n; k++) {
        const tensor_info *t = &ti[k];
        uint64_t a = t->offset > lo ? t->offset : lo;
        uint64_t b = t->offset + t->numel < lo + len ? t->offset + t->numel : lo + len;
        if (a >= b) continue;
        const plan_entry *e = entry_of(&p, g, ti, k);
        char path[PATH_MAX];
        int fd = open_shard(&p, e->shard, tmp_dir, path, sizeof path);
        uint64_t es = export_size(cfg, t), staged = hub_place_of(&cfg->model, t).staged;
        off_t at = (off_t)(p.data_start[e->shard] + e->rel + (staged + a - t->offset) * es);
        write_values(es, fd, data + (a - lo), b - a, at, path);
        SYS_CHECK(fsync(fd));
        SYS_CHECK(close(fd));
    }
    free_plan(&p);
}

static void read_all(int fd, void *buf, size_t n, off_t at, const char *path) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, at + (off_t)done);
        if (r <= 0) mt_die("%s: read failed: %s", path, r < 0 ? strerror(errno) : "end of file");
        done += (size_t)r;
    }
}

// One expert's slab of a fused tensor, staged -> the hub's order, in place.
static void permute_slab(const mt_config *cfg, const export_plan *p, const plan_entry *e,
                         const tensor_info *t, int expert, const char *tmp_dir) {
    char path[PATH_MAX];
    int fd = open_shard(p, e->shard, tmp_dir, path, sizeof path), es = (int)export_size(cfg, t);
    size_t bytes = (size_t)hub_place_of(&cfg->model, t).slab * es;
    off_t at = (off_t)(p->data_start[e->shard] + e->rel + (uint64_t)expert * bytes);
    unsigned char *staged = malloc(bytes), *hub = malloc(bytes);
    if (!staged || !hub) mt_die("out of memory");
    read_all(fd, staged, bytes, at, path);
    hub_permute_slab(&cfg->model, t, staged, hub, es);
    write_all(fd, hub, bytes, at, path);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
    free(staged);
    free(hub);
}

void hf_export_assemble(const mt_config *cfg, const char *tmp_dir, uint64_t max, int writer,
                        int writers) {
    export_plan p;
    make_plan(cfg, max, &p);
    int turn = 0; // slabs are dealt to the writers in turn
    for (int i = 0; i < p.n; i++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256];
        const tensor_info *t = entry_info(&cfg->model, &p.e[i], ti, name, sizeof name);
        if (!hub_permuted(t)) continue;
        for (int e = 0; e < hub_slabs(&cfg->model, t); e++)
            if (turn++ % writers == writer) permute_slab(cfg, &p, &p.e[i], t, e, tmp_dir);
    }
    free_plan(&p);
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) mt_die("%s: %s", dir, strerror(errno));
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

void hf_export_publish(const char *tmp_dir, const char *dir) {
    fsync_dir(tmp_dir);
    // rename() replaces an empty folder atomically; hf_export_dir_check refused a full one.
    if (rename(tmp_dir, dir) != 0) mt_die("rename %s -> %s: %s", tmp_dir, dir, strerror(errno));
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) *slash = 0;
    fsync_dir(slash ? parent : ".");
}

int hf_export_dir_check(const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d && errno == ENOENT) return 0;
    if (!d) return failf(err, errlen, "%s: %s", dir, strerror(errno));
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    SYS_CHECK(closedir(d));
    if (n)
        return failf(err, errlen, "%s already exists and is not empty: refusing to overwrite it",
                     dir);
    return 0;
}

void hf_export_tmp_path(const char *dir, char *out, size_t cap) {
    snprintf(out, cap, "%s.export-tmp", dir);
}

uint64_t hf_export_max_shard_bytes(void) {
    const char *s = getenv("MT_HF_MAX_SHARD_BYTES");
    unsigned long long v = s ? strtoull(s, NULL, 10) : 0;
    return v > 0 ? (uint64_t)v : HF_MAX_SHARD_BYTES;
}
