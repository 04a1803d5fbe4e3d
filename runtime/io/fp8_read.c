// Block-scaled FP8 weights found and read (hf_index.h's fp8_check_scale, fp8_read_range): a
// weight NAME stored as F8_E4M3 codes goes with NAME_scale_inv, and each element read is
// dequantized as transformers does (fp8.h).
#include "runtime/base/base.h"
#include "runtime/io/fp8.h"
#include "runtime/io/hf_index.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SCALE_TAIL[] = "_scale_inv"; // NAME's scales are NAME_scale_inv

static const hf_tensor *scale_of(const hf_index *ix, const hf_tensor *t) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", t->name, SCALE_TAIL);
    return hf_tensor_named(ix, name);
}

int fp8_is_scale(const hf_index *ix, const hf_tensor *t) {
    size_t n = strlen(t->name), k = strlen(SCALE_TAIL);
    if (n <= k || n - k >= 512 || strcmp(t->name + n - k, SCALE_TAIL) != 0) return 0;
    char base[512];
    memcpy(base, t->name, n - k), base[n - k] = 0;
    const hf_tensor *w = hf_tensor_named(ix, base);
    return w && w->dtype == DT_F8;
}

int fp8_check_scale(const hf_index *ix, const hf_tensor *t, char *used, char *err, size_t errlen) {
    const char *file = hf_tensor_file(ix, t);
    if (t->ndim != 2)
        return failf(err, errlen, "%s: tensor %s: F8_E4M3 only as a 2-D block-scaled weight", file,
                     t->name);
    const hf_tensor *s = scale_of(ix, t);
    if (!s)
        return failf(err, errlen, "%s: tensor %s: F8_E4M3 without its %s_scale_inv", file, t->name,
                     t->name);
    if (used) used[s - hf_tensor_at(ix, 0)] = 1;
    int64_t rows = fp8_blocks(t->shape[0]), cols = fp8_blocks(t->shape[1]);
    if (s->dtype != DT_F32 || s->ndim != 2 || s->shape[0] != rows || s->shape[1] != cols)
        return failf(err, errlen,
                     "%s: tensor %s: F32 [%lld, %lld] expected (one scale per 128 x 128 block of "
                     "%s [%lld, %lld])",
                     hf_tensor_file(ix, s), s->name, (long long)rows, (long long)cols, t->name,
                     (long long)t->shape[0], (long long)t->shape[1]);
    return 0;
}

int fp8_read_range(const hf_index *ix, const hf_tensor *t, uint64_t off, uint64_t count, float *out,
                   char *err, size_t errlen) {
    const hf_tensor *s = scale_of(ix, t);
    if (fp8_check_scale(ix, t, NULL, err, errlen) < 0) return -1;
    float *scales = malloc(s->numel * sizeof *scales); // a few thousand: 1 / 16384 of the weight
    if (!scales) mt_die("out of memory");
    int rc = hf_read_bytes(ix, s, 0, s->numel * sizeof *scales, scales, err, errlen);
    enum { CHUNK = 1 << 18 }; // codes per pread: bounded memory, whatever the slice
    static __thread unsigned char codes[CHUNK];
    while (rc == 0 && count > 0) {
        size_t n = count < CHUNK ? (size_t)count : CHUNK;
        rc = hf_read_bytes(ix, t, off, n, codes, err, errlen);
        if (rc == 0) fp8_dequantize(out, codes, off, n, t->shape[1], scales);
        out += n, off += n, count -= n;
    }
    free(scales);
    return rc;
}
