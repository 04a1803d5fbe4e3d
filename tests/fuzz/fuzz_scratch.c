// The scratch folder of fuzz.h: one per process under $TMPDIR, so that parallel fuzzers and
// the replay tests never share files.
#include "tests/fuzz/fuzz.h"
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[PATH_MAX];

static void remove_scratch(void) {
    DIR *d = opendir(scratch);
    if (!d) return;
    int fd = dirfd(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(fd, e->d_name, 0);
    closedir(d);
    rmdir(scratch);
}

const char *fuzz_dir(void) {
    if (scratch[0]) return scratch;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/mtfuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) perror(scratch), abort();
    atexit(remove_scratch);
    return scratch;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size) {
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) perror(path), abort();
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) perror(path), abort();
        done += (size_t)n;
    }
    close(fd);
    return path;
}
