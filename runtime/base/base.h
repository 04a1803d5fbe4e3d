// The floor every subsystem stands on: one error macro per library (SYS_CHECK and mt_die come
// from shm/syscheck.h, MPI_CHECK and UCS_CHECK are here), a few file and clock helpers, and the
// counter-based hash that draws data and initial weights.
#ifndef MT_BASE_H
#define MT_BASE_H

#include "runtime/base/json_strict.h"
#include "shm/syscheck.h"
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <ucs/type/status.h>

#define MPI_CHECK(call)                                                                            \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) {                                                              \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                   \
            int mpi_len_ = 0;                                                                      \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                        \
            mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, mpi_msg_);                          \
        }                                                                                          \
    } while (0)

#define UCS_CHECK(call)                                                                            \
    do {                                                                                           \
        ucs_status_t ucs_rc_ = (call);                                                             \
        if (ucs_rc_ != UCS_OK)                                                                     \
            mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, ucs_status_string(ucs_rc_));        \
    } while (0)

// mkdir -p; exits with a message naming the folder on failure (make_dirs_or_say: -1 and the
// message in err).
void make_dirs(const char *dir);
int make_dirs_or_say(const char *dir, char *err, size_t n);
double now_seconds(void); // CLOCK_MONOTONIC
// What /proc/<pid>/stat says of a process: its state letter (R, S, T for stopped, Z, ...) and
// its parent's pid. 0, or -1 when there is no such process.
int proc_stat(int pid, char *state, int *ppid);

// Files and folders the job names inside folders that others may write to (checkpoint, export
// and run folders): never opened, written or deleted through a symbolic link planted there.
// open_nofollow's how: "w" creates or truncates, "a" appends, "x" creates a file that must not
// exist; O_NOFOLLOW and O_CLOEXEC always, mode 0644. -1 with errno (ELOOP for a link).
int open_nofollow(const char *path, const char *how);
FILE *fopen_nofollow(const char *path, const char *how); // "w" or "a" as above
// A temporary folder or file a crashed earlier run of ours may have left at path: removed when
// it is a plain file, or a real folder holding only plain files (removed through the folder's
// own descriptor, never a link). Absent: 0. Anything else (a symbolic link, a folder with more
// in it): -1 with a one-line message in err, and nothing touched.
int remove_stale_temp(const char *path, char *err, size_t errlen);
// The same for path under the folder open as at (AT_FDCWD: path as it is).
int remove_stale_temp_at(int at, const char *path, char *err, size_t errlen);

// Whether another user could change what path names (path_trust.c): 0 when every folder from
// / down to it belongs to this user or root and nobody else may write to it unless it is sticky
// (as /tmp is), no symbolic link on the way is another user's, and path itself, when it
// exists, is this user's (or root's too, with owner_root_ok) and writable by nobody else. A
// path not made yet is judged by the nearest folder above it. -1 with the reason in err
// ("/x belongs to uid 65534 (nobody), not to this user (uid 0)", "/x is writable by every user
// (mode 0777, not sticky)"), for the caller to put between its field and what to do.
int path_trust_check(const char *path, int owner_root_ok, char *err, size_t n);

// Formats a one-line message into err and returns -1, so that a check can `return failf(...)`.
int failf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// A whole small (JSON) file as a NUL-terminated string to free(); NULL with err set when it
// does not open, is larger than max or reads short.
char *read_text(const char *path, size_t max, char *err, size_t errlen);

// A counter-based generator: a pure function of its input, so random draws need no state to
// carry through checkpoints or to split across shards.
static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
