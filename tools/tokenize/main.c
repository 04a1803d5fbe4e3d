// mt-tokenize: text or JSONL -> MTCTOKS1 token shards (docs/tokenize.md).
#include "tools/tokenize/bpe.h"
#include "tools/tokenize/chat.h"
#include "tools/tokenize/out_lock.h"
#include "runtime/base/json_strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1u << 20) // text is encoded in pieces of about this many bytes

typedef struct {
    const char *tokenizer, *out, *field, *eot, *chat_format;
    int jsonl, quiet, append_eos, assume_nfc, chat, force;
    uint64_t shard_tokens;
} options;

// --chat: the format and the default system message of its template (ChatML), if any.
typedef struct {
    chat_format format;
    char *default_system;
    chat_text text;
} chat_mode;

// The shard being written, and progress over all inputs.
typedef struct {
    const char *prefix;
    int width; // bytes per token
    uint64_t max_tokens, count, total;
    int index;
    FILE *f;
    char tmp[4096], path[4096];
    double t0, last;
    uint64_t in_done, in_total;
    int quiet, tty;
    // The target mask of the shard (bit i: token i is a target), kept until it closes; a shard
    // with a context-only token is written as version 2 with the mask after its tokens.
    unsigned char *mask;
    int masked;
} writer;

// The shards of a run are written under temporary names and renamed only when every input is
// done (publish), so that PREFIX_*.bin is always one run's whole set: on an error the staged
// ones are removed, and an earlier run's set stays as it was. The run holds PREFIX's lock from
// its check for an earlier set to the renames (out_lock.c).
static writer *current;
static out_lock lock = {.fd = -1};

static void staged_path(const writer *w, int index, char *out, size_t n) {
    snprintf(out, n, "%s_%06d.bin.tmp.%d", w->prefix, index, (int)getpid());
}

static void remove_staged(const writer *w) {
    char path[4200];
    for (int i = 0; i <= w->index; i++) { // index: the shard being written, if any
        staged_path(w, i, path, sizeof path);
        unlink(path);
    }
}

// One line on stderr, the staged shards removed, exit code: 1 for a failure of the input or
// the tokenizer, 2 for a refusal of what was asked (die_usage).
__attribute__((noreturn)) static void vdie(int code, const char *fmt, va_list ap) {
    if (current) remove_staged(current);
    out_lock_release(&lock);
    fputs("mt-tokenize: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    exit(code);
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(1, fmt, ap);
}

__attribute__((format(printf, 1, 2), noreturn)) static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(2, fmt, ap);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fputs("usage: mt-tokenize -t tokenizer.json -o PREFIX [options] INPUT...\n"
          "Tokenizes text with a Hugging Face byte-level BPE tokenizer.json and writes MTCTOKS1\n"
          "shards PREFIX_000000.bin, PREFIX_000001.bin, ... (docs/data-format.md).\n"
          "Each INPUT is one document (a text file), or with --jsonl one document per line.\n"
          "  -t, --tokenizer FILE   tokenizer.json (model BPE, ByteLevel pre-tokenizer)\n"
          "  -o, --out PREFIX       output path prefix; its folder must exist, and it must\n"
          "                         hold no PREFIX_NNNNNN.bin of an earlier run (a run\n"
          "                         holds PREFIX.lock while it writes)\n"
          "      --force            replace an earlier run's PREFIX_*.bin, all of them\n"
          "      --jsonl            inputs are JSON Lines; a line with \"input_ids\" (and\n"
          "                         optionally \"labels\", -100 = not a target) is taken as\n"
          "                         tokenized, and its masked tokens are written as such\n"
          "      --field NAME       JSONL field holding the text (default: text)\n"
          "      --chat             JSONL conversations: \"messages\" of {\"role\", \"content\"},\n"
          "                         ShareGPT \"conversations\" or Alpaca \"instruction\" and\n"
          "                         \"output\" lines (docs/tokenize.md), rendered in the\n"
          "                         model's chat format; only the assistant\n"
          "                         turns are targets (the rest is context)\n"
          "      --chat-format F    chatml, llama3 or mistral (default: the one the\n"
          "                         chat_template of tokenizer_config.json beside -t names)\n"
          "      --eot TOKEN        append TOKEN (content such as \"<|endoftext|>\", or an id)\n"
          "                         after every document\n"
          "      --append-eos       --eot with the first of <|endoftext|>, <|end_of_text|>,\n"
          "                         </s>, <eos> that the tokenizer has\n"
          "      --shard-tokens N   at most N tokens per shard (default 100000000)\n"
          "      --assume-nfc       the text is already in Unicode NFC: accept a tokenizer\n"
          "                         whose normalizer is NFC (Qwen2) without normalizing\n"
          "  -q, --quiet            no progress line on stderr\n"
          "  -h, --help             this text\n"
          "Tokens are uint16 when every id fits in 16 bits, else uint32.\n",
          f);
}

static void put_header(writer *w) {
    unsigned char h[256] = {0};
    uint32_t version = w->masked ? 2 : 1, width = (uint32_t)w->width, flags = 1; // 1: masked
    memcpy(h, "MTCTOKS1", 8);
    memcpy(h + 8, &version, 4); // little-endian hosts only (x86-64, aarch64)
    memcpy(h + 12, &width, 4);
    memcpy(h + 16, &w->count, 8);
    if (w->masked) memcpy(h + 24, &flags, 4);
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(h, 1, 256, w->f) != 256)
        die("%s: write failed: %s", w->path, strerror(errno));
}

static void shard_open(writer *w) {
    snprintf(w->path, sizeof w->path, "%s_%06d.bin", w->prefix, w->index);
    staged_path(w, w->index, w->tmp, sizeof w->tmp);
    if (!(w->f = fopen(w->tmp, "wb"))) die("%s: cannot create: %s", w->path, strerror(errno));
    w->count = 0;
    w->masked = 0;
    if (!w->mask && !(w->mask = malloc((size_t)(w->max_tokens + 7) / 8)))
        die("out of memory for the target mask");
    memset(w->mask, 0, (size_t)(w->max_tokens + 7) / 8);
    put_header(w);
}

// The header is rewritten with the count, then fsync; publish() renames it.
static void shard_close(writer *w) {
    size_t mask_bytes = (size_t)(w->count + 7) / 8;
    if (w->masked &&
        (fseek(w->f, 0, SEEK_END) != 0 || fwrite(w->mask, 1, mask_bytes, w->f) != mask_bytes))
        die("%s: write failed: %s", w->path, strerror(errno));
    put_header(w);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0 || fclose(w->f) != 0)
        die("%s: write failed: %s", w->path, strerror(errno));
    w->f = NULL;
    w->index++;
}

// The index of an output shard PREFIX_NNNNNN.bin (6 digits or more), or -1 for another name.
static int shard_index(const char *prefix, const char *path) {
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) != 0 || path[n] != '_') return -1;
    const char *d = path + n + 1;
    size_t digits = strspn(d, "0123456789");
    return digits >= 6 && strcmp(d + digits, ".bin") == 0 ? atoi(d) : -1;
}

// Calls fn on every existing PREFIX_NNNNNN.bin; returns how many there are.
static int each_old_shard(const char *prefix, void (*fn)(const char *path, int index)) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s_*.bin", prefix);
    glob_t g;
    int count = 0;
    if (glob(pattern, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) {
            int index = shard_index(prefix, g.gl_pathv[i]);
            if (index < 0) continue;
            count++;
            if (fn) fn(g.gl_pathv[i], index);
        }
    globfree(&g);
    return count;
}

// An earlier run's shards at PREFIX would mix with this run's under a glob: refused, unless
// --force asks to replace them (publish() then removes those this run does not rewrite).
static void check_prefix(const char *prefix, int force) {
    int old = each_old_shard(prefix, NULL);
    if (old && !force)
        die_usage("%s: %d shard%s of an earlier run (%s_*.bin) %s there; give another -o, or "
                  "--force to replace them all",
                  prefix, old, old == 1 ? "" : "s", prefix, old == 1 ? "is" : "are");
}

static int published; // shards of this run; the earlier run's from this index on are removed
static void remove_if_stale(const char *path, int index) {
    if (index >= published && unlink(path) != 0)
        die("%s: cannot remove an earlier run's shard: %s", path, strerror(errno));
}

// Every staged shard renamed to its name, then the earlier run's others removed, so that the
// glob reads this run's set alone; the folder is fsynced so the renames survive a crash.
static void publish(writer *w) {
    char staged[4200], final[4200];
    for (int i = 0; i < w->index; i++) {
        staged_path(w, i, staged, sizeof staged);
        snprintf(final, sizeof final, "%s_%06d.bin", w->prefix, i);
        if (rename(staged, final) != 0) die("%s: rename failed: %s", final, strerror(errno));
    }
    current = NULL; // what is renamed stays
    published = w->index;
    each_old_shard(w->prefix, remove_if_stale);
    snprintf(final, sizeof final, "%s", w->prefix);
    int fd = open(dirname(final), O_RDONLY);
    if (fd >= 0) fsync(fd), close(fd);
}

static void progress(writer *w, int final) {
    double t = now();
    if (w->quiet || (!final && t - w->last < 1.0)) return;
    w->last = t;
    double dt = t - w->t0 > 1e-9 ? t - w->t0 : 1e-9, mbs = w->in_done / dt / 1e6;
    double eta = w->in_done ? (double)(w->in_total - w->in_done) * dt / w->in_done : 0;
    fprintf(stderr,
            "%smt-tokenize: %.1f/%.1f MB, %llu tokens, %.0f tokens/s, %.2f MB/s, ETA %.0fs%s",
            w->tty ? "\r" : "", w->in_done / 1e6, w->in_total / 1e6, (unsigned long long)w->total,
            w->total / dt, mbs, final ? 0.0 : eta, w->tty && !final ? "" : "\n");
}

// targets[i] == 0: token i is context only (never a target); NULL: every token is a target.
static void emit(writer *w, const uint32_t *ids, const unsigned char *targets, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!w->f) shard_open(w);
        if (!targets || targets[i])
            w->mask[w->count >> 3] |= (unsigned char)(1u << (w->count & 7));
        else
            w->masked = 1;
        if (w->width == 2) {
            uint16_t v = (uint16_t)ids[i];
            fwrite(&v, 2, 1, w->f);
        } else {
            fwrite(&ids[i], 4, 1, w->f);
        }
        w->total++;
        if (++w->count == w->max_tokens) shard_close(w);
    }
    if (w->f && ferror(w->f)) die("%s: write failed: %s", w->path, strerror(errno));
}

// --eot's token after a document (none when eot < 0), a target or context.
static void emit_eot(writer *w, int64_t eot, unsigned char target) {
    if (eot < 0) return;
    uint32_t e = (uint32_t)eot;
    emit(w, &e, &target, 1);
}

// A cut point in the text that no pre-tokenizer piece crosses: between an ASCII letter and
// '\n' (GPT-2 and Llama-3 patterns end a letter run there and start a new piece at '\n').
static size_t cut_point(const bpe *t, const char *p, size_t n) {
    if (n <= CHUNK || !bpe_can_cut(t)) return n;
    for (size_t i = CHUNK; i < n; i++)
        if (p[i] == '\n' && ((p[i - 1] | 0x20) >= 'a' && (p[i - 1] | 0x20) <= 'z')) return i;
    return n;
}

static void encode_doc(bpe *t, writer *w, const char *text, size_t n, int64_t eot,
                       const char *where) {
    size_t bad = utf8_invalid_at(text, n); // whole, so the offset is the document's, not a piece's
    if (bad < n) die("%s: invalid UTF-8 at byte %zu", where, bad);
    bpe_ids ids = {0};
    char err[512];
    size_t off = 0;
    do {
        size_t k = cut_point(t, text + off, n - off);
        ids.n = 0;
        if (bpe_encode(t, text + off, k, off > 0, &ids, err, sizeof err) != 0)
            die("%s: %s", where, err);
        emit(w, ids.ids, NULL, ids.n);
        off += k;
        w->in_done += k;
        progress(w, 0);
    } while (off < n);
    emit_eot(w, eot, 1);
    free(ids.ids);
}

// A pre-tokenized line: input_ids, and labels as Hugging Face prepares them (-100: not a
// target; otherwise the token itself, since a target here is always the next token).
static void emit_ids(bpe *t, writer *w, const cJSON *j, int64_t eot, const char *where) {
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "input_ids");
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(j, "labels");
    int n = cJSON_GetArraySize(ids);
    if (!cJSON_IsArray(ids) || n == 0) die("%s: input_ids: not a non-empty array", where);
    if (labels && (!cJSON_IsArray(labels) || cJSON_GetArraySize(labels) != n))
        die("%s: labels: not an array of %d numbers like input_ids", where, n);
    uint32_t *tok = malloc(sizeof *tok * (size_t)n);
    unsigned char *target = malloc((size_t)n);
    if (!tok || !target) die("%s: out of memory", where);
    uint64_t vocab = bpe_vocab_size(t);
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(ids, i),
                    *y = labels ? cJSON_GetArrayItem(labels, i) : NULL;
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v < 0 || v >= (double)vocab || v != (double)(uint64_t)v)
            die("%s: input_ids[%d]: not a token id below the vocab size %llu", where, i,
                (unsigned long long)vocab);
        tok[i] = (uint32_t)v;
        target[i] = 1;
        if (!y) continue;
        if (!cJSON_IsNumber(y) || (y->valuedouble != -100 && y->valuedouble != v))
            die("%s: labels[%d]: %s, expected -100 (not a target) or input_ids[%d] = %u", where, i,
                cJSON_IsNumber(y) ? "another token" : "not a number", i, tok[i]);
        target[i] = y->valuedouble != -100;
    }
    emit(w, tok, target, (size_t)n);
    unsigned char all = 1; // the separator is a target only after a document all targets
    for (int i = 0; i < n; i++) all &= target[i];
    emit_eot(w, eot, all);
    free(tok);
    free(target);
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 20, r;
    char *buf = malloc(cap);
    *n = 0;
    while (buf && (r = fread(buf + *n, 1, cap - *n, f)) > 0)
        if ((*n += r) == cap) buf = realloc(buf, cap *= 2);
    if (!buf) die("%s: out of memory", path);
    if (ferror(f)) die("%s: read failed: %s", path, strerror(errno));
    fclose(f);
    return buf;
}

// A conversation: rendered in the chat format, tokenized whole (as apply_chat_template does),
// and every token that overlaps an assistant turn's span is a target, the rest context.
static void emit_chat(bpe *t, writer *w, const cJSON *j, chat_mode *chat, int64_t eot,
                      const char *where) {
    char err[512];
    cJSON *built;
    const cJSON *messages = chat_messages_of(j, &built, err, sizeof err);
    if (!messages) die("%s: %s", where, err);
    int rendered =
        chat_render(chat->format, messages, chat->default_system, &chat->text, err, sizeof err);
    cJSON_Delete(built);
    if (rendered != 0) die("%s: %s", where, err);
    bpe_ids ids = {0};
    if (bpe_encode(t, chat->text.text, chat->text.len, 0, &ids, err, sizeof err) != 0)
        die("%s: %s", where, err);
    unsigned char *target = calloc(ids.n + 1, 1);
    if (!target) die("%s: out of memory", where);
    size_t at = 0;
    int s = 0;
    for (size_t i = 0; i < ids.n; i++) {
        size_t end = at + bpe_token_bytes(t, ids.ids[i]);
        while (s < chat->text.nspan && chat->text.span[s][1] <= at) s++;
        target[i] = s < chat->text.nspan && chat->text.span[s][0] < end;
        at = end;
    }
    emit(w, ids.ids, target, ids.n);
    emit_eot(w, eot, 0); // between conversations: context
    free(target);
    free(ids.ids);
}

// What Python refuses in a JSONL line before its JSON: a byte order mark in front of it (json:
// "Unexpected UTF-8 BOM"), and bytes that are not UTF-8, named by their offset in the line
// (the conversation rendered from it, or a decoded field, has others).
static void check_line(const char *line, size_t n, const char *where) {
    if (n >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0)
        die("%s: the line starts with a UTF-8 byte order mark (BOM), which Python's json refuses; "
            "save the file as UTF-8 without one",
            where);
    size_t bad = utf8_invalid_at(line, n);
    if (bad < n) die("%s: invalid UTF-8 at byte %zu of the line", where, bad);
}

static void do_jsonl(bpe *t, writer *w, const char *path, const char *field, chat_mode *chat,
                     int64_t eot) {
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: cannot open: %s", path, strerror(errno));
    char *line = NULL, where[4200];
    size_t cap = 0;
    ssize_t n;
    long docs = 0;
    for (long lineno = 1; (n = getline(&line, &cap, f)) > 0; lineno++) {
        snprintf(where, sizeof where, "%s:%ld", path, lineno);
        size_t k = (size_t)n;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ')) k--;
        if (k == 0) { // blank lines are not documents
            w->in_done += (size_t)n;
            continue;
        }
        check_line(line, k, where);
        char why[256];
        cJSON *j = json_parse_strict(line, k, why, sizeof why);
        if (!j) die("%s: %s", where, why); // as Python's json reads the line, or refused
        docs++;
        if (chat || cJSON_GetObjectItemCaseSensitive(j, "input_ids")) { // chat, or tokenized
            if (chat)
                emit_chat(t, w, j, chat, eot, where);
            else
                emit_ids(t, w, j, eot, where);
            w->in_done += (size_t)n;
            progress(w, 0);
            cJSON_Delete(j);
            continue;
        }
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, field);
        if (!cJSON_IsString(s)) die("%s: no string field \"%s\"", where, field);
        w->in_done += (size_t)n - k; // encode_doc counts the text's bytes, this the rest
        size_t before = w->in_done;
        encode_doc(t, w, s->valuestring, strlen(s->valuestring), eot, where);
        w->in_done = before + k; // JSON bytes, not decoded text bytes, measure the input
        cJSON_Delete(j);
    }
    if (ferror(f)) die("%s: read failed: %s", path, strerror(errno));
    if (docs == 0) die_usage("%s: no document: the file holds only blank lines", path);
    free(line);
    fclose(f);
}

static uint64_t parse_count(const char *s, const char *opt) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || *s == '-') die("%s: not a positive integer: %s", opt, s);
    return v;
}

static int64_t eot_id(const bpe *t, const options *o) {
    static const char *eos[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    if (o->eot) {
        int64_t id = bpe_token_id(t, o->eot);
        char *end;
        if (id < 0) id = strtoll(o->eot, &end, 10), id = *end || id < 0 ? -1 : id;
        if (id < 0 || (uint64_t)id >= bpe_vocab_size(t))
            die("%s: --eot %s: no such token", o->tokenizer, o->eot);
        return id;
    }
    for (int i = 0; o->append_eos && i < 4; i++)
        if (bpe_token_id(t, eos[i]) >= 0) return bpe_token_id(t, eos[i]);
    if (o->append_eos) die("%s: --append-eos: no end-of-text token; use --eot", o->tokenizer);
    return -1;
}

static void parse_args(int argc, char **argv, options *o) {
    static const struct option longs[] = {{"tokenizer", 1, 0, 't'},    {"out", 1, 0, 'o'},
                                          {"jsonl", 0, 0, 'j'},        {"field", 1, 0, 'f'},
                                          {"eot", 1, 0, 'e'},          {"append-eos", 0, 0, 'E'},
                                          {"shard-tokens", 1, 0, 's'}, {"quiet", 0, 0, 'q'},
                                          {"assume-nfc", 0, 0, 'N'},   {"chat", 0, 0, 'c'},
                                          {"chat-format", 1, 0, 'C'},  {"force", 0, 0, 'F'},
                                          {"help", 0, 0, 'h'},         {0, 0, 0, 0}};
    *o = (options){.field = "text", .shard_tokens = 100000000};
    int c;
    while ((c = getopt_long(argc, argv, "t:o:qh", longs, NULL)) != -1) {
        switch (c) {
        case 't':
            o->tokenizer = optarg;
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'j':
            o->jsonl = 1;
            break;
        case 'f':
            o->field = optarg;
            break;
        case 'e':
            o->eot = optarg;
            break;
        case 'E':
            o->append_eos = 1;
            break;
        case 's':
            o->shard_tokens = parse_count(optarg, "--shard-tokens");
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'N':
            o->assume_nfc = 1;
            break;
        case 'c':
            o->chat = o->jsonl = 1;
            break;
        case 'C':
            if (chat_format_named(optarg) == CHAT_NONE)
                die("--chat-format %s: not chatml, llama3 or mistral", optarg);
            o->chat_format = optarg;
            o->chat = o->jsonl = 1;
            break;
        case 'F':
            o->force = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (!o->tokenizer || !o->out || optind >= argc) {
        fprintf(stderr, "mt-tokenize: need --tokenizer, --out and at least one INPUT\n");
        usage(stderr);
        exit(2);
    }
}

int main(int argc, char **argv) {
    options o;
    parse_args(argc, argv, &o);
    char err[1024];
    bpe *t = bpe_load(o.tokenizer, o.assume_nfc ? BPE_ASSUME_NFC : 0, err, sizeof err);
    if (!t) die("%s", err);
    int64_t eot = eot_id(t, &o);
    chat_mode chat = {0};
    if (o.chat && o.chat_format) chat.format = chat_format_named(o.chat_format);
    if (o.chat && !o.chat_format &&
        (chat.format = chat_format_detect(o.tokenizer, &chat.default_system, err, sizeof err)) ==
            CHAT_NONE)
        die("%s", err);
    writer w = {.prefix = o.out,
                .width = bpe_vocab_size(t) <= 65536 ? 2 : 4,
                .max_tokens = o.shard_tokens,
                .quiet = o.quiet,
                .tty = isatty(2)};
    for (int i = optind; i < argc; i++) { // check every input before writing anything
        struct stat st;
        if (stat(argv[i], &st) != 0 || access(argv[i], R_OK) != 0)
            die("%s: cannot open: %s", argv[i], strerror(errno ? errno : EACCES));
        if (S_ISREG(st.st_mode) && st.st_size == 0) die_usage("%s: empty: no document", argv[i]);
        w.in_total += (uint64_t)st.st_size;
    }
    if (out_lock_take(&lock, o.out, err, sizeof err) != 0) die_usage("%s", err);
    check_prefix(o.out, o.force);
    w.t0 = w.last = now();
    current = &w;
    for (int i = optind; i < argc; i++) {
        if (o.jsonl) {
            do_jsonl(t, &w, argv[i], o.field, o.chat ? &chat : NULL, eot);
            continue;
        }
        size_t n;
        char *text = read_file(argv[i], &n);
        encode_doc(t, &w, text, n, eot, argv[i]);
        free(text);
    }
    if (w.f) shard_close(&w);
    if (w.total == 0) die_usage("no token to write: every document of the input is empty");
    publish(&w);
    out_lock_release(&lock);
    progress(&w, 1);
    if (!o.quiet)
        fprintf(stderr, "mt-tokenize: wrote %d shard(s) %s_*.bin, %d-bit tokens\n", w.index, o.out,
                w.width * 8);
    bpe_free(t);
    free(w.mask);
    free(chat.default_system);
    chat_text_free(&chat.text);
    return 0;
}
