// A token shard's header (ours, "MTCTOKS1", or llm.c's) through dataset_check_shards: the
// magic, version, token width and the count against the file's size.
#include "runtime/io/io.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[4096];
    size_t tokens;
    dataset_check_shards(fuzz_write("shard.bin", data, size), &tokens, err, sizeof err);
    return 0;
}
