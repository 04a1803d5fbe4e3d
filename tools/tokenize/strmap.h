#ifndef MT_TOKENIZE_STRMAP_H
#define MT_TOKENIZE_STRMAP_H

// Open-addressing map from a byte string to a uint32 (bpe.c's vocab: token -> id; its cache:
// word -> offset of the word's ids).
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **key;
    uint32_t *klen, *val;
    size_t cap, n;
} strmap;

void strmap_init(strmap *m, size_t want); // room for `want` keys at under half load
void strmap_free(strmap *m);
int strmap_get(const strmap *m, const char *s, size_t n, uint32_t *val); // 1: found
// Caller keeps the load under one half (strmap_init sizes for it; the cache is emptied).
void strmap_put(strmap *m, const char *s, size_t n, uint32_t val);

// calloc and realloc that print "mt-tokenize: out of memory" and exit(1) instead of failing.
void *tok_calloc(size_t n, size_t sz);
void *tok_realloc(void *p, size_t sz);

#endif
