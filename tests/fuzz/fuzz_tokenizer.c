// A Hugging Face tokenizer.json through bpe_load, and, when it loads, the encoding of a text
// that touches bytes, merges, added tokens and invalid UTF-8.
#include "tests/fuzz/fuzz.h"
#include "tools/tokenize/bpe.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[4096];
    bpe *t = bpe_load(fuzz_write("tokenizer.json", data, size), 0, err, sizeof err);
    if (!t) return 0;
    static const char text[] = "hello world<|endoftext|> \n\n  caf\xc3\xa9 123 \xff tail";
    bpe_ids ids = {0};
    bpe_encode(t, text, sizeof text - 1, 0, &ids, err, sizeof err);
    free(ids.ids);
    bpe_free(t);
    return 0;
}
