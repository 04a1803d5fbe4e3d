#include "shm/shm.h"
#include "shm/syscheck.h"
#include <fcntl.h>
#include <numa.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// The job id is public (it names the job's folder in /dev/shm, and mpirun's arguments), so the
// region's name also has a random part of its own: no other user can create it first.
void shm_region_name(char *out, size_t cap, const char *job, int shard) {
    char secret[33];
    mt_random_hex(secret, 16);
    snprintf(out, cap, "/mtc-%s-s%d-%s", job, shard, secret);
}

static void *map_shared(int fd, size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) mt_die("mmap of %zu bytes of shared memory: %s", size, strerror(errno));
    return p;
}

// The pages are reserved only after the NUMA policy is set on the mapping: tmpfs then
// allocates them on that node. Reserving them now (rather than on first touch) makes a
// too-small /dev/shm fail here with a clear message instead of a SIGBUS mid-step.
void shm_region_create(shm_region *r, const char *name, size_t size, int numa_node) {
    snprintf(r->name, sizeof r->name, "%s", name);
    r->size = size;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        char path[128];
        snprintf(path, sizeof path, "/dev/shm%s", name);
        mt_refuse_taken("", path);
    }
    if (fd < 0) mt_die("shm_open(%s): %s", name, strerror(errno));
    SYS_CHECK(ftruncate(fd, (off_t)size));
    r->base = map_shared(fd, size);
    if (numa_node >= 0 && numa_available() >= 0) numa_tonode_memory(r->base, size, numa_node);
    int rc = posix_fallocate(fd, 0, (off_t)size);
    if (rc != 0) {
        shm_unlink(name);
        mt_die("cannot reserve %zu MiB in /dev/shm for %s: %s (check df -h /dev/shm)", size >> 20,
               name, strerror(rc));
    }
    SYS_CHECK(close(fd));
}

void shm_region_open(shm_region *r, const char *name, size_t size) {
    snprintf(r->name, sizeof r->name, "%s", name);
    r->size = size;
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) mt_die("shm_open(%s): %s", name, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(fd, &st));
    if ((size_t)st.st_size < size)
        mt_die("shared region %s holds %lld bytes, expected %zu", name, (long long)st.st_size,
               size);
    r->base = map_shared(fd, size);
    SYS_CHECK(close(fd));
}

void shm_region_unlink(shm_region *r) {
    if (shm_unlink(r->name) != 0 && errno != ENOENT)
        mt_die("shm_unlink(%s): %s", r->name, strerror(errno));
}

void shm_region_close(shm_region *r) {
    if (r->base) SYS_CHECK(munmap(r->base, r->size));
    r->base = NULL;
}
