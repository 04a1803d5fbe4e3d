// One job per run folder: two jobs writing checkpoints, LATEST and metrics.jsonl into the same
// folder would destroy each other's saves halfway. The lock is flock() on the folder itself, held
// by mtrun and by mpirun, which inherits the descriptor, so it is let go of only when both are
// gone; mtrun itself returns only when every rank is gone (supervise.c). Nothing is written into
// the folder for it (a refused resume leaves the folder exactly as it was), and a lock the kernel
// drops with its holder cannot go stale, unlike a pid file. The holder's pid, for the message a
// second job gets, is the kernel's: /proc/locks.
#include "launcher/launcher.h"
#include "runtime/base/base.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

// The pid /proc/locks gives for the flock on the file of st, or 0.
static long lock_holder(const struct stat *st) {
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[256];
    long pid = 0;
    while (!pid && fgets(line, sizeof line, f)) {
        long who;
        unsigned maj, min;
        unsigned long ino;
        if (sscanf(line, "%*d: FLOCK %*s %*s %ld %x:%x:%lu", &who, &maj, &min, &ino) == 4 &&
            maj == major(st->st_dev) && min == minor(st->st_dev) && ino == st->st_ino)
            pid = who;
    }
    fclose(f);
    return pid;
}

int run_lock_take(const char *dir, const char *what, char *err, size_t n) {
    if (make_dirs_or_say(dir, err, n) < 0) return -1;
    // No O_CLOEXEC: mpirun keeps the lock while it lives.
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return failf(err, n, "%s %s: %s", what, dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    struct stat st;
    long pid = fstat(fd, &st) == 0 ? lock_holder(&st) : 0;
    close(fd);
    char who[48] = "another job";
    if (pid > 0) snprintf(who, sizeof who, "another job (pid %ld)", pid);
    return failf(err, n,
                 "%s %s: %s is writing to this folder; wait for it to end, or choose another "
                 "--out",
                 what, dir, who);
}
