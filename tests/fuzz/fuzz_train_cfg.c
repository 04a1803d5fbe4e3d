// train.cfg through mt_config_load, as mtrun and every rank load it: libconfig's parser, the
// schema, the rules between fields, and the checks of the files it names (read, never written).
#include "runtime/io/io.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static mt_config cfg;
    char err[4096];
    mt_config_load(&cfg, fuzz_write("train.cfg", data, size), err, sizeof err);
    return 0;
}
