// The machine as the plan sees it: memory (/proc/meminfo), /dev/shm, the lock limit, whether
// the VM's memory may grow, and storage.dir: its free space and the rate of the disk under it,
// measured once per job with a short O_DIRECT write and read bounded by the free space (or given
// with --disk-bw), so that the step estimate and the break-even tokens per step are the disk's
// and not an assumption; when it cannot be measured, the plan says why.
// Tests pretend other sizes with MT_PLAN_MEM_LIMIT, MT_PLAN_SHM_LIMIT and MT_PLAN_DISK_LIMIT.
#include "launcher/launcher.h"
#include "runtime/base/base.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

// A test's override: a plain number of bytes. Anything else is refused like a bad argument: a
// limit silently ignored would plan against the real machine.
static int env_bytes(const char *name, uint64_t *v) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || !isdigit((unsigned char)*s) || errno) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s=%s: not a number of bytes (a plain integer)", name, s);
        mt_put_line(stderr, "mtrun: ", msg);
        exit(2);
    }
    *v = x;
    return 1;
}

static void read_meminfo(host_probe *h) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) h->mem_total = kb * 1024;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) h->mem_available = kb * 1024;
    }
    if (f) fclose(f);
    h->mem_known = h->mem_available > 0;
}

// Whether a virtio driver has a device bound: a balloon or virtio-mem device lets a VM's
// memory grow past what /proc/meminfo shows at the start (some GPU VMs start with a fraction).
static int virtio_bound(const char *driver) {
    char path[128];
    snprintf(path, sizeof path, "/sys/bus/virtio/drivers/%s", driver);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int bound = 0;
    while ((e = readdir(d)) && !bound) bound = strncmp(e->d_name, "virtio", 6) == 0;
    closedir(d);
    return bound;
}

void host_probe_read(host_probe *h) {
    memset(h, 0, sizeof *h);
    read_meminfo(h);
    // For tests: pretend this much memory is available (or free in /dev/shm).
    if (env_bytes("MT_PLAN_MEM_LIMIT", &h->mem_available)) h->mem_forced = h->mem_known = 1;
    struct statvfs st;
    if (statvfs("/dev/shm", &st) == 0) {
        h->shm_free = (uint64_t)st.f_bavail * st.f_frsize;
        h->shm_size = (uint64_t)st.f_blocks * st.f_frsize;
        h->shm_known = 1;
    }
    if (env_bytes("MT_PLAN_SHM_LIMIT", &h->shm_free)) { // an empty /dev/shm of that size
        h->shm_size = h->shm_free;
        h->shm_forced = h->shm_known = 1;
    }
    struct rlimit rl;
    h->memlock_unlimited = 1;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        h->memlock_unlimited = 0;
        h->memlock = rl.rlim_cur;
    }
    h->root = geteuid() == 0; // CAP_IPC_LOCK: the lock limit does not apply
    h->elastic = !h->mem_forced && (virtio_bound("virtio_balloon") || virtio_bound("virtio_mem"));
}

int plan_backend_cuda(const mt_config *c) {
    if (c->backend == BACKEND_CUDA) return 1;
#ifdef MT_HAVE_CUDA
    // The driver's device files say whether "auto" will find a GPU, without a CUDA call.
    if (c->backend == BACKEND_AUTO)
        return access("/dev/nvidia0", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0;
#endif
    return 0;
}

// Cores the compute rank runs on: its NUMA node's share when mpirun binds it, else all.
int plan_compute_cores(const placement *pl) {
    if (pl->oversubscribe || pl->numa_nodes < 2) return pl->cores;
    int per_node = pl->cores / pl->numa_nodes;
    return per_node > 0 ? per_node : 1;
}

// ---- storage.dir ----

// The probe writes at most an eighth of the free space and at most PROBE_MAX_BYTES, in whole
// blocks: on a shared disk another job's save or start must never meet a disk that a plan filled.
// Under PROBE_MIN_BYTES it does not run at all: a few requests time their latency, not the rate.
#define PROBE_MAX_BYTES ((size_t)256 << 20)
#define PROBE_MIN_BYTES ((size_t)32 << 20)
#define PROBE_FREE_SHARE 8
#define PROBE_BLOCK ((size_t)16 << 20) // dd's block in bench/RESULTS.md's figures
#define PROBE_DEPTH 8                  // requests in flight, as the tier's ranks keep them

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// bytes through fd in PROBE_BLOCK requests, PROBE_DEPTH in flight, cycling over buf (buf_bytes,
// a multiple of PROBE_BLOCK). 0, or a negative errno (-EIO for a short transfer).
static int probe_pass(struct io_uring *ring, int fd, char *buf, size_t buf_bytes, size_t bytes,
                      int write) {
    size_t next = 0, done = 0;
    int in_flight = 0;
    while (done < bytes) {
        while (in_flight < PROBE_DEPTH && next < bytes) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe) break;
            char *at = buf + next % buf_bytes;
            if (write)
                io_uring_prep_write(sqe, fd, at, PROBE_BLOCK, (off_t)next);
            else
                io_uring_prep_read(sqe, fd, at, PROBE_BLOCK, (off_t)next);
            next += PROBE_BLOCK, in_flight++;
        }
        int rc = io_uring_submit(ring);
        if (rc < 0) return rc;
        struct io_uring_cqe *cqe;
        while ((rc = io_uring_wait_cqe(ring, &cqe)) == -EINTR) continue;
        if (rc < 0) return rc;
        int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        if (res != (int)PROBE_BLOCK) return res < 0 ? res : -EIO;
        done += PROBE_BLOCK, in_flight--;
    }
    return 0;
}

// How many bytes the probe may write on a disk with free_bytes free (see PROBE_FREE_SHARE), or
// 0 with the reason in why.
static size_t probe_bytes(uint64_t free_bytes, char *why, size_t n) {
    uint64_t share = free_bytes / PROBE_FREE_SHARE;
    size_t bytes = share < PROBE_MAX_BYTES ? (size_t)share : PROBE_MAX_BYTES;
    bytes -= bytes % PROBE_BLOCK;
    if (bytes >= PROBE_MIN_BYTES) return bytes;
    char text[24];
    snprintf(why, n,
             "%s free in storage.dir; the probe writes at most 1/%d of it and needs %zu MiB",
             plan_bytes_text(text, sizeof text, (double)free_bytes), PROBE_FREE_SHARE,
             PROBE_MIN_BYTES >> 20);
    return 0;
}

// A file of the probe's own in dir that no other process can name, so none can plant a link
// or a file in its place: O_TMPFILE, or where the filesystem has none, a random name (mkostemp:
// O_EXCL, so never a link's target) unlinked at once. O_DIRECT is set afterwards, so that a
// filesystem without it is told apart from one without O_TMPFILE. -1 with the reason in why.
static int probe_file(const char *dir, char *why, size_t n) {
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) { // EISDIR: a kernel without it
        char path[MT_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/.mtrun-disk-probe-XXXXXX", dir);
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0 && unlink(path) != 0) {
            snprintf(why, n, "cannot remove its file %s: %s", mt_shown(path), strerror(errno));
            close(fd);
            return -1;
        }
    }
    if (fd < 0) {
        snprintf(why, n, "cannot create a file in storage.dir: %s", strerror(errno));
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
        snprintf(why, n, "storage.dir's filesystem does not take O_DIRECT: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

// Writes bytes into fd and reads them back, O_DIRECT, several requests in flight: the tier's
// ranks keep dozens, and a disk that serves one request at a time at 1.3 GB/s served the tier's
// four ranks at 2 GB/s or more (bench/RESULTS.md). The file is allocated first, as the tier's
// files are (storage.c): writes past a file's end serialize on some filesystems, which the
// tier's writes never do. Nothing is written unless that allocation succeeds: fallocate(2), not
// posix_fallocate, which on a filesystem without it falls back to writing. The rate of the two
// passes together, or 0 with the reason in why.
static double probe_measure(int fd, size_t bytes, char *why, size_t n) {
    if (fallocate(fd, 0, 0, (off_t)bytes) != 0) {
        snprintf(why, n, "allocating %zu MiB in storage.dir: %s", bytes >> 20, strerror(errno));
        return 0;
    }
    int rc;
    struct io_uring ring;
    if ((rc = io_uring_queue_init(PROBE_DEPTH, &ring, 0)) < 0) {
        snprintf(why, n, "io_uring: %s", strerror(-rc));
        return 0;
    }
    size_t buf_bytes =
        (size_t)PROBE_DEPTH * PROBE_BLOCK < bytes ? PROBE_DEPTH * PROBE_BLOCK : bytes;
    void *buf = NULL;
    double rate = 0;
    if (posix_memalign(&buf, 4096, buf_bytes) != 0) {
        snprintf(why, n, "no memory for its %zu MiB buffer", buf_bytes >> 20);
    } else {
        memset(buf, 0x5a, buf_bytes);
        double t0 = seconds();
        rc = probe_pass(&ring, fd, buf, buf_bytes, bytes, 1);
        if (rc == 0 && fdatasync(fd) != 0) rc = -errno;
        if (rc == 0) rc = probe_pass(&ring, fd, buf, buf_bytes, bytes, 0);
        if (rc == 0)
            rate = 2.0 * (double)bytes / (seconds() - t0);
        else
            snprintf(why, n, "a write or read in storage.dir failed: %s", strerror(-rc));
    }
    io_uring_queue_exit(&ring);
    free(buf);
    return rate;
}

// storage.dir's rate by the probe, with how it was measured in h->disk_bw_source, or 0 with the
// reason in h->disk_bw_unmeasured (the ranks then say in one line what fails there, if anything).
static double probe_rate(host_probe *h, const char *dir, uint64_t free_bytes) {
    char *why = h->disk_bw_unmeasured;
    size_t n = sizeof h->disk_bw_unmeasured, bytes = probe_bytes(free_bytes, why, n);
    int fd = bytes ? probe_file(dir, why, n) : -1;
    if (fd < 0) return 0;
    double rate = probe_measure(fd, bytes, why, n);
    close(fd);
    if (rate > 0)
        snprintf(h->disk_bw_source, sizeof h->disk_bw_source,
                 "measured: %zu MiB written and read, O_DIRECT, %d requests in flight", bytes >> 20,
                 PROBE_DEPTH);
    return rate;
}

// The kind of a pseudo-filesystem (the kernel's view of processes, devices, cgroups...) that
// path is on, or NULL for a real one. Its "free space" is 0 or made up and its files cannot be
// created, so storage.dir there is refused outright, --force or not.
static const char *pseudo_fs(const char *path) {
    static const struct {
        unsigned long magic;
        const char *name;
    } kinds[] = {{PROC_SUPER_MAGIC, "proc"},
                 {SYSFS_MAGIC, "sysfs"},
                 {DEVPTS_SUPER_MAGIC, "devpts"},
                 {CGROUP_SUPER_MAGIC, "cgroup"},
                 {CGROUP2_SUPER_MAGIC, "cgroup2"},
                 {DEBUGFS_MAGIC, "debugfs"},
                 {TRACEFS_MAGIC, "tracefs"},
                 {SECURITYFS_MAGIC, "securityfs"},
                 {BPF_FS_MAGIC, "bpf"},
                 {PSTOREFS_MAGIC, "pstore"},
                 {EFIVARFS_MAGIC, "efivarfs"},
                 {NSFS_MAGIC, "nsfs"},
                 {BINFMTFS_MAGIC, "binfmt_misc"},
                 {SELINUX_MAGIC, "selinuxfs"},
                 {0x62656570, "configfs"},
                 {0x65735543, "fusectl"}};
    struct statfs st;
    if (statfs(path, &st) != 0) return NULL; // a missing folder: the ranks say so
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if ((unsigned long)st.f_type == kinds[i].magic) return kinds[i].name;
    return NULL;
}

void host_probe_disk(host_probe *h, const mt_config *c, double disk_bw) {
    if (!c->storage_grads && !c->storage_adam) return;
    const char *pseudo = pseudo_fs(c->storage_dir);
    if (pseudo) {
        char msg[MT_PATH_MAX + 160];
        snprintf(msg, sizeof msg,
                 "storage.dir %s: a %s pseudo-filesystem, not a disk: give a folder on a local "
                 "drive",
                 mt_shown(c->storage_dir), pseudo);
        mt_put_line(stderr, "mtrun: ", msg);
        exit(2);
    }
    struct statvfs st;
    int room_known = statvfs(c->storage_dir, &st) == 0; // a missing folder: the ranks say so
    int room_errno = errno;
    uint64_t free_bytes = room_known ? (uint64_t)st.f_bavail * st.f_frsize : 0;
    h->disk_free = free_bytes;
    h->disk_known = room_known;
    if (env_bytes("MT_PLAN_DISK_LIMIT", &h->disk_free)) // for tests: pretend this much is free
        h->disk_known = h->disk_forced = 1;
    if (disk_bw > 0) {
        h->disk_bw = disk_bw;
        snprintf(h->disk_bw_source, sizeof h->disk_bw_source, "--disk-bw");
    } else if (!room_known) {
        snprintf(h->disk_bw_unmeasured, sizeof h->disk_bw_unmeasured, "storage.dir: %s",
                 strerror(room_errno));
    } else { // the probe is bounded by the real disk's room, never by MT_PLAN_DISK_LIMIT's
        h->disk_bw = probe_rate(h, c->storage_dir, free_bytes);
    }
}
