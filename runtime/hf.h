// Hugging Face model directories: config.json and safetensors weights, in and out.
// Nothing here needs MPI, so tests can drive the loader and the exporter directly; the job
// (job.c, optimizer.c) adds the collectives around them.
#ifndef MT_HF_H
#define MT_HF_H

#include "runtime/config.h"
#include <stdint.h>

// Exported shards hold at most this many bytes of tensor data, as transformers' save does.
#define HF_MAX_SHARD_BYTES 5000000000ull

// Reads dir/config.json into the model fields of *model (dim, layers, heads, kv_heads, ffn_dim,
// vocab, rope_theta, norm_eps, tied_embeddings); seq_len is checked against a sliding window.
// Returns 0, or -1 with one line in err naming the file and the problem.
int hf_read_config(const char *dir, int seq_len, mt_config *model, char *err, size_t errlen);

typedef struct hf_index hf_index; // every tensor of a weights folder: file, dtype, byte range

// Opens dir's model.safetensors, or the shards model.safetensors.index.json names, and checks
// every header (lengths, offsets inside the file, no overlaps, sizes = numel x dtype size).
hf_index *hf_index_open(const char *dir, char *err, size_t errlen);
// Every tensor cfg's model needs is there with its shape and a supported dtype, and nothing
// else is (an unknown tensor, like a bias, would change the math).
int hf_index_check(const hf_index *ix, const mt_config *cfg, char *err, size_t errlen);
// Elements [off, off + count) of tensor name, converted to fp32; pread()s only those bytes.
int hf_read_range(const hf_index *ix, const char *name, uint64_t off, uint64_t count, float *out,
                  char *err, size_t errlen);
// Elements [lo, lo + len) of parameter group g (model.c's flat layout) from the files.
int hf_read_group_slice(const hf_index *ix, const mt_config *cfg, int g, uint64_t lo, uint64_t len,
                        float *out, char *err, size_t errlen);
void hf_index_close(hf_index *ix);

// Export, in three phases so that writers can run in parallel (one per optimizer rank):
//  1. hf_export_prepare (one writer): creates tmp_dir with config.json, the index and every
//     shard file at its final size with its header in place;
//  2. hf_export_write_slice (every writer, for its slices): pwrite()s fp32 data, fsyncs;
//  3. hf_export_publish (one writer, after all): renames tmp_dir to dir.
// The layout is a pure function of (cfg, max_shard_bytes), so writers agree without talking.
void hf_export_prepare(const mt_config *cfg, const char *tmp_dir, uint64_t max_shard_bytes);
void hf_export_write_slice(const mt_config *cfg, const char *tmp_dir, uint64_t max_shard_bytes,
                           int g, uint64_t lo, uint64_t len, const float *data);
void hf_export_publish(const char *tmp_dir, const char *dir);
// 0 when dir does not exist or is an empty folder; else -1 with a message.
int hf_export_dir_check(const char *dir, char *err, size_t errlen);
// The temporary folder beside dir that an export is assembled in.
void hf_export_tmp_path(const char *dir, char *out, size_t cap);
// MT_HF_MAX_SHARD_BYTES (tests: many small shards) or HF_MAX_SHARD_BYTES.
uint64_t hf_export_max_shard_bytes(void);

#endif
