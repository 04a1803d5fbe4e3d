// Runs a fuzz target once over every file named, or every file in the folders named, without
// libFuzzer: make test replays the seed corpora and the reproducers of past bugs with gcc's
// ASan and UBSan, which a CI machine has without clang. Each input gets a buffer of exactly
// its size, so that a read one byte past the end is caught as under libFuzzer.
#include "tests/fuzz/fuzz.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "%s: %s\n", path, strerror(errno)), -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size)
        return fprintf(stderr, "%s: cannot read\n", path), fclose(f), free(data), -1;
    fclose(f);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 1;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

// The number of inputs run, or -1.
static int replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) < 0) return fprintf(stderr, "%s: %s\n", path, strerror(errno)), -1;
    if (!S_ISDIR(st.st_mode)) return replay_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, by_name), runs = 0;
    if (n < 0) return fprintf(stderr, "%s: %s\n", path, strerror(errno)), -1;
    for (int i = 0; i < n; i++) {
        char child[PATH_MAX];
        if (names[i]->d_name[0] != '.' && runs >= 0) {
            snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
            int r = replay_path(child);
            runs = r < 0 ? -1 : runs + r;
        }
        free(names[i]);
    }
    free(names);
    return runs;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]), 2;
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int r = replay_path(argv[i]);
        if (r < 0) return 1;
        total += r;
    }
    if (total == 0) return fprintf(stderr, "%s: no inputs\n", argv[0]), 1;
    printf("%s: %d inputs replayed, no sanitizer report\n", argv[0], total);
    return 0;
}
