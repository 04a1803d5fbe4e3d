// A Hugging Face config.json through hf_read_config: architecture, shape and the features
// this trainer refuses.
#include "runtime/model/model.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mt_model model;
    char err[4096];
    fuzz_write("config.json", data, size);
    hf_read_config(fuzz_dir(), 256, &model, err, sizeof err);
    return 0;
}
