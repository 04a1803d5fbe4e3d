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
int hf_read_family(const json_ctx *j, int seq_len, mt_config *m);

#endif
