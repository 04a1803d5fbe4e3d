// Checkpoint pieces that need no MPI job (runtime/io/checkpoint.c): the block hash (libxxhash's
// XXH64, seed 0, what `xxhsum -H1` prints) against the reference
// implementation's published values, and checkpoint.keep's pruning on a scratch folder.
//
//   test_checkpoint                 run the tests
//   test_checkpoint bench DIR MIB   write a MIB MiB file in DIR, then time hashing it back
//                                   in memory, through mmap as a save does (page cache), and cold
#include "runtime/io/io.h"
#include "runtime/base/base.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/check.h"
#include <xxhash.h>

// Values from xxHash's own test suite and python-xxhash's documentation; the inputs cover the
// < 32-byte path, the 32-byte stripes and every tail length (8, 4, 1).
static void test_xxh64(void) {
    static const struct {
        const char *in;
        uint64_t want;
    } cases[] = {
        {"", 0xEF46DB3751D8E999ull},
        {"a", 0xD24EC4F1A98C6E5Bull},
        {"abc", 0x44BC2CF5AD770999ull},
        {"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1ull},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = XXH64(cases[i].in, strlen(cases[i].in), 0);
        CHECK(got == cases[i].want, "xxh64(\"%s\") = %016llx, want %016llx", cases[i].in,
              (unsigned long long)got, (unsigned long long)cases[i].want);
    }
}

static void touch_dir(const char *root, const char *name, int with_files) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, name);
    make_dirs(p);
    if (!with_files) return;
    for (int i = 0; i < 2; i++) {
        char f[600];
        snprintf(f, sizeof f, "%s/%s", p, i ? "state.bin" : "manifest.json");
        FILE *fp = fopen(f, "w");
        fputs("x", fp);
        fclose(fp);
    }
}

static int exists(const char *root, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, name);
    return access(p, F_OK) == 0;
}

// Only exact step_%06d folders go, oldest first; LATEST's target, look-alikes, the
// .replaced- folders, files and a folder holding something of the user's all stay.
static void test_prune(void) {
    char root[] = "/tmp/mt-ckpt-test.XXXXXX";
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    const char *steps[] = {"step_000005", "step_000010", "step_000015", "step_000020",
                           "step_1000000"};
    for (int i = 0; i < 5; i++) touch_dir(root, steps[i], 1);
    const char *others[] = {"step_000001.replaced-123", "step_00003",  "step_0000007",
                            ".step_000025.tmp",         "step_00000x", "keepme"};
    for (int i = 0; i < 6; i++) touch_dir(root, others[i], 1);
    touch_dir(root, "step_000002", 1);
    touch_dir(root, "step_000002/user-notes", 0); // not ours: the folder must stay
    CHECK(checkpoint_prune(root, 0, "step_000020") == 0, "keep 0 removes nothing");
    // LATEST may name an older step than the newest folder (a resume from the middle).
    int n = checkpoint_prune(root, 2, "step_000010");
    CHECK(n == 2, "removed %d folders, want 2 (5 and 15)", n);
    CHECK(exists(root, "step_1000000") && exists(root, "step_000020"), "the 2 newest stay");
    CHECK(exists(root, "step_000010"), "LATEST's target stays");
    CHECK(!exists(root, "step_000005") && !exists(root, "step_000015"), "older ones go");
    CHECK(exists(root, "step_000002/user-notes"), "a folder with foreign content stays");
    for (int i = 0; i < 6; i++) CHECK(exists(root, others[i]), "%s stays", others[i]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "cleanup");
}

static int bench(const char *dir, long mib) {
    char path[512];
    snprintf(path, sizeof path, "%s/mt-ckpt-bench.bin", dir);
    size_t len = (size_t)mib << 20;
    unsigned char *buf = malloc(len);
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return perror(path), 1;
    for (size_t done = 0; done < len;) { // write() moves at most ~2 GiB per call
        ssize_t n = write(fd, buf + done, len - done);
        if (n <= 0) return perror(path), 1;
        done += (size_t)n;
    }
    if (fsync(fd) != 0) return perror(path), 1;
    double t0 = now_seconds();
    uint64_t h1 = XXH64(buf, len, 0);
    double t1 = now_seconds();
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    madvise(p, len, MADV_SEQUENTIAL);
    uint64_t h2 = XXH64(p, len, 0);
    double t2 = now_seconds();
    munmap(p, len);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); // clean pages leave the cache: a cold read
    double t3 = now_seconds();
    p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    madvise(p, len, MADV_SEQUENTIAL);
    uint64_t h3 = XXH64(p, len, 0);
    double t4 = now_seconds();
    munmap(p, len);
    close(fd);
    unlink(path);
    free(buf);
    double gb = (double)len / 1e9;
    printf("xxh64 in memory: %.3f s/GB (%.2f GB/s)\n", (t1 - t0) / gb, gb / (t1 - t0));
    printf("xxh64 via mmap, page cache: %.3f s/GB (%.2f GB/s)\n", (t2 - t1) / gb, gb / (t2 - t1));
    printf("xxh64 via mmap, from disk: %.3f s/GB (%.2f GB/s)\n", (t4 - t3) / gb, gb / (t4 - t3));
    return h1 == h2 && h1 == h3 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "bench") == 0) return bench(argv[2], atol(argv[3]));
    test_xxh64();
    test_prune();
    if (failed) return tests_summary();
    printf("test_checkpoint: all passed\n");
    return 0;
}
