#include "runtime/fsutil.h"
#include "shm/syscheck.h"
#include <limits.h>
#include <sys/stat.h>
#include <time.h>

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
