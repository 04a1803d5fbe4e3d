// One job per run folder: two jobs writing checkpoints, LATEST and metrics.jsonl into the same
// folder would destroy each other's saves halfway. The lock is flock() on RUN/.lock, a file of
// the job's user, mode 0600, held by mtrun and by mpirun, which inherits the descriptor, so it is
// let go of only when both are gone; mtrun itself returns only when every rank is gone
// (supervise.c). A lock the kernel drops with its holder cannot go stale, unlike a pid file.
// Why a file and not the folder itself: anyone who can read a folder can flock it, and so block
// every job there; a 0600 file only its owner (and root) can open. As OpenSSH and PostgreSQL do
// with the files that guard them, a lock file another uid owns, or a link, is refused, never
// used or removed. The holder's pid, for the message a second job gets, is the kernel's:
// /proc/locks.
#include "launcher/launcher.h"
#include "runtime/base/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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

// The lock file of folder dir (open as dfd): a plain file of this user, mode 0600 (made so when
// missing). Its descriptor, or -1 with one line in err.
static int open_lock_file(int dfd, const char *dir, const char *what, char *err, size_t n) {
    // No O_CLOEXEC: mpirun keeps the lock while it lives.
    int fd = openat(dfd, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
    struct stat st;
    if (fd < 0 && errno == ELOOP)
        return failf(err, n,
                     "%s %s: its lock file .lock is a symbolic link: not following it (remove "
                     "it if it is yours)",
                     what, dir);
    if (fd < 0 && errno != EACCES)
        return failf(err, n, "%s %s/.lock: %s", what, dir, strerror(errno));
    if (fd >= 0 && fstat(fd, &st) != 0) {
        close(fd);
        return failf(err, n, "%s %s/.lock: %s", what, dir, strerror(errno));
    }
    if (fd < 0 && fstatat(dfd, ".lock", &st, AT_SYMLINK_NOFOLLOW) != 0)
        return failf(err, n, "%s %s/.lock: %s", what, dir, strerror(errno));
    if (fd < 0 || st.st_uid != geteuid() || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return failf(err, n,
                     "%s %s: its lock file .lock belongs to uid %u, not to this user (uid %u): "
                     "another user can block or steer jobs in this folder; use a folder of "
                     "your own",
                     what, dir, (unsigned)st.st_uid, (unsigned)geteuid());
    }
    if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) != 0) {
        close(fd);
        return failf(err, n, "%s %s/.lock: %s", what, dir, strerror(errno));
    }
    return fd;
}

// The folder locked, open, and its name: what a save the job did not finish leaves there is
// removed through it (run_lock_clear_unfinished), never through a link or a folder moved in.
static int held_dir = -1;
static char held_name[MT_PATH_MAX];

// ".step_NNNNNN.tmp": the hidden folder a save is written into before it is renamed into place.
static int is_unfinished_save(const char *name) {
    size_t len = strlen(name);
    if (len < 16 || strncmp(name, ".step_", 6) != 0 || strcmp(name + len - 4, ".tmp") != 0)
        return 0;
    for (size_t i = 6; i < len - 4; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return 1;
}

// Calls fn on each .step_NNNNNN.tmp entry of the held folder.
static void each_save_temp(void (*fn)(const struct dirent *e)) {
    int fd = held_dir >= 0 ? dup(held_dir) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    rewinddir(d);
    for (struct dirent *e; (e = readdir(d));)
        if (is_unfinished_save(e->d_name)) fn(e);
    closedir(d);
}

// Those there before the job started (a crash's, a link planted there) are not this job's: the
// save that reuses the name clears a stale one itself, and a link is said by the rank. Known by
// inode and change time, for a save may get the inode of the stale folder it cleared.
typedef struct {
    ino_t ino;
    struct timespec ctime;
} entry_id;
static entry_id *before;
static size_t n_before;

static int entry_of(const struct dirent *e, entry_id *id) {
    struct stat st;
    if (fstatat(held_dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    id->ino = st.st_ino, id->ctime = st.st_ctim;
    return 0;
}

static void note_before(const struct dirent *e) {
    entry_id *more = realloc(before, (n_before + 1) * sizeof *before);
    if (!more) mt_die("out of memory");
    before = more;
    if (entry_of(e, &before[n_before]) == 0) n_before++;
}

static void remove_if_this_jobs(const struct dirent *e) {
    entry_id id;
    if (entry_of(e, &id) != 0) return;
    for (size_t i = 0; i < n_before; i++)
        if (before[i].ino == id.ino && before[i].ctime.tv_sec == id.ctime.tv_sec &&
            before[i].ctime.tv_nsec == id.ctime.tv_nsec)
            return;
    char err[MT_PATH_MAX + 256];
    if (remove_stale_temp_at(held_dir, e->d_name, err, sizeof err) < 0)
        fprintf(stderr, "mtrun: %s: %s\n", mt_shown(held_name), mt_shown(err));
    else
        fprintf(stderr, "mtrun: removed %s/%s, a save the job did not finish\n",
                mt_shown(held_name), e->d_name);
}

int run_lock_take(const char *dir, const char *what, char *err, size_t n) {
    if (make_dirs_or_say(dir, err, n) < 0) return -1;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return failf(err, n, "%s %s: %s", what, dir, strerror(errno));
    int fd = open_lock_file(dfd, dir, what, err, n);
    struct stat st;
    char host[256] = "", id[320];
    gethostname(host, sizeof host - 1);
    // The ranks check that the folder they hold is this one (job_hold_run_folder).
    int known = fstat(dfd, &st) == 0;
    if (fd < 0) {
        close(dfd);
        return -1;
    }
    held_dir = dfd;
    snprintf(held_name, sizeof held_name, "%s", dir);
    each_save_temp(note_before);
    snprintf(id, sizeof id, "%llu:%llu:%s", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, host);
    if (known && setenv("MT_RUN_FOLDER", id, 1) != 0)
        return failf(err, n, "setenv: %s", strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    long pid = fstat(fd, &st) == 0 ? lock_holder(&st) : 0;
    close(fd);
    char who[48] = "another job";
    if (pid > 0) snprintf(who, sizeof who, "another job (pid %ld)", pid);
    return failf(err, n,
                 "%s %s: %s is writing to this folder; wait for it to end, or choose another "
                 "--out",
                 what, dir, who);
}

void run_lock_clear_unfinished(void) {
    each_save_temp(remove_if_this_jobs);
}
