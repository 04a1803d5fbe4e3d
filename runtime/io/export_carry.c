// What an export carries from model_dir unchanged (io.h's hf_carried): the tensors we do not
// train, a Qwen3.5 VLM's vision tower and the multi-token-prediction layers (Qwen3.5's mtp.*,
// DeepSeek's and GLM's decoder layers past the last), copied byte for
// byte in their own dtype into shards of their own (model-carried-NNNNN-of-NNNNN.safetensors),
// and the config.json keys of the checkpoint around the language model (a VLM's top level and
// vision_config, the keys of text_config we do not read, the MTP layers' keys), so that the
// exported folder is the whole checkpoint transformers and vLLM load. Block-scaled FP8 weights
// (DeepSeek-V3's MTP layer) are the exception: the export has no quantization_config to read
// them by, so each goes out dequantized (fp8_read.c, the values the trained weights were read
// as) in the export's dtype, and its NAME_scale_inv stays behind.
#include "runtime/base/base.h"
#include "runtime/io/export_carry.h"
#include "runtime/io/hf_index.h"
#include "runtime/io/io.h"
#include "kernels/bf16.h"
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIG_MAX (16u << 20)

static int starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

// DeepSeek's and GLM's multi-token-prediction layers are decoder layers past the last
// (model.layers.61.* of DeepSeek-V3's 61), which transformers does not load.
static int past_last_layer(const mt_model *m, const char *name) {
    const char *p = "model.layers.";
    if (m->moe_names != MOE_NAMES_DEEPSEEK || !starts_with(name, p)) return 0;
    char *end;
    long layer = strtol(name + strlen(p), &end, 10);
    return end != name + strlen(p) && *end == '.' && layer >= m->layers;
}

int hf_carried(const mt_model *m, const char *name) {
    return (m->hub_vlm && starts_with(name, "model.visual.")) ||
           (m->linear_k_heads > 0 && starts_with(name, "mtp.")) || past_last_layer(m, name);
}

static void carried_file(char *out, size_t cap, int s, int n) {
    snprintf(out, cap, "model-carried-%05d-of-%05d.safetensors", s + 1, n);
}

// The dtype t goes out in: an FP8 weight's the export's, any other its own.
static int dtype_out(const hf_tensor *t, int to_bf16) {
    return t->dtype != DT_F8 ? t->dtype : to_bf16 ? DT_BF16 : DT_F32;
}

static uint64_t bytes_of(const hf_tensor *t) {
    return t->end - t->begin;
}

static uint64_t bytes_out(const hf_tensor *t, int to_bf16) {
    return t->dtype != DT_F8 ? bytes_of(t) : t->numel * (to_bf16 ? 2 : 4);
}

// Shard s's header, padded with spaces to a multiple of 8, for the carried tensors whose
// shard[] is s.
static char *carried_header(const hf_index *ix, const int *shard, int s, int to_bf16,
                            uint64_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t at = 0;
    for (int i = 0; i < hf_index_count(ix); i++) {
        if (shard[i] != s) continue;
        const hf_tensor *t = hf_tensor_at(ix, i);
        cJSON *o = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(o, "dtype", hf_dtype_name(dtype_out(t, to_bf16)));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape"), *offs;
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        offs = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(at += bytes_out(t, to_bf16))));
    }
    return safetensors_header_text(root, len);
}

static void put(int fd, const void *buf, size_t n, off_t at, const char *path) {
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const char *)buf + done, n - done, at + (off_t)done);
        if (w < 0) mt_die("%s: write failed: %s", path, strerror(errno));
        done += (size_t)w;
    }
}

// An FP8 weight dequantized into the export's dtype at `at`, a piece at a time.
static void put_fp8(int fd, const hf_index *ix, const hf_tensor *t, int to_bf16, off_t at,
                    const char *path) {
    enum { PIECE = 1 << 22 };
    char err[PATH_MAX + 256];
    float *x = malloc(sizeof(float) * PIECE);
    bf16 *h = malloc(sizeof(bf16) * PIECE);
    if (!x || !h) mt_die("out of memory");
    for (uint64_t done = 0; done < t->numel;) {
        size_t m = t->numel - done < PIECE ? (size_t)(t->numel - done) : PIECE;
        if (fp8_read_range(ix, t, done, m, x, err, sizeof err) < 0) mt_die("export: %s", err);
        for (size_t i = 0; to_bf16 && i < m; i++) h[i] = bf16_from_float(x[i]);
        size_t width = to_bf16 ? sizeof(bf16) : sizeof(float);
        put(fd, to_bf16 ? (const void *)h : (const void *)x, m * width, at, path);
        at += (off_t)(m * width), done += m;
    }
    free(x), free(h);
}

// Shard s: its header, then each of its tensors' bytes as model_dir holds them (an FP8 weight's
// dequantized).
static void write_carried(const hf_index *ix, const int *shard, int s, int n, int to_bf16,
                          const char *dir) {
    char file[64], path[PATH_MAX], err[PATH_MAX + 256];
    carried_file(file, sizeof file, s, n);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open_nofollow(path, "x");
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    uint64_t hlen;
    char *h = carried_header(ix, shard, s, to_bf16, &hlen);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    put(fd, len8, 8, 0, path);
    put(fd, h, hlen, 8, path);
    free(h);
    enum { CHUNK = 1 << 24 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) mt_die("out of memory");
    off_t at = (off_t)(8 + hlen);
    for (int i = 0; i < hf_index_count(ix); i++) {
        if (shard[i] != s) continue;
        const hf_tensor *t = hf_tensor_at(ix, i);
        if (t->dtype == DT_F8) {
            put_fp8(fd, ix, t, to_bf16, at, path);
            at += (off_t)bytes_out(t, to_bf16);
            continue;
        }
        for (uint64_t done = 0; done < bytes_of(t);) {
            size_t m = bytes_of(t) - done < CHUNK ? (size_t)(bytes_of(t) - done) : CHUNK;
            if (hf_read_bytes(ix, t, done, m, buf, err, sizeof err) < 0) mt_die("export: %s", err);
            put(fd, buf, m, at, path);
            at += (off_t)m, done += m;
        }
    }
    free(buf);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

// Whether model_dir may hold tensors to carry: only the families hf_carried names read it again.
static int may_carry(const mt_config *cfg) {
    return cfg->model_dir[0] && (cfg->model.hub_vlm || cfg->model.linear_k_heads > 0 ||
                                 cfg->model.moe_names == MOE_NAMES_DEEPSEEK);
}

double hf_export_carry(const mt_config *cfg, const char *dir, uint64_t max, cJSON *map) {
    if (!may_carry(cfg)) return 0;
    char err[PATH_MAX + 256];
    hf_index *ix = hf_index_open(cfg->model_dir, err, sizeof err);
    if (!ix) mt_die("export: %s", err);
    int count = hf_index_count(ix), n = 0;
    int *shard = malloc(sizeof *shard * (count ? count : 1));
    if (!shard) mt_die("out of memory");
    uint64_t used = 0;
    double total = 0;
    int to_bf16 = cfg->export_dtype == EXPORT_BFLOAT16;
    for (int i = 0; i < count; i++) { // a shard closes when the next tensor would overflow it
        const hf_tensor *t = hf_tensor_at(ix, i);
        shard[i] = -1;
        if (!hf_carried(&cfg->model, t->name) || fp8_is_scale(ix, t)) continue;
        uint64_t b = bytes_out(t, to_bf16);
        if (n == 0 || (used > 0 && used + b > max)) n++, used = 0;
        shard[i] = n - 1, used += b, total += (double)b;
    }
    for (int s = 0; s < n; s++) write_carried(ix, shard, s, n, to_bf16, dir);
    for (int i = 0; i < count; i++) {
        char file[64];
        if (shard[i] < 0) continue;
        carried_file(file, sizeof file, shard[i], n);
        cJSON_AddStringToObject(map, hf_tensor_at(ix, i)->name, file);
    }
    free(shard);
    hf_index_close(ix);
    return total;
}

// model_dir's config.json; where it is needed (a family that carries tensors), its absence
// ends the export, else NULL.
static cJSON *source_config(const mt_config *cfg, int needed) {
    char path[PATH_MAX], err[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/config.json", cfg->model_dir);
    char *text = read_text(path, CONFIG_MAX, err, sizeof err);
    cJSON *root = text ? json_parse_strict(text, strlen(text), err, sizeof err) : NULL;
    free(text);
    if (!root && needed) mt_die("export: %s: %s", path, err);
    return root;
}

// ours' keys over into's (ours emptied). rope_parameters is merged: a VLM's mRoPE keys
// (mrope_section, mrope_interleaved), which change nothing for text, stay for images.
static void overlay(cJSON *into, cJSON *ours) {
    while (ours->child) {
        cJSON *item = cJSON_DetachItemViaPointer(ours, ours->child);
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(into, item->string);
        if (cJSON_IsObject(item) && cJSON_IsObject(old) && !strcmp(item->string, "rope_parameters"))
            for (const cJSON *k = old->child; k; k = k->next)
                if (!cJSON_GetObjectItemCaseSensitive(item, k->string))
                    cJSON_AddItemToObject(item, k->string, cJSON_Duplicate(k, 1));
        cJSON_DeleteItemFromObjectCaseSensitive(into, item->string);
        cJSON_AddItemToObject(into, item->string, item);
    }
}

cJSON *hf_export_config(const mt_config *cfg, cJSON *ours) {
    if (!cfg->model_dir[0]) return ours;
    cJSON *src = source_config(cfg, may_carry(cfg));
    // transformers builds the embedding with padding_idx = pad_token_id (gpt-oss's 199999): a
    // further fine-tune of the export leaves that row as the original did (a VLM's config.json
    // is kept whole below)
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(src, "pad_token_id");
    if (pad && !cfg->model.hub_vlm && !cJSON_GetObjectItemCaseSensitive(ours, "pad_token_id"))
        cJSON_AddItemToObject(ours, "pad_token_id", cJSON_Duplicate(pad, 1));
    if (!may_carry(cfg)) { // pad_token_id alone: a config.json gone since the start is no loss
        cJSON_Delete(src);
        return ours;
    }
    if (!cfg->model.hub_vlm) { // a text model: the MTP layers' keys (mtp_num_hidden_layers, ...)
        for (const cJSON *k = src->child; k; k = k->next)
            if ((starts_with(k->string, "mtp_") ||
                 !strcmp(k->string, "num_nextn_predict_layers")) &&
                !cJSON_GetObjectItemCaseSensitive(ours, k->string))
                cJSON_AddItemToObject(ours, k->string, cJSON_Duplicate(k, 1));
        cJSON_Delete(src);
        return ours;
    }
    // A VLM: our keys over its text_config's; its class, vision_config and token ids stay.
    cJSON *text = cJSON_GetObjectItemCaseSensitive(src, "text_config");
    if (!cJSON_IsObject(text)) mt_die("export: %s/config.json: no text_config", cfg->model_dir);
    cJSON_DeleteItemFromObjectCaseSensitive(ours, "architectures");
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(ours, "tie_word_embeddings");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(ours, "torch_dtype");
    cJSON_DeleteItemFromObjectCaseSensitive(src, "tie_word_embeddings");
    cJSON_AddBoolToObject(src, "tie_word_embeddings", cJSON_IsTrue(tie));
    cJSON_DeleteItemFromObjectCaseSensitive(src, "dtype");
    cJSON_DeleteItemFromObjectCaseSensitive(src, "torch_dtype");
    if (cJSON_IsString(dtype)) cJSON_AddStringToObject(src, "torch_dtype", dtype->valuestring);
    overlay(text, ours);
    cJSON_Delete(ours);
    return src;
}
