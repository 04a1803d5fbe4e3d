// A job's processes from mpirun's start to the last rank's end, and what they leave in /dev/shm.
//
// mtrun returns only when nothing of its job runs: it is the subreaper of its descendants
// (PR_SET_CHILD_SUBREAPER), so ranks that outlive a killed mpirun become its children, and it
// ends and reaps them before it says anything. The ranks themselves die with mpirun
// (PR_SET_PDEATHSIG in mt-rank), mpirun with mtrun.
//
// Everything the job keeps in /dev/shm besides the ranks' regions lives in one folder of mode
// 0700, /dev/shm/mtc-<job>: Open MPI's segments, the stop request, the ranks' last words and the
// `alive` lock. No other user can create anything in it, so nothing a stranger writes can steer
// the job. When mtrun is killed outright, a janitor forked before mpirun (setsid: away from the
// terminal and deaf to its signals) sees mtrun's pipe close, waits for mpirun to let go of
// `alive`, and removes the folder and the regions. A janitor killed too leaves a folder whose
// `alive` nobody holds: the next mtrun of the same user reaps it (job_dirs_reap).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "launcher/launcher.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid, forwarded, aborting;
static char stop_path[128]; // /dev/shm/mtc-<job>/stop, which the compute ranks look for

static int ranks_said, mpirun_signal; // for mtrun's last line (supervise_ranks_said)

int supervise_signal(void) {
    return forwarded;
}

int supervise_ranks_said(int *mpirun_killed_by) {
    *mpirun_killed_by = mpirun_signal;
    return ranks_said;
}

// A first SIGINT, SIGTERM or SIGHUP (a closed terminal) asks the job to stop after the step
// under way, with a checkpoint (SIGUSR1, which mpirun passes on to every rank, and the stop file,
// for a launcher that does not pass it on); a second one aborts it (abort_tick).
static void on_signal(int sig) {
    static const char note[] = "\nmtrun: stopping after this step, with a checkpoint (again to "
                               "abort at once)\n";
    static const char abort_note[] = "\nmtrun: aborting the job\n";
    int first = !forwarded;
    forwarded = sig;
    if (child_pid <= 0) return;
    if (first) {
        (void)!write(STDERR_FILENO, note, sizeof note - 1);
        int fd = open(stop_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) close(fd);
        kill((pid_t)child_pid, SIGUSR1);
    } else if (!aborting) {
        (void)!write(STDERR_FILENO, abort_note, sizeof abort_note - 1);
        aborting = 1;
    }
}

// ---- the job's folder ----

static int is_job_id(const char *s) {
    size_t n = strlen(s);
    if (n != 32) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

// Whether /dev/shm/name (a folder, a region) is this user's: /dev/shm is open to every user, who
// can read the job id in ps and create names that start like ours. Never removed: those of
// another uid (root's mtrun included), and links. In /dev/shm (sticky) nobody else can replace
// an entry of ours between this check and the unlink.
static int is_ours(int shm_fd, const char *name, int want_dir) {
    struct stat st;
    return fstatat(shm_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == geteuid() &&
           (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

// Removes the folder /dev/shm/mtc-<job> with what it holds, and this user's /dev/shm/mtc-<job>-*
// (the regions, and virtual nodes' regions); returns how many regions there were.
static int remove_job_files(const char *job) {
    char dir[96], prefix[64], err[PATH_MAX + 256];
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    snprintf(dir, sizeof dir, "/dev/shm/mtc-%s", job);
    if (is_ours(dirfd(d), dir + 9, 1) && remove_stale_temp(dir, err, sizeof err) < 0)
        mt_put_line(stderr, "mtrun: ", err);
    snprintf(prefix, sizeof prefix, "mtc-%s-", job);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && is_ours(dirfd(d), e->d_name, 0) &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    closedir(d);
    return removed;
}

// The job's `alive` lock: 1 while a process holds it (mtrun, and mpirun, which inherits it), 0
// once nobody does, -1 when there is no such file (not a folder of this mtrun's, or still being
// made).
static int alive_state(const char *job) {
    char path[128];
    if (mt_job_file(path, sizeof path, job, "alive") < 0) return -1;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

void job_dirs_reap(void) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d))) {
        const char *job = e->d_name + 4;
        if (strncmp(e->d_name, "mtc-", 4) != 0 || !is_job_id(job)) continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid() || alive_state(job) != 0)
            continue;
        int n = remove_job_files(job);
        fprintf(stderr,
                "mtrun: removed what job %s left in /dev/shm (%d region%s) when it was "
                "killed\n",
                job, n, n == 1 ? "" : "s");
    }
    closedir(d);
}

// The janitor: waits until mtrun's end of the pipe closes. A byte first means mtrun cleaned up
// itself; none means it was killed: once mpirun has let go of `alive` (it gets SIGTERM when mtrun
// dies; 30 s at most), the janitor removes the job's files.
static void janitor(int from_mtrun, const char *job) {
    setsid();
    prctl(PR_SET_NAME, "mtrun-janitor");
    signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN), signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN), signal(SIGPIPE, SIG_IGN);
    char b;
    ssize_t n;
    while ((n = read(from_mtrun, &b, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1) _exit(0);
    for (int i = 0; i < 600 && alive_state(job) == 1; i++) usleep(50000);
    remove_job_files(job);
    _exit(0);
}

static int to_janitor = -1; // the pipe that keeps the janitor waiting
static pid_t janitor_pid;

const char *job_dir_make(const char *job) {
    static char dir[96];
    snprintf(dir, sizeof dir, "/dev/shm/mtc-%s", job);
    if (access("/dev/shm", W_OK) != 0) return NULL;
    if (mkdir(dir, 0700) != 0) {
        if (errno != EEXIST) return NULL;
        struct stat st;
        SYS_CHECK(lstat(dir, &st));
        fprintf(stderr,
                "mtrun: %s exists and belongs to uid %u: the job id is random, so it is not "
                "this job's; not using or removing it (remove it if it is stale)\n",
                dir, (unsigned)st.st_uid);
        exit(2);
    }
    int p[2];
    SYS_CHECK(pipe2(p, O_CLOEXEC));
    pid_t pid = fork();
    SYS_CHECK(pid);
    if (pid == 0) {
        close(p[1]);
        janitor(p[0], job);
    }
    close(p[0]);
    janitor_pid = pid, to_janitor = p[1];
    // Locked before it takes its name, so that another mtrun's job_dirs_reap never finds it
    // unlocked. No O_CLOEXEC: mpirun inherits the lock.
    char alive[160], fresh[160];
    mt_job_file(alive, sizeof alive, job, "alive");
    mt_job_file(fresh, sizeof fresh, job, "alive.new");
    int fd = open(fresh, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    SYS_CHECK(fd);
    SYS_CHECK(flock(fd, LOCK_EX));
    SYS_CHECK(rename(fresh, alive));
    return dir;
}

// The lines ranks left in /dev/shm/mtc-<job>/last-words as they gave up (mt_last_words): said
// again when mpirun's forwarding lost them (`show`).
static int repeat_last_words(const char *job, int show) {
    char path[128], line[4096];
    mt_job_file(path, sizeof path, job, "last-words");
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    FILE *f = fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid() ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return 0;
    }
    int shown = 0;
    for (; show && fgets(line, sizeof line, f); shown++) fputs(line, stderr);
    fclose(f);
    return shown;
}

// ---- mpirun and whatever outlives it ----

// The children of process `parent` other than `except`, up to max of them.
static int children(pid_t parent, pid_t *out, int max, pid_t except) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        int pid = atoi(e->d_name), ppid;
        char state;
        if (pid > 0 && pid != except && proc_stat(pid, &state, &ppid) == 0 && ppid == parent)
            out[n++] = pid;
    }
    closedir(d);
    return n;
}

// The job's processes that outlived mpirun (ranks whose parent-death signal had not ended them
// yet, or came too early to be set, or a dying rank mpirun did not wait for) are ours now:
// killed and reaped, until none is left.
static void end_orphans(void) {
    pid_t pids[256];
    for (int n; (n = children(getpid(), pids, 256, janitor_pid)) > 0;)
        for (int i = 0; i < n; i++) {
            kill(pids[i], SIGKILL);
            while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR) {
            }
        }
}

// A second signal: mpirun's ranks are killed, so that mpirun itself sees them die, ends the job
// on every host and cleans up after itself (SIGTERM to mpirun waits for the step under way). It is
// killed too if it has not ended within 3 s.
static void abort_tick(void) {
    static double since;
    if (!aborting || child_pid <= 0) return;
    double now = now_seconds();
    if (since == 0) since = now;
    pid_t pids[256];
    int n = children((pid_t)child_pid, pids, 256, 0);
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    if (now - since > 3) kill((pid_t)child_pid, SIGKILL);
}

int supervise_run(const cmdline *c, const char *job, int ranks_per_node) {
    mt_job_file(stop_path, sizeof stop_path, job, "stop");
    SYS_CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1));
    // Block the signals until the handlers are in place, so none is lost around fork.
    int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < 3; i++) sigaddset(&block, sigs[i]);
    SYS_CHECK(sigprocmask(SIG_BLOCK, &block, &old));
    pid_t parent = getpid();
    int err_pipe[2];
    SYS_CHECK(pipe2(err_pipe, O_CLOEXEC));
    pid_t pid = fork();
    SYS_CHECK(pid);
    if (pid == 0) {
        SYS_CHECK(dup2(err_pipe[1], STDERR_FILENO)); // dup2 clears close-on-exec on the copy
        // If mtrun is killed outright (SIGKILL, a test's timeout), mpirun must not run on
        // as an orphan: it gets SIGTERM and takes the ranks down.
        SYS_CHECK(prctl(PR_SET_PDEATHSIG, SIGTERM));
        if (getppid() != parent) _exit(128 + SIGTERM);
        // Its own process group: a Ctrl-C on the terminal reaches mtrun alone, which turns
        // the first one into a stop with a checkpoint (on_signal).
        SYS_CHECK(setpgid(0, 0));
        sigprocmask(SIG_SETMASK, &old, NULL);
        execv(c->argv[0], c->argv);
        fprintf(stderr, "mtrun: cannot run %s: %s\n", c->argv[0], strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) SYS_CHECK(sigaction(sigs[i], &sa, NULL));
    SYS_CHECK(sigprocmask(SIG_SETMASK, &old, NULL));
    SYS_CHECK(close(err_pipe[1]));
    int status;
    int said = relay_mpirun_stderr(err_pipe[0], ranks_per_node, pid, &status, abort_tick);
    SYS_CHECK(close(err_pipe[0]));
    child_pid = 0;
    end_orphans();
    said += repeat_last_words(job, !said && !(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    ranks_said = said, mpirun_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (to_janitor >= 0) {
        int removed = remove_job_files(job);
        if (removed)
            fprintf(stderr,
                    "mtrun: removed %d shared-memory region%s that job %s left in "
                    "/dev/shm\n",
                    removed, removed == 1 ? "" : "s", job);
        signal(SIGPIPE, SIG_IGN); // a janitor killed meanwhile must not take mtrun with it
        (void)!write(to_janitor, "", 1);
        close(to_janitor);
        while (waitpid(janitor_pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    // After a signal report it, like a shell: 130, 143 or 129, also when the job stopped cleanly.
    if (forwarded) return 128 + forwarded;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
