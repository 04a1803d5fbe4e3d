#include "runtime/io/io.h"
#include "runtime/io/manifest.h"
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
// Checksum granularity: small enough that a mismatch points near the damage and the work
// spreads over the ranks, large enough that a 70B checkpoint lists only ~13k checksums.
#define BLOCK_BYTES (64ull << 20)

// Since manifest version 3 the header also says which step it holds, how many steps were
// skipped and the seed, so that a manifest edited to match itself still has to match these
// (which the block checksums cover). Version 2 headers hold zeros there.
typedef struct {
    uint64_t magic;
    int64_t n_groups;
    uint64_t numel[(STATE_HEADER_BYTES - 48) / 8];
    int64_t step, skipped;
    uint64_t seed, reserved;
} state_header;
_Static_assert(sizeof(state_header) == STATE_HEADER_BYTES, "state.bin's header is 64 KiB");

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

int checkpoint_find_latest(const char *dir, char *out, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/LATEST", dir);
    char err[PATH_MAX + 64];
    char *name = read_text(path, 4096, err, sizeof err); // LATEST names one folder
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

// A manifest's overrides steer the job as its own command line does (data.path, export_dir), so
// they are read only from a checkpoint that no other user can change: its folders and
// manifest.json this user's or root's, writable by nobody else. The manifest's "self" checksum
// proves nothing here: anyone can recompute it after editing the file.
int checkpoint_read_overrides(const char *step_dir, char out[][MT_OVERRIDE_MAX], int max, int *n,
                              char *err, size_t errlen) {
    char path[PATH_MAX], why[PATH_MAX + 128];
    *n = 0;
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    if (path_trust_check(path, 1, why, sizeof why) < 0)
        return failf(err, errlen,
                     "%s: a checkpoint another user can change could steer this job through its "
                     "settings (a checksum is no signature); copy it into a folder of your own "
                     "and resume from there",
                     why),
               -3;
    return manifest_overrides(step_dir, out, max, n, err, errlen);
}

int checkpoint_read_step(const char *step_dir, int *step, int *skipped, char *err, size_t errlen) {
    char path[PATH_MAX];
    cJSON *root = manifest_load(step_dir, path, sizeof path, err, errlen);
    if (!root) return -1;
    double s, k = 0;
    int rc = manifest_get_uint(root, "step", path, "", &s, err, errlen);
    if (rc == 0 && s > INT_MAX) {
        snprintf(err, errlen, "%s: step out of range", path);
        rc = -1;
    }
    // skipped_steps came with non-finite-norm skipping; a manifest without it skipped none
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(data, "skipped_steps"))
        rc = manifest_get_uint(data, "skipped_steps", path, "data.", &k, err, errlen);
    if (rc == 0 && k > s) {
        snprintf(err, errlen, "%s: data.skipped_steps %.0f is more than step %.0f", path, k, s);
        rc = -1;
    }
    if (rc == 0) *step = (int)s, *skipped = (int)k;
    cJSON_Delete(root);
    return rc;
}

static int check_header(const char *step_dir, const mt_job *job, const manifest_facts *mf,
                        char *err, size_t errlen) {
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
    if (mf->version >= 3 &&
        (h.step != (int64_t)mf->step || h.skipped != (int64_t)mf->skipped || h.seed != mf->seed))
        return snprintf(err, errlen,
                        "%s: holds step %lld (%lld skipped, seed %llu), the manifest says step "
                        "%.0f (%.0f skipped, seed %llu)",
                        path, (long long)h.step, (long long)h.skipped, (unsigned long long)h.seed,
                        mf->step, mf->skipped, (unsigned long long)mf->seed),
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
    manifest_facts mf;
    if (manifest_check(step_dir, job, state_bytes(job), &bl, &mf, err, errlen) != 0) return -1;
    free(bl.sums);
    return check_header(step_dir, job, &mf, err, errlen);
}

// Each member of comm reads only its share of the blocks, so the file is read once in all.
int checkpoint_verify_state(const char *step_dir, const mt_job *job, MPI_Comm comm, char *err,
                            size_t errlen) {
    block_list bl;
    manifest_facts mf;
    if (manifest_check(step_dir, job, state_bytes(job), &bl, &mf, err, errlen) != 0)
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

// The job being saved or loaded: its files are written through job->run_at (the run folder held
// open), and messages name them by the folder's own name.
static const mt_job *cur_job;
static const char *shown(const char *p) {
    return cur_job ? job_run_shown(cur_job, p) : p;
}

static void fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    SYS_CHECK(fd);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

// A new file in a folder others may write to: created, never opened through a planted link.
static void write_file_synced(const char *path, const char *text) {
    int fd = open_nofollow(path, "x");
    if (fd < 0) mt_die("%s: %s", shown(path), strerror(errno));
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n)
        mt_die("%s: write failed: %s", shown(path), strerror(errno));
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

// The leftovers of a crashed earlier save of ours, never what a link points to.
static void clear_stale(const char *path) {
    char err[PATH_MAX + 256];
    if (remove_stale_temp(path, err, sizeof err) < 0) mt_die("checkpoint: %s", shown(err));
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
        if (!writing) mt_die("%s: read failed at byte %lld: %s", shown(path), (long long)off, why);
        int full = n < 0 && (errno == ENOSPC || errno == EDQUOT);
        unlink(path), rmdir(step_dir);
        mt_die("checkpoint: %s: %s%s; the partial save %s was removed", shown(path), why,
               full ? " (the device holding the checkpoint folder is full)" : "", shown(step_dir));
    }
}

static void create_state_file(const mt_job *job, const char *tmp, int step) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", tmp);
    static state_header h;
    memset(&h, 0, sizeof h);
    h.magic = STATE_MAGIC;
    h.n_groups = job->n_groups;
    for (int g = 0; g < job->n_groups; g++) h.numel[g] = job->group_numel[g];
    h.step = step, h.skipped = job->skipped_steps, h.seed = job->cfg.seed;
    int fd = open_nofollow(path, "x");
    if (fd < 0) mt_die("%s: %s", shown(path), strerror(errno));
    move_bytes(fd, path, tmp, &h, sizeof h, 0, 1);
    SYS_CHECK(ftruncate(fd, (off_t)state_bytes(job)));
    SYS_CHECK(close(fd));
}

// The slice [lo, lo + len) of an array whose state lives on the compute rank's device (the
// groups it updates): it passes through a piece buffer, taken from the compute rank before it is
// written (a save) or sent to it once read (a resume), so that it is never whole in host memory.
static void move_piecewise(int fd, const char *path, const char *step_dir, float **piece,
                           uint64_t len, off_t off, int writing) {
    if (!*piece) *piece = job_piece_buffer();
    for (uint64_t at = 0, n; at < len; at += n) {
        n = job_piece_len(len, at);
        off_t where = off + (off_t)(at * sizeof(float));
        if (writing) job_recv_floats(*piece, n, 0);
        move_bytes(fd, path, step_dir, *piece, n * sizeof(float), where, writing);
        if (!writing) job_send_floats(*piece, n, 0);
    }
}

// An array of the NVMe tier (storage.adam): through an aligned piece, for its file is O_DIRECT.
// Pieces are 4 KiB multiples; the tier's areas are rounded up to 4 KiB, so the last piece's
// O_DIRECT length may round up too.
static void move_via_tier(int fd, const char *path, const char *step_dir, int tier_fd,
                          uint64_t tier_off, uint64_t len, off_t off, int writing) {
    size_t piece_n = (job_piece() + 1023) / 1024 * 1024;
    void *piece;
    if (posix_memalign(&piece, 4096, piece_n * sizeof(float))) mt_die("out of memory");
    for (uint64_t at = 0, n; at < len; at += n) {
        n = len - at < piece_n ? len - at : piece_n;
        size_t bytes = n * sizeof(float), direct = (bytes + 4095) & ~(size_t)4095;
        off_t where = off + (off_t)(at * sizeof(float)), tier_at = (off_t)(tier_off + at * 4);
        if (!writing) move_bytes(fd, path, step_dir, piece, bytes, where, 0);
        ssize_t got = writing ? pread(tier_fd, piece, direct, tier_at)
                              : pwrite(tier_fd, piece, direct, tier_at);
        if (got != (ssize_t)direct)
            mt_die("storage.dir: %s the Adam moments for %s: %s", writing ? "reading" : "writing",
                   path, got < 0 ? strerror(errno) : "short transfer");
        if (writing) move_bytes(fd, path, step_dir, piece, bytes, where, 1);
    }
    free(piece);
}

// This rank's slices of state.bin: its shard's master (saved by the leader node: every node
// holds the same) and the part of its shard whose moments this node keeps (job_moment_part).
static void io_slices(mt_job *job, const char *step_dir, group_state *state, int writing) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", step_dir);
    int fd = open(path, (writing ? O_WRONLY : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) mt_die("%s: %s", shown(path), strerror(errno));
    int k = job_shard_of_rank(job->rank);
    const shard_layout *lay = &job->layouts[k];
    float *piece = NULL;
    for (int g = 0; g < job->n_groups; g++) {
        uint64_t part, n;
        job_moment_part(job, g, lay->len[g], job->node, &part, &n);
        float *arrays[3] = {state[g].master, state[g].m, state[g].v};
        for (int w = 0; w < 3; w++) {
            // The leader node saves what all nodes hold whole: the master, and the groups the
            // compute rank updates (only the leader's compute rank sends them back to save).
            if (writing && !job_writes(job) && (w == 0 || g < job->device_groups)) continue;
            uint64_t lo = lay->lo[g] + (w ? part : 0), len = w ? n : lay->len[g];
            off_t off = (off_t)(state_offset(job, g, w) + lo * sizeof(float));
            if (arrays[w])
                move_bytes(fd, path, step_dir, arrays[w], len * sizeof(float), off, writing);
            else if (state[g].tier_fd > 0 && (w || state[g].tier_master)) // the NVMe tier
                move_via_tier(fd, path, step_dir, state[g].tier_fd,
                              w == 0   ? state[g].tier_master
                              : w == 1 ? state[g].tier_m
                                       : state[g].tier_v,
                              len, off, writing);
            else
                move_piecewise(fd, path, step_dir, &piece, len, off, writing);
        }
    }
    free(piece);
    if (writing && fsync(fd) != 0) {
        int full = errno == ENOSPC || errno == EDQUOT;
        const char *why = strerror(errno);
        unlink(path), rmdir(step_dir);
        mt_die("checkpoint: %s: fsync: %s%s; the partial save %s was removed", shown(path), why,
               full ? " (the device holding the checkpoint folder is full)" : "", shown(step_dir));
    }
    SYS_CHECK(close(fd));
}

static void publish(const mt_job *job, const char *tmp, const char *name) {
    const char *dir = job->run_at;
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

// The optimizer ranks that write a save: the leader node's, or every node's when each keeps a
// part of the moments.
static MPI_Comm savers(const mt_job *job) {
    return job_moments_split(job) ? job->opt_world : job->opt_comm;
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
    hash_my_blocks(path, bl->block, bl->file_bytes, savers(job), mine);
    MPI_CHECK(MPI_Reduce(mine, bl->sums, (int)bl->n, MPI_UINT64_T, MPI_BOR, 0, savers(job)));
    free(mine);
}

// Tests (MT_FAULT_SLOW_SAVE_MS): the leader pauses this long once the save's folder is made, for
// a signal to land in the middle of a save. Signals do not cut the pause short.
static void fault_slow_save(void) {
    const char *ms = getenv("MT_FAULT_SLOW_SAVE_MS");
    int n = ms ? atoi(ms) : 0;
    struct timespec left = {n / 1000, (long)(n % 1000) * 1000000L};
    while (n > 0 && nanosleep(&left, &left) != 0)
        if (errno != EINTR) SYS_CHECK(-1);
}

void checkpoint_save(mt_job *job, int step, group_state *state) {
    char tmp[PATH_MAX], name[64];
    snprintf(name, sizeof name, "step_%06d", step);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", job->run_at, name);
    cur_job = job;
    int leader = job_writes(job) && job->rank == 1;
    if (leader) {
        clear_stale(tmp);
        if (mkdir(tmp, 0755) != 0) mt_die("checkpoint: mkdir %s: %s", shown(tmp), strerror(errno));
        create_state_file(job, tmp, step);
        fault_slow_save();
    }
    MPI_CHECK(MPI_Barrier(savers(job)));
    io_slices(job, tmp, state, 1);
    MPI_CHECK(MPI_Barrier(savers(job)));
    block_list bl;
    checksum_state(job, tmp, &bl);
    if (leader) {
        char path[PATH_MAX], *text = manifest_text(job, step, &bl);
        snprintf(path, sizeof path, "%s/manifest.json", tmp);
        write_file_synced(path, text);
        free(text);
        publish(job, tmp, name);
        checkpoint_prune(job->run_at, job->cfg.checkpoint_keep, name);
    }
    free(bl.sums);
    MPI_CHECK(MPI_Barrier(savers(job)));
}

void checkpoint_load(mt_job *job, group_state *state) {
    io_slices(job, job->resume_path, state, 0);
}

// The nodes hold the same state: the leader saves and exports it (with the moments split across
// nodes, every node saves its part).
int checkpoint_due(const mt_job *job, int version) {
    int every = job->cfg.checkpoint_interval;
    if (job->stopped_bad == 2) return 0; // a ring step half applied: nothing of it is kept
    return (job_writes(job) || job_moments_split(job)) && every > 0 &&
           (version == job->end_step || version % every == 0);
}

int checkpoint_export_due(const mt_job *job) {
    return job->stopped_bad != 2 && job_writes(job) && job->cfg.export_dir[0] &&
           job->end_step == job->cfg.steps;
}

int checkpoint_saves_device_state(const mt_job *job, int version) { // the leader saves it
    return job_writes(job) && checkpoint_due(job, version);
}
