// Files: the training data, Hugging Face weights in and out, checkpoints, and train.cfg with
// every file it names checked. Nothing here needs MPI but the checkpoints' collectives, so tests
// drive the rest directly; the optimizer ranks add the collectives around exports.
#ifndef MT_IO_H
#define MT_IO_H

#include "runtime/job/job.h"
#include "runtime/model/model.h"
#include <stddef.h>
#include <stdint.h>

// Loads and validates path and the files it names. Returns 0, or -1 with a one-line message in
// err: "<file>:<line>: <key>: <problem>" (or "<file>: <problem>" when no line applies).
int mt_config_load(mt_config *cfg, const char *path, char *err, size_t errlen);
// The same with key=value overrides applied over the file (config_parse, model.h).
int mt_config_load_with(mt_config *cfg, const char *path, const char *const *overrides, int n,
                        char *err, size_t errlen);

// ---- data ----

// Training data: one virtual token stream over files read window by window, split into a training
// head and a validation tail, or, with data.val_path, all for training and a second stream of
// the same format for validation. The stream is raw text (one token per byte), token shards (ours,
// "MTCTOKS1", or llm.c's .bin; docs/data-format.md) concatenated in sorted path order, or
// synthetic tokens. Batches are drawn at offsets that are a pure function of (seed, split,
// step, micro-batch, row), so a resumed run reads exactly what the uninterrupted one would
// have, with no data-loader state to save. Windows may cross shard boundaries.

typedef struct {
    char *path;
    int fd;                  // open read-only for the job's life (-1 when empty); windows are
                             // pread() from it, so a file cut short is an error, never a SIGBUS
    size_t file_len, header; // header: bytes before the first token
    size_t n, start;         // its token count, and the index of its first token in the stream
    int width;               // bytes per token: 1 (text), 2 or 4
    int masked;     // MTCTOKS1 version 2: a target mask follows the tokens, bit i (LSB first) set
                    // when token i is a target
    size_t targets; // tokens that are targets (n without a mask), counted at load
} data_shard;

// MTCTOKS1 version 2's flags (offset 24): a target mask of ceil(count / 8) bytes follows the
// tokens (docs/data-format.md).
#define MT_SHARD_MASKED 1u

typedef struct {
    data_shard *shards; // in stream order; none for synthetic data
    int nshards;
    size_t n, n_train;      // validation reads [n_train, n), unless val_path's stream is there
    int vocab;              // synthetic data: uniform tokens in [0, vocab), a hash of the position
    data_shard *val_shards; // data.val_path's stream (n_train is then n); none without it
    int val_nshards;
    size_t val_n;
} dataset;

enum { SPLIT_TRAIN, SPLIT_VAL };

// The config loader's check of data.format "tokens": expands data.path (a glob or a folder),
// reads every header and checks it against its file's size, without mapping any tokens.
// Returns 0 and the total token count, or -1 with one line in err naming the file.
int dataset_check_shards(const char *pattern, size_t *ntokens, char *err, size_t errlen);

// Exits with a one-line message naming the file when it is unreadable, malformed or too
// short, or (for shards) holds a token >= vocab, with that token's index in the file.
void dataset_open(dataset *ds, const mt_config *c);
// The end of the training split of a stream of n tokens: validation reads [end, n) (n with
// data.val_path, whose own stream is the validation).
size_t dataset_train_end(const mt_config *c, size_t n);
// Each split that the job reads holds at least one target (data.path's n tokens and val_path's
// val_n): else -1, the config key whose file lacks them and one line naming the file and the
// split, e.g. the training head when the targets are all in the validation tail. Before launch;
// reads masks only up to each split's first target.
int dataset_check_targets(const mt_config *c, size_t n, size_t val_n, const char **key, char *err,
                          size_t errlen);
void dataset_close(dataset *ds);
// rows x (seq+1) window: inputs[r*T + t] = tokens[o + t], targets = tokens[o + t + 1], or -1
// where a masked shard marks that token context only. The offset o is drawn the same way
// whichever stream holds the split.
void dataset_batch(const dataset *ds, int split, uint64_t seed, int64_t step, int micro, int rows,
                   int T, int32_t *inputs, int32_t *targets);
// data.pack "documents": the rows cut into documents, each ending at an `eot` token:
// doc_start[r * T + t] is where token t's document starts in row r (the row's first document
// starts at 0, wherever the window fell), and an eot's target (the next document's first
// token) becomes -1, for no document is predicted from another.
void dataset_pack_documents(int eot, int rows, int T, const int32_t *inputs, int32_t *targets,
                            int32_t *doc_start);

// ---- Hugging Face weights: safetensors in (each optimizer rank reads its slices), and out ----

// Exported shards hold at most this many bytes of tensor data, as transformers' save does.
#define HF_MAX_SHARD_BYTES 5000000000ull

typedef struct hf_index hf_index; // every tensor of a weights folder: file, dtype, byte range

// Opens dir's model.safetensors, or the shards model.safetensors.index.json names, and checks
// every header (lengths, offsets inside the file, no overlaps, sizes = numel x dtype size).
hf_index *hf_index_open(const char *dir, char *err, size_t errlen);
// What config.json does not say of the folder's layout, told from its tensor names: whether
// its MoE experts are fused (model.hub_experts_fused), its language model's tensors nested
// (model.hub_lm_nested). Before hf_index_check.
void hf_index_layout(const hf_index *ix, mt_model *m);
// Every tensor cfg's model needs is there with its shape and a supported dtype, and nothing
// else is (an unknown tensor, like a bias, would change the math).
int hf_index_check(const hf_index *ix, const mt_model *m, char *err, size_t errlen);
// Elements [off, off + count) of tensor name, converted to fp32; pread()s only those bytes.
int hf_read_range(const hf_index *ix, const char *name, uint64_t off, uint64_t count, float *out,
                  char *err, size_t errlen);
// Elements [lo, lo + len) of parameter group g (model.c's flat layout) from the files.
int hf_read_group_slice(const hf_index *ix, const mt_model *m, int g, uint64_t lo, uint64_t len,
                        float *out, char *err, size_t errlen);
void hf_index_close(hf_index *ix);
// Whether model_dir's tensor name is one we do not train but carry, byte for byte, into the
// export (export_carry.c): a Qwen3.5 VLM's vision tower (model.visual.*) and the
// multi-token-prediction layers of the Gated DeltaNet families (mtp.*).
int hf_carried(const mt_model *m, const char *name);
// 0 when every element of a slice read from the files is finite; else -1 naming the tensor and
// the element: a model that starts from NaN or Inf trains nothing but NaN.
int hf_check_finite(const mt_config *cfg, int g, uint64_t lo, uint64_t len, const float *data,
                    char *err, size_t errlen);

// Export, in three phases so that writers can run in parallel (one per optimizer rank):
//  1. hf_export_prepare (one writer): creates tmp_dir with config.json, the index and every
//     shard file at its final size with its header in place, and copies model_dir's carried
//     tensors (hf_carried) into shards of their own;
//  2. hf_export_write_slice (every writer, for its slices): pwrite()s fp32 data, fsyncs;
//  3. hf_export_assemble (every writer, after all have written): gpt-oss's fused expert tensors
//     and Qwen3-Next's fused projections permuted from the slices' layout into the hub's, one
//     slab (an expert's, or a whole projection) at a time, each slab by one of the `writers`
//     writers (nothing to do for other models);
//  4. hf_export_publish (one writer, after all): renames tmp_dir to dir.
// The layout is a pure function of (cfg, max_shard_bytes), so writers agree without talking.
void hf_export_prepare(const mt_config *cfg, const char *tmp_dir, uint64_t max_shard_bytes);
// Whether t stays F32 in a bfloat16 export: what transformers keeps in fp32 (DeepSeek-V3's and
// GLM's router weight and its frozen e_score_correction_bias, _keep_in_fp32_modules_strict).
int hf_export_fp32(const mt_model *m, const tensor_info *t);
void hf_export_write_slice(const mt_config *cfg, const char *tmp_dir, uint64_t max_shard_bytes,
                           int g, uint64_t lo, uint64_t len, const float *data);
void hf_export_assemble(const mt_config *cfg, const char *tmp_dir, uint64_t max_shard_bytes,
                        int writer, int writers);
void hf_export_publish(const char *tmp_dir, const char *dir);
// 0 when dir does not exist or is an empty folder; else -1 with a message.
int hf_export_dir_check(const char *dir, char *err, size_t errlen);
// The temporary folder beside dir that an export is assembled in.
void hf_export_tmp_path(const char *dir, char *out, size_t cap);
// MT_HF_MAX_SHARD_BYTES (tests: many small shards) or HF_MAX_SHARD_BYTES.
uint64_t hf_export_max_shard_bytes(void);

// ---- checkpoints ----

// Checkpoints: a folder step_NNNNNN/ per save under the checkpoint dir, holding state.bin
// (fp32 master, m and v of every group, in group order, independent of the sharding, so a
// checkpoint written with one -np resumes with another) and manifest.json. The optimizer ranks
// write their slices in parallel into a hidden temporary folder; it is fsynced and renamed into
// place, and only then does LATEST point at it. A crash mid-save leaves the last one intact.
// manifest.json (version 2) records the model shape, the data position and an XXH64 checksum
// of every 64 MiB block of state.bin, so that resume refuses a damaged or mismatched checkpoint.
// See docs/checkpoints.md.

// 0 and out = "<dir>/step_NNNNNN" when dir/LATEST names a checkpoint; -1 otherwise.
int checkpoint_find_latest(const char *dir, char *out, size_t cap);
// dir is a checkpoint folder (with manifest.json) or a checkpoint dir (with LATEST).
int checkpoint_resolve(const char *dir, char *out, size_t cap, char *err, size_t errlen);
// The key=value overrides the run that saved a checkpoint was given (none in older ones), at most
// max: mtrun applies them again on --resume, before the command line's own. 0; -1 (err set) when
// the manifest does not load or check; -2 when its overrides are malformed; -3 when another user
// could have changed them (path_trust_check: a folder on the way, or manifest.json, is theirs or
// writable by them).
int checkpoint_read_overrides(const char *step_dir, char out[][MT_OVERRIDE_MAX], int max, int *n,
                              char *err, size_t errlen);
// The step a checkpoint holds, and how many steps before it were skipped (non-finite norms).
int checkpoint_read_step(const char *step_dir, int *step, int *skipped, char *err, size_t errlen);
// Checks that manifest.json (version, model shape, checksum list) and state.bin's header and
// size match the job's config. Local: every rank reaches the same verdict.
int checkpoint_check_state(const char *step_dir, const mt_job *job, char *err, size_t errlen);
// Collective over comm, after checkpoint_check_state passed: each member hashes every
// size-th block of state.bin and all learn the first mismatching block, if any (0 or -1).
int checkpoint_verify_state(const char *step_dir, const mt_job *job, MPI_Comm comm, char *err,
                            size_t errlen);
// checkpoint.keep: removes the oldest step_NNNNNN folders of dir beyond the keep newest (by
// step), never latest_name, nothing else. keep <= 0 keeps all. Returns how many went.
int checkpoint_prune(const char *dir, int keep, const char *latest_name);

// Whether the step that makes weights `version` ends with a save (checkpoint.interval, and
// always at the job's last step), and whether the job ends with an export to export_dir (only a
// run that reaches its last step exports; --stop-at is a pause, not the end).
int checkpoint_due(const mt_job *job, int version);
int checkpoint_export_due(const mt_job *job);
// The save after the step that makes `version` needs the state of the groups the compute rank
// updates itself: the leader's compute rank sends it to its optimizer ranks while they write.
int checkpoint_saves_device_state(const mt_job *job, int version);

// Collective over the optimizer ranks: state[g] holds this rank's slices of master, m and v.
// A group with none (NULL: one the compute rank updates, whose state lives on its device) moves
// a piece at a time to or from the compute rank (job_send_floats, MT_STATE_PIECE), saved as
// it arrives and sent as it is read. Moments in the NVMe tier (storage.adam: m and v NULL,
// tier_fd >= 0) move between its file, at byte offsets tier_m and tier_v, and the checkpoint.
typedef struct {
    float *master, *m, *v;
    int tier_fd; // -1 (or 0, as calloc leaves it, with m set): the moments are in memory
    uint64_t tier_m, tier_v, tier_master; // tier_master: storage.master's (else 0)
} group_state;
void checkpoint_save(mt_job *job, int step, group_state *state);
void checkpoint_load(mt_job *job, group_state *state);

#endif
