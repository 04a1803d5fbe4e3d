// Unit test of tools/tokenize/bpe.c without Python: a hand-written byte-level tokenizer.json
// (256 byte tokens, five merges, one added token) with expected ids, and the load errors.
// usage: test_tokenize DIR (a scratch folder, made if absent)
#include "tools/tokenize/bpe.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

// GPT-2's byte-to-unicode character of byte b, as UTF-8.
static void byte_char(unsigned b, char out[3]) {
    unsigned next = 256, cp = 0;
    for (unsigned c = 0; c <= b; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        cp = printable ? c : next++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
}

// Byte b has id b; merges he=256, ll=257, hell=258, hello=259, Ġw=260; <|endoftext|>=261.
static cJSON *fixture(void) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    char c[3];
    for (unsigned b = 0; b < 256; b++) byte_char(b, c), cJSON_AddNumberToObject(vocab, c, b);
    const char *merged[] = {"he", "ll", "hell", "hello", "\xC4\xA0w"};
    const char *merges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w"};
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < 5; i++) {
        cJSON_AddNumberToObject(vocab, merged[i], 256 + i);
        cJSON_AddItemToArray(m, cJSON_CreateString(merges[i]));
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddFalseToObject(pre, "add_prefix_space");
    cJSON_AddTrueToObject(pre, "use_regex");
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", 261);
    cJSON_AddStringToObject(a, "content", "<|endoftext|>");
    cJSON_AddTrueToObject(a, "special");
    cJSON_AddItemToArray(added, a);
    return root;
}

static void write_json(const char *path, cJSON *j) {
    char *s = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    fputs(s, f);
    fclose(f);
    free(s);
}

static void expect(bpe *t, const char *text, const uint32_t *want, size_t n) {
    bpe_ids ids = {0};
    char err[256];
    int rc = bpe_encode(t, text, strlen(text), 0, &ids, err, sizeof err);
    int same = rc == 0 && ids.n == n && memcmp(ids.ids, want, n * sizeof *want) == 0;
    if (!same) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %u", ids.ids[i]);
        fputc('\n', stderr);
    }
    CHECK(same, "encode(\"%s\")", text);
    free(ids.ids);
}

#define EXPECT(t, text, ...)                                                                       \
    do {                                                                                           \
        const uint32_t want_[] = {__VA_ARGS__};                                                    \
        expect(t, text, want_, sizeof want_ / sizeof *want_);                                      \
    } while (0)

static void test_encode(const char *dir) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/good.json", dir);
    cJSON *j = fixture();
    write_json(path, j);
    cJSON_Delete(j);
    bpe *t = bpe_load(path, 0, err, sizeof err);
    CHECK(t, "load: %s", err);
    if (!t) return;
    CHECK(bpe_vocab_size(t) == 262, "vocab size %llu", (unsigned long long)bpe_vocab_size(t));
    EXPECT(t, "hello", 259);
    EXPECT(t, "hello world", 259, 260, 'o', 'r', 'l', 'd');
    EXPECT(t, "yellow", 'y', 'e', 257, 'o', 'w');
    EXPECT(t, "lll", 257, 'l'); // equal ranks merge leftmost first
    EXPECT(t, "hell<|endoftext|>o", 258, 261, 'o');
    EXPECT(t, "<|endoftext|><|endoftext|>", 261, 261);
    EXPECT(t, "it's  \n", 'i', 't', '\'', 's', ' ', ' ', '\n');
    EXPECT(t, "\xC3\xA9", 0xC3, 0xA9); // é: one token per byte, no merge
    bpe_ids ids = {0};
    CHECK(bpe_encode(t, "a\xFF", 2, 0, &ids, err, sizeof err) != 0 && strstr(err, "byte 1"),
          "invalid UTF-8 not refused: %s", err);
    free(ids.ids);
    CHECK(bpe_token_id(t, "<|endoftext|>") == 261 && bpe_token_id(t, "hello") == 259 &&
              bpe_token_id(t, "nope") == -1,
          "bpe_token_id");
    bpe_free(t);
}

// Edits the fixture, loads it, and wants one line naming the file and containing `want`.
static void expect_error(const char *dir, const char *name, void (*edit)(cJSON *),
                         const char *want) {
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    cJSON *j = fixture();
    edit(j);
    write_json(path, j);
    cJSON_Delete(j);
    bpe *t = bpe_load(path, 0, err, sizeof err);
    CHECK(!t && strstr(err, path) && strstr(err, want) && !strchr(err, '\n'),
          "%s: got \"%s\", want \"%s\"", name, err, want);
    bpe_free(t);
}

static void wordpiece(cJSON *j) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "model"), "type",
                              cJSON_CreateString("WordPiece"));
}
static void no_merges(cJSON *j) {
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "model"), "merges");
}
static void no_vocab(cJSON *j) {
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "model"), "vocab");
}
static void no_model(cJSON *j) {
    cJSON_DeleteItemFromObject(j, "model");
}
static void nfc(cJSON *j) {
    cJSON *n = cJSON_CreateObject();
    cJSON_AddStringToObject(n, "type", "NFC");
    cJSON_ReplaceItemInObject(j, "normalizer", n);
}
static void whitespace(cJSON *j) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "pre_tokenizer"), "type",
                              cJSON_CreateString("Whitespace"));
}
static void bad_merge(cJSON *j) {
    cJSON_AddItemToArray(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges"),
                         cJSON_CreateString("q z"));
}
static void fallback(cJSON *j) {
    cJSON_AddTrueToObject(cJSON_GetObjectItem(j, "model"), "byte_fallback");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_tokenize DIR\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    test_encode(argv[1]);
    expect_error(argv[1], "wordpiece", wordpiece, "model type \"WordPiece\" is not supported");
    expect_error(argv[1], "nomerges", no_merges, "no \"merges\" array");
    expect_error(argv[1], "novocab", no_vocab, "no \"vocab\" object");
    expect_error(argv[1], "nomodel", no_model, "no \"model\" object");
    expect_error(argv[1], "nfc", nfc, "normalizer \"NFC\" is not supported (--assume-nfc");
    expect_error(argv[1], "whitespace", whitespace,
                 "pre_tokenizer \"Whitespace\" is not supported");
    expect_error(argv[1], "badmerge", bad_merge, "model.merges[5]");
    expect_error(argv[1], "fallback", fallback, "byte_fallback is not supported");
    char err[512], path[4096];
    snprintf(path, sizeof path, "%s/nfc.json", argv[1]); // written by expect_error above
    bpe *t = bpe_load(path, BPE_ASSUME_NFC, err, sizeof err);
    CHECK(t, "NFC with BPE_ASSUME_NFC: %s", err);
    bpe_free(t);
    snprintf(path, sizeof path, "%s/absent.json", argv[1]);
    CHECK(!bpe_load(path, 0, err, sizeof err) && strstr(err, path), "absent file: %s", err);
    snprintf(path, sizeof path, "%s/broken.json", argv[1]);
    FILE *f = fopen(path, "w");
    fputs("{\"model\": [", f);
    fclose(f);
    CHECK(!bpe_load(path, 0, err, sizeof err) && strstr(err, path) && strstr(err, "not valid JSON"),
          "broken JSON: %s", err);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("test_tokenize: all passed\n");
    return failures != 0;
}
