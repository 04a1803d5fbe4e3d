#include "runtime/checkpoint.h"
#include "runtime/check.h"
#include "runtime/fsutil.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_MAGIC 0x3130545043544d4dull // "MMTCPT01"
#define STATE_HEADER_BYTES 65536

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

static int read_small_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return 0;
}

int checkpoint_find_latest(const char *dir, char *out, size_t cap) {
    char path[PATH_MAX], name[256];
    snprintf(path, sizeof path, "%s/LATEST", dir);
    if (read_small_file(path, name, sizeof name) != 0) return -1;
    name[strcspn(name, "\n")] = 0;
    snprintf(out, cap, "%s/%s", dir, name);
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

int checkpoint_read_step(const char *step_dir, int *step, char *err, size_t errlen) {
    char path[PATH_MAX], text[4096];
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    if (read_small_file(path, text, sizeof text) != 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    cJSON *root = cJSON_Parse(text);
    const cJSON *s = root ? cJSON_GetObjectItemCaseSensitive(root, "step") : NULL;
    int ok = cJSON_IsNumber(s) && s->valuedouble >= 0;
    if (ok) *step = (int)s->valuedouble;
    cJSON_Delete(root);
    if (!ok) snprintf(err, errlen, "%s: not a checkpoint manifest (no \"step\")", path);
    return ok ? 0 : -1;
}

int checkpoint_check_state(const char *step_dir, const mt_job *job, char *err, size_t errlen) {
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
    uint64_t want = state_offset(job, job->n_groups - 1, 3);
    if (rc != 0 || (uint64_t)st.st_size != want)
        return snprintf(err, errlen, "%s: truncated or oversized (%lld bytes, expected %llu)", path,
                        (long long)st.st_size, (unsigned long long)want),
               -1;
    return 0;
}

static void fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    SYS_CHECK(fd);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

static void write_file_synced(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) mt_die("%s: write failed: %s", path, strerror(errno));
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

static void remove_tree(const char *dir) { // only ever our own hidden temporary folder
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            SYS_CHECK(unlink(path));
        }
    closedir(d);
    SYS_CHECK(rmdir(dir));
}

static void create_state_file(const mt_job *job, const char *tmp) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", tmp);
    static state_header h;
    memset(&h, 0, sizeof h);
    h.magic = STATE_MAGIC;
    h.n_groups = job->n_groups;
    for (int g = 0; g < job->n_groups; g++) h.numel[g] = job->group_numel[g];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) mt_die("%s: %s", path, strerror(errno));
    SYS_CHECK(ftruncate(fd, (off_t)state_offset(job, job->n_groups - 1, 3)));
    SYS_CHECK(close(fd));
}

static void io_slices(mt_job *job, const char *step_dir, group_state *state, int writing) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", step_dir);
    int fd = open(path, writing ? O_WRONLY : O_RDONLY);
    if (fd < 0) mt_die("%s: %s", path, strerror(errno));
    int k = job_shard_of_rank(job->rank);
    const shard_layout *lay = &job->layouts[k];
    for (int g = 0; g < job->n_groups; g++) {
        float *arrays[3] = {state[g].master, state[g].m, state[g].v};
        size_t bytes = lay->len[g] * sizeof(float);
        for (int w = 0; w < 3; w++) {
            off_t off = (off_t)(state_offset(job, g, w) + lay->lo[g] * sizeof(float));
            ssize_t n =
                writing ? pwrite(fd, arrays[w], bytes, off) : pread(fd, arrays[w], bytes, off);
            if (n != (ssize_t)bytes)
                mt_die("%s: short %s at %lld", path, writing ? "write" : "read", (long long)off);
        }
    }
    if (writing) SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

static void write_manifest(const mt_job *job, const char *tmp, int step) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "megatrain-c checkpoint");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddNumberToObject(root, "groups", job->n_groups);
    double params = 0;
    for (int g = 0; g < job->n_groups; g++) params += (double)job->group_numel[g];
    cJSON_AddNumberToObject(root, "params", params);
    cJSON_AddStringToObject(root, "state", "state.bin");
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
    char text[300];
    snprintf(text, sizeof text, "%s\n", name);
    write_file_synced(latest_tmp, text);
    SYS_CHECK(rename(latest_tmp, latest));
    fsync_path(dir);
}

void checkpoint_save(mt_job *job, int step, group_state *state) {
    char tmp[PATH_MAX], name[64];
    snprintf(name, sizeof name, "step_%06d", step);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", job->cfg.checkpoint_dir, name);
    int leader = job->rank == 1;
    if (leader) {
        make_dirs(job->cfg.checkpoint_dir);
        remove_tree(tmp); // a crashed earlier save of ours
        SYS_CHECK(mkdir(tmp, 0755));
        create_state_file(job, tmp);
    }
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    io_slices(job, tmp, state, 1);
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    if (leader) {
        write_manifest(job, tmp, step);
        publish(job, tmp, name);
    }
    MPI_CHECK(MPI_Barrier(job->opt_comm));
}

void checkpoint_load(mt_job *job, group_state *state) {
    io_slices(job, job->resume_path, state, 0);
}
