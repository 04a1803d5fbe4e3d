#include "runtime/base/base.h"
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int make_one(const char *path, char *err, size_t n) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return failf(err, n, "mkdir %s: %s", path, strerror(errno));
    return 0;
}

int make_dirs_or_say(const char *dir, char *err, size_t n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (make_one(path, err, n) < 0) return -1;
            *p = '/';
        }
    return make_one(path, err, n);
}

void make_dirs(const char *dir) {
    char err[PATH_MAX + 128];
    if (make_dirs_or_say(dir, err, sizeof err) < 0) mt_die("%s", err);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int proc_stat(int pid, char *state, int *ppid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')'); // the name before it may hold spaces and parentheses
    return end && sscanf(end + 1, " %c %d", state, ppid) == 2 ? 0 : -1;
}

int failf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

char *read_text(const char *path, size_t max, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return failf(err, errlen, "%s: cannot open: %s", path, strerror(errno)), NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0)
        failf(err, errlen, "%s: %s", path, strerror(errno));
    else if ((uint64_t)st.st_size > max)
        failf(err, errlen, "%s: too large for a JSON file", path);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        mt_die("out of memory");
    if (buf && pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
        failf(err, errlen, "%s: short read", path);
        free(buf);
        buf = NULL;
    }
    if (buf) buf[st.st_size] = 0;
    SYS_CHECK(close(fd));
    return buf;
}

int open_nofollow(const char *path, const char *how) {
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
    flags |= how[0] == 'a' ? O_APPEND : how[0] == 'x' ? O_EXCL : O_TRUNC;
    return open(path, flags, 0644);
}

FILE *fopen_nofollow(const char *path, const char *how) {
    int fd = open_nofollow(path, how);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, how[0] == 'a' ? "a" : "w");
    if (!f) close(fd);
    return f;
}

// The plain files of the folder open as dirfd; -1 (errno set) at anything else in it.
static int remove_plain_files(int dirfd) {
    DIR *d = fdopendir(dirfd);
    if (!d) return -1;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            rc = -1, errno = ENOTEMPTY;
        else
            rc = unlinkat(dirfd, e->d_name, 0);
    }
    closedir(d); // closes dirfd
    return rc;
}

int remove_stale_temp_at(int at, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (fstatat(at, path, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : failf(err, errlen, "%s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode))
        return unlinkat(at, path, 0) == 0 ? 0 : failf(err, errlen, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return failf(err, errlen,
                     "%s is a %s, not a temporary folder of ours: not following or removing it "
                     "(remove it yourself if it is safe to)",
                     path, S_ISLNK(st.st_mode) ? "symbolic link" : "special file");
    int fd = openat(at, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || remove_plain_files(fd) != 0 || unlinkat(at, path, AT_REMOVEDIR) != 0)
        return failf(err, errlen,
                     "%s: a stale temporary folder that cannot be cleared (%s): "
                     "remove it yourself if it is safe to",
                     path, strerror(errno));
    return 0;
}

int remove_stale_temp(const char *path, char *err, size_t errlen) {
    return remove_stale_temp_at(AT_FDCWD, path, err, errlen);
}
