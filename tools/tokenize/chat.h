#ifndef MT_TOKENIZE_CHAT_H
#define MT_TOKENIZE_CHAT_H

// Chat data: a conversation's messages rendered in a model's chat format, with the byte spans
// that are training targets (the assistant turns: their content and end-of-turn token).
#include <cjson/cJSON.h>
#include <stddef.h>

typedef enum { CHAT_NONE, CHAT_CHATML, CHAT_LLAMA3, CHAT_MISTRAL } chat_format;

typedef struct {
    char *text;
    size_t len, cap;
    size_t (*span)[2]; // [start, end) byte offsets of the targets, in order
    int nspan, capspan;
} chat_text;

// "chatml", "llama3", "mistral"; CHAT_NONE for anything else.
chat_format chat_format_named(const char *name);
const char *chat_format_name(chat_format f);

// The format that tokenizer_config.json beside tokenizer_json names in its chat_template, and
// the default system message a ChatML template adds when a conversation has none (NULL when
// it adds none; the caller frees it). CHAT_NONE with one line in err when it cannot tell.
chat_format chat_format_detect(const char *tokenizer_json, char **default_system, char *err,
                               size_t errlen);

// Renders messages (a JSON array of {"role", "content"}) into out (reset first). Returns 0,
// or -1 with one line in err naming the message at fault.
int chat_render(chat_format f, const cJSON *messages, const char *default_system, chat_text *out,
                char *err, size_t errlen);
void chat_text_free(chat_text *c);

// The messages of a --chat line: its "messages", or those mapped from ShareGPT's
// "conversations" or Alpaca's "instruction", "input", "output" and "system" as LlamaFactory maps
// them. A mapped array is left in *built for the caller to free (cJSON_Delete). NULL with one
// line in err when the line holds none of the three, or one that cannot be mapped.
const cJSON *chat_messages_of(const cJSON *line, cJSON **built, char *err, size_t errlen);

#endif
