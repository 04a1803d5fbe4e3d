// One job per run folder: two jobs writing checkpoints, LATEST and metrics.jsonl into the same
// folder would destroy each other's saves halfway. The lock is flock() on <dir>/.mtrun.lock,
// held by mtrun and by mpirun, which inherits the descriptor, so it is let go of only when both
// are gone; mtrun itself returns only when every rank is gone (supervise.c). The file holds the
// holder's pid, for the message a second job gets. A lock the kernel drops with its holder
// cannot go stale, unlike a pid file.
#include "launcher/launcher.h"
#include "runtime/base/base.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static void holder_pid(int fd, char *out, size_t n) {
    char buf[32] = "";
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    long pid = got > 0 ? strtol(buf, NULL, 10) : 0;
    if (pid > 0)
        snprintf(out, n, "mtrun pid %ld", pid);
    else
        snprintf(out, n, "a job starting up");
}

int run_lock_take(const char *dir, const char *what, char *err, size_t n) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/.mtrun.lock", dir) >= (int)sizeof path)
        return failf(err, n, "%s %s: path too long", what, dir);
    if (make_dirs_or_say(dir, err, n) < 0) return -1;
    // No O_CLOEXEC: mpirun keeps the lock while it lives.
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
    if (fd < 0)
        return failf(err, n, "%s: %s%s", path, strerror(errno),
                     errno == ELOOP ? " (a symbolic link: not following it)" : "");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char who[64];
        holder_pid(fd, who, sizeof who);
        close(fd);
        return failf(err, n,
                     "%s %s: another job (%s) is writing to this folder; wait for it to end, or "
                     "choose another --out",
                     what, dir, who);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        return failf(err, n, "%s: %s", path, strerror(errno));
    return 0;
}
