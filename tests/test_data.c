// Token-shard data (runtime/io/data.c): shards written here, in every supported format, read
// back through dataset_batch; windows across shard boundaries; "bytes" unchanged; data.val_path
// (evaluation's own stream); and each bad input refused with one line that names the file.
//
//   test_data                 run the tests (in a fresh temporary folder)
//   test_data split IN DIR    write IN's bytes as three shards in DIR, one per format
//                             (used by data_e2e.sh to train on shards of a text file)
#include "runtime/model/model.h"
#include "runtime/io/io.h"
#include "runtime/base/base.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/check.h"

static char tmp[256];

// ---- writers ----

enum { OURS, LLMC };

static char *path_of(const char *name) {
    static char p[8][512];
    static int k;
    char *out = p[k++ % 8];
    snprintf(out, 512, "%s/%s", tmp, name);
    return out;
}

static void write_file(const char *path, const void *head, size_t hn, const void *body, size_t bn) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(head, 1, hn, f) != hn || fwrite(body, 1, bn, f) != bn || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

// tokens[0..n) as a shard: ours (width 2 or 4) or llm.c's (width 2: gpt-2, 4: llama-3).
static void write_shard(const char *path, int format, int width, const uint32_t *tok, size_t n) {
    uint8_t head[1024] = {0};
    size_t hn = 256;
    if (format == OURS) {
        uint32_t version = 1, dtype = (uint32_t)width;
        uint64_t count = n;
        memcpy(head, "MTCTOKS1", 8);
        memcpy(head + 8, &version, 4);
        memcpy(head + 12, &dtype, 4);
        memcpy(head + 16, &count, 8);
    } else {
        int32_t h[3] = {width == 2 ? 20240520 : 20240801, width == 2 ? 1 : 7, (int32_t)n};
        memcpy(head, h, sizeof h);
        hn = 1024;
    }
    uint8_t *body = malloc(n * (size_t)width + 1);
    for (size_t i = 0; i < n; i++) {
        uint16_t t16 = (uint16_t)tok[i];
        if (width == 2)
            memcpy(body + 2 * i, &t16, 2);
        else
            memcpy(body + 4 * i, &tok[i], 4);
    }
    write_file(path, head, hn, body, n * (size_t)width);
    free(body);
}

static void config_for(mt_config *c, const char *format, const char *path, int vocab, int T) {
    memset(c, 0, sizeof *c);
    c->data_format = mt_choice_index(DATA_FORMAT_NAMES, format);
    snprintf(c->data_path, sizeof c->data_path, "%s", path);
    c->model.vocab = vocab;
    c->seq_len = T;
    c->val_fraction = 0.1;
}

// ---- reading back ----

// A stream whose token i is K*i + B, so that a window tells where it starts.
enum { K = 7, B = 3 };
static uint32_t tok_at(size_t i) {
    return (uint32_t)(K * i + B);
}

// Every row of every batch must be a window of the stream: consecutive tokens from some
// offset o in the split's range, targets one further on. Returns how many windows span
// a boundary in cuts[0..ncuts).
static int check_windows(const dataset *ds, int T, const size_t *cuts, int ncuts,
                         const char *what) {
    enum { ROWS = 8 };
    int32_t in[ROWS * 128], tg[ROWS * 128];
    int crossings = 0, bad = 0;
    for (int split = SPLIT_TRAIN; split <= SPLIT_VAL; split++)
        for (int64_t step = 0; step < 200 && !bad; step++) {
            dataset_batch(ds, split, 42, step, 1, ROWS, T, in, tg);
            for (int r = 0; r < ROWS && !bad; r++) {
                size_t o = (size_t)(in[r * T] - B) / K;
                size_t lo = split == SPLIT_TRAIN ? 0 : ds->n_train;
                size_t hi = split == SPLIT_TRAIN ? ds->n_train : ds->n;
                CHECK(o >= lo && o + T < hi, "%s: window at %zu outside [%zu, %zu)", what, o, lo,
                      hi - T);
                for (int t = 0; t < T && !bad; t++) {
                    bad |= in[r * T + t] != (int32_t)tok_at(o + t);
                    bad |= tg[r * T + t] != (int32_t)tok_at(o + t + 1);
                }
                CHECK(!bad, "%s: split %d step %ld row %d is not the window at %zu", what, split,
                      (long)step, r, o);
                for (int c = 0; c < ncuts; c++) crossings += o < cuts[c] && cuts[c] <= o + T;
            }
        }
    return crossings;
}

static void test_round_trip(void) {
    enum { N = 9000, T = 64 };
    uint32_t *tok = malloc(N * sizeof *tok);
    for (size_t i = 0; i < N; i++) tok[i] = tok_at(i);
    struct {
        const char *name;
        int format, width;
    } cases[] = {{"ours_u16.tok", OURS, 2},
                 {"ours_u32.tok", OURS, 4},
                 {"llmc_gpt2.bin", LLMC, 2},
                 {"llmc_llama3.bin", LLMC, 4}};
    for (int i = 0; i < 4; i++) {
        write_shard(path_of(cases[i].name), cases[i].format, cases[i].width, tok, N);
        mt_config c;
        config_for(&c, "tokens", path_of(cases[i].name), 65536, T);
        dataset ds;
        dataset_open(&ds, &c);
        CHECK(ds.n == N, "%s: %zu tokens, expected %d", cases[i].name, ds.n, N);
        CHECK(ds.n_train == (size_t)(N * 0.9), "%s: n_train %zu", cases[i].name, ds.n_train);
        check_windows(&ds, T, NULL, 0, cases[i].name);
        dataset_close(&ds);
    }
    free(tok);
}

// Shards of every format in one folder read as their concatenation, through a folder and
// through a glob, and exactly as one big shard does: same batches, bit for bit.
static void test_multi_shard(void) {
    enum { N = 9000, T = 64 };
    uint32_t *tok = malloc(N * sizeof *tok);
    for (size_t i = 0; i < N; i++) tok[i] = tok_at(i);
    mkdir(path_of("multi"), 0700);
    size_t cut[] = {1000, 1000, 5000, 8990}; // an empty shard, and a shard shorter than T
    write_shard(path_of("multi/s0.bin"), OURS, 2, tok, cut[0]);
    write_shard(path_of("multi/s1.tok"), OURS, 4, tok + cut[0], 0);
    write_shard(path_of("multi/s2.bin"), LLMC, 2, tok + cut[1], cut[2] - cut[1]);
    write_shard(path_of("multi/s3.tok"), LLMC, 4, tok + cut[2], cut[3] - cut[2]);
    write_shard(path_of("multi/s4.bin"), OURS, 2, tok + cut[3], N - cut[3]);
    write_file(path_of("multi/README"), "not a shard\n", 12, "", 0); // not *.bin or *.tok
    write_shard(path_of("whole.tok"), OURS, 2, tok, N);

    mt_config c;
    dataset dir, pat, whole;
    config_for(&c, "tokens", path_of("multi"), 65536, T);
    dataset_open(&dir, &c);
    config_for(&c, "tokens", path_of("multi/s[0-4].*"), 65536, T);
    dataset_open(&pat, &c);
    config_for(&c, "tokens", path_of("whole.tok"), 65536, T);
    dataset_open(&whole, &c);
    CHECK(dir.nshards == 5 && pat.nshards == 5, "%d and %d shards, expected 5", dir.nshards,
          pat.nshards);
    int crossings = check_windows(&dir, T, cut, 4, "folder");
    CHECK(crossings >= 10, "only %d windows crossed a shard boundary", crossings);
    check_windows(&pat, T, cut, 4, "glob");

    int32_t a[4 * T], b[4 * T], c2[4 * T], d[4 * T];
    int same = 1;
    for (int64_t step = 0; step < 100; step++) {
        dataset_batch(&dir, SPLIT_TRAIN, 7, step, 0, 4, T, a, b);
        dataset_batch(&whole, SPLIT_TRAIN, 7, step, 0, 4, T, c2, d);
        same &= !memcmp(a, c2, sizeof a) && !memcmp(b, d, sizeof b);
    }
    CHECK(same, "the shards do not read like the single file holding their concatenation");
    dataset_close(&dir);
    dataset_close(&pat);
    dataset_close(&whole);
    free(tok);
}

// "bytes" must read exactly what it read before shards existed: the window at the offset
// hashed from (seed, split, step, micro, row), one token per byte of the file.
static void test_bytes_unchanged(void) {
    enum { N = 5000, T = 32, ROWS = 4 };
    uint8_t text[N];
    for (int i = 0; i < N; i++) text[i] = (uint8_t)(splitmix64((uint64_t)i) >> 56);
    write_file(path_of("text.txt"), text, N, "", 0);
    mt_config c;
    config_for(&c, "bytes", path_of("text.txt"), 256, T);
    dataset ds;
    dataset_open(&ds, &c);
    int32_t in[ROWS * T], tg[ROWS * T];
    int ok = 1;
    for (int split = SPLIT_TRAIN; split <= SPLIT_VAL; split++)
        for (int64_t step = 0; step < 50; step++) {
            dataset_batch(&ds, split, 1337, step, 1, ROWS, T, in, tg);
            size_t lo = split ? ds.n_train : 0, hi = split ? N : ds.n_train;
            for (int r = 0; r < ROWS; r++) {
                uint64_t key =
                    splitmix64(1337 ^ splitmix64((uint64_t)split << 62 ^ (uint64_t)step << 24 ^
                                                 1ull << 12 ^ (uint64_t)r));
                size_t o = lo + key % (hi - lo - T);
                for (int t = 0; t < T; t++)
                    ok &= in[r * T + t] == text[o + t] && tg[r * T + t] == text[o + t + 1];
            }
        }
    CHECK(ds.n_train == (size_t)(N * 0.9), "bytes: n_train %zu", ds.n_train);
    CHECK(ok, "bytes: windows differ from the offsets hashed before token shards");
    dataset_close(&ds);
}

// data.val_path: evaluation reads its own stream (two shards here, windows crossing them), and
// training all of data.path; the two never mix.
static void test_val_path(void) {
    enum { N = 3000, M = 2000, CUT = 700, T = 64, ROWS = 8, VBASE = 500000 };
    uint32_t *tok = malloc(N * sizeof *tok), *val = malloc(M * sizeof *val);
    for (size_t i = 0; i < N; i++) tok[i] = tok_at(i);
    for (size_t i = 0; i < M; i++) val[i] = VBASE + 3 * (uint32_t)i;
    mkdir(path_of("vp"), 0700);
    mkdir(path_of("vp/val"), 0700);
    write_shard(path_of("vp/train.tok"), OURS, 2, tok, N);
    write_shard(path_of("vp/val/a.bin"), LLMC, 4, val, CUT);
    write_shard(path_of("vp/val/b.tok"), OURS, 4, val + CUT, M - CUT);
    mt_config c;
    config_for(&c, "tokens", path_of("vp/train.tok"), 1 << 22, T);
    snprintf(c.val_path, sizeof c.val_path, "%s", path_of("vp/val"));
    c.val_fraction = 0; // as the config loader sets it with val_path
    dataset ds;
    dataset_open(&ds, &c);
    CHECK(ds.n == N && ds.n_train == N && ds.val_n == M, "val_path: n %zu, n_train %zu, val %zu",
          ds.n, ds.n_train, ds.val_n);
    int32_t in[ROWS * T], tg[ROWS * T];
    int bad = 0, crossings = 0;
    size_t top = 0;
    for (int64_t step = 0; step < 200 && !bad; step++) {
        dataset_batch(&ds, SPLIT_VAL, 42, step, 0, ROWS, T, in, tg);
        for (int r = 0; r < ROWS && !bad; r++) {
            size_t o = (size_t)(in[r * T] - VBASE) / 3;
            bad |= in[r * T] < VBASE || o + T >= M;
            for (int t = 0; t < T; t++) {
                bad |= in[r * T + t] != (int32_t)val[o + t];
                bad |= o + t + 1 < M && tg[r * T + t] != (int32_t)val[o + t + 1];
            }
            crossings += o < CUT && CUT <= o + T;
        }
        CHECK(!bad, "val_path: step %ld: a validation row is not a window of the val stream",
              (long)step);
        dataset_batch(&ds, SPLIT_TRAIN, 42, step, 0, ROWS, T, in, tg);
        for (int r = 0; r < ROWS && !bad; r++) {
            size_t o = (size_t)(in[r * T] - B) / K;
            bad |=
                in[r * T] >= VBASE || o + T >= N || in[r * T + T - 1] != (int32_t)tok_at(o + T - 1);
            top = o + T > top ? o + T : top;
        }
        CHECK(!bad, "val_path: step %ld: a training row is not a window of data.path", (long)step);
    }
    CHECK(crossings >= 10, "val_path: only %d windows crossed the val shards' boundary", crossings);
    CHECK(top > N * 0.95, "val_path: training windows reach only %zu of %d tokens", top, N);
    dataset_close(&ds);
    free(tok), free(val);
}

// ---- bad input ----

// mt_config_load on a config whose data is format "tokens" at path (plus `extra` settings in
// the data group): must fail with one line "bad.cfg:2: <key>: " that names file and says what.
static void expect_data_error(const char *name, const char *path, const char *extra,
                              const char *key, const char *file, const char *what) {
    char cfg[512], err[1024], where[64];
    snprintf(cfg, sizeof cfg, "%s/bad.cfg", tmp);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "model = { dim = 64; layers = 1; heads = 4; ffn_dim = 128; vocab = 300; };\n"
            "data = { path = \"%s\"; format = \"tokens\"; %s };\n"
            "batch = { micro_batch = 1; micro_batches = 1; seq_len = 16; };\n"
            "optimizer = { lr = 1e-3; };\nsteps = 1;\nbackend = \"cpu\";\n",
            path, extra);
    fclose(f);
    mt_config c;
    int rc = mt_config_load(&c, cfg, err, sizeof err);
    snprintf(where, sizeof where, "bad.cfg:2: %s: ", key);
    int ok = rc == -1 && !strchr(err, '\n') && strstr(err, file) && strstr(err, what) &&
             strstr(err, where);
    CHECK(ok, "%s: rc %d, message '%s' should name %s and say '%s'", name, rc, err, file, what);
    if (ok) printf("ok   %s: %s\n", name, err);
}

static void expect_config_error(const char *name, const char *path, const char *file,
                                const char *what) {
    expect_data_error(name, path, "", "data.path", file, what);
}

static void cut_to(const char *path, off_t size) {
    if (truncate(path, size) != 0) perror(path), exit(1);
}

static void test_config_errors(void) {
    uint32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)i;
    mkdir(path_of("bad"), 0700);
    mkdir(path_of("empty"), 0700);
    expect_config_error("missing file", path_of("bad/none.bin"), path_of("bad/none.bin"),
                        "No such file");
    expect_config_error("empty glob", path_of("bad/*.none"), path_of("bad/*.none"),
                        "no file matches");
    expect_config_error("empty folder", path_of("empty"), path_of("empty"),
                        "no *.bin or *.tok files");

    write_file(path_of("bad/magic.bin"), "MTCTOKS2", 8, tok, 300);
    expect_config_error("wrong magic", path_of("bad/magic.bin"), path_of("bad/magic.bin"),
                        "wrong magic");
    remove(path_of("bad/magic.bin"));

    write_shard(path_of("bad/short.bin"), OURS, 2, tok, 100);
    cut_to(path_of("bad/short.bin"), 256 + 2 * 99);
    expect_config_error("truncated", path_of("bad/*.bin"), path_of("bad/short.bin"),
                        "header says 100 tokens (200 bytes), but 198 bytes follow it");
    write_shard(path_of("bad/short.bin"), LLMC, 2, tok, 100);
    cut_to(path_of("bad/short.bin"), 1024 + 2 * 100 + 1);
    expect_config_error("llm.c shard with a stray byte", path_of("bad"), path_of("bad/short.bin"),
                        "but 201 bytes follow it");
    cut_to(path_of("bad/short.bin"), 500);
    expect_config_error("cut inside the header", path_of("bad"), path_of("bad/short.bin"),
                        "shorter than llm.c's 1024-byte header");
    remove(path_of("bad/short.bin"));

    write_shard(path_of("bad/few.tok"), OURS, 2, tok, 10);
    expect_config_error("too few tokens", path_of("bad"), path_of("bad"), "training tokens");

    char extra[600];
    write_shard(path_of("bad/good.tok"), OURS, 2, tok, 100);
    snprintf(extra, sizeof extra, "val_path = \"%s\";", path_of("bad/none.bin"));
    expect_data_error("missing val_path", path_of("bad/good.tok"), extra, "data.val_path",
                      path_of("bad/none.bin"), "No such file");
    snprintf(extra, sizeof extra, "val_path = \"%s\";", path_of("bad/few.tok"));
    expect_data_error("val_path too short", path_of("bad/good.tok"), extra, "data.val_path",
                      path_of("bad/few.tok"), "10 tokens, fewer than batch.seq_len + 1 = 17");
    snprintf(extra, sizeof extra, "val_path = \"%s\"; val_fraction = 0.2;",
             path_of("bad/good.tok"));
    expect_data_error("val_path with val_fraction", path_of("bad/good.tok"), extra,
                      "data.val_fraction", "", "not used with data.val_path");
    remove(path_of("bad/few.tok"));
    remove(path_of("bad/good.tok"));
}

// dataset_open in a child, which must exit 2 (bad input) with one line on stderr naming the
// file and index.
static void expect_load_error(const char *name, const char *path, int vocab, const char *file,
                              const char *what) {
    int fds[2];
    if (pipe(fds) != 0) exit(1);
    pid_t pid = fork();
    if (pid == 0) { // a fresh exec: OpenMP's thread pool does not survive a fork
        char v[16];
        snprintf(v, sizeof v, "%d", vocab);
        dup2(fds[1], 2);
        execl("/proc/self/exe", "test_data", "load", path, v, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char msg[2048] = "";
    size_t got = 0;
    ssize_t r;
    while ((r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)r;
    msg[got] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    char *nl = strchr(msg, '\n');
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 2 && nl && nl[1] == 0 &&
             strstr(msg, file) && strstr(msg, what);
    if (nl) *nl = 0;
    CHECK(ok, "%s: status %d, message '%s' should name %s and say '%s'", name, status, msg, file,
          what);
    if (ok) printf("ok   %s: %s\n", name, msg);
}

static void test_load_errors(void) {
    enum { N = 2000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(i % 300);
    mkdir(path_of("range"), 0700);
    write_shard(path_of("range/a.bin"), OURS, 2, tok, N);
    tok[1234] = 300;
    write_shard(path_of("range/b.bin"), LLMC, 2, tok, N);
    expect_load_error("token >= vocab (uint16)", path_of("range"), 300, path_of("range/b.bin"),
                      "token 300 at index 1234 is >= model.vocab = 300");
    tok[1234] = 0;
    tok[N - 1] = 1u << 20;
    write_shard(path_of("range/b.bin"), OURS, 4, tok, N);
    expect_load_error("token >= vocab (uint32)", path_of("range"), 300, path_of("range/b.bin"),
                      "token 1048576 at index 1999 is >= model.vocab = 300");
}

// ---- the shard writer for data_e2e.sh ----

// IN's bytes, one token each, as three shards cut at 1/3 and 2/3: ours uint16, llm.c's
// uint16, ours uint32. Read in path order, they are IN again.
static int split_file(const char *in, const char *dir) {
    FILE *f = fopen(in, "rb");
    if (!f) return perror(in), 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    rewind(f);
    uint8_t *bytes = malloc(n);
    uint32_t *tok = malloc(n * sizeof *tok);
    if (fread(bytes, 1, n, f) != n) return perror(in), 1;
    fclose(f);
    for (size_t i = 0; i < n; i++) tok[i] = bytes[i];
    size_t a = n / 3, b = 2 * n / 3;
    char p[1024];
    snprintf(p, sizeof p, "%s/part-0.tok", dir);
    write_shard(p, OURS, 2, tok, a);
    snprintf(p, sizeof p, "%s/part-1.bin", dir);
    write_shard(p, LLMC, 2, tok + a, b - a);
    snprintf(p, sizeof p, "%s/part-2.tok", dir);
    write_shard(p, OURS, 4, tok + b, n - b);
    free(bytes);
    free(tok);
    return 0;
}

static void remove_tree(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

// test_data load PATH VOCAB: the child of expect_load_error.
static int load(const char *path, const char *vocab) {
    mt_config c;
    config_for(&c, "tokens", path, atoi(vocab), 16);
    dataset ds;
    dataset_open(&ds, &c);
    dataset_close(&ds);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "split") == 0) return split_file(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "load") == 0) return load(argv[2], argv[3]);
    snprintf(tmp, sizeof tmp, "/tmp/mt-test-data.XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    test_round_trip();
    test_multi_shard();
    test_bytes_unchanged();
    test_val_path();
    test_config_errors();
    test_load_errors();
    remove_tree(tmp);
    return tests_summary();
}
