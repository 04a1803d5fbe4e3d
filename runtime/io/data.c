#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// Shards are little-endian and are read in place, straight from the mapping.
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are little-endian: this reader needs a little-endian host"
#endif

enum { MT_HEADER = 256, LLMC_HEADER = 1024 };          // bytes: ours, llm.c's (256 int32)
enum { LLMC_GPT2 = 20240520, LLMC_LLAMA3 = 20240801 }; // llm.c magics: uint16, uint32 tokens
static const char mt_magic[8] = {'M', 'T', 'C', 'T', 'O', 'K', 'S', '1'};

static int errf(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

// ---- headers ----

// Our header: magic, uint32 version (1 or 2), uint32 bytes per token (2 or 4), uint64 count;
// version 2 adds uint32 flags at 24, whose bit 0 says a target mask follows the tokens.
static int parse_mt_header(const uint8_t *h, size_t got, data_shard *s, uint64_t *count, char *err,
                           size_t n) {
    uint32_t version, dtype, flags = 0;
    if (got < MT_HEADER)
        return errf(err, n, "%s: truncated: %zu bytes, shorter than the %d-byte header", s->path,
                    got, MT_HEADER);
    memcpy(&version, h + 8, 4);
    memcpy(&dtype, h + 12, 4);
    memcpy(count, h + 16, 8);
    if (version != 1 && version != 2)
        return errf(err, n, "%s: shard version %u, expected 1 or 2", s->path, version);
    if (dtype != 2 && dtype != 4)
        return errf(err, n, "%s: token dtype %u, expected 2 (uint16) or 4 (uint32)", s->path,
                    dtype);
    if (version == 2) memcpy(&flags, h + 24, 4);
    if (flags & ~(uint32_t)MT_SHARD_MASKED)
        return errf(err, n, "%s: unknown shard flags 0x%x (this reader knows 0x%x)", s->path, flags,
                    MT_SHARD_MASKED);
    s->header = MT_HEADER;
    s->width = (int)dtype;
    s->masked = flags & MT_SHARD_MASKED;
    return 0;
}

// llm.c's header: 256 int32, [0] magic, [1] version, [2] token count.
static int parse_llmc_header(const uint8_t *h, size_t got, data_shard *s, uint64_t *count,
                             char *err, size_t n) {
    int32_t w[3];
    memcpy(w, h, sizeof w);
    int want = w[0] == LLMC_GPT2 ? 1 : 7;
    if (w[1] != want)
        return errf(err, n, "%s: llm.c shard version %d, expected %d for magic %d", s->path, w[1],
                    want, w[0]);
    if (got < LLMC_HEADER)
        return errf(err, n, "%s: truncated: %zu bytes, shorter than llm.c's %d-byte header",
                    s->path, got, LLMC_HEADER);
    if (w[2] < 0) return errf(err, n, "%s: negative token count %d", s->path, w[2]);
    s->header = LLMC_HEADER;
    s->width = w[0] == LLMC_GPT2 ? 2 : 4;
    *count = (uint64_t)w[2];
    return 0;
}

// Identifies the format by its magic and checks the count against the file's size, so that
// a shard cut short by a failed copy is caught here, not as a fault mid-training.
static int read_header(int fd, size_t size, data_shard *s, char *err, size_t n) {
    uint8_t h[LLMC_HEADER];
    ssize_t got = pread(fd, h, sizeof h, 0);
    if (got < 0) return errf(err, n, "%s: read: %s", s->path, strerror(errno));
    int32_t magic = 0;
    if (got >= 4) memcpy(&magic, h, 4);
    uint64_t count = 0;
    int rc;
    if (got >= 8 && memcmp(h, mt_magic, 8) == 0)
        rc = parse_mt_header(h, (size_t)got, s, &count, err, n);
    else if (got >= 12 && (magic == LLMC_GPT2 || magic == LLMC_LLAMA3))
        rc = parse_llmc_header(h, (size_t)got, s, &count, err, n);
    else
        return errf(err, n, "%s: not a token shard (wrong magic: neither \"MTCTOKS1\" nor llm.c's)",
                    s->path);
    if (rc < 0) return -1;
    size_t body = size - s->header, mask = s->masked ? (size_t)(count + 7) / 8 : 0;
    if (count > (SIZE_MAX - mask) / (size_t)s->width || body != count * s->width + mask)
        return errf(err, n, "%s: header says %llu tokens (%llu bytes%s), but %zu bytes follow it",
                    s->path, (unsigned long long)count,
                    (unsigned long long)(count * (unsigned)s->width + mask),
                    mask ? " with the target mask" : "", body);
    s->n = (size_t)count;
    return 0;
}

// ---- finding the shards ----

static int by_path(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// data.path is a folder (its *.bin and *.tok files) or a glob(3) pattern. The paths are
// sorted bytewise, not by locale, so the stream's order is the same on every machine.
static int expand(const char *pattern, glob_t *g, char *err, size_t n) {
    struct stat st;
    memset(g, 0, sizeof *g);
    if (stat(pattern, &st) == 0 && S_ISDIR(st.st_mode)) {
        char p[MT_PATH_MAX + 8];
        snprintf(p, sizeof p, "%s/*.bin", pattern);
        if (glob(p, 0, NULL, g) != 0) { // start the *.tok glob afresh
            globfree(g);
            memset(g, 0, sizeof *g);
        }
        snprintf(p, sizeof p, "%s/*.tok", pattern);
        (void)glob(p, g->gl_pathc ? GLOB_APPEND : 0, NULL, g); // no match: still gl_pathc == 0
        if (g->gl_pathc == 0)
            return errf(err, n, "%s: the folder holds no *.bin or *.tok files", pattern);
    } else {
        int rc = glob(pattern, 0, NULL, g);
        if (rc == GLOB_NOMATCH && !strpbrk(pattern, "*?["))
            return errf(err, n, "%s: cannot open: %s", pattern, strerror(ENOENT));
        if (rc == GLOB_NOMATCH) return errf(err, n, "%s: no file matches", pattern);
        if (rc != 0) return errf(err, n, "%s: glob failed (%s)", pattern, strerror(errno));
    }
    qsort(g->gl_pathv, g->gl_pathc, sizeof(char *), by_path);
    return 0;
}

static int open_shard(data_shard *s, char *err, size_t n) {
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errf(err, n, "%s: cannot open: %s", s->path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st);
    if (rc < 0)
        rc = errf(err, n, "%s: %s", s->path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = errf(err, n, "%s: not a regular file", s->path);
    else
        rc = read_header(fd, (size_t)st.st_size, s, err, n);
    if (rc == 0) s->map_len = (size_t)st.st_size;
    close(fd);
    return rc;
}

static void free_shards(data_shard *s, int ns) {
    for (int i = 0; i < ns; i++) free(s[i].path);
    free(s);
}

// Lists and checks every shard of pattern, in stream order; maps nothing.
static int find_shards(const char *pattern, data_shard **out, int *nout, size_t *total, char *err,
                       size_t n) {
    glob_t g;
    if (expand(pattern, &g, err, n) < 0) {
        globfree(&g);
        return -1;
    }
    data_shard *s = calloc(g.gl_pathc, sizeof *s);
    if (!s) mt_die("out of memory");
    int ns = 0, rc = 0;
    *total = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++, ns++) {
        s[ns].path = strdup(g.gl_pathv[i]);
        if (!s[ns].path) mt_die("out of memory");
        rc = open_shard(&s[ns], err, n);
        s[ns].start = *total;
        *total += s[ns].n;
    }
    globfree(&g);
    if (rc < 0) {
        free_shards(s, ns);
        return -1;
    }
    *out = s, *nout = ns;
    return 0;
}

int dataset_check_shards(const char *pattern, size_t *ntokens, char *err, size_t errlen) {
    data_shard *s;
    int ns;
    if (find_shards(pattern, &s, &ns, ntokens, err, errlen) < 0) return -1;
    free_shards(s, ns);
    return 0;
}

// ---- mapping and the token-range scan ----

static void map_shard(data_shard *s) {
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) mt_die("%s: cannot open: %s", s->path, strerror(errno));
    s->map = mmap(NULL, s->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (s->map == MAP_FAILED) mt_die("%s: mmap: %s", s->path, strerror(errno));
    SYS_CHECK(close(fd));
    s->tokens = s->map + s->header;
    if (s->masked) s->mask = s->map + s->header + s->n * (size_t)s->width;
}

static uint32_t token(const data_shard *s, size_t i) {
    if (s->width == 1) return ((const uint8_t *)s->tokens)[i];
    if (s->width == 2) return ((const uint16_t *)s->tokens)[i];
    return ((const uint32_t *)s->tokens)[i];
}

// The largest token of a shard. A plain max per width vectorizes; the scan is bound by
// memory (or the disk, on first touch), so it reads ahead sequentially.
static uint32_t max_token(const data_shard *s) {
    uint32_t m = 0;
    if (s->width == 2) {
        const uint16_t *t = s->tokens;
#pragma omp parallel for reduction(max : m)
        for (size_t i = 0; i < s->n; i++) m = t[i] > m ? t[i] : m;
    } else {
        const uint32_t *t = s->tokens;
#pragma omp parallel for reduction(max : m)
        for (size_t i = 0; i < s->n; i++) m = t[i] > m ? t[i] : m;
    }
    return m;
}

// A token >= vocab would index past the embedding; catch it at load time, by file and index.
static void check_range(const data_shard *s, int vocab) {
    (void)madvise((void *)s->map, s->map_len, MADV_SEQUENTIAL); // a hint: failure is harmless
    if (max_token(s) >= (uint32_t)vocab)
        for (size_t i = 0; i < s->n; i++)
            if (token(s, i) >= (uint32_t)vocab)
                mt_die("%s: token %u at index %zu is >= model.vocab = %d", s->path, token(s, i), i,
                       vocab);
}

// data.format "bytes": the text file is one shard with no header, one token per byte.
static void open_bytes(data_shard **out, int *nout, const char *path) {
    data_shard *s = *out = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    *nout = 1;
    s->path = strdup(path);
    if (!s->path) mt_die("out of memory");
    int fd = open(path, O_RDONLY);
    if (fd < 0) mt_die("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(fd, &st));
    SYS_CHECK(close(fd));
    s->n = s->map_len = (size_t)st.st_size;
    s->width = 1;
    if (s->n) map_shard(s);
}

static void open_tokens(data_shard **out, int *nout, const char *pattern, int vocab) {
    char err[MT_PATH_MAX + 256];
    size_t total;
    if (find_shards(pattern, out, nout, &total, err, sizeof err) < 0) mt_die("%s", err);
    for (int i = 0; i < *nout; i++) {
        if ((*out)[i].n == 0) continue; // nothing to map; never chosen by a window
        map_shard(&(*out)[i]);
        check_range(&(*out)[i], vocab);
    }
}

// The stream of path in c's format, mapped; returns its token count. Windows land anywhere,
// so the kernel's read-ahead would only waste page cache.
static size_t open_stream(const mt_config *c, const char *path, data_shard **out, int *nout) {
    if (strcmp(c->data_format, "tokens") == 0)
        open_tokens(out, nout, path, c->vocab);
    else
        open_bytes(out, nout, path);
    size_t n = 0;
    for (int i = 0; i < *nout; i++) {
        n += (*out)[i].n;
        if ((*out)[i].map) (void)madvise((void *)(*out)[i].map, (*out)[i].map_len, MADV_RANDOM);
    }
    return n;
}

static void too_short(const char *path, size_t n, int seq_len, size_t need) {
    mt_die("%s: %zu tokens, too few for seq_len %d (need at least %zu)", path, n, seq_len, need);
}

void dataset_open(dataset *ds, const mt_config *c) {
    memset(ds, 0, sizeof *ds);
    ds->vocab = c->vocab;
    if (strcmp(c->data_format, "synthetic") == 0) { // for benchmarks: no file to read
        ds->n = (size_t)1 << 40;
        ds->n_train = ds->n - (ds->n >> 4);
        return;
    }
    size_t window = (size_t)c->seq_len + 1;
    ds->n = open_stream(c, c->data_path, &ds->shards, &ds->nshards);
    if (c->val_path[0]) { // all of data.path trains; evaluation reads val_path
        ds->val_n = open_stream(c, c->val_path, &ds->val_shards, &ds->val_nshards);
        if (ds->n < window) too_short(c->data_path, ds->n, c->seq_len, window);
        if (ds->val_n < window) too_short(c->val_path, ds->val_n, c->seq_len, window);
        ds->n_train = ds->n;
        return;
    }
    if (ds->n < 2 * window) too_short(c->data_path, ds->n, c->seq_len, 2 * window);
    ds->n_train = (size_t)(ds->n * (1.0 - c->val_fraction));
    if (ds->n_train < (size_t)c->seq_len + 1) ds->n_train = c->seq_len + 1;
    if (ds->n - ds->n_train < (size_t)c->seq_len + 1) ds->n_train = ds->n - c->seq_len - 1;
}

static void close_stream(data_shard **shards, int *ns) {
    for (int i = 0; i < *ns; i++)
        if ((*shards)[i].map) SYS_CHECK(munmap((void *)(*shards)[i].map, (*shards)[i].map_len));
    free_shards(*shards, *ns);
    *shards = NULL;
    *ns = 0;
}

void dataset_close(dataset *ds) {
    close_stream(&ds->shards, &ds->nshards);
    close_stream(&ds->val_shards, &ds->val_nshards);
}

// ---- reading windows ----

// The shard holding stream index i: the last one that starts at or before it. Empty shards
// share their start with the next one, which comes later and so wins.
static int shard_of(const data_shard *shards, int nshards, size_t i) {
    int lo = 0, hi = nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (shards[mid].start <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// A masked shard's token whose bit is clear is context only: as a target it is -1, which the
// classifier skips (no loss, no gradient).
static int32_t target_of(const data_shard *sh, size_t i) {
    return sh->mask && !(sh->mask[i >> 3] >> (i & 7) & 1) ? -1 : (int32_t)token(sh, i);
}

// count tokens of a stream from index o, as inputs, or as targets (with the shards' masks); a
// window that crosses into the next shard simply continues there, so the stream reads exactly
// like the concatenated files.
static void copy_tokens(const data_shard *shards, int nshards, int vocab, size_t o, int count,
                        int32_t *out, int targets) {
    if (nshards == 0) { // synthetic
        for (int t = 0; t < count; t++) out[t] = (int32_t)(splitmix64(o + t) % (uint64_t)vocab);
        return;
    }
    size_t done = 0;
    for (int s = shard_of(shards, nshards, o); done < (size_t)count; s++) {
        const data_shard *sh = &shards[s];
        size_t off = o + done - sh->start, take = sh->n - off;
        if (take > (size_t)count - done) take = (size_t)count - done;
        for (size_t t = 0; t < take; t++)
            out[done + t] = targets ? target_of(sh, off + t) : (int32_t)token(sh, off + t);
        done += take;
    }
}

void dataset_pack_documents(int eot, int rows, int T, const int32_t *inputs, int32_t *targets,
                            int32_t *doc_start) {
    for (int r = 0; r < rows; r++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            doc_start[i] = start;
            if (inputs[i] != eot) continue;
            targets[i] = -1;
            start = t + 1;
        }
    }
}

void dataset_batch(const dataset *ds, int split, uint64_t seed, int64_t step, int micro, int rows,
                   int T, int32_t *inputs, int32_t *targets) {
    const data_shard *shards = ds->shards;
    int nshards = ds->nshards;
    size_t lo = split == SPLIT_TRAIN ? 0 : ds->n_train;
    size_t hi = split == SPLIT_TRAIN ? ds->n_train : ds->n;
    if (split == SPLIT_VAL && ds->val_nshards) // data.val_path
        shards = ds->val_shards, nshards = ds->val_nshards, lo = 0, hi = ds->val_n;
    size_t span = hi - lo - (size_t)T; // windows [o, o + T] with o + T < hi
    for (int r = 0; r < rows; r++) {
        uint64_t key = splitmix64(seed ^ splitmix64((uint64_t)split << 62 ^ (uint64_t)step << 24 ^
                                                    (uint64_t)micro << 12 ^ (uint64_t)r));
        size_t o = lo + key % span;
        copy_tokens(shards, nshards, ds->vocab, o, T, inputs + (size_t)r * T, 0);
        copy_tokens(shards, nshards, ds->vocab, o + 1, T, targets + (size_t)r * T, 1);
    }
}
