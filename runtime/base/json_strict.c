// Strict JSON (json_strict.h): cJSON does the parsing; this file adds the three checks where
// cJSON is looser than Python's json.
#include "runtime/base/json_strict.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

// Line and column (from 1) of byte at in text, for messages a user can find in an editor.
static void where(const char *text, const char *at, int *line, int *col) {
    *line = 1, *col = 1;
    for (const char *p = text; p < at; p++) {
        if (*p == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

static int say(char *err, size_t errlen, const char *text, const char *at, const char *what) {
    int line, col;
    where(text, at, &line, &col);
    snprintf(err, errlen, "%s at line %d, column %d", what, line, col);
    return -1;
}

// A "\u0000" escape inside a string of text[0..len): the one escape that cJSON would turn into
// a shorter string than Python's. The scan follows string boundaries, so "\\u0000" (an escaped
// backslash, then plain text) is not one.
static const char *nul_escape(const char *text, size_t len) {
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = 0;
        } else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && len - i >= 6 && !memcmp(text + i + 2, "0000", 4))
                return text + i;
            i++; // skip the escaped character, whatever it is
        }
    }
    return NULL;
}

// Python's dict keeps the last value of a repeated key: each later duplicate replaces the
// first one in place, recursively through the whole value.
static void keep_last_duplicates(cJSON *v) {
    for (cJSON *c = v ? v->child : NULL; c; c = c->next) keep_last_duplicates(c);
    if (!cJSON_IsObject(v)) return;
    for (cJSON *first = v->child; first; first = first->next) {
        cJSON *dup = first->next;
        while (dup) {
            cJSON *next = dup->next;
            if (dup->string && first->string && !strcmp(dup->string, first->string)) {
                cJSON_DetachItemViaPointer(v, dup);
                cJSON_ReplaceItemViaPointer(v, first, dup);
                first = dup;
            }
            dup = next;
        }
    }
}

static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int starts_non_finite(const char *p, const char *end) {
    if (p < end && (*p == '-' || *p == '+')) p++;
    size_t n = (size_t)(end - p);
    return (n >= 3 && !memcmp(p, "NaN", 3)) || (n >= 8 && !memcmp(p, "Infinity", 8));
}

cJSON *json_parse_strict(const char *text, size_t len, char *err, size_t errlen) {
    const char *end = text + len, *stop = NULL;
    if (memchr(text, '\0', len)) {
        say(err, errlen, text, memchr(text, '\0', len), "a NUL byte");
        return NULL;
    }
    const char *nul = nul_escape(text, len);
    if (nul) {
        say(err, errlen, text, nul, "\\u0000 in a string is not supported");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &stop, 0);
    if (!root) {
        const char *at = stop && stop >= text && stop <= end ? stop : text;
        if (starts_non_finite(at, end))
            say(err, errlen, text, at, "a non-finite number (NaN or Infinity) is not valid JSON");
        else if (skip_space(text, end) == end)
            snprintf(err, errlen, "empty: no JSON value");
        else
            say(err, errlen, text, at, "not valid JSON");
        return NULL;
    }
    if (skip_space(stop, end) != end) {
        say(err, errlen, text, skip_space(stop, end), "more data after the JSON value");
        cJSON_Delete(root);
        return NULL;
    }
    keep_last_duplicates(root);
    return root;
}
