// storage.dir as the plan sees it: its free space, and the rate of the disk under it, measured
// once per job with a short O_DIRECT write and read (or given with --disk-bw), so that the step
// estimate and the break-even tokens per step are the disk's and not an assumption.
#include "launcher/launcher.h"
#include "runtime/base/base.h"
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define PROBE_BYTES ((size_t)256 << 20)
#define PROBE_BLOCK ((size_t)16 << 20) // dd's block in bench/RESULTS.md's figures

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// Writes PROBE_BYTES in PROBE_BLOCK requests and reads them back, O_DIRECT, through a file of
// our own (O_EXCL, unlinked at once); the rate of the two together, or 0 when the folder
// does not take O_DIRECT or the file (the ranks then say why in one line).
static double probe_rate(const char *dir) {
    char path[MT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.mtrun-disk-probe-%d", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return 0;
    unlink(path);
    void *buf = NULL;
    double rate = 0;
    if (posix_memalign(&buf, 4096, PROBE_BLOCK) == 0) {
        memset(buf, 0x5a, PROBE_BLOCK);
        double t0 = seconds();
        int ok = 1;
        for (size_t at = 0; ok && at < PROBE_BYTES; at += PROBE_BLOCK)
            ok = pwrite(fd, buf, PROBE_BLOCK, (off_t)at) == (ssize_t)PROBE_BLOCK;
        ok = ok && fdatasync(fd) == 0;
        for (size_t at = 0; ok && at < PROBE_BYTES; at += PROBE_BLOCK)
            ok = pread(fd, buf, PROBE_BLOCK, (off_t)at) == (ssize_t)PROBE_BLOCK;
        if (ok) rate = 2.0 * PROBE_BYTES / (seconds() - t0);
    }
    free(buf);
    close(fd);
    return rate;
}

void host_probe_disk(host_probe *h, const mt_config *c, double disk_bw) {
    if (!c->storage_grads && !c->storage_adam) return;
    struct statvfs st;
    if (statvfs(c->storage_dir, &st) == 0) {
        h->disk_free = (uint64_t)st.f_bavail * st.f_frsize;
        h->disk_known = 1;
    }
    const char *limit = getenv("MT_PLAN_DISK_LIMIT"); // for tests: pretend this much is free
    if (limit && *limit) {
        h->disk_free = strtoull(limit, NULL, 10);
        h->disk_known = h->disk_forced = 1;
    }
    if (disk_bw > 0) {
        h->disk_bw = disk_bw, h->disk_bw_source = "--disk-bw";
        return;
    }
    h->disk_bw = probe_rate(c->storage_dir);
    h->disk_bw_source = h->disk_bw > 0 ? "measured: 256 MiB written and read, O_DIRECT" : NULL;
}
