#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Shards are little-endian and their tokens are copied out as they are, without a swap.
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
    if (rc == 0) s->file_len = (size_t)st.st_size;
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

// ---- reading, and the scan at load ----

// Bad data ends the job as bad input (exit 2, which mtrun passes on), in one line naming the
// file: only the compute rank reads data, so this cannot wait for the others (job_fail_input).
__attribute__((format(printf, 1, 2), noreturn)) static void refuse(const char *fmt, ...) {
    char msg[MT_PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mt_say_last("megatrain: ", msg);
    exit(2);
}

// Opens the shard the loader checked, and holds it: a file replaced or cut since is refused.
static void open_shard_fd(data_shard *s) {
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) refuse("%s: cannot open: %s", s->path, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(s->fd, &st));
    if ((size_t)st.st_size != s->file_len)
        refuse("%s: changed while the job started (%zu bytes, then %lld)", s->path, s->file_len,
               (long long)st.st_size);
}

// len bytes at offset off of shard s, all of them: a file that shrank under a running job is
// refused by name rather than read short.
static void read_exact(const data_shard *s, void *buf, size_t len, size_t off) {
    for (size_t got = 0; got < len;) {
        ssize_t r = pread(s->fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) refuse("%s: read: %s", s->path, strerror(errno));
        if (r == 0)
            refuse("%s: changed while the job reads it: it ends before byte %zu of %zu", s->path,
                   off + got, s->file_len);
        got += (size_t)r;
    }
}

// Tokens [i, i + count) of s as int32, each checked against vocab where it is used: a token
// >= vocab would index past the embedding, and the file may have been rewritten since load.
static void read_tokens(const data_shard *s, size_t i, size_t count, int vocab, int32_t *out) {
    if (s->width == 4) {
        read_exact(s, out, count * 4, s->header + i * 4);
    } else {
        uint8_t *raw = (uint8_t *)out + count * (4 - (size_t)s->width); // widen in place, upward
        read_exact(s, raw, count * (size_t)s->width, s->header + i * (size_t)s->width);
        for (size_t t = 0; t < count; t++) {
            uint16_t w;
            if (s->width == 2) memcpy(&w, raw + 2 * t, 2);
            out[t] = s->width == 2 ? (int32_t)w : (int32_t)raw[t];
        }
    }
    for (size_t t = 0; t < count; t++)
        if ((uint32_t)out[t] >= (uint32_t)vocab)
            refuse("%s: token %u at index %zu is >= model.vocab = %d", s->path, (uint32_t)out[t],
                   i + t, vocab);
}

// The mask bytes covering tokens [i, i + count) of a masked shard; bit (i + t) of the file's
// mask is bit ((i & 7) + t) of bits.
static void read_mask(const data_shard *s, size_t i, size_t count, uint8_t *bits) {
    size_t first = i >> 3, last = (i + count - 1) >> 3;
    read_exact(s, bits, last - first + 1, s->header + s->n * (size_t)s->width + first);
}

// Every token of s checked against vocab, and its targets counted, a chunk at a time.
static void scan_shard(data_shard *s, int vocab) {
    enum { CHUNK = 1 << 20 };
    int32_t *buf = malloc(CHUNK * sizeof *buf);
    uint8_t *bits = malloc(CHUNK / 8 + 2);
    if (!buf || !bits) mt_die("out of memory");
    s->targets = s->masked ? 0 : s->n;
    for (size_t i = 0; i < s->n; i += CHUNK) {
        size_t count = s->n - i < CHUNK ? s->n - i : CHUNK;
        read_tokens(s, i, count, vocab, buf);
        if (!s->masked) continue;
        read_mask(s, i, count, bits); // i is a multiple of 8: bit t is token i + t
        for (size_t t = 0; t < count; t++) s->targets += bits[t >> 3] >> (t & 7) & 1;
    }
    free(buf);
    free(bits);
}

// data.format "bytes": the text file is one shard with no header, one token per byte.
static void open_bytes(data_shard **out, int *nout, const char *path) {
    data_shard *s = *out = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    *nout = 1;
    s->path = strdup(path);
    if (!s->path) mt_die("out of memory");
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) refuse("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(s->fd, &st));
    s->n = s->file_len = s->targets = (size_t)st.st_size;
    s->width = 1;
}

static void open_tokens(data_shard **out, int *nout, const char *pattern, int vocab) {
    char err[MT_PATH_MAX + 256];
    size_t total;
    if (find_shards(pattern, out, nout, &total, err, sizeof err) < 0) refuse("%s", err);
    for (int i = 0; i < *nout; i++) {
        (*out)[i].fd = -1;
        if ((*out)[i].n == 0) continue; // nothing to read; never chosen by a window
        open_shard_fd(&(*out)[i]);
        scan_shard(&(*out)[i], vocab);
    }
}

// A stream with no target at all would train on a loss of 0/0 (transformers: NaN; here nothing
// but weight decay): refused, naming the file, or the pattern and its shard count.
static void need_targets(const char *path, const data_shard *s, int ns) {
    size_t targets = 0;
    for (int i = 0; i < ns; i++) targets += s[i].targets;
    if (targets > 0 || ns == 0) return;
    if (ns == 1)
        refuse("%s: no target token: the mask marks every token context only (labels all -100), "
               "nothing to train on",
               s[0].path);
    refuse("%s: no target token in its %d shards: every mask marks every token context only "
           "(labels all -100), nothing to train on",
           path, ns);
}

// The stream of path in c's format, opened and scanned; returns its token count.
static size_t open_stream(const mt_config *c, const char *path, data_shard **out, int *nout) {
    if (c->data_format == DATA_TOKENS)
        open_tokens(out, nout, path, c->model.vocab);
    else
        open_bytes(out, nout, path);
    need_targets(path, *out, *nout);
    size_t n = 0;
    for (int i = 0; i < *nout; i++) n += (*out)[i].n;
    return n;
}

size_t dataset_train_end(const mt_config *c, size_t n) {
    if (c->val_path[0]) return n; // all of data.path trains; evaluation reads val_path
    size_t n_train = (size_t)(n * (1.0 - c->val_fraction)), window = (size_t)c->seq_len + 1;
    if (n_train < window) n_train = window;
    if (n - n_train < window) n_train = n - window;
    return n_train;
}

static void too_short(const char *path, size_t n, int seq_len, size_t need) {
    refuse("%s: %zu tokens, too few for seq_len %d (need at least %zu)", path, n, seq_len, need);
}

void dataset_open(dataset *ds, const mt_config *c) {
    memset(ds, 0, sizeof *ds);
    ds->vocab = c->model.vocab;
    if (c->data_format == DATA_SYNTHETIC) { // for benchmarks: no file to read
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
    ds->n_train = dataset_train_end(c, ds->n);
}

static void close_stream(data_shard **shards, int *ns) {
    for (int i = 0; i < *ns; i++)
        if ((*shards)[i].fd >= 0) SYS_CHECK(close((*shards)[i].fd));
    free_shards(*shards, *ns);
    *shards = NULL;
    *ns = 0;
}

void dataset_close(dataset *ds) {
    close_stream(&ds->shards, &ds->nshards);
    close_stream(&ds->val_shards, &ds->val_nshards);
}

// ---- each split's targets, checked before any rank starts ----

// Whether a target lies in tokens [from, to) of shard s (relative to its start): a shard without
// a mask is all targets; a masked one's mask is read until the first set bit in the range.
static int shard_has_target(const data_shard *s, size_t from, size_t to, int *found, char *err,
                            size_t errlen) {
    enum { CHUNK = 1 << 20 };
    if (from >= to || (*found = !s->masked)) return 0;
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    uint8_t *bits = malloc(CHUNK);
    if (!bits) mt_die("out of memory");
    int rc = fd < 0 ? errf(err, errlen, "%s: cannot open: %s", s->path, strerror(errno)) : 0;
    for (size_t byte = from >> 3; rc == 0 && !*found && byte <= (to - 1) >> 3; byte += CHUNK) {
        size_t want = ((to - 1) >> 3) - byte + 1 < CHUNK ? ((to - 1) >> 3) - byte + 1 : CHUNK;
        ssize_t got = pread(fd, bits, want, (off_t)(s->header + s->n * (size_t)s->width + byte));
        if (got != (ssize_t)want) {
            rc = errf(err, errlen, "%s: read: %s", s->path, got < 0 ? strerror(errno) : "short");
            break;
        }
        for (size_t i = 0; i < want * 8 && !*found; i++) {
            size_t t = (byte << 3) + i;
            if (!bits[i >> 3]) { // a whole byte of context, as most of a prompt's mask is
                i |= 7;
                continue;
            }
            *found = t >= from && t < to && (bits[i >> 3] >> (i & 7) & 1);
        }
    }
    free(bits);
    if (fd >= 0) close(fd);
    return rc;
}

// Tokens [from, to) of pattern's stream hold a target, or the split is refused in one line.
static int split_has_target(const char *pattern, const char *split, size_t from, size_t to,
                            char *err, size_t errlen) {
    data_shard *s;
    int ns, found = 0, rc = 0;
    size_t total;
    if (find_shards(pattern, &s, &ns, &total, err, errlen) < 0) return -1;
    for (int i = 0; i < ns && rc == 0 && !found; i++) {
        size_t lo = from > s[i].start ? from - s[i].start : 0;
        size_t hi = to < s[i].start + s[i].n ? to - s[i].start : s[i].n;
        if (to > s[i].start) rc = shard_has_target(&s[i], lo, hi, &found, err, errlen);
    }
    free_shards(s, ns);
    if (rc == 0 && !found)
        rc = errf(err, errlen,
                  "%s: no target token in its %s (tokens %zu to %zu of %zu): the mask marks every "
                  "token there context only (labels all -100), nothing to %s",
                  pattern, split, from, to, total,
                  strcmp(split, "training split") ? "evaluate" : "train on");
    return rc;
}

// A window's targets are its tokens after the first, so a split [lo, hi) trains on [lo + 1, hi).
int dataset_check_targets(const mt_config *c, size_t n, size_t val_n, const char **key, char *err,
                          size_t errlen) {
    size_t window = (size_t)c->seq_len + 1;
    *key = "data.path";
    if (c->data_format != DATA_TOKENS) return 0; // text: every byte is a target
    if (c->val_path[0]) {
        if (split_has_target(c->data_path, "training split", 1, n, err, errlen) < 0) return -1;
        *key = "data.val_path";
        return split_has_target(c->val_path, "validation split", 1, val_n, err, errlen);
    }
    if (n < 2 * window) return 0; // too short: the rank says so at load
    size_t end = dataset_train_end(c, n);
    if (split_has_target(c->data_path, "training split", 1, end, err, errlen) < 0) return -1;
    if (c->eval_interval <= 0) return 0; // the validation tail is never read
    return split_has_target(c->data_path, "validation split", end + 1, n, err, errlen);
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

// count tokens of a stream from index o, as inputs, or as targets (a masked shard's token whose
// bit is clear is context only: -1, which the classifier skips); a window that crosses into the
// next shard simply continues there, so the stream reads exactly like the concatenated files.
static void copy_tokens(const data_shard *shards, int nshards, int vocab, size_t o, int count,
                        int32_t *out, int targets) {
    if (nshards == 0) { // synthetic
        for (int t = 0; t < count; t++) out[t] = (int32_t)(splitmix64(o + t) % (uint64_t)vocab);
        return;
    }
    uint8_t *bits = targets ? malloc((size_t)count / 8 + 2) : NULL;
    if (targets && !bits) mt_die("out of memory");
    size_t done = 0;
    for (int s = shard_of(shards, nshards, o); done < (size_t)count; s++) {
        const data_shard *sh = &shards[s];
        size_t off = o + done - sh->start, take = sh->n - off;
        if (take > (size_t)count - done) take = (size_t)count - done;
        if (take == 0) continue;
        read_tokens(sh, off, take, vocab, out + done);
        if (targets && sh->masked) {
            read_mask(sh, off, take, bits);
            for (size_t t = 0, b = off & 7; t < take; t++, b++)
                if (!(bits[b >> 3] >> (b & 7) & 1)) out[done + t] = -1;
        }
        done += take;
    }
    free(bits);
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
