// Two runs onto one -o PREFIX would each find no earlier shards when they start and rename
// their sets over each other's when they end, both exiting 0, with one run's shards (or a mix)
// under the glob. A run therefore holds PREFIX.lock, a file beside its shards, with flock() from
// the check for an earlier set to the rename of its own, and a second run is refused.
// The file is opened O_NOFOLLOW (a link planted there is refused, never followed) and
// O_NONBLOCK (a FIFO planted there cannot hang the run), and removed when the run ends. A run
// that finds the file removed or replaced between its open and its flock (by the run that held
// it, ending) takes the new one, so two runs never hold two different files of one name.
#include "tools/tokenize/out_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

// PREFIX's folder exists and is one; else -1 with the reason, naming the user's path.
static int check_folder(const char *prefix, char *err, size_t n) {
    char copy[4200];
    snprintf(copy, sizeof copy, "%s", prefix);
    const char *dir = dirname(copy);
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, n, "%s: its folder %s: %s", prefix, dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s: %s is not a folder", prefix, dir);
        return -1;
    }
    return 0;
}

// The lock file opened, or -1 with the reason.
static int open_lock(const out_lock *l, const char *prefix, char *err, size_t n) {
    int fd = open(l->path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) return fd;
    if (fd >= 0 || errno == ELOOP)
        snprintf(err, n, "%s: %s is a link or not a plain file, not mt-tokenize's lock: remove it",
                 prefix, l->path);
    else
        snprintf(err, n, "%s: cannot create its lock file %s: %s", prefix, l->path,
                 strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
}

// Whether fd is still the file at path (the run that held it may have removed it since).
static int still_there(int fd, const char *path) {
    struct stat held, now;
    return fstat(fd, &held) == 0 && lstat(path, &now) == 0 && held.st_dev == now.st_dev &&
           held.st_ino == now.st_ino;
}

int out_lock_take(out_lock *l, const char *prefix, char *err, size_t n) {
    l->fd = -1;
    if (check_folder(prefix, err, n) != 0) return -1;
    snprintf(l->path, sizeof l->path, "%s.lock", prefix);
    for (;;) {
        int fd = open_lock(l, prefix, err, n);
        if (fd < 0) return -1;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK)
                snprintf(err, n,
                         "%s: another mt-tokenize run is writing shards there (it holds %s); "
                         "wait for it to end, or give another -o",
                         prefix, l->path);
            else
                snprintf(err, n, "%s: cannot lock %s: %s", prefix, l->path, strerror(errno));
            close(fd);
            return -1;
        }
        if (still_there(fd, l->path)) {
            l->fd = fd;
            return 0;
        }
        close(fd);
    }
}

void out_lock_release(out_lock *l) {
    if (l->fd < 0) return;
    // While still held, so no other run holds this file meanwhile; where unlink fails, the file
    // stays for the next run to take as it is.
    (void)unlink(l->path);
    close(l->fd);
    l->fd = -1;
}
