// One macro per library for error checks; this one is for system calls (-1 and errno).
// A failed call ends the process with one line naming the call, the place and the reason:
// in an MPI job, mpirun then takes the other ranks down too.
#ifndef MT_SYSCHECK_H
#define MT_SYSCHECK_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

// s into out (n bytes, terminated; cut short where it does not fit) with control bytes (a newline,
// an ANSI escape from a file a stranger wrote) shown as \xNN, so that no name or message can forge
// or recolor other lines. Returns the length written.
static inline size_t mt_escape(char *out, size_t n, const char *s) {
    size_t len = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && len + 5 < n; p++)
        if (*p < 0x20 || *p == 0x7f)
            len += (size_t)snprintf(out + len, n - len, "\\x%02x", *p);
        else
            out[len++] = (char)*p;
    out[len] = 0;
    return len;
}

// prefix and msg (escaped) as one line. It goes out in one write: stderr is unbuffered, and
// several ranks giving up at once would otherwise interleave their lines byte by byte in
// mpirun's output.
static inline void mt_put_line(FILE *f, const char *prefix, const char *msg) {
    char line[16384];
    size_t n = (size_t)snprintf(line, sizeof line - 2, "%s", prefix);
    if (n > sizeof line - 2) n = sizeof line - 2;
    n += mt_escape(line + n, sizeof line - 1 - n, msg);
    line[n++] = '\n';
    fwrite(line, 1, n, f);
    fflush(f);
}

// A name from the command line or a config (a path, a config file) inside a longer line,
// escaped as mt_escape does. The text lives in one of 4 buffers in turn: at most 4 of these in
// one printf.
static inline const char *mt_shown(const char *s) {
    static char buf[4][1024];
    static int next;
    char *out = buf[next++ & 3];
    mt_escape(out, sizeof buf[0], s);
    return out;
}

// /dev/shm/mtc-<job>/<what>: the files mtrun and the ranks leave each other (last words, a stop
// request), in the job's folder, which mtrun makes with mode 0700 so that no other user can
// create them. job NULL: MT_JOB_ID, the launcher's (not a virtual node's). Returns -1 when there
// is no job id.
static inline int mt_job_file(char *out, size_t n, const char *job, const char *what) {
    if (!job) job = getenv("MT_JOB_ID");
    if (!job || !*job || strlen(job) > 64) return -1;
    snprintf(out, n, "/dev/shm/mtc-%s/%s", job, what);
    return 0;
}

// The NUMA node the kernel gives PCI device bus_id ("0000:19:00.0", or nvidia-smi's
// "00000000:19:00.0", any case); -1 when it does not say.
static inline int mt_pci_numa_node(const char *bus_id) {
    unsigned dom, bus, dev, fn;
    char path[96];
    int node = -1;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return -1;
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", dom, bus, dev,
             fn);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (fscanf(f, "%d", &node) != 1) node = -1;
    fclose(f);
    return node;
}

// A rank's last line also goes to /dev/shm/mtc-<job>-last-words: a rank that exits at once can
// lose its line in mpirun's output forwarding, and mtrun then repeats it from there.
static inline void mt_last_words(const char *prefix, const char *msg) {
    char path[128];
    if (mt_job_file(path, sizeof path, NULL, "last-words") < 0) return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f) return;
    mt_put_line(f, prefix, msg);
    fclose(f);
}

// A process's last line before it exits: on stderr, and in the job's last words.
static inline void mt_say_last(const char *prefix, const char *msg) {
    mt_put_line(stderr, prefix, msg);
    mt_last_words(prefix, msg);
}

// The line, then `ending` (how the process exits).
#define mt_say_then_(ending, ...)                                                                  \
    do {                                                                                           \
        char mt_die_msg_[2048];                                                                    \
        snprintf(mt_die_msg_, sizeof mt_die_msg_, __VA_ARGS__);                                    \
        mt_say_last("megatrain: ", mt_die_msg_);                                                   \
        ending;                                                                                    \
    } while (0)

#define mt_die(...) mt_say_then_(exit(1), __VA_ARGS__)
// Like mt_die, from a copy thread: _exit, for exit() would tear the CUDA runtime down under the
// main thread's feet, whose next call would then fail and say a second, misleading line.
#define mt_die_now(...) mt_say_then_(_exit(1), __VA_ARGS__)
// Like mt_die, but exit 2: the job was refused (its input, or a name another user holds), it
// did not break.
#define mt_refuse(...) mt_say_then_(exit(2), __VA_ARGS__)

// 2 * bytes hex digits from the kernel's CSPRNG, for names no other user may guess and create
// first (bytes <= 32).
static inline void mt_random_hex(char *out, int bytes) {
    unsigned char b[32];
    for (int got = 0; got < bytes;) {
        ssize_t n = getrandom(b + got, (size_t)(bytes - got), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) mt_die("getrandom: %s", strerror(errno));
        got += (int)n;
    }
    for (int i = 0; i < bytes; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

// After an O_EXCL create of path failed with EEXIST: one line naming the owner, exit 2. The
// name has a random part, so only someone who saw it could have made it; it is never removed
// (it may be another user's, or another job's).
static inline void mt_refuse_taken(const char *what, const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) mt_die("%s%s: %s", what, path, strerror(errno));
    mt_refuse("%s%s exists and belongs to uid %u: the job does not use or remove a name it did "
              "not make; remove it if it is stale, or ask its owner",
              what, path, (unsigned)st.st_uid);
}

// For calls that return -1 (or NULL for the _PTR variant) and set errno.
#define SYS_CHECK(call)                                                                            \
    do {                                                                                           \
        if ((call) == -1) mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, strerror(errno));     \
    } while (0)

#endif
