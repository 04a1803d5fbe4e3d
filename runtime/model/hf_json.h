// config.json's reading helpers, shared by hf_config.c (the file, RoPE, special tokens) and
// hf_family.c (the architectures): private to runtime/model/.
#ifndef MT_HF_JSON_H
#define MT_HF_JSON_H

#include "runtime/model/model.h"
#include <cjson/cJSON.h>

typedef struct {
    const char *path;
    const cJSON *root;
    char *err;
    size_t errlen;
    char text_path[MT_PATH_MAX + 16]; // path once inside a VLM's text_config
} json_ctx;

// The value of key, NULL when absent or null ("the default", as in transformers).
const cJSON *item(const json_ctx *j, const char *key);
// A positive integer; def < 0 makes the key required. Each returns 0, or -1 with one line in
// j->err naming the file and the key.
int get_int(const json_ctx *j, const char *key, int def, int *out);
int get_num(const json_ctx *j, const char *key, double def, double *out); // positive
int get_bool(const json_ctx *j, const char *key, int def, int *out);

// The architecture (architectures[0]) and the fields it defines: shape, attention's extras,
// the experts. hf_family.c.
// For a ConditionalGeneration class (hf_family.c's vlm rows), j moves into text_config.
int hf_read_family(json_ctx *j, int seq_len, mt_model *m);

// The Gated DeltaNet families' keys (hf_family_gdn.c). gdn_enter_text_config: j moves into a
// VLM's text_config; *tied gets the top level's tie_word_embeddings, which gdn_settle_tie makes
// the model's once the text config is read (text_config's own, when given, must agree).
int gdn_enter_text_config(json_ctx *j, int *tied);
int gdn_settle_tie(const json_ctx *j, int tied, mt_model *m);
// The linear attention's fields, layer_types and partial_rotary_factor when gdn (fused:
// Qwen3-Next's fused projections); with !gdn, those fields cleared. gdn_write: the same keys
// written back.
int gdn_read(const json_ctx *j, int gdn, int fused, mt_model *m);
// partial_rotary_factor (rope_parameters', else the top level's, else def), checked
// (hf_family_gdn.c).
int hf_read_partial_rotary(const json_ctx *j, double def, mt_model *m);
// model_dir's config.json's class into arch (hf_family_mla.c): 1, or 0 when it has none
// (no model_dir, NULL or "", no file, no single class).
int hf_source_arch(const char *model_dir, char *arch, size_t cap);
void gdn_write(cJSON *r, const mt_model *m);

#endif
