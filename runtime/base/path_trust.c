// Whether another user can change what a path names. A job writes its checkpoints into folders,
// reads its resume settings back from them and renames its exports into place; a user who owns
// one of the folders on the way there, or may write to one, can swap a folder of theirs in, plant
// files the job then trusts (a manifest's "self" checksum is no signature: anyone can recompute
// it) or read what the job writes. So every folder from / down to the path must belong to this
// user or to root, and nobody else may write to it unless it is sticky, as /tmp is: there
// others may add names but never remove or rename this user's. Symbolic links on the way count
// as what their owner can re-point. The rule is OpenSSH's StrictModes, for the same reason.
#include "runtime/base/base.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int uid_trusted(uid_t uid) {
    return uid == geteuid() || uid == 0;
}

// "uid 65534 (nobody)", or "uid N" where the name is unknown.
static const char *uid_named(uid_t uid, char *buf, size_t n) {
    struct passwd *pw = getpwuid(uid);
    if (pw && pw->pw_name)
        snprintf(buf, n, "uid %u (%s)", (unsigned)uid, pw->pw_name);
    else
        snprintf(buf, n, "uid %u", (unsigned)uid);
    return buf;
}

static int not_ours(const char *at, uid_t uid, const char *kind, char *err, size_t n) {
    char who[128];
    return failf(err, n, "%s%s belongs to %s, not to this user (uid %u)", at, kind,
                 uid_named(uid, who, sizeof who), (unsigned)geteuid());
}

// One thing on the way: its owner, and who else may write to it.
static int check_one(const char *at, const struct stat *st, int must_be_ours, char *err, size_t n) {
    if (!uid_trusted(st->st_uid) || (must_be_ours && st->st_uid != geteuid()))
        return not_ours(at, st->st_uid, "", err, n);
    int shared = (st->st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (shared && !(S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX)))
        return failf(err, n, "%s is writable by %s (mode %04o%s)", at,
                     st->st_mode & S_IWOTH ? "every user" : "its group",
                     (unsigned)(st->st_mode & 07777), S_ISDIR(st->st_mode) ? ", not sticky" : "");
    return 0;
}

// The symbolic links among the leading components of path, as given: each one's owner.
static int check_links(const char *path, char *err, size_t n) {
    char at[PATH_MAX];
    snprintf(at, sizeof at, "%s", path);
    for (char *p = at + 1;; p++) {
        if (*p && *p != '/') continue;
        char was = *p;
        *p = 0;
        struct stat st;
        if (lstat(at, &st) == 0 && S_ISLNK(st.st_mode) && !uid_trusted(st.st_uid))
            return not_ours(at, st.st_uid, " (a symbolic link)", err, n);
        if (!was) return 0;
        *p = was;
    }
}

// path, or the nearest folder above it that exists (where a fresh one will be made).
static void nearest_existing(const char *path, char *out, size_t n) {
    struct stat st;
    snprintf(out, n, "%s", path);
    while (lstat(out, &st) != 0 && errno == ENOENT) {
        char *slash = strrchr(out, '/');
        while (slash && slash > out && slash[1] == 0) *slash = 0, slash = strrchr(out, '/');
        if (!slash) {
            snprintf(out, n, ".");
            return;
        }
        slash[slash == out] = 0; // "/x" -> "/"
    }
}

int path_trust_check(const char *path, int owner_root_ok, char *err, size_t n) {
    char at[PATH_MAX], real[PATH_MAX];
    nearest_existing(path, at, sizeof at);
    if (check_links(at, err, n) < 0) return -1;
    if (!realpath(at, real)) return failf(err, n, "%s: %s", at, strerror(errno));
    int exists = strcmp(at, path) == 0;
    // Each folder from / down, then the path itself (the last component; no link in real).
    for (char *p = real;; p++) {
        if (*p && *p != '/') continue;
        char was = *p;
        if (p > real) *p = 0;
        const char *now = p > real ? real : "/";
        struct stat st;
        if (lstat(now, &st) != 0) return failf(err, n, "%s: %s", now, strerror(errno));
        int last = !was || (p == real && !p[1]);
        if (check_one(now, &st, last && exists && !owner_root_ok, err, n) < 0) return -1;
        if (last) return 0;
        *p = was;
    }
}
