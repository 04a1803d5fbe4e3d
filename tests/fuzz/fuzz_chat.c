// A line of mt-tokenize --chat's JSONL through chat_render in each format: the messages'
// shape checks (roles, contents, the mistral turn order) and the target spans, which must lie
// within the rendered text and in order.
#include "tests/fuzz/fuzz.h"
#include "tools/tokenize/chat.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *line = cJSON_ParseWithLength((const char *)data, size);
    if (!line) return 0;
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(line, "messages");
    chat_text text = {0};
    char err[512];
    for (int f = CHAT_CHATML; f <= CHAT_MISTRAL; f++) {
        if (chat_render((chat_format)f, messages, f == CHAT_CHATML ? "default" : NULL, &text, err,
                        sizeof err) != 0)
            continue;
        size_t last = 0;
        for (int s = 0; s < text.nspan; s++) {
            if (text.span[s][0] < last || text.span[s][1] < text.span[s][0] ||
                text.span[s][1] > text.len)
                abort();
            last = text.span[s][1];
        }
    }
    chat_text_free(&text);
    cJSON_Delete(line);
    return 0;
}
