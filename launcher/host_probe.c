// The machine as the plan sees it: memory (/proc/meminfo), /dev/shm, the lock limit, whether
// the VM's memory may grow, and storage.dir: its free space and the rate of the disk under it,
// measured once per job with a short O_DIRECT write and read (or given with --disk-bw), so that
// the step estimate and the break-even tokens per step are the disk's and not an assumption.
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

#define PROBE_BYTES ((size_t)256 << 20)
#define PROBE_BLOCK ((size_t)16 << 20) // dd's block in bench/RESULTS.md's figures
#define PROBE_DEPTH 8                  // requests in flight, as the tier's ranks keep them

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// PROBE_BYTES through fd in PROBE_BLOCK requests, PROBE_DEPTH in flight; 0 on any failure.
static int probe_pass(struct io_uring *ring, int fd, char *buf, int write) {
    size_t next = 0, done = 0;
    int in_flight = 0;
    while (done < PROBE_BYTES) {
        while (in_flight < PROBE_DEPTH && next < PROBE_BYTES) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe) break;
            char *at = buf + next % ((size_t)PROBE_DEPTH * PROBE_BLOCK);
            if (write)
                io_uring_prep_write(sqe, fd, at, PROBE_BLOCK, (off_t)next);
            else
                io_uring_prep_read(sqe, fd, at, PROBE_BLOCK, (off_t)next);
            next += PROBE_BLOCK, in_flight++;
        }
        if (io_uring_submit(ring) < 0) return 0;
        struct io_uring_cqe *cqe;
        int rc;
        while ((rc = io_uring_wait_cqe(ring, &cqe)) == -EINTR) continue;
        if (rc < 0) return 0;
        int ok = cqe->res == (int)PROBE_BLOCK;
        io_uring_cqe_seen(ring, cqe);
        if (!ok) return 0;
        done += PROBE_BLOCK, in_flight--;
    }
    return 1;
}

// Writes PROBE_BYTES and reads them back, O_DIRECT, through a file of our own (O_EXCL, unlinked
// at once), with several requests in flight: the tier's ranks keep dozens, and a disk that
// serves one request at a time at 1.3 GB/s served the tier's four ranks at 2 GB/s or more
// (bench/RESULTS.md). The rate of the two passes together, or 0 when the folder does not take
// O_DIRECT or the file (the ranks then say why in one line).
static double probe_rate(const char *dir) {
    char path[MT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.mtrun-disk-probe-%d", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return 0;
    unlink(path);
    void *buf = NULL;
    double rate = 0;
    struct io_uring ring;
    if (io_uring_queue_init(PROBE_DEPTH, &ring, 0) < 0) {
        close(fd);
        return 0;
    }
    // Allocated first, as the tier's files are (storage.c): writes past a file's end serialize
    // on some filesystems, which the tier's writes never do.
    int room = posix_fallocate(fd, 0, (off_t)PROBE_BYTES) == 0 || ftruncate(fd, PROBE_BYTES) == 0;
    if (room && posix_memalign(&buf, 4096, (size_t)PROBE_DEPTH * PROBE_BLOCK) == 0) {
        memset(buf, 0x5a, (size_t)PROBE_DEPTH * PROBE_BLOCK);
        double t0 = seconds();
        int ok =
            probe_pass(&ring, fd, buf, 1) && fdatasync(fd) == 0 && probe_pass(&ring, fd, buf, 0);
        if (ok) rate = 2.0 * PROBE_BYTES / (seconds() - t0);
    }
    io_uring_queue_exit(&ring);
    free(buf);
    close(fd);
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
    if (statvfs(c->storage_dir, &st) == 0) {
        h->disk_free = (uint64_t)st.f_bavail * st.f_frsize;
        h->disk_known = 1;
    }
    if (env_bytes("MT_PLAN_DISK_LIMIT", &h->disk_free)) // for tests: pretend this much is free
        h->disk_known = h->disk_forced = 1;
    if (disk_bw > 0) {
        h->disk_bw = disk_bw, h->disk_bw_source = "--disk-bw";
        return;
    }
    h->disk_bw = probe_rate(c->storage_dir);
    h->disk_bw_source = h->disk_bw > 0
                            ? "measured: 256 MiB written and read, O_DIRECT, 8 requests in flight"
                            : NULL;
}
