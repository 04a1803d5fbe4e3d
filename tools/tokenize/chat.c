// Chat formats, rendered as the models' own chat templates render them (docs/tokenize.md):
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n                            (Qwen2 and others)
//   llama3   <|begin_of_text|> then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//            with CONTENT stripped of surrounding whitespace, as the template's `| trim`
//   mistral  <s> then [INST] USER [/INST] and ASSISTANT</s>, turns alternating from the user
// The whole conversation is one string, tokenized at once as transformers' apply_chat_template
// does, so special tokens are split out exactly as there; the targets are the assistant turns'
// content and their end-of-turn token.
#include "tools/tokenize/chat.h"
#include "tools/tokenize/strmap.h"

#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"", "chatml", "llama3", "mistral"};

chat_format chat_format_named(const char *name) {
    for (int f = CHAT_CHATML; f <= CHAT_MISTRAL; f++)
        if (strcmp(name, NAMES[f]) == 0) return (chat_format)f;
    return CHAT_NONE;
}

const char *chat_format_name(chat_format f) {
    return NAMES[f];
}

static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

static void put(chat_text *c, const char *s, size_t n) {
    if (c->len + n + 1 > c->cap) {
        c->cap = (c->len + n + 1) * 2;
        c->text = tok_realloc(c->text, c->cap);
    }
    memcpy(c->text + c->len, s, n);
    c->len += n;
    c->text[c->len] = 0;
}

static void puts_(chat_text *c, const char *s) {
    put(c, s, strlen(s));
}

// Opens (start) or closes the current target span at the text's end.
static void mark(chat_text *c, int start) {
    if (start) {
        if (c->nspan == c->capspan) {
            c->capspan = c->capspan ? 2 * c->capspan : 8;
            c->span = tok_realloc(c->span, sizeof *c->span * (size_t)c->capspan);
        }
        c->span[c->nspan][0] = c->span[c->nspan][1] = c->len;
        c->nspan++;
    } else {
        c->span[c->nspan - 1][1] = c->len;
    }
}

static int is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

// Jinja's `| trim`: surrounding whitespace off.
static void put_trimmed(chat_text *c, const char *s) {
    size_t n = strlen(s);
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    put(c, s, n);
}

// Each message is an object with a role of system, user or assistant and a string content.
static int check_messages(const cJSON *messages, char *err, size_t n) {
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0)
        return fail(err, n, "messages: not a non-empty array");
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!role) return fail(err, n, "messages[%d]: no string \"role\"", i);
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))
            return fail(err, n, "messages[%d]: role \"%s\" is not system, user or assistant", i,
                        role);
        if (!cJSON_IsString(content)) return fail(err, n, "messages[%d]: no string \"content\"", i);
    }
    return 0;
}

static const char *role_of(const cJSON *m) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
}

static const char *content_of(const cJSON *m) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
}

static int is_assistant(const cJSON *m) {
    return strcmp(role_of(m), "assistant") == 0;
}

static void render_chatml(const cJSON *messages, const char *default_system, chat_text *c) {
    if (default_system && strcmp(role_of(messages->child), "system") != 0) {
        puts_(c, "<|im_start|>system\n");
        puts_(c, default_system);
        puts_(c, "<|im_end|>\n");
    }
    for (const cJSON *m = messages->child; m; m = m->next) {
        puts_(c, "<|im_start|>");
        puts_(c, role_of(m));
        puts_(c, "\n");
        if (is_assistant(m)) mark(c, 1);
        puts_(c, content_of(m));
        puts_(c, "<|im_end|>");
        if (is_assistant(m)) mark(c, 0);
        puts_(c, "\n");
    }
}

static void render_llama3(const cJSON *messages, chat_text *c) {
    puts_(c, "<|begin_of_text|>");
    for (const cJSON *m = messages->child; m; m = m->next) {
        puts_(c, "<|start_header_id|>");
        puts_(c, role_of(m));
        puts_(c, "<|end_header_id|>\n\n");
        if (is_assistant(m)) mark(c, 1);
        put_trimmed(c, content_of(m));
        puts_(c, "<|eot_id|>");
        if (is_assistant(m)) mark(c, 0);
    }
}

static int render_mistral(const cJSON *messages, chat_text *c, char *err, size_t n) {
    puts_(c, "<s>");
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        const char *want = i % 2 ? "assistant" : "user";
        if (strcmp(role_of(m), want) != 0)
            return fail(err, n,
                        "messages[%d]: role \"%s\": the mistral format alternates user and "
                        "assistant, starting with user (no system)",
                        i, role_of(m));
        if (!is_assistant(m)) {
            puts_(c, "[INST] ");
            puts_(c, content_of(m));
            puts_(c, " [/INST]");
            continue;
        }
        mark(c, 1);
        puts_(c, content_of(m));
        puts_(c, "</s>");
        mark(c, 0);
    }
    return 0;
}

int chat_render(chat_format f, const cJSON *messages, const char *default_system, chat_text *out,
                char *err, size_t errlen) {
    out->len = 0, out->nspan = 0;
    put(out, "", 0);
    if (check_messages(messages, err, errlen) != 0) return -1;
    if (f == CHAT_CHATML) render_chatml(messages, default_system, out);
    if (f == CHAT_LLAMA3) render_llama3(messages, out);
    if (f == CHAT_MISTRAL) return render_mistral(messages, out, err, errlen);
    return 0;
}

void chat_text_free(chat_text *c) {
    free(c->text);
    free(c->span);
    *c = (chat_text){0};
}

// ---- the conversation of a line ----
// The conversation of a --chat line, in any of the three layouts SFT data comes in:
//   messages       [{"role": "system"|"user"|"assistant", "content"}], as it is
//   ShareGPT       {"conversations": [{"from": "system"|"human"|"gpt", "value"}]}
//   Alpaca         {"instruction", "input" (optional), "output", "system" (optional)}
// mapped onto messages as LlamaFactory's converters map them (its data/converter.py):
// ShareGPT's first turn may be the system message, then human and gpt alternate from human,
// ending with gpt; Alpaca's user turn is the instruction and the input joined by "\n", either
// alone when the other is empty. An empty system message is none (the template's default, if
// it has one). Where LlamaFactory skips a line it cannot map, this refuses it, naming it.
static int add_message(cJSON *messages, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return -1;
    }
    cJSON_AddItemToArray(messages, m);
    return 0;
}

// ShareGPT's turns: system first if at all, then human / gpt alternating, an even count.
static int from_sharegpt(const cJSON *turns, cJSON *messages, char *err, size_t n) {
    if (!cJSON_IsArray(turns) || cJSON_GetArraySize(turns) == 0)
        return fail(err, n, "conversations: not a non-empty array");
    int i = 0, k = 0; // k: the turn's place after the system message
    for (const cJSON *t = turns->child; t; t = t->next, i++) {
        const char *from = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "from"));
        const char *value = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "value"));
        if (!from) return fail(err, n, "conversations[%d]: no string \"from\"", i);
        if (!value) return fail(err, n, "conversations[%d]: no string \"value\"", i);
        if (i == 0 && strcmp(from, "system") == 0) {
            if (*value && add_message(messages, "system", value) != 0)
                return fail(err, n, "out of memory");
            continue;
        }
        const char *want = k % 2 == 0 ? "human" : "gpt";
        if (strcmp(from, want) != 0)
            return fail(err, n,
                        "conversations[%d]: from \"%s\" where \"%s\" is due (after an optional "
                        "first \"system\", \"human\" and \"gpt\" alternate)",
                        i, from, want);
        if (add_message(messages, k % 2 == 0 ? "user" : "assistant", value) != 0)
            return fail(err, n, "out of memory");
        k++;
    }
    if (k == 0 || k % 2) return fail(err, n, "conversations: does not end with a \"gpt\" turn");
    return 0;
}

// An optional string field: NULL when absent or null, "" refused as not a string otherwise.
static int optional_string(const cJSON *line, const char *key, const char **out, char *err,
                           size_t n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(line, key);
    *out = "";
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsString(x)) return fail(err, n, "\"%s\": not a string", key);
    *out = x->valuestring;
    return 0;
}

static int from_alpaca(const cJSON *line, cJSON *messages, char *err, size_t n) {
    const char *instruction, *input, *system;
    const cJSON *output = cJSON_GetObjectItemCaseSensitive(line, "output");
    const cJSON *history = cJSON_GetObjectItemCaseSensitive(line, "history");
    if (optional_string(line, "instruction", &instruction, err, n) != 0 ||
        optional_string(line, "input", &input, err, n) != 0 ||
        optional_string(line, "system", &system, err, n) != 0)
        return -1;
    if (!cJSON_IsString(output)) return fail(err, n, "no string \"output\" (Alpaca)");
    if (history && !cJSON_IsNull(history) &&
        !(cJSON_IsArray(history) && cJSON_GetArraySize(history) == 0))
        return fail(err, n, "\"history\": not read; give the earlier turns as \"messages\"");
    size_t a = strlen(instruction), b = strlen(input);
    char *user = malloc(a + b + 2); // a line may be long: not on the stack
    if (user) snprintf(user, a + b + 2, "%s%s%s", instruction, a && b ? "\n" : "", input);
    int bad = !user || (*system && add_message(messages, "system", system) != 0) ||
              add_message(messages, "user", user) != 0 ||
              add_message(messages, "assistant", output->valuestring) != 0;
    free(user);
    return bad ? fail(err, n, "out of memory") : 0;
}

const cJSON *chat_messages_of(const cJSON *line, cJSON **built, char *err, size_t errlen) {
    *built = NULL;
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(line, "messages");
    if (messages) return messages;
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(line, "conversations");
    int alpaca = cJSON_GetObjectItemCaseSensitive(line, "output") ||
                 cJSON_GetObjectItemCaseSensitive(line, "instruction");
    if (!turns && !alpaca) {
        fail(err, errlen,
             "no \"messages\", \"conversations\" (ShareGPT) or \"instruction\" and \"output\" "
             "(Alpaca)");
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    if (!out) {
        fail(err, errlen, "out of memory");
        return NULL;
    }
    if ((turns ? from_sharegpt(turns, out, err, errlen) : from_alpaca(line, out, err, errlen)) !=
        0) {
        cJSON_Delete(out);
        return NULL;
    }
    return *built = out;
}

// ---- telling the format from tokenizer_config.json ----

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, r;
    char *buf = tok_realloc(NULL, cap);
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += r) == cap - 1) buf = tok_realloc(buf, cap *= 2);
    fclose(f);
    buf[n] = 0;
    return buf;
}

// The template: a string, or a list of {"name", "template"} whose "default" is taken.
static const char *template_of(const cJSON *config) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(config, "chat_template");
    if (cJSON_IsString(t)) return t->valuestring;
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e; e = e->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        if (name && strcmp(name, "default") == 0)
            return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "template"));
    }
    return NULL;
}

// A ChatML template that adds a system message when the conversation has none (Qwen2's) holds
// it as a literal: '<|im_start|>system\nTEXT<|im_end|>\n' (\n as Jinja's escape).
static char *default_system_of(const char *tpl) {
    static const char *const heads[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
    if (!strstr(tpl, "!= 'system'") && !strstr(tpl, "!= \"system\"")) return NULL;
    for (int i = 0; i < 2; i++) {
        const char *p = strstr(tpl, heads[i]), *end;
        if (!p || !(end = strstr(p += strlen(heads[i]), "<|im_end|>"))) continue;
        size_t n = (size_t)(end - p);
        if (memchr(p, '{', n) || memchr(p, '\'', n) || memchr(p, '"', n)) continue; // not literal
        char *s = tok_realloc(NULL, n + 1);
        memcpy(s, p, n);
        s[n] = 0;
        return s;
    }
    return NULL;
}

chat_format chat_format_detect(const char *tokenizer_json, char **default_system, char *err,
                               size_t errlen) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", tokenizer_json);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dirname(dir));
    *default_system = NULL;
    char *text = read_text(path);
    cJSON *config = text ? cJSON_Parse(text) : NULL;
    const char *tpl = config ? template_of(config) : NULL;
    chat_format f = !tpl                                              ? CHAT_NONE
                    : strstr(tpl, "<|im_start|>")                     ? CHAT_CHATML
                    : strstr(tpl, "<|start_header_id|>")              ? CHAT_LLAMA3
                    : strstr(tpl, "[INST]") && strstr(tpl, "[/INST]") ? CHAT_MISTRAL
                                                                      : CHAT_NONE;
    if (f == CHAT_CHATML) *default_system = default_system_of(tpl);
    if (f == CHAT_NONE)
        fail(err, errlen, "%s: %s; pass --chat-format chatml, llama3 or mistral", path,
             !text     ? "cannot open it"
             : !config ? "not valid JSON"
             : !tpl    ? "no chat_template"
                       : "its chat_template is none of ChatML, Llama 3 or Mistral's [INST]");
    cJSON_Delete(config);
    free(text);
    return f;
}
