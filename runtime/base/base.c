#include "runtime/base/base.h"
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void make_one(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) mt_die("mkdir %s: %s", path, strerror(errno));
}

void make_dirs(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            make_one(path);
            *p = '/';
        }
    make_one(path);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
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
