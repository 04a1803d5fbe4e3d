// A model.safetensors file through hf_index_open: the 8-byte header length, the JSON header,
// each tensor's dtype, shape and offsets, overlaps; then a read of every tensor it lists that
// the index accepted, so that offsets it let through are exercised.
#include "runtime/io/io.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[4096];
    fuzz_write("model.safetensors", data, size);
    hf_index *ix = hf_index_open(fuzz_dir(), err, sizeof err);
    if (!ix) return 0;
    static float out[64];
    const char *names[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
    for (int i = 0; i < 3; i++) hf_read_range(ix, names[i], 0, 64, out, err, sizeof err);
    hf_index_close(ix);
    return 0;
}
