// The byte-string map behind mt-tokenize's vocab and word cache, and allocation that ends the
// program with one line when memory runs out.
#include "tools/tokenize/strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void *tok_calloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "mt-tokenize: out of memory\n");
        exit(1);
    }
    return p;
}

void *tok_realloc(void *p, size_t sz) {
    p = realloc(p, sz);
    if (!p) {
        fprintf(stderr, "mt-tokenize: out of memory\n");
        exit(1);
    }
    return p;
}

void strmap_init(strmap *m, size_t want) {
    m->cap = 16;
    while (m->cap < want * 2) m->cap *= 2;
    m->key = tok_calloc(m->cap, sizeof *m->key);
    m->klen = tok_calloc(m->cap, sizeof *m->klen);
    m->val = tok_calloc(m->cap, sizeof *m->val);
    m->n = 0;
}

void strmap_free(strmap *m) {
    for (size_t i = 0; m->key && i < m->cap; i++) free(m->key[i]);
    free(m->key);
    free(m->klen);
    free(m->val);
    memset(m, 0, sizeof *m);
}

static size_t strmap_slot(const strmap *m, const char *s, size_t n) {
    size_t i = hash_bytes(s, n) & (m->cap - 1);
    while (m->key[i] && !(m->klen[i] == n && memcmp(m->key[i], s, n) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

int strmap_get(const strmap *m, const char *s, size_t n, uint32_t *val) {
    size_t i = strmap_slot(m, s, n);
    if (!m->key[i]) return 0;
    *val = m->val[i];
    return 1;
}

// Caller keeps the load under one half (strmap_init sizes for it; the cache is emptied).
void strmap_put(strmap *m, const char *s, size_t n, uint32_t val) {
    size_t i = strmap_slot(m, s, n);
    if (!m->key[i]) {
        m->key[i] = tok_calloc(n + 1, 1);
        memcpy(m->key[i], s, n);
        m->klen[i] = (uint32_t)n;
        m->n++;
    }
    m->val[i] = val;
}
