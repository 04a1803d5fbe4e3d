#include "runtime/data.h"
#include "runtime/hash.h"
#include "shm/syscheck.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void dataset_open(dataset *ds, const mt_config *c) {
    memset(ds, 0, sizeof *ds);
    if (strcmp(c->data_format, "synthetic") == 0) { // for benchmarks: no file to read
        ds->n = (size_t)1 << 40;
        ds->n_train = ds->n - (ds->n >> 4);
        ds->vocab = c->vocab;
        return;
    }
    int fd = open(c->data_path, O_RDONLY);
    if (fd < 0) mt_die("%s: cannot open: %s", c->data_path, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(fd, &st));
    ds->n = (size_t)st.st_size;
    size_t need = 2 * ((size_t)c->seq_len + 1);
    if (ds->n < need)
        mt_die("%s: %zu tokens, too few for seq_len %d (need at least %zu)", c->data_path, ds->n,
               c->seq_len, need);
    ds->bytes = mmap(NULL, ds->n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (ds->bytes == MAP_FAILED) mt_die("%s: mmap: %s", c->data_path, strerror(errno));
    SYS_CHECK(close(fd));
    ds->n_train = (size_t)(ds->n * (1.0 - c->val_fraction));
    if (ds->n_train < (size_t)c->seq_len + 1) ds->n_train = c->seq_len + 1;
    if (ds->n - ds->n_train < (size_t)c->seq_len + 1) ds->n_train = ds->n - c->seq_len - 1;
}

void dataset_close(dataset *ds) {
    if (ds->bytes) SYS_CHECK(munmap((void *)ds->bytes, ds->n));
    ds->bytes = NULL;
}

static int32_t token_at(const dataset *ds, size_t i) {
    if (ds->bytes) return ds->bytes[i];
    return (int32_t)(splitmix64(i) % (uint64_t)ds->vocab);
}

void dataset_batch(const dataset *ds, int split, uint64_t seed, int64_t step, int micro, int rows,
                   int T, int32_t *inputs, int32_t *targets) {
    size_t lo = split == SPLIT_TRAIN ? 0 : ds->n_train;
    size_t hi = split == SPLIT_TRAIN ? ds->n_train : ds->n;
    size_t span = hi - lo - (size_t)T; // windows [o, o + T] with o + T < hi
    for (int r = 0; r < rows; r++) {
        uint64_t key = splitmix64(seed ^ splitmix64((uint64_t)split << 62 ^ (uint64_t)step << 24 ^
                                      (uint64_t)micro << 12 ^ (uint64_t)r));
        size_t o = lo + key % span;
        for (int t = 0; t < T; t++) {
            inputs[r * T + t] = token_at(ds, o + t);
            targets[r * T + t] = token_at(ds, o + t + 1);
        }
    }
}
