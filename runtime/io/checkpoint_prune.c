// checkpoint.keep: the newest K step folders of a checkpoint dir stay, older ones go.
#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// 1 and *step when name is exactly what checkpoint_save names a folder ("step_%06d").
static int is_step_name(const char *name, int *step) {
    if (strncmp(name, "step_", 5) != 0 || strspn(name + 5, "0123456789") != strlen(name + 5) ||
        strlen(name + 5) < 6 || strlen(name + 5) > 10)
        return 0;
    long long v = atoll(name + 5);
    char again[32];
    snprintf(again, sizeof again, "step_%06lld", v);
    *step = (int)v;
    return v <= INT_MAX && strcmp(again, name) == 0;
}

static int by_step_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

// Removes only the two files a save writes, manifest first (without it the folder is no longer
// a checkpoint, should we crash halfway); anything else inside keeps the folder in place.
static int remove_step_dir(const char *path) {
    const char *files[] = {"manifest.json", "state.bin"};
    char f[PATH_MAX];
    for (int i = 0; i < 2; i++) {
        snprintf(f, sizeof f, "%s/%s", path, files[i]);
        if (unlink(f) != 0 && errno != ENOENT) return -1;
    }
    return rmdir(path);
}

int checkpoint_prune(const char *dir, int keep, const char *latest_name) {
    if (keep <= 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int *steps = NULL, n = 0, cap = 0, removed = 0, step;
    struct dirent *e;
    struct stat st;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!is_step_name(e->d_name, &step) || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == cap && !(steps = realloc(steps, (cap = cap ? 2 * cap : 64) * sizeof *steps)))
            mt_die("out of memory");
        steps[n++] = step;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, by_step_desc);
    for (int i = keep; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "step_%06d", steps[i]);
        if (strcmp(name, latest_name) == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (remove_step_dir(path) == 0)
            removed++;
        else
            fprintf(stderr, "checkpoint.keep: cannot remove %s: %s (left in place)\n", path,
                    strerror(errno));
    }
    free(steps);
    return removed;
}

// After every rank's fsync, the optimizer ranks read the file back block by block (round
// robin) and the leader gathers the checksums: they depend only on the bytes, not on -np.
