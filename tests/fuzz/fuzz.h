// What every fuzz target shares: the libFuzzer entry point, and a scratch folder of its own
// for the parsers that read files by path (they are fuzzed through the same open/read/mmap
// a user's file goes through, not through a buffer interface the product does not have).
#ifndef MT_FUZZ_H
#define MT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// This process's scratch folder, made at the first call and removed with its files at exit.
const char *fuzz_dir(void);
// data written to fuzz_dir()/name, replacing what was there; returns the file's path (static).
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);

#endif
