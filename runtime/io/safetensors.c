// Hugging Face weights in: safetensors headers checked, and tensors read (matched to the model:
// hf_weights.c).
//
// A safetensors file is: 8 bytes little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data; offsets are relative to the data. Every header is validated before anything is
// allocated, and weights are read with pread() over exactly the bytes a caller asks for, so
// each optimizer rank reads only its own slice and nothing holds a second full copy.
// Hosts are little-endian (x86-64, aarch64), as the files are.
#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include "runtime/io/hf_index.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_MAX (100u << 20) // safetensors' own limit on the JSON header
#define INDEX_MAX (16u << 20)   // model.safetensors.index.json

static const char *const dtype_names[] = {"BF16", "F16", "F32", "U8", "F8_E4M3"};
static const int dtype_bytes[] = {2, 2, 4, 1, 1};
enum { N_DTYPES = sizeof dtype_bytes / sizeof *dtype_bytes };

const char *hf_dtype_name(int dtype) {
    return dtype >= 0 && dtype < N_DTYPES ? dtype_names[dtype] : "?";
}

static int dtype_of(const char *name) {
    for (int d = 0; d < N_DTYPES; d++)
        if (strcmp(name, dtype_names[d]) == 0) return d;
    return -1;
}

struct hf_index {
    char index_path[PATH_MAX]; // the file that names the tensors (for "missing" messages)
    int n_files, n, cap;
    char **files;
    int *fds;
    hf_tensor *t;
};

static hf_tensor *find_tensor(const hf_index *ix, const char *name) {
    for (int i = 0; i < ix->n; i++)
        if (strcmp(ix->t[i].name, name) == 0) return &ix->t[i];
    return NULL;
}

const hf_tensor *hf_tensor_named(const hf_index *ix, const char *name) {
    return find_tensor(ix, name);
}

const char *hf_tensor_file(const hf_index *ix, const hf_tensor *t) {
    return ix->files[t->file];
}

const char *hf_index_path(const hf_index *ix) {
    return ix->index_path;
}

int hf_index_count(const hf_index *ix) {
    return ix->n;
}

const hf_tensor *hf_tensor_at(const hf_index *ix, int i) {
    return &ix->t[i];
}

static int parse_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 0x1p53 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

// One header entry; base is where the data starts, data the bytes after it.
static int parse_entry(hf_index *ix, int f, const cJSON *e, uint64_t base, uint64_t data, char *err,
                       size_t errlen) {
    const char *path = ix->files[f], *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    hf_tensor t = {.file = f, .numel = 1};
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > 8 ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return failf(err, errlen, "%s: tensor %s: malformed header entry", path, name);
    if ((t.dtype = dtype_of(dt->valuestring)) < 0)
        return failf(err, errlen,
                     "%s: tensor %s: dtype %s not supported (BF16, F16, F32, U8, F8_E4M3)", path,
                     name, dt->valuestring);
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t dim;
        if (parse_u64(d, &dim) < 0)
            return failf(err, errlen, "%s: tensor %s: bad shape", path, name);
        t.shape[t.ndim++] = (int64_t)dim;
        t.numel *= dim;
    }
    uint64_t b, en;
    if (parse_u64(cJSON_GetArrayItem(offs, 0), &b) < 0 ||
        parse_u64(cJSON_GetArrayItem(offs, 1), &en) < 0 || b > en || en > data)
        return failf(err, errlen,
                     "%s: tensor %s: data_offsets outside the file's %llu data bytes (truncated?)",
                     path, name, (unsigned long long)data);
    if (en - b != t.numel * (uint64_t)dtype_bytes[t.dtype])
        return failf(err, errlen, "%s: tensor %s: %llu bytes, but %llu elements of %s need %llu",
                     path, name, (unsigned long long)(en - b), (unsigned long long)t.numel,
                     dtype_names[t.dtype], (unsigned long long)(t.numel * dtype_bytes[t.dtype]));
    if (find_tensor(ix, name)) return failf(err, errlen, "%s: tensor %s appears twice", path, name);
    t.begin = base + b, t.end = base + en;
    if (!(t.name = strdup(name))) mt_die("out of memory");
    if (ix->n == ix->cap) {
        ix->cap = ix->cap ? 2 * ix->cap : 64;
        if (!(ix->t = realloc(ix->t, ix->cap * sizeof *ix->t))) mt_die("out of memory");
    }
    ix->t[ix->n++] = t;
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const hf_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

// Two tensors sharing bytes is a corrupt file (the format forbids it; we would train on both).
static int check_overlaps(const hf_index *ix, int first, char *err, size_t errlen) {
    int n = ix->n - first;
    if (n == 0) return 0; // a header of no tensors: ix->t may still be NULL
    hf_tensor *s = malloc(n * sizeof *s);
    if (!s) mt_die("out of memory");
    memcpy(s, ix->t + first, n * sizeof *s);
    qsort(s, n, sizeof *s, by_begin);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (s[i].begin < s[i - 1].end)
            rc = failf(err, errlen, "%s: tensors %s and %s overlap", ix->files[s[i].file],
                       s[i - 1].name, s[i].name);
    free(s);
    return rc;
}

static int parse_header_json(hf_index *ix, int f, const char *json, uint64_t hlen, uint64_t size,
                             char *err, size_t errlen) {
    cJSON *root = cJSON_ParseWithLength(json, hlen);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return failf(err, errlen, "%s: header is not a JSON object", ix->files[f]);
    }
    int first = ix->n, rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if ((rc = parse_entry(ix, f, e, 8 + hlen, size - 8 - hlen, err, errlen)) < 0) break;
    }
    cJSON_Delete(root);
    return rc < 0 ? rc : check_overlaps(ix, first, err, errlen);
}

static int read_header(hf_index *ix, int f, int sharded, char *err, size_t errlen) {
    const char *path = ix->files[f];
    int fd = ix->fds[f] = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && sharded)
        return failf(err, errlen, "%s: missing shard (listed in %s)", path, ix->index_path);
    if (fd < 0) return failf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(fd, &st));
    uint64_t size = (uint64_t)st.st_size, hlen = 0;
    unsigned char len8[8];
    if (size < 8 || pread(fd, len8, 8, 0) != 8)
        return failf(err, errlen, "%s: truncated (no 8-byte header length)", path);
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen > HEADER_MAX)
        return failf(err, errlen, "%s: header length %llu is over the 100 MB limit", path,
                     (unsigned long long)hlen);
    if (hlen > size - 8)
        return failf(err, errlen, "%s: truncated (header of %llu bytes, file of %llu)", path,
                     (unsigned long long)hlen, (unsigned long long)size);
    char *json = malloc(hlen + 1);
    if (!json) mt_die("out of memory");
    int rc = pread(fd, json, hlen, 8) == (ssize_t)hlen
                 ? parse_header_json(ix, f, json, hlen, size, err, errlen)
                 : failf(err, errlen, "%s: short read of the header", path);
    free(json);
    return rc;
}

static int add_file(hf_index *ix, const char *dir, const char *name) {
    for (int i = 0; i < ix->n_files; i++)
        if (strcmp(strrchr(ix->files[i], '/') + 1, name) == 0) return i;
    ix->files = realloc(ix->files, (ix->n_files + 1) * sizeof *ix->files);
    ix->fds = realloc(ix->fds, (ix->n_files + 1) * sizeof *ix->fds);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!ix->files || !ix->fds || !(ix->files[ix->n_files] = strdup(path))) mt_die("out of memory");
    ix->fds[ix->n_files] = -1;
    return ix->n_files++;
}

// The index's weight_map names the shards; each name must then be in the shard it names.
static int open_sharded(hf_index *ix, const char *dir, char *err, size_t errlen) {
    char *text = read_text(ix->index_path, INDEX_MAX, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    int rc = cJSON_IsObject(map) ? 0 : failf(err, errlen, "%s: no weight_map", ix->index_path);
    if (rc < 0) map = NULL; // the loops below then do nothing
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
            rc = failf(err, errlen, "%s: %s: not a file name", ix->index_path, e->string);
            break;
        }
        add_file(ix, dir, e->valuestring);
    }
    for (int f = 0; f < ix->n_files && rc == 0; f++) rc = read_header(ix, f, 1, err, errlen);
    cJSON_ArrayForEach(e, map) {
        if (rc < 0) break;
        const hf_tensor *t = find_tensor(ix, e->string);
        if (!t || strcmp(strrchr(ix->files[t->file], '/') + 1, e->valuestring)) {
            rc = failf(err, errlen,
                       "%s/%s: no tensor %s (model.safetensors.index.json maps it there)", dir,
                       e->valuestring, e->string);
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

hf_index *hf_index_open(const char *dir, char *err, size_t errlen) {
    hf_index *ix = calloc(1, sizeof *ix);
    if (!ix) mt_die("out of memory");
    snprintf(ix->index_path, sizeof ix->index_path, "%s/model.safetensors.index.json", dir);
    int rc;
    if (access(ix->index_path, F_OK) == 0) {
        rc = open_sharded(ix, dir, err, errlen);
    } else {
        snprintf(ix->index_path, sizeof ix->index_path, "%s/model.safetensors", dir);
        rc = read_header(ix, add_file(ix, dir, "model.safetensors"), 0, err, errlen);
        if (rc < 0 && access(ix->index_path, F_OK) != 0)
            rc =
                failf(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    if (rc == 0) return ix;
    hf_index_close(ix);
    return NULL;
}

void hf_index_close(hf_index *ix) {
    if (!ix) return;
    for (int f = 0; f < ix->n_files; f++) {
        if (ix->fds[f] >= 0) SYS_CHECK(close(ix->fds[f]));
        free(ix->files[f]);
    }
    for (int i = 0; i < ix->n; i++) free(ix->t[i].name);
    free(ix->files);
    free(ix->fds);
    free(ix->t);
    free(ix);
}

// ---- matching the model ----

static void shape_text(char *out, size_t cap, const int64_t *dims, int ndim) {
    snprintf(out, cap, "[");
    for (int d = 0; d < ndim; d++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%lld", d ? ", " : "", (long long)dims[d]);
    snprintf(out + strlen(out), cap - strlen(out), "]");
}

int hf_check_shape(const hf_index *ix, const char *name, const int64_t *want, int ndim, int u8,
                   char *used, char *err, size_t errlen) {
    const hf_tensor *t = find_tensor(ix, name);
    if (!t)
        return failf(err, errlen, "%s: no tensor %s (config.json needs it)", ix->index_path, name);
    used[t - ix->t] = 1;
    if ((t->dtype == DT_U8) != u8)
        return failf(err, errlen, "%s: tensor %s: dtype %s, config.json needs %s",
                     ix->files[t->file], name, dtype_names[t->dtype],
                     u8 ? "U8 (MXFP4 blocks and scales)" : "BF16, F16 or F32");
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == want[d];
    if (!same) {
        char got[160], need[160];
        shape_text(got, sizeof got, t->shape, t->ndim);
        shape_text(need, sizeof need, want, ndim);
        return failf(err, errlen, "%s: tensor %s has shape %s, config.json needs %s",
                     ix->files[t->file], name, got, need);
    }
    return 0;
}

// ---- reading ----

// Exact half -> float, subnormals, infinities and NaN payloads included.
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13;
    } else if (exp) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (!man) {
        bits = sign;
    } else { // subnormal: man x 2^-24, renormalized
        uint32_t e = 113;
        while (!(man & 0x400u)) man <<= 1, e--;
        bits = sign | e << 23 | (man & 0x3ffu) << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void convert(int dtype, const unsigned char *src, size_t n, float *out) {
    if (dtype == DT_F32) {
        memcpy(out, src, n * 4);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        if (dtype == DT_F16) {
            out[i] = f16_to_f32(h);
        } else {
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&out[i], &bits, 4);
        }
    }
}

int hf_read_range(const hf_index *ix, const char *name, uint64_t off, uint64_t count, float *out,
                  char *err, size_t errlen) {
    const hf_tensor *t = find_tensor(ix, name);
    if (!t) return failf(err, errlen, "%s: no tensor %s", ix->index_path, name);
    if (off > t->numel || count > t->numel - off)
        return failf(err, errlen, "%s: tensor %s: elements past its end", ix->index_path, name);
    if (t->dtype == DT_U8)
        return failf(err, errlen, "%s: tensor %s: U8 is not a weight", ix->files[t->file], name);
    if (t->dtype == DT_F8) // hf_weights.c reads it through fp8_read_range, with its scales
        return failf(err, errlen, "%s: tensor %s: F8_E4M3 without its scales", ix->files[t->file],
                     name);
    enum { CHUNK = 1 << 16 }; // elements per pread: bounded memory, whatever the slice
    static __thread unsigned char buf[CHUNK * 4];
    size_t es = (size_t)dtype_bytes[t->dtype];
    while (count > 0) {
        size_t n = count < CHUNK ? (size_t)count : CHUNK;
        if (hf_read_bytes(ix, t, off * es, n * es, buf, err, errlen) < 0) return -1;
        convert(t->dtype, buf, n, out);
        out += n, off += n, count -= n;
    }
    return 0;
}

int hf_read_bytes(const hf_index *ix, const hf_tensor *t, uint64_t off, size_t n, void *out,
                  char *err, size_t errlen) {
    if (off > t->end - t->begin || n > t->end - t->begin - off)
        return failf(err, errlen, "%s: tensor %s: bytes past its end", ix->index_path, t->name);
    off_t at = (off_t)(t->begin + off);
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(ix->fds[t->file], (char *)out + got, n - got, at + (off_t)got);
        if (r <= 0)
            return failf(err, errlen, "%s: tensor %s: read failed: %s", ix->files[t->file], t->name,
                         r < 0 ? strerror(errno) : "unexpected end of file");
        got += (size_t)r;
    }
    return 0;
}

// ---- writing ----

char *safetensors_header_text(cJSON *root, uint64_t *len) {
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t n = json ? strlen(json) : 0, padded = (n + 7) & ~(size_t)7;
    char *out = malloc(padded + 1);
    if (!json || !out) mt_die("out of memory");
    memcpy(out, json, n);
    memset(out + n, ' ', padded - n);
    out[padded] = 0;
    free(json);
    *len = padded;
    return out;
}
