// The safetensors index's tensors, private to io/: safetensors.c keeps them and reads them;
// safetensors_hub.c (gpt-oss's fused and MXFP4 expert tensors) and hf_weights.c (the model's
// tensors found and read) read through them.
#ifndef MT_HF_INDEX_H
#define MT_HF_INDEX_H

#include "runtime/io/io.h"
#include <stddef.h>
#include <stdint.h>

enum { DT_BF16, DT_F16, DT_F32, DT_U8, DT_F8 }; // DT_F8: F8_E4M3, block-scaled (fp8_read.c)

typedef struct {
    char *name;
    int dtype, ndim, file;
    int64_t shape[8];
    uint64_t numel;
    uint64_t begin, end; // absolute byte offsets in the file
} hf_tensor;

// safetensors' name of a DT_* dtype ("BF16").
const char *hf_dtype_name(int dtype);
// The tensor called name, NULL when the folder has none; the folder's tensors by index.
const hf_tensor *hf_tensor_named(const hf_index *ix, const char *name);
int hf_index_count(const hf_index *ix);
const hf_tensor *hf_tensor_at(const hf_index *ix, int i);
// The file that holds t, and the file that names the tensors (for messages).
const char *hf_tensor_file(const hf_index *ix, const hf_tensor *t);
const char *hf_index_path(const hf_index *ix);
// Bytes [off, off + n) of t's data.
int hf_read_bytes(const hf_index *ix, const hf_tensor *t, uint64_t off, size_t n, void *out,
                  char *err, size_t errlen);
// Tensor name is there with shape want[ndim] and a float dtype (U8 with u8), and is marked in
// used[]; else -1 with one line naming the file and the tensor.
int hf_check_shape(const hf_index *ix, const char *name, const int64_t *want, int ndim, int u8,
                   char *used, char *err, size_t errlen);

// A block-scaled FP8 weight t (DT_F8, 2-D): its NAME_scale_inv is there, F32, of the grid
// fp8.h says, and is marked in used[] (when not NULL); and elements [off, off + count) of t
// dequantized (fp8_read.c).
int fp8_check_scale(const hf_index *ix, const hf_tensor *t, char *used, char *err, size_t errlen);
// Whether t is the scale of a block-scaled FP8 weight (NAME_scale_inv beside F8_E4M3 NAME).
int fp8_is_scale(const hf_index *ix, const hf_tensor *t);
int fp8_read_range(const hf_index *ix, const hf_tensor *t, uint64_t off, uint64_t count, float *out,
                   char *err, size_t errlen);

// gpt-oss's fused tensors (safetensors_hub.c): t's hub tensor (name) checked against the config
// once, at its first tensor: plain, or MXFP4 blocks and scales (name_blocks, name_scales) for
// the experts' projections; and elements [off, off + count) of t read from it.
int hf_hub_check(const hf_index *ix, const mt_model *m, const tensor_info *t, const char *name,
                 char *used, char *err, size_t errlen);
int hf_hub_read(const hf_index *ix, const mt_model *m, const tensor_info *t, const char *name,
                uint64_t off, uint64_t count, float *out, char *err, size_t errlen);

// A safetensors header's text from root (consumed): the JSON padded with spaces to a multiple of
// 8 bytes, as the format asks of the data that follows; *len its length (safetensors.c; the
// export's shards and its carried tensors' write it).
struct cJSON;
char *safetensors_header_text(struct cJSON *root, uint64_t *len);

#endif
