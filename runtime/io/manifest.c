// manifest.json: what a checkpoint holds (model shape, step, data position, the skip count),
// the XXH64 of every block of state.bin, and its own checksum ("self"), written at a save and
// checked, field by field against the job's config, before a resume reads anything.
#include "runtime/io/manifest.h"
#include "runtime/base/base.h"
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <xxhash.h>

#define MANIFEST_VERSION 3 // 3: "self" checksum, step/seed in state.bin's header; 2 still read

// A manifest lists a checksum per 64 MiB of state: 16 MiB of JSON is over 100 TB of state.
#define MANIFEST_MAX (16u << 20)

// The manifest's own checksum: XXH64 of the file with the 16 hex digits of its "self" field
// (the last one) read as zeros. Returns where those digits are, or NULL without one.
static char *self_digits(char *text) {
    char *key = NULL;
    for (char *p = text; (p = strstr(p, "\"self\"")); p++) key = p;
    if (!key) return NULL;
    char *p = key + 6;
    while (*p == ' ' || *p == ':' || *p == '\t' || *p == '\n') p++;
    if (*p != '"' || strspn(p + 1, "0123456789abcdef") < 16 || p[17] != '"') return NULL;
    return p + 1;
}

static uint64_t self_hash(char *text, char *digits) {
    char saved[16];
    memcpy(saved, digits, 16), memset(digits, '0', 16);
    uint64_t h = XXH64(text, strlen(text), 0);
    memcpy(digits, saved, 16);
    return h;
}

// Version 3 manifests must carry a "self" checksum that matches: a flipped bit or a hand edit
// of any field (the step, the seed...) is refused before anything is read from it.
static int check_self(char *text, const cJSON *root, const char *path, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(v) || v->valuedouble < 3) return 0;
    char *digits = self_digits(text), want[17];
    if (!digits) return snprintf(err, errlen, "%s: no \"self\" checksum", path), -1;
    snprintf(want, sizeof want, "%016llx", (unsigned long long)self_hash(text, digits));
    if (memcmp(want, digits, 16) == 0) return 0;
    snprintf(err, errlen,
             "%s: its \"self\" checksum does not match its contents (damaged or edited)", path);
    return -1;
}

cJSON *manifest_load(const char *step_dir, char *path, size_t cap, char *err, size_t errlen) {
    snprintf(path, cap, "%s/manifest.json", step_dir);
    char *text = read_text(path, MANIFEST_MAX, err, errlen);
    if (!text) return NULL;
    cJSON *root = cJSON_Parse(text);
    if (!root) snprintf(err, errlen, "%s: not valid JSON", path);
    if (root && check_self(text, root, path, err, errlen) < 0) cJSON_Delete(root), root = NULL;
    free(text);
    return root;
}

// A number field that must exist and be a non-negative integer; -1 (with err) otherwise.
int manifest_get_uint(const cJSON *obj, const char *key, const char *path, const char *prefix,
                      double *out, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9e18 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return snprintf(err, errlen, "%s: %s%s missing or not a non-negative integer", path, prefix,
                        key),
               -1;
    *out = v->valuedouble;
    return 0;
}

// The model's options that add tensors to a layer, recorded by name in the manifest.
static const struct {
    const char *key;
    size_t off;
} tensor_options[] = {
    {"qkv_bias", offsetof(mt_model, qkv_bias)},
    {"o_bias", offsetof(mt_model, o_bias)},
    {"attn_sinks", offsetof(mt_model, attn_sinks)},
    {"router_bias", offsetof(mt_model, router_bias)},
    {"expert_bias", offsetof(mt_model, expert_bias)},
    {"attn_output_gate", offsetof(mt_model, attn_output_gate)},
    {"norm_zero_centered", offsetof(mt_model, norm_zero_centered)},
    {"router_correction", offsetof(mt_model, router_correction)},
};

static int check_model(const cJSON *root, const mt_model *m, const char *path, char *err,
                       size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return snprintf(err, errlen, "%s: no \"model\" object", path), -1;
    const char *keys[] = {"dim", "layers", "heads", "kv_heads", "ffn_dim", "vocab"};
    const int want[] = {m->dim, m->layers, m->heads, m->kv_heads, m->ffn_dim, m->vocab};
    for (int i = 0; i < 6; i++) {
        double v;
        if (manifest_get_uint(model, keys[i], path, "model.", &v, err, errlen) != 0) return -1;
        if (v != want[i])
            return snprintf(err, errlen, "%s: model.%s %.0f != config %d", path, keys[i], v,
                            want[i]),
                   -1;
    }
    const cJSON *tied = cJSON_GetObjectItemCaseSensitive(model, "tied_embeddings");
    if (!cJSON_IsBool(tied))
        return snprintf(err, errlen, "%s: model.tied_embeddings missing or not a bool", path), -1;
    if (!!cJSON_IsTrue(tied) != !!m->tied_embeddings)
        return snprintf(err, errlen, "%s: model.tied_embeddings %s != config %s", path,
                        cJSON_IsTrue(tied) ? "true" : "false",
                        m->tied_embeddings ? "true" : "false"),
               -1;
    // The options that add tensors; absent in checkpoints from before each option, whose models
    // have none.
    for (size_t i = 0; i < sizeof tensor_options / sizeof *tensor_options; i++) {
        const char *key = tensor_options[i].key;
        int saved = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, key));
        int want = !!*(const int *)((const char *)m + tensor_options[i].off);
        if (saved != want)
            return snprintf(err, errlen, "%s: model.%s %s != config %s", path, key,
                            saved ? "true" : "false", want ? "true" : "false"),
                   -1;
    }
    return 0;
}

static int parse_hex64(const cJSON *s, uint64_t *out) {
    if (!cJSON_IsString(s) || strlen(s->valuestring) != 16) return -1;
    char *end;
    *out = strtoull(s->valuestring, &end, 16);
    return *end == 0 && strspn(s->valuestring, "0123456789abcdef") == 16 ? 0 : -1;
}

static int parse_blocks(const cJSON *root, const char *path, block_list *bl, char *err,
                        size_t errlen) {
    memset(bl, 0, sizeof *bl);
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(root, "checksum");
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(ck, "algorithm");
    if (!cJSON_IsObject(ck) || !cJSON_IsString(alg) || strcmp(alg->valuestring, "xxh64") != 0)
        return snprintf(err, errlen, "%s: no \"checksum\" object with algorithm \"xxh64\"", path),
               -1;
    double block, bytes;
    if (manifest_get_uint(ck, "block_bytes", path, "checksum.", &block, err, errlen) != 0 ||
        manifest_get_uint(ck, "file_bytes", path, "checksum.", &bytes, err, errlen) != 0)
        return -1;
    if (block == 0 || (uint64_t)block % 65536 != 0)
        return snprintf(err, errlen, "%s: checksum.block_bytes %.0f is not a multiple of 64 KiB",
                        path, block),
               -1;
    bl->block = (uint64_t)block, bl->file_bytes = (uint64_t)bytes;
    bl->n = (bl->file_bytes + bl->block - 1) / bl->block;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(ck, "blocks");
    if (!cJSON_IsArray(arr) || (uint64_t)cJSON_GetArraySize(arr) != bl->n)
        return snprintf(err, errlen, "%s: checksum.blocks should list %" PRIu64 " checksums", path,
                        bl->n),
               -1;
    bl->sums = calloc(bl->n ? bl->n : 1, sizeof *bl->sums);
    if (!bl->sums) mt_die("out of memory");
    uint64_t i = 0;
    for (const cJSON *s = arr->child; s; s = s->next, i++)
        if (parse_hex64(s, &bl->sums[i]) != 0) {
            free(bl->sums), bl->sums = NULL;
            return snprintf(err, errlen, "%s: checksum.blocks[%" PRIu64 "] is not 16 hex digits",
                            path, i),
                   -1;
        }
    return 0;
}

static int check_version(const cJSON *root, const char *path, char *err, size_t errlen) {
    double version;
    if (manifest_get_uint(root, "version", path, "", &version, err, errlen) != 0) return -1;
    if (version == MANIFEST_VERSION || version == 2) return 0;
    snprintf(err, errlen, "%s: version %.0f, this build reads versions 2 and %d", path, version,
             MANIFEST_VERSION);
    return -1;
}

// The run the manifest belongs to: its groups and seed are the config's (another seed would
// read other batches than the run it continues).
static int check_run(const cJSON *root, const mt_job *job, const char *path, manifest_facts *mf,
                     char *err, size_t errlen) {
    double v, groups;
    if (manifest_get_uint(root, "version", path, "", &v, err, errlen) != 0 ||
        manifest_get_uint(root, "step", path, "", &mf->step, err, errlen) != 0 ||
        manifest_get_uint(root, "groups", path, "", &groups, err, errlen) != 0)
        return -1;
    mf->version = (int)v;
    if (groups != job->n_groups)
        return snprintf(err, errlen, "%s: groups %.0f != %d that the config's model has", path,
                        groups, job->n_groups),
               -1;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(data, "seed");
    char want[32];
    snprintf(want, sizeof want, "%" PRIu64, job->cfg.seed);
    if (!cJSON_IsString(seed))
        return snprintf(err, errlen, "%s: data.seed missing or not a string", path), -1;
    if (strcmp(seed->valuestring, want) != 0)
        return snprintf(err, errlen,
                        "%s: data.seed %.30s != the config's seed %s (another seed reads other "
                        "batches than the run it continues)",
                        path, seed->valuestring, want),
               -1;
    mf->seed = job->cfg.seed, mf->skipped = 0;
    if (cJSON_GetObjectItemCaseSensitive(data, "skipped_steps"))
        return manifest_get_uint(data, "skipped_steps", path, "data.", &mf->skipped, err, errlen);
    return 0;
}

// Everything resume needs from the manifest, checked against the job's config; on success
// bl->sums is malloc'd.
int manifest_check(const char *step_dir, const mt_job *job, uint64_t file_bytes, block_list *bl,
                   manifest_facts *mf, char *err, size_t errlen) {
    char path[PATH_MAX];
    cJSON *root = manifest_load(step_dir, path, sizeof path, err, errlen);
    if (!root) return -1;
    int rc = check_version(root, path, err, errlen);
    if (rc == 0) rc = check_model(root, &job->cfg.model, path, err, errlen);
    if (rc == 0) rc = check_run(root, job, path, mf, err, errlen);
    if (rc == 0) rc = parse_blocks(root, path, bl, err, errlen);
    cJSON_Delete(root);
    if (rc == 0 && bl->file_bytes != file_bytes) {
        snprintf(err, errlen,
                 "%s: checksum.file_bytes %" PRIu64 " != %" PRIu64 " that the config's model needs",
                 path, bl->file_bytes, file_bytes);
        free(bl->sums);
        rc = -1;
    }
    return rc;
}

// ---- writing ----

static cJSON *manifest_model(const mt_model *m) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddNumberToObject(obj, "dim", m->dim);
    cJSON_AddNumberToObject(obj, "layers", m->layers);
    cJSON_AddNumberToObject(obj, "heads", m->heads);
    cJSON_AddNumberToObject(obj, "kv_heads", m->kv_heads);
    cJSON_AddNumberToObject(obj, "ffn_dim", m->ffn_dim);
    cJSON_AddNumberToObject(obj, "vocab", m->vocab);
    cJSON_AddBoolToObject(obj, "tied_embeddings", m->tied_embeddings);
    for (size_t i = 0; i < sizeof tensor_options / sizeof *tensor_options; i++)
        cJSON_AddBoolToObject(obj, tensor_options[i].key,
                              *(const int *)((const char *)m + tensor_options[i].off));
    return obj;
}

// Batches are a pure function of (seed, step), so the step is the whole data position.
static cJSON *manifest_data(const mt_config *c, int step, int skipped) {
    cJSON *d = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed); // a string: exact beyond 2^53
    cJSON_AddNumberToObject(d, "position", step);
    cJSON_AddNumberToObject(d, "skipped_steps", skipped); // non-finite norms: no update made
    cJSON_AddStringToObject(d, "seed", seed);
    cJSON_AddStringToObject(d, "rng",
                            "none: initialization and batches are pure functions of "
                            "(seed, step); there is no other random state");
    return d;
}

static cJSON *manifest_checksum(const block_list *bl) {
    cJSON *ck = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(ck, "algorithm", "xxh64");
    cJSON_AddNumberToObject(ck, "block_bytes", (double)bl->block);
    cJSON_AddNumberToObject(ck, "file_bytes", (double)bl->file_bytes);
    for (uint64_t i = 0; i < bl->n; i++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, bl->sums[i]);
        cJSON_AddItemToArray(arr, cJSON_CreateString(hex));
    }
    cJSON_AddItemToObject(ck, "blocks", arr);
    return ck;
}

char *manifest_text(const mt_job *job, int step, const block_list *bl) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "megatrain-c checkpoint");
    cJSON_AddNumberToObject(root, "version", MANIFEST_VERSION);
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddItemToObject(root, "model", manifest_model(&job->cfg.model));
    cJSON_AddNumberToObject(root, "groups", job->n_groups);
    double params = 0;
    for (int g = 0; g < job->n_groups; g++) params += (double)job->group_numel[g];
    cJSON_AddNumberToObject(root, "params", params);
    cJSON_AddItemToObject(root, "data", manifest_data(&job->cfg, step, job->skipped_steps));
    cJSON_AddStringToObject(root, "state", "state.bin");
    cJSON_AddItemToObject(root, "checksum", manifest_checksum(bl));
    cJSON_AddStringToObject(root, "config", job->cfg.source_path);
    if (job->cfg.n_overrides) { // the command line's key=value settings, for the resume
        cJSON *o = cJSON_CreateArray();
        for (int i = 0; i < job->cfg.n_overrides; i++)
            cJSON_AddItemToArray(o, cJSON_CreateString(job->cfg.overrides[i]));
        cJSON_AddItemToObject(root, "overrides", o);
    }
    cJSON_AddStringToObject(root, "self", "0000000000000000"); // last: see check_self
    char *text = cJSON_Print(root), *digits = text ? self_digits(text) : NULL;
    if (!digits) mt_die("checkpoint: cannot lay out manifest.json");
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)self_hash(text, digits));
    memcpy(digits, hex, 16);
    cJSON_Delete(root);
    return text;
}

int manifest_overrides(const char *step_dir, char out[][MT_OVERRIDE_MAX], int max, int *n,
                       char *err, size_t errlen) {
    char path[MT_PATH_MAX + 32];
    *n = 0;
    cJSON *root = manifest_load(step_dir, path, sizeof path, err, errlen);
    if (!root) return -1;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "overrides"), *e;
    int rc = 0;
    if (o && !cJSON_IsArray(o)) {
        failf(err, errlen, "%s: overrides: not an array", path);
        rc = -2;
    }
    const cJSON *list = rc == 0 ? o : NULL;
    cJSON_ArrayForEach(e, list) {
        if (!cJSON_IsString(e) || strlen(e->valuestring) >= MT_OVERRIDE_MAX || *n == max ||
            !strchr(e->valuestring, '=')) {
            failf(err, errlen, "%s: overrides: entry %d is not a key=value of at most %d bytes",
                  path, *n + 1, MT_OVERRIDE_MAX - 1);
            rc = -2;
            break;
        }
        snprintf(out[(*n)++], MT_OVERRIDE_MAX, "%s", e->valuestring);
    }
    cJSON_Delete(root);
    return rc;
}
