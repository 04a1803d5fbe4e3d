// What an export carries from model_dir unchanged (export_carry.c), private to io/: export.c
// calls it while it prepares the folder.
#ifndef MT_EXPORT_CARRY_H
#define MT_EXPORT_CARRY_H

#include "runtime/model/model.h"
#include <cjson/cJSON.h>

// model_dir's carried tensors (io.h's hf_carried) copied into dir as shards of at most max bytes
// (a larger tensor alone), each named in map (the index's weight_map); their bytes.
double hf_export_carry(const mt_config *cfg, const char *dir, uint64_t max, cJSON *map);
// The config.json to write for ours (the keys hf_write_family and export.c wrote): ours itself
// (with model_dir's pad_token_id), ours with model_dir's mtp_* keys for a text model with MTP
// layers, or for a VLM model_dir's config.json with ours over its text_config (ours is
// consumed, the result returned).
cJSON *hf_export_config(const mt_config *cfg, cJSON *ours);

#endif
