// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json.
//
// Encoding follows the tokenizers library: split the text on added tokens first (leftmost,
// longest), run the regex pre-tokenizer(s) on each remaining segment (every piece, matched or
// not, is kept: behavior "Isolated"), map each piece's bytes through GPT-2's byte-to-unicode
// table, then merge the lowest-rank adjacent pair until none is in the merge list.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tools/tokenize/bpe.h"
#include "tools/tokenize/strmap.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The pattern tokenizers' ByteLevel uses when use_regex is true; it is not in the JSON.
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Llama-3's and Qwen2's Split patterns, for bpe_can_cut only.
static const char *const KNOWN_PATTERNS[] = {
    GPT2_PATTERN,
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
#define MAX_STAGES 4
// Token ids stay below 2^24, model.vocab's bound: a table per id (token_bytes) is then small,
// and an id from a stranger's file cannot ask for gigabytes.
#define MAX_ID 16777216.0
#define CACHE_MAX (1u << 20) // words cached before the cache is emptied

// Open-addressing map from a pair of ids to (rank, merged id).
typedef struct {
    uint64_t *key;
    uint32_t *rank, *merged;
    size_t cap;
} pairmap;

typedef struct {
    char *content;
    size_t len;
    uint32_t id;
} added_tok;

struct bpe {
    strmap vocab;
    pairmap merges;
    uint64_t vocab_size;
    uint32_t byte_id[256]; // id of each byte's byte-level character; UINT32_MAX if none
    int ignore_merges;     // a word that is itself in the vocab is one token (Llama-3)
    int add_prefix_space;
    added_tok *added;
    size_t nadded;
    unsigned char added_first[256]; // some added token starts with this byte
    pcre2_code *re[MAX_STAGES];
    pcre2_match_data *md[MAX_STAGES];
    int nstages;
    int can_cut;
    strmap cache;
    bpe_ids pool; // ids of cached words
    uint32_t *sym;
    size_t symcap;
    uint32_t *token_bytes; // [vocab_size]: the bytes of text each id stands for
    char *scratch;         // prefix-space copy / byte-level string
    size_t scratchcap;
};

static size_t pair_slot(const pairmap *m, uint64_t key) {
    size_t i = (key * 0x9E3779B97F4A7C15ull >> 20) & (m->cap - 1);
    while (m->key[i] != UINT64_MAX && m->key[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

static void err_set(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void bpe_ids_push(bpe_ids *a, uint32_t id) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->ids = tok_realloc(a->ids, a->cap * sizeof *a->ids);
    }
    a->ids[a->n++] = id;
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 upward.
static unsigned byte_to_codepoint(unsigned b) {
    static unsigned table[256];
    static int ready;
    if (!ready) {
        unsigned next = 256;
        for (unsigned c = 0; c < 256; c++) {
            int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            table[c] = printable ? c : next++;
        }
        ready = 1;
    }
    return table[b];
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | cp >> 6); // byte-level code points are all below U+0800
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static cJSON *read_json(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, errlen, "%s: cannot open: %m", path);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0, r;
    char *buf = tok_calloc(cap, 1);
    while ((r = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += r) == cap) buf = tok_realloc(buf, cap *= 2);
    fclose(f);
    cJSON *j = cJSON_ParseWithLength(buf, n);
    if (!j) err_set(err, errlen, "%s: not valid JSON", path);
    free(buf);
    return j;
}

static int load_vocab(bpe *t, const cJSON *vocab, const char *path, char *err, size_t errlen) {
    strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab) + 512);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_ID) {
            err_set(err, errlen, "%s: model.vocab: \"%s\" has no valid id (0 to 2^24 - 1)", path,
                    e->string);
            return -1;
        }
        uint32_t id = (uint32_t)e->valuedouble;
        strmap_put(&t->vocab, e->string, strlen(e->string), id);
        if (id + 1ull > t->vocab_size) t->vocab_size = id + 1ull;
    }
    char s[4];
    for (unsigned b = 0; b < 256; b++) {
        size_t n = put_utf8(s, byte_to_codepoint(b));
        if (!strmap_get(&t->vocab, s, n, &t->byte_id[b])) t->byte_id[b] = UINT32_MAX;
    }
    return 0;
}

// A merge is "a b" (older files) or ["a", "b"] (newer files).
static int merge_parts(const cJSON *m, const char **a, size_t *na, const char **b, size_t *nb) {
    if (cJSON_IsString(m)) {
        const char *sp = strchr(m->valuestring, ' ');
        if (!sp || strchr(sp + 1, ' ')) return -1;
        *a = m->valuestring, *na = (size_t)(sp - m->valuestring);
        *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_GetArraySize(m) != 2) return -1;
    const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
    if (!cJSON_IsString(x) || !cJSON_IsString(y)) return -1;
    *a = x->valuestring, *na = strlen(*a), *b = y->valuestring, *nb = strlen(*b);
    return 0;
}

static int load_merges(bpe *t, const cJSON *merges, const char *path, char *err, size_t errlen) {
    size_t n = (size_t)cJSON_GetArraySize(merges), cap = 16, rank = 0;
    while (cap < n * 2) cap *= 2;
    t->merges.cap = cap;
    t->merges.key = tok_calloc(cap, sizeof(uint64_t));
    memset(t->merges.key, 0xFF, cap * sizeof(uint64_t));
    t->merges.rank = tok_calloc(cap, sizeof(uint32_t));
    t->merges.merged = tok_calloc(cap, sizeof(uint32_t));
    char buf[1024];
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t na, nb;
        uint32_t ia, ib, im;
        if (merge_parts(m, &a, &na, &b, &nb) != 0 || na + nb >= sizeof buf) {
            err_set(err, errlen, "%s: model.merges[%zu] is not a pair of tokens", path, rank);
            return -1;
        }
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        if (!strmap_get(&t->vocab, a, na, &ia) || !strmap_get(&t->vocab, b, nb, &ib) ||
            !strmap_get(&t->vocab, buf, na + nb, &im)) {
            err_set(err, errlen,
                    "%s: model.merges[%zu] (\"%.*s\" \"%.*s\") names a token not in "
                    "model.vocab",
                    path, rank, (int)na, a, (int)nb, b);
            return -1;
        }
        uint64_t key = (uint64_t)ia << 32 | ib;
        size_t i = pair_slot(&t->merges, key);
        if (t->merges.key[i] == key) continue; // a repeated merge keeps its first rank
        t->merges.key[i] = key;
        t->merges.rank[i] = (uint32_t)rank;
        t->merges.merged[i] = im;
    }
    return 0;
}

static int is_null(const cJSON *j) {
    return !j || cJSON_IsNull(j);
}

static int is_true(const cJSON *obj, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

static const char *type_of(const cJSON *j) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "(no type)";
}

static int load_model(bpe *t, const cJSON *model, const char *path, char *err, size_t errlen) {
    if (!cJSON_IsObject(model)) {
        err_set(err, errlen, "%s: no \"model\" object", path);
        return -1;
    }
    const char *type = type_of(model);
    if (strcmp(type, "BPE") != 0) {
        err_set(err, errlen, "%s: model type \"%s\" is not supported (only BPE)", path, type);
        return -1;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        err_set(err, errlen, "%s: model has no %s", path,
                !cJSON_IsObject(vocab) ? "\"vocab\" object" : "\"merges\" array");
        return -1;
    }
    // Options that change the output and that this tokenizer does not implement.
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
    const char *bad = !is_null(cJSON_GetObjectItemCaseSensitive(model, "dropout")) ? "dropout"
                      : is_true(model, "byte_fallback")                            ? "byte_fallback"
                      : !is_null(prefix) && strcmp(cJSON_GetStringValue(prefix) ?: "x", "") != 0
                          ? "continuing_subword_prefix"
                      : !is_null(suffix) && strcmp(cJSON_GetStringValue(suffix) ?: "x", "") != 0
                          ? "end_of_word_suffix"
                          : NULL;
    if (bad) {
        err_set(err, errlen, "%s: model.%s is not supported", path, bad);
        return -1;
    }
    t->ignore_merges = is_true(model, "ignore_merges");
    if (load_vocab(t, vocab, path, err, errlen) != 0) return -1;
    return load_merges(t, merges, path, err, errlen);
}

static int known_pattern(const char *pattern) {
    for (size_t i = 0; i < sizeof KNOWN_PATTERNS / sizeof *KNOWN_PATTERNS; i++)
        if (strcmp(pattern, KNOWN_PATTERNS[i]) == 0) return 1;
    return 0;
}

static int add_stage(bpe *t, const char *pattern, const char *path, char *err, size_t errlen) {
    int code;
    if (!known_pattern(pattern)) t->can_cut = 0;
    PCRE2_SIZE off;
    if (t->nstages == MAX_STAGES) {
        err_set(err, errlen, "%s: more than %d regex pre-tokenizers", path, MAX_STAGES);
        return -1;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        err_set(err, errlen, "%s: pre_tokenizer regex does not compile at offset %zu: %s", path,
                (size_t)off, (char *)msg);
        return -1;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if no JIT
    t->re[t->nstages] = re;
    t->md[t->nstages++] = pcre2_match_data_create_from_pattern(re, NULL);
    return 0;
}

// One pre-tokenizer of the chain: Split(Regex, Isolated) or ByteLevel (which must be last).
static int load_pretok_one(bpe *t, const cJSON *p, int last, const char *path, char *err,
                           size_t errlen) {
    const char *type = type_of(p);
    if (strcmp(type, "ByteLevel") == 0) {
        if (!last) {
            err_set(err, errlen, "%s: pre_tokenizer ByteLevel must come last", path);
            return -1;
        }
        t->add_prefix_space = is_true(p, "add_prefix_space");
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (is_null(ur) || cJSON_IsTrue(ur)) return add_stage(t, GPT2_PATTERN, path, err, errlen);
        return 0;
    }
    if (strcmp(type, "Split") == 0 && !last) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *re = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pat, "Regex"));
        const char *beh = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "behavior"));
        if (re && beh && strcmp(beh, "Isolated") == 0 && !is_true(p, "invert"))
            return add_stage(t, re, path, err, errlen);
        err_set(err, errlen,
                "%s: pre_tokenizer Split is supported only with a Regex pattern, "
                "behavior Isolated and invert false",
                path);
        return -1;
    }
    err_set(err, errlen,
            "%s: pre_tokenizer \"%s\" is not supported (ByteLevel, or a Sequence "
            "of Split(Regex) ending with ByteLevel)",
            path, type);
    return -1;
}

static int load_normalizer(const cJSON *root, unsigned flags, const char *path, char *err,
                           size_t errlen) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (is_null(norm)) return 0;
    int nfc = strcmp(type_of(norm), "NFC") == 0;
    if (nfc && (flags & BPE_ASSUME_NFC)) return 0;
    err_set(err, errlen, "%s: normalizer \"%s\" is not supported%s", path, type_of(norm),
            nfc ? " (--assume-nfc if the text is already in NFC)" : "");
    return -1;
}

static int load_pretok(bpe *t, const cJSON *root, const char *path, char *err, size_t errlen) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (is_null(p)) {
        err_set(err, errlen, "%s: no pre_tokenizer: only byte-level BPE is supported", path);
        return -1;
    }
    if (strcmp(type_of(p), "Sequence") != 0) return load_pretok_one(t, p, 1, path, err, errlen);
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    int n = cJSON_GetArraySize(seq), i = 0;
    if (n == 0) {
        err_set(err, errlen, "%s: pre_tokenizer Sequence is empty", path);
        return -1;
    }
    for (const cJSON *e = seq->child; e; e = e->next, i++)
        if (load_pretok_one(t, e, i == n - 1, path, err, errlen) != 0) return -1;
    return 0;
}

static int load_added(bpe *t, const cJSON *root, const char *path, char *err, size_t errlen) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    t->added = tok_calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *t->added);
    for (const cJSON *a = arr ? arr->child : NULL; a; a = a->next) {
        const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "content"));
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (!content || !*content || !cJSON_IsNumber(id) || id->valuedouble < 0 ||
            id->valuedouble >= MAX_ID) {
            err_set(err, errlen, "%s: added_tokens[%zu] needs a content and an id (0 to 2^24 - 1)",
                    path, t->nadded);
            return -1;
        }
        const char *opt = is_true(a, "single_word") ? "single_word"
                          : is_true(a, "lstrip")    ? "lstrip"
                          : is_true(a, "rstrip")    ? "rstrip"
                                                    : NULL;
        if (opt) {
            err_set(err, errlen, "%s: added token \"%s\": %s is not supported", path, content, opt);
            return -1;
        }
        added_tok *d = &t->added[t->nadded++];
        d->content = strdup(content);
        d->len = strlen(content);
        if (strchr(content, '\n')) t->can_cut = 0;
        d->id = (uint32_t)id->valuedouble;
        t->added_first[(unsigned char)content[0]] = 1;
        if (d->id + 1ull > t->vocab_size) t->vocab_size = d->id + 1ull;
    }
    return 0;
}

// A vocab token is byte-level text: one character per byte it stands for. An added token
// stands for its content.
static void load_token_bytes(bpe *t) {
    t->token_bytes = tok_calloc(t->vocab_size, sizeof *t->token_bytes);
    for (size_t i = 0; i < t->vocab.cap; i++) {
        if (!t->vocab.key[i]) continue;
        uint32_t chars = 0;
        for (uint32_t k = 0; k < t->vocab.klen[i]; k++)
            chars += ((unsigned char)t->vocab.key[i][k] & 0xC0) != 0x80;
        t->token_bytes[t->vocab.val[i]] = chars;
    }
    for (size_t i = 0; i < t->nadded; i++)
        t->token_bytes[t->added[i].id] = (uint32_t)t->added[i].len;
}

bpe *bpe_load(const char *path, unsigned flags, char *err, size_t errlen) {
    cJSON *root = read_json(path, err, errlen);
    if (!root) return NULL;
    bpe *t = tok_calloc(1, sizeof *t);
    t->can_cut = 1;
    int rc = load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), path, err, errlen);
    if (rc == 0) rc = load_normalizer(root, flags, path, err, errlen);
    if (rc == 0) rc = load_pretok(t, root, path, err, errlen);
    if (rc == 0) rc = load_added(t, root, path, err, errlen);
    cJSON_Delete(root);
    if (rc != 0) {
        bpe_free(t);
        return NULL;
    }
    strmap_init(&t->cache, CACHE_MAX);
    load_token_bytes(t);
    return t;
}

void bpe_free(bpe *t) {
    if (!t) return;
    strmap_free(&t->vocab);
    strmap_free(&t->cache);
    free(t->merges.key);
    free(t->merges.rank);
    free(t->merges.merged);
    for (size_t i = 0; i < t->nadded; i++) free(t->added[i].content);
    free(t->added);
    for (int i = 0; i < t->nstages; i++) {
        pcre2_match_data_free(t->md[i]);
        pcre2_code_free(t->re[i]);
    }
    free(t->pool.ids);
    free(t->token_bytes);
    free(t->sym);
    free(t->scratch);
    free(t);
}

uint64_t bpe_vocab_size(const bpe *t) {
    return t->vocab_size;
}

size_t bpe_token_bytes(const bpe *t, uint32_t id) {
    return id < t->vocab_size ? t->token_bytes[id] : 0;
}

int bpe_can_cut(const bpe *t) {
    return t->can_cut;
}

int64_t bpe_token_id(const bpe *t, const char *content) {
    for (size_t i = 0; i < t->nadded; i++)
        if (strcmp(t->added[i].content, content) == 0) return t->added[i].id;
    uint32_t id;
    return strmap_get(&t->vocab, content, strlen(content), &id) ? (int64_t)id : -1;
}

static char *scratch(bpe *t, size_t n) {
    if (n > t->scratchcap) {
        t->scratchcap = n * 2;
        t->scratch = tok_realloc(t->scratch, t->scratchcap);
    }
    return t->scratch;
}

// Merges one pre-tokenized word: repeatedly the lowest-rank pair, leftmost on ties, as
// tokenizers' priority queue does.
static int merge_word(bpe *t, const unsigned char *p, size_t n, bpe_ids *out) {
    if (n > t->symcap) {
        t->symcap = n * 2;
        t->sym = tok_realloc(t->sym, t->symcap * sizeof *t->sym);
    }
    uint32_t *s = t->sym;
    for (size_t i = 0; i < n; i++)
        if ((s[i] = t->byte_id[p[i]]) == UINT32_MAX) return -(int)p[i] - 1;
    for (size_t m = n; m > 1; m--) {
        uint32_t best = UINT32_MAX, merged = 0;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            size_t k = pair_slot(&t->merges, (uint64_t)s[i] << 32 | s[i + 1]);
            if (t->merges.key[k] != UINT64_MAX && t->merges.rank[k] < best)
                best = t->merges.rank[k], merged = t->merges.merged[k], at = i;
        }
        if (best == UINT32_MAX) break;
        s[at] = merged;
        memmove(s + at + 1, s + at + 2, (m - at - 2) * sizeof *s);
        n = m - 1;
    }
    for (size_t i = 0; i < n; i++) bpe_ids_push(out, s[i]);
    return 0;
}

// Llama-3's ignore_merges: a word whose byte-level string is a vocab token is that token.
static int whole_word(bpe *t, const unsigned char *p, size_t n, uint32_t *id) {
    char *s = scratch(t, 2 * n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += put_utf8(s + k, byte_to_codepoint(p[i]));
    return strmap_get(&t->vocab, s, k, id);
}

static int encode_word(bpe *t, const char *p, size_t n, bpe_ids *out, char *err, size_t errlen) {
    uint32_t v, id;
    if (n == 0) return 0;
    if (strmap_get(&t->cache, p, n, &v)) { // v: pool offset; pool[v] = count
        for (uint32_t i = 0; i < t->pool.ids[v]; i++) bpe_ids_push(out, t->pool.ids[v + 1 + i]);
        return 0;
    }
    size_t start = out->n;
    if (t->ignore_merges && whole_word(t, (const unsigned char *)p, n, &id)) {
        bpe_ids_push(out, id);
    } else {
        int rc = merge_word(t, (const unsigned char *)p, n, out);
        if (rc != 0) {
            err_set(err, errlen, "byte 0x%02x has no token in the vocab", -rc - 1);
            return -1;
        }
    }
    if (t->cache.n >= CACHE_MAX || t->pool.n > (1u << 28)) { // bound the cache's memory
        strmap_free(&t->cache);
        strmap_init(&t->cache, CACHE_MAX);
        t->pool.n = 0;
    }
    strmap_put(&t->cache, p, n, (uint32_t)t->pool.n);
    bpe_ids_push(&t->pool, (uint32_t)(out->n - start));
    for (size_t i = start; i < out->n; i++) bpe_ids_push(&t->pool, out->ids[i]);
    return 0;
}

static size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// Runs regex stage k over p[0..n); every match and every gap between matches is a piece.
static int split_stage(bpe *t, int k, const char *p, size_t n, bpe_ids *out, char *err,
                       size_t errlen);

static int piece(bpe *t, int k, const char *p, size_t n, bpe_ids *out, char *err, size_t el) {
    if (n == 0) return 0;
    return k + 1 < t->nstages ? split_stage(t, k + 1, p, n, out, err, el)
                              : encode_word(t, p, n, out, err, el);
}

static int split_stage(bpe *t, int k, const char *p, size_t n, bpe_ids *out, char *err,
                       size_t errlen) {
    size_t pos = 0, gap = 0;
    while (pos < n) {
        int rc = pcre2_match(t->re[k], (PCRE2_SPTR)p, n, pos, PCRE2_NO_UTF_CHECK, t->md[k], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            err_set(err, errlen, "regex match failed (PCRE2 error %d)", rc);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md[k]);
        if (ov[1] == ov[0]) { // an empty match: the next character joins the gap
            pos = ov[0] + utf8_len((unsigned char)p[ov[0]]);
            continue;
        }
        if (piece(t, k, p + gap, ov[0] - gap, out, err, errlen) != 0 ||
            piece(t, k, p + ov[0], ov[1] - ov[0], out, err, errlen) != 0)
            return -1;
        pos = gap = ov[1];
    }
    return piece(t, k, p + gap, n - gap, out, err, errlen);
}

// A segment between added tokens.
static int encode_segment(bpe *t, const char *p, size_t n, int prefix, bpe_ids *out, char *err,
                          size_t errlen) {
    if (n == 0) return 0;
    if (prefix && t->add_prefix_space && p[0] != ' ') {
        char *s = tok_calloc(n + 1, 1); // own buffer: scratch is used further down
        s[0] = ' ';
        memcpy(s + 1, p, n);
        int rc = encode_segment(t, s, n + 1, 0, out, err, errlen);
        free(s);
        return rc;
    }
    if (t->nstages == 0) return encode_word(t, p, n, out, err, errlen);
    return split_stage(t, 0, p, n, out, err, errlen);
}

// The longest added token starting at p, or NULL.
static const added_tok *added_at(const bpe *t, const char *p, size_t n) {
    const added_tok *best = NULL;
    for (size_t i = 0; i < t->nadded; i++) {
        const added_tok *a = &t->added[i];
        if (a->len <= n && (!best || a->len > best->len) && memcmp(a->content, p, a->len) == 0)
            best = a;
    }
    return best;
}

size_t utf8_invalid_at(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80                ? 1
                   : c >= 0xC2 && c < 0xE0 ? 2
                   : c >= 0xE0 && c < 0xF0 ? 3
                   : c >= 0xF0 && c < 0xF5 ? 4
                                           : 0;
        if (k == 0 || i + k > n) return i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i;
        unsigned c1 = k > 1 ? s[i + 1] : 0x80;
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
            (c == 0xF4 && c1 >= 0x90))
            return i; // overlong, surrogate, or beyond U+10FFFF
        i += k;
    }
    return n;
}

int bpe_encode(bpe *t, const char *text, size_t len, int continued, bpe_ids *out, char *err,
               size_t errlen) {
    size_t bad = utf8_invalid_at(text, len);
    if (bad < len) {
        err_set(err, errlen, "invalid UTF-8 at byte %zu", bad);
        return -1;
    }
    size_t seg = 0;
    int prefix = !continued;
    for (size_t i = 0; i < len; i++) {
        if (!t->added_first[(unsigned char)text[i]]) continue;
        const added_tok *a = added_at(t, text + i, len - i);
        if (!a) continue;
        if (encode_segment(t, text + seg, i - seg, prefix, out, err, errlen) != 0) return -1;
        bpe_ids_push(out, a->id);
        seg = i + a->len;
        i = seg - 1;
        prefix = 1;
    }
    return encode_segment(t, text + seg, len - seg, prefix, out, err, errlen);
}
