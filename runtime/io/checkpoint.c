#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include <cjson/cJSON.h>
#include <xxhash.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_MAGIC 0x3130545043544d4dull // "MMTCPT01"
#define STATE_HEADER_BYTES 65536
#define MANIFEST_VERSION 2
// Checksum granularity: small enough that a mismatch points near the damage and the work
// spreads over the ranks, large enough that a 70B checkpoint lists only ~13k checksums.
#define BLOCK_BYTES (64ull << 20)

typedef struct {
    uint64_t magic;
    int64_t n_groups;
    uint64_t numel[(STATE_HEADER_BYTES - 16) / 8];
} state_header;

static uint64_t state_offset(const mt_job *job, int g, int which) {
    uint64_t off = STATE_HEADER_BYTES;
    for (int i = 0; i < g; i++) off += 3 * job->group_numel[i] * sizeof(float);
    return off + (uint64_t)which * job->group_numel[g] * sizeof(float);
}

static uint64_t state_bytes(const mt_job *job) {
    return state_offset(job, job->n_groups - 1, 3);
}

// Hashes block i of an open file (the last block may be short) through a read-only mapping:
// no buffer, and right after a save the pages are still in the page cache.
static uint64_t hash_block(int fd, const char *path, uint64_t block, uint64_t file_bytes,
                           uint64_t i) {
    uint64_t off = i * block, len = file_bytes - off < block ? file_bytes - off : block;
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
    if (p == MAP_FAILED) mt_die("%s: mmap block %" PRIu64 ": %s", path, i, strerror(errno));
    madvise(p, len, MADV_SEQUENTIAL);
    uint64_t h = XXH64(p, len, 0);
    SYS_CHECK(munmap(p, len));
    return h;
}

// This member of comm hashes blocks i with i % size == rank into sums (others left 0).
static void hash_my_blocks(const char *path, uint64_t block, uint64_t file_bytes, MPI_Comm comm,
                           uint64_t *sums) {
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    uint64_t n = (file_bytes + block - 1) / block;
    int fd = open(path, O_RDONLY);
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    for (uint64_t i = (uint64_t)rank; i < n; i += (uint64_t)size)
        sums[i] = hash_block(fd, path, block, file_bytes, i);
    SYS_CHECK(close(fd));
}

// Tests shrink the blocks (a page multiple, for mmap) to exercise several of them.
static uint64_t block_bytes(void) {
    const char *s = getenv("MT_CHECKPOINT_BLOCK_BYTES");
    long long v = s ? atoll(s) : 0;
    return v > 0 && v % 65536 == 0 ? (uint64_t)v : BLOCK_BYTES;
}

// ---- the manifest ----

static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        buf[fread(buf, 1, (size_t)n, f)] = 0;
    }
    fclose(f);
    return buf;
}

static cJSON *load_manifest(const char *step_dir, char *path, size_t cap, char *err,
                            size_t errlen) {
    snprintf(path, cap, "%s/manifest.json", step_dir);
    char *text = read_text_file(path);
    if (!text) return snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno)), NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) snprintf(err, errlen, "%s: not valid JSON", path);
    return root;
}

// A number field that must exist and be a non-negative integer; -1 (with err) otherwise.
static int get_uint(const cJSON *obj, const char *key, const char *path, const char *prefix,
                    double *out, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9e18 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return snprintf(err, errlen, "%s: %s%s missing or not a non-negative integer", path, prefix,
                        key),
               -1;
    *out = v->valuedouble;
    return 0;
}

static int check_model(const cJSON *root, const mt_config *c, const char *path, char *err,
                       size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return snprintf(err, errlen, "%s: no \"model\" object", path), -1;
    const char *keys[] = {"dim", "layers", "heads", "kv_heads", "ffn_dim", "vocab"};
    const int want[] = {c->dim, c->layers, c->heads, c->kv_heads, c->ffn_dim, c->vocab};
    for (int i = 0; i < 6; i++) {
        double v;
        if (get_uint(model, keys[i], path, "model.", &v, err, errlen) != 0) return -1;
        if (v != want[i])
            return snprintf(err, errlen, "%s: model.%s %.0f != config %d", path, keys[i], v,
                            want[i]),
                   -1;
    }
    const cJSON *tied = cJSON_GetObjectItemCaseSensitive(model, "tied_embeddings");
    if (!cJSON_IsBool(tied))
        return snprintf(err, errlen, "%s: model.tied_embeddings missing or not a bool", path), -1;
    if (!!cJSON_IsTrue(tied) != !!c->tied_embeddings)
        return snprintf(err, errlen, "%s: model.tied_embeddings %s != config %s", path,
                        cJSON_IsTrue(tied) ? "true" : "false",
                        c->tied_embeddings ? "true" : "false"),
               -1;
    // Absent in checkpoints from before Qwen2's biases: those models have none.
    int qkv_bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "qkv_bias"));
    if (qkv_bias != !!c->qkv_bias)
        return snprintf(err, errlen, "%s: model.qkv_bias %s != config %s", path,
                        qkv_bias ? "true" : "false", c->qkv_bias ? "true" : "false"),
               -1;
    return 0;
}

typedef struct {
    uint64_t block, file_bytes, n;
    uint64_t *sums; // [n], malloc'd
} block_list;

static int parse_hex64(const cJSON *s, uint64_t *out) {
    if (!cJSON_IsString(s) || strlen(s->valuestring) != 16) return -1;
    char *end;
    *out = strtoull(s->valuestring, &end, 16);
    return *end == 0 && strspn(s->valuestring, "0123456789abcdef") == 16 ? 0 : -1;
}

static int parse_blocks(const cJSON *root, const char *path, block_list *bl, char *err,
                        size_t errlen) {
    memset(bl, 0, sizeof *bl);
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(root, "checksum");
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(ck, "algorithm");
    if (!cJSON_IsObject(ck) || !cJSON_IsString(alg) || strcmp(alg->valuestring, "xxh64") != 0)
        return snprintf(err, errlen, "%s: no \"checksum\" object with algorithm \"xxh64\"", path),
               -1;
    double block, bytes;
    if (get_uint(ck, "block_bytes", path, "checksum.", &block, err, errlen) != 0 ||
        get_uint(ck, "file_bytes", path, "checksum.", &bytes, err, errlen) != 0)
        return -1;
    if (block == 0 || (uint64_t)block % 65536 != 0)
        return snprintf(err, errlen, "%s: checksum.block_bytes %.0f is not a multiple of 64 KiB",
                        path, block),
               -1;
    bl->block = (uint64_t)block, bl->file_bytes = (uint64_t)bytes;
    bl->n = (bl->file_bytes + bl->block - 1) / bl->block;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(ck, "blocks");
    if (!cJSON_IsArray(arr) || (uint64_t)cJSON_GetArraySize(arr) != bl->n)
        return snprintf(err, errlen, "%s: checksum.blocks should list %" PRIu64 " checksums", path,
                        bl->n),
               -1;
    bl->sums = calloc(bl->n ? bl->n : 1, sizeof *bl->sums);
    if (!bl->sums) mt_die("out of memory");
    uint64_t i = 0;
    for (const cJSON *s = arr->child; s; s = s->next, i++)
        if (parse_hex64(s, &bl->sums[i]) != 0) {
            free(bl->sums), bl->sums = NULL;
            return snprintf(err, errlen, "%s: checksum.blocks[%" PRIu64 "] is not 16 hex digits",
                            path, i),
                   -1;
        }
    return 0;
}

static int check_version(const cJSON *root, const char *path, char *err, size_t errlen) {
    double version;
    if (get_uint(root, "version", path, "", &version, err, errlen) != 0) return -1;
    if (version == MANIFEST_VERSION) return 0;
    snprintf(err, errlen, "%s: version %.0f, this build reads version %d", path, version,
             MANIFEST_VERSION);
    return -1;
}

// Everything resume needs from the manifest, checked against the job's config; on success
// bl->sums is malloc'd.
static int check_manifest(const char *step_dir, const mt_job *job, block_list *bl, char *err,
                          size_t errlen) {
    char path[PATH_MAX];
    cJSON *root = load_manifest(step_dir, path, sizeof path, err, errlen);
    if (!root) return -1;
    int rc = check_version(root, path, err, errlen);
    if (rc == 0) rc = check_model(root, &job->cfg, path, err, errlen);
    if (rc == 0) rc = parse_blocks(root, path, bl, err, errlen);
    cJSON_Delete(root);
    if (rc == 0 && bl->file_bytes != state_bytes(job)) {
        snprintf(err, errlen,
                 "%s: checksum.file_bytes %" PRIu64 " != %" PRIu64 " that the config's model needs",
                 path, bl->file_bytes, state_bytes(job));
        free(bl->sums);
        rc = -1;
    }
    return rc;
}

int checkpoint_find_latest(const char *dir, char *out, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/LATEST", dir);
    char *name = read_text_file(path);
    if (!name) return -1;
    name[strcspn(name, "\n")] = 0;
    snprintf(out, cap, "%s/%s", dir, name);
    free(name);
    return 0;
}

int checkpoint_resolve(const char *dir, char *out, size_t cap, char *err, size_t errlen) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (access(path, R_OK) == 0) {
        snprintf(out, cap, "%s", dir);
        return 0;
    }
    if (checkpoint_find_latest(dir, out, cap) == 0) return 0;
    snprintf(err, errlen, "--resume %s: no checkpoint there (neither LATEST nor manifest.json)",
             dir);
    return -1;
}

int checkpoint_read_step(const char *step_dir, int *step, int *skipped, char *err, size_t errlen) {
    char path[PATH_MAX];
    cJSON *root = load_manifest(step_dir, path, sizeof path, err, errlen);
    if (!root) return -1;
    double s, k = 0;
    int rc = get_uint(root, "step", path, "", &s, err, errlen);
    if (rc == 0 && s > INT_MAX) {
        snprintf(err, errlen, "%s: step out of range", path);
        rc = -1;
    }
    // skipped_steps came with non-finite-norm skipping; a manifest without it skipped none
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(data, "skipped_steps"))
        rc = get_uint(data, "skipped_steps", path, "data.", &k, err, errlen);
    if (rc == 0 && k > s) {
        snprintf(err, errlen, "%s: data.skipped_steps %.0f is more than step %.0f", path, k, s);
        rc = -1;
    }
    if (rc == 0) *step = (int)s, *skipped = (int)k;
    cJSON_Delete(root);
    return rc;
}

static int check_header(const char *step_dir, const mt_job *job, char *err, size_t errlen) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", step_dir);
    static state_header h;
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)), -1;
    size_t got = fread(&h, 1, sizeof h, f);
    struct stat st;
    int rc = fstat(fileno(f), &st);
    fclose(f);
    if (got != sizeof h || h.magic != STATE_MAGIC)
        return snprintf(err, errlen, "%s: not a MegaTrain-C state file", path), -1;
    if (h.n_groups != job->n_groups)
        return snprintf(err, errlen, "%s: holds %lld parameter groups, the config needs %d", path,
                        (long long)h.n_groups, job->n_groups),
               -1;
    for (int g = 0; g < job->n_groups; g++)
        if (h.numel[g] != job->group_numel[g])
            return snprintf(err, errlen, "%s: group %d has %llu parameters, the config needs %llu",
                            path, g, (unsigned long long)h.numel[g],
                            (unsigned long long)job->group_numel[g]),
                   -1;
    uint64_t want = state_bytes(job);
    if (rc != 0 || (uint64_t)st.st_size != want)
        return snprintf(err, errlen, "%s: truncated or oversized (%lld bytes, expected %llu)", path,
                        (long long)st.st_size, (unsigned long long)want),
               -1;
    return 0;
}

int checkpoint_check_state(const char *step_dir, const mt_job *job, char *err, size_t errlen) {
    block_list bl;
    if (check_manifest(step_dir, job, &bl, err, errlen) != 0) return -1;
    free(bl.sums);
    return check_header(step_dir, job, err, errlen);
}

// Each member of comm reads only its share of the blocks, so the file is read once in all.
int checkpoint_verify_state(const char *step_dir, const mt_job *job, MPI_Comm comm, char *err,
                            size_t errlen) {
    block_list bl;
    if (check_manifest(step_dir, job, &bl, err, errlen) != 0)
        mt_die("%s", err); // checkpoint_check_state passed on this same input just before
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", step_dir);
    uint64_t *got = calloc(bl.n, sizeof *got);
    if (!got) mt_die("out of memory");
    hash_my_blocks(path, bl.block, bl.file_bytes, comm, got);
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    long long bad = LLONG_MAX, first_bad;
    for (uint64_t i = (uint64_t)rank; i < bl.n && bad == LLONG_MAX; i += (uint64_t)size)
        if (got[i] != bl.sums[i]) bad = (long long)i;
    MPI_CHECK(MPI_Allreduce(&bad, &first_bad, 1, MPI_LONG_LONG, MPI_MIN, comm));
    free(got);
    free(bl.sums);
    if (first_bad == LLONG_MAX) return 0;
    uint64_t lo = (uint64_t)first_bad * bl.block;
    uint64_t hi = lo + bl.block < bl.file_bytes ? lo + bl.block : bl.file_bytes;
    snprintf(err, errlen,
             "%s: block %lld (bytes %" PRIu64 "-%" PRIu64
             ") checksum mismatch with manifest.json: the checkpoint is corrupt",
             path, first_bad, lo, hi - 1);
    return -1;
}

// ---- saving ----

static void fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    SYS_CHECK(fd);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

// A new file in a folder others may write to: created, never opened through a planted link.
static void write_file_synced(const char *path, const char *text) {
    int fd = open_nofollow(path, "x");
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) mt_die("%s: write failed: %s", path, strerror(errno));
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

// The leftovers of a crashed earlier save of ours, never what a link points to.
static void clear_stale(const char *path) {
    char err[PATH_MAX + 256];
    if (remove_stale_temp(path, err, sizeof err) < 0) mt_die("checkpoint: %s", err);
}

// pread/pwrite move at most about 2 GiB a call, and a write may end early: loop. A write that
// fails (a full disk, most often) removes the partial save, which is ours alone, and says so.
static void move_bytes(int fd, const char *path, const char *step_dir, void *buf, size_t bytes,
                       off_t off, int writing) {
    for (size_t done = 0; done < bytes;) {
        ssize_t n = writing ? pwrite(fd, (char *)buf + done, bytes - done, off + (off_t)done)
                            : pread(fd, (char *)buf + done, bytes - done, off + (off_t)done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        const char *why = n == 0 ? "unexpected end of file" : strerror(errno);
        if (!writing) mt_die("%s: read failed at byte %lld: %s", path, (long long)off, why);
        int full = n < 0 && (errno == ENOSPC || errno == EDQUOT);
        unlink(path), rmdir(step_dir);
        mt_die("checkpoint: %s: %s%s; the partial save %s was removed", path, why,
               full ? " (the device holding the checkpoint folder is full)" : "", step_dir);
    }
}

static void create_state_file(const mt_job *job, const char *tmp) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", tmp);
    static state_header h;
    memset(&h, 0, sizeof h);
    h.magic = STATE_MAGIC;
    h.n_groups = job->n_groups;
    for (int g = 0; g < job->n_groups; g++) h.numel[g] = job->group_numel[g];
    int fd = open_nofollow(path, "x");
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    move_bytes(fd, path, tmp, &h, sizeof h, 0, 1);
    SYS_CHECK(ftruncate(fd, (off_t)state_bytes(job)));
    SYS_CHECK(close(fd));
}

static void io_slices(mt_job *job, const char *step_dir, group_state *state, int writing) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", step_dir);
    int fd = open(path, (writing ? O_WRONLY : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    int k = job_shard_of_rank(job->rank);
    const shard_layout *lay = &job->layouts[k];
    for (int g = 0; g < job->n_groups; g++) {
        float *arrays[3] = {state[g].master, state[g].m, state[g].v};
        size_t bytes = lay->len[g] * sizeof(float);
        for (int w = 0; w < 3; w++) {
            off_t off = (off_t)(state_offset(job, g, w) + lay->lo[g] * sizeof(float));
            move_bytes(fd, path, step_dir, arrays[w], bytes, off, writing);
        }
    }
    if (writing && fsync(fd) != 0) {
        int full = errno == ENOSPC || errno == EDQUOT;
        const char *why = strerror(errno);
        unlink(path), rmdir(step_dir);
        mt_die("checkpoint: %s: fsync: %s%s; the partial save %s was removed", path, why,
               full ? " (the device holding the checkpoint folder is full)" : "", step_dir);
    }
    SYS_CHECK(close(fd));
}

static cJSON *manifest_model(const mt_config *c) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "dim", c->dim);
    cJSON_AddNumberToObject(m, "layers", c->layers);
    cJSON_AddNumberToObject(m, "heads", c->heads);
    cJSON_AddNumberToObject(m, "kv_heads", c->kv_heads);
    cJSON_AddNumberToObject(m, "ffn_dim", c->ffn_dim);
    cJSON_AddNumberToObject(m, "vocab", c->vocab);
    cJSON_AddBoolToObject(m, "tied_embeddings", c->tied_embeddings);
    cJSON_AddBoolToObject(m, "qkv_bias", c->qkv_bias);
    return m;
}

// Batches are a pure function of (seed, step), so the step is the whole data position.
static cJSON *manifest_data(const mt_config *c, int step, int skipped) {
    cJSON *d = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed); // a string: exact beyond 2^53
    cJSON_AddNumberToObject(d, "position", step);
    cJSON_AddNumberToObject(d, "skipped_steps", skipped); // non-finite norms: no update made
    cJSON_AddStringToObject(d, "seed", seed);
    cJSON_AddStringToObject(d, "rng",
                            "none: initialization and batches are pure functions of "
                            "(seed, step); there is no other random state");
    return d;
}

static cJSON *manifest_checksum(const block_list *bl) {
    cJSON *ck = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(ck, "algorithm", "xxh64");
    cJSON_AddNumberToObject(ck, "block_bytes", (double)bl->block);
    cJSON_AddNumberToObject(ck, "file_bytes", (double)bl->file_bytes);
    for (uint64_t i = 0; i < bl->n; i++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, bl->sums[i]);
        cJSON_AddItemToArray(arr, cJSON_CreateString(hex));
    }
    cJSON_AddItemToObject(ck, "blocks", arr);
    return ck;
}

static void write_manifest(const mt_job *job, const char *tmp, int step, const block_list *bl) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "megatrain-c checkpoint");
    cJSON_AddNumberToObject(root, "version", MANIFEST_VERSION);
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddItemToObject(root, "model", manifest_model(&job->cfg));
    cJSON_AddNumberToObject(root, "groups", job->n_groups);
    double params = 0;
    for (int g = 0; g < job->n_groups; g++) params += (double)job->group_numel[g];
    cJSON_AddNumberToObject(root, "params", params);
    cJSON_AddItemToObject(root, "data", manifest_data(&job->cfg, step, job->skipped_steps));
    cJSON_AddStringToObject(root, "state", "state.bin");
    cJSON_AddItemToObject(root, "checksum", manifest_checksum(bl));
    cJSON_AddStringToObject(root, "config", job->cfg.source_path);
    char *text = cJSON_Print(root), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", tmp);
    write_file_synced(path, text);
    free(text);
    cJSON_Delete(root);
}

// The last step of a save: move the folder into place, keeping any same-named older one.
static void publish(const mt_job *job, const char *tmp, const char *name) {
    const char *dir = job->cfg.checkpoint_dir;
    char final[PATH_MAX], aside[PATH_MAX], latest_tmp[PATH_MAX], latest[PATH_MAX];
    snprintf(final, sizeof final, "%s/%s", dir, name);
    if (access(final, F_OK) == 0) {
        snprintf(aside, sizeof aside, "%s.replaced-%lld", final, (long long)time(NULL));
        SYS_CHECK(rename(final, aside));
    }
    fsync_path(tmp);
    SYS_CHECK(rename(tmp, final));
    snprintf(latest_tmp, sizeof latest_tmp, "%s/.LATEST.tmp", dir);
    snprintf(latest, sizeof latest, "%s/LATEST", dir);
    clear_stale(latest_tmp);
    char text[300];
    snprintf(text, sizeof text, "%s\n", name);
    write_file_synced(latest_tmp, text);
    SYS_CHECK(rename(latest_tmp, latest));
    fsync_path(dir);
}

static void checksum_state(mt_job *job, const char *tmp, block_list *bl) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", tmp);
    bl->block = block_bytes();
    bl->file_bytes = state_bytes(job);
    bl->n = (bl->file_bytes + bl->block - 1) / bl->block;
    uint64_t *mine = calloc(bl->n, sizeof *mine);
    bl->sums = calloc(bl->n, sizeof *bl->sums);
    if (!mine || !bl->sums) mt_die("out of memory");
    hash_my_blocks(path, bl->block, bl->file_bytes, job->opt_comm, mine);
    MPI_CHECK(MPI_Reduce(mine, bl->sums, (int)bl->n, MPI_UINT64_T, MPI_BOR, 0, job->opt_comm));
    free(mine);
}

void checkpoint_save(mt_job *job, int step, group_state *state) {
    char tmp[PATH_MAX], name[64];
    snprintf(name, sizeof name, "step_%06d", step);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", job->cfg.checkpoint_dir, name);
    int leader = job->rank == 1;
    if (leader) {
        make_dirs(job->cfg.checkpoint_dir);
        clear_stale(tmp);
        if (mkdir(tmp, 0755) != 0) mt_die("checkpoint: mkdir %s: %s", tmp, strerror(errno));
        create_state_file(job, tmp);
    }
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    io_slices(job, tmp, state, 1);
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    block_list bl;
    checksum_state(job, tmp, &bl);
    if (leader) {
        write_manifest(job, tmp, step, &bl);
        publish(job, tmp, name);
        checkpoint_prune(job->cfg.checkpoint_dir, job->cfg.checkpoint_keep, name);
    }
    free(bl.sums);
    MPI_CHECK(MPI_Barrier(job->opt_comm));
}

void checkpoint_load(mt_job *job, group_state *state) {
    io_slices(job, job->resume_path, state, 0);
}

int checkpoint_due(const mt_job *job, int version) {
    int every = job->cfg.checkpoint_interval;
    return every > 0 && (version == job->end_step || version % every == 0);
}

int checkpoint_export_due(const mt_job *job) {
    return job->cfg.export_dir[0] && job->end_step == job->cfg.steps;
}

int checkpoint_state_due(const mt_job *job, int version) {
    return checkpoint_due(job, version) || (version == job->end_step && checkpoint_export_due(job));
}
