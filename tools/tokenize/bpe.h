#ifndef MT_TOKENIZE_BPE_H
#define MT_TOKENIZE_BPE_H

// Byte-level BPE from a Hugging Face tokenizer.json (GPT-2 / Llama-3 / Qwen2 style).
#include <stddef.h>
#include <stdint.h>

typedef struct bpe bpe;

// A growing array of token ids.
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} bpe_ids;

// bpe_load flags: the caller vouches that the text is already in Unicode NFC, so a "NFC"
// normalizer (Qwen2) is a no-op; this tokenizer has no Unicode normalization tables.
#define BPE_ASSUME_NFC 1u

// Loads tokenizer.json. On failure returns NULL and puts one line naming the file in err;
// every feature this tokenizer cannot reproduce exactly is such a failure.
bpe *bpe_load(const char *path, unsigned flags, char *err, size_t errlen);
void bpe_free(bpe *t);
// One more than the largest id of the vocab and the added tokens.
uint64_t bpe_vocab_size(const bpe *t);
// The bytes of text that token id stands for (its encoding's offsets add these up).
size_t bpe_token_bytes(const bpe *t, uint32_t id);
// The id of a token's content (vocab or added token), or -1.
int64_t bpe_token_id(const bpe *t, const char *content);
// Appends the ids of UTF-8 text. `continued` says the text goes on from a previous call
// (no prefix space). Returns 0, or -1 with a reason (for example invalid UTF-8 at an offset).
int bpe_encode(bpe *t, const char *text, size_t len, int continued, bpe_ids *out, char *err,
               size_t errlen);
void bpe_ids_push(bpe_ids *a, uint32_t id);
// Offset of the first invalid UTF-8 sequence in text[0..n) (overlong forms, surrogates and code
// points past U+10FFFF included), or n when it is all valid.
size_t utf8_invalid_at(const char *text, size_t n);
// 1 when text may be encoded in pieces cut between an ASCII letter and '\n' with the same
// result: the pre-tokenizer patterns are the known GPT-2 / Llama-3 / Qwen2 ones, which never
// join a letter and a following newline, and no added token holds a newline.
int bpe_can_cut(const bpe *t);

#endif
