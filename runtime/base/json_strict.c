// Strict JSON (json_strict.h): cJSON does the parsing; this file adds the checks where cJSON is
// looser than Python's json.
#include "runtime/base/json_strict.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

// The keys of one object seen so far: open addressing over the keys' FNV-1a hashes, each slot
// the item that holds the key now. Sized once for the largest object, and for each object only
// its own power-of-two prefix is used and cleared, so a whole document costs linear time.
typedef struct {
    cJSON **slot;
    size_t cap;
} key_set;

static uint64_t key_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t table_size(size_t keys) {
    size_t cap = 16;
    while (cap < 2 * keys) cap *= 2;
    return cap;
}

static size_t largest_object(const cJSON *v) {
    size_t n = 0, most = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        size_t inner = largest_object(c);
        most = inner > most ? inner : most;
        n++;
    }
    return cJSON_IsObject(v) && n > most ? n : most;
}

// The slot that holds key, or the empty one where it would go.
static cJSON **key_slot(cJSON **slot, size_t cap, const char *key) {
    size_t i = (size_t)key_hash(key) & (cap - 1);
    while (slot[i] && strcmp(slot[i]->string, key)) i = (i + 1) & (cap - 1);
    return &slot[i];
}

// Python's dict keeps the last value of a repeated key: each later duplicate replaces the
// first one in place.
static void keep_last_in_object(cJSON *obj, const key_set *set) {
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n++;
    size_t cap = table_size(n);
    for (cJSON *c = obj->child, *next; c; c = next) {
        next = c->next;
        if (!c->string) continue;
        cJSON **held = key_slot(set->slot, cap, c->string);
        if (*held) {
            cJSON_DetachItemViaPointer(obj, c);
            cJSON_ReplaceItemViaPointer(obj, *held, c);
        }
        *held = c;
    }
    memset(set->slot, 0, cap * sizeof *set->slot);
}

static void keep_last_duplicates(cJSON *v, const key_set *set) {
    for (cJSON *c = v->child; c; c = c->next) keep_last_duplicates(c, set);
    if (cJSON_IsObject(v)) keep_last_in_object(v, set);
}

// Numbers in the text, in order, beside cJSON's number items in document order (values only:
// keys are strings, and true, false and null hold no digit).
typedef struct {
    const char *p, *end;
} number_scan;

// Whether the next number in the text is written with a fraction or an exponent.
static int next_number_is_float(number_scan *s) {
    const char *p = s->p;
    for (int in_string = 0; p < s->end; p++) {
        if (in_string) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                in_string = 0;
        } else if (*p == '"') {
            in_string = 1;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            break;
        }
    }
    int is_float = 0;
    for (; p < s->end && *p && strchr("0123456789+-.eE", *p); p++)
        is_float |= *p == '.' || *p == 'e' || *p == 'E';
    s->p = p;
    return is_float;
}

// Marks with JSON_FLOAT_TEXT the numbers Python reads as floats ("4.0"): cJSON keeps a double
// only, and transformers refuses a float for an int field.
static void mark_float_numbers(cJSON *v, number_scan *s) {
    if (cJSON_IsNumber(v) && next_number_is_float(s)) v->type |= JSON_FLOAT_TEXT;
    for (cJSON *c = v->child; c; c = c->next) mark_float_numbers(c, s);
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
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) { // cJSON skips it; Python's json refuses it
        snprintf(err, errlen, "a UTF-8 byte order mark (BOM) at the start is not valid JSON");
        return NULL;
    }
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
    mark_float_numbers(root, &(number_scan){text, end}); // before duplicates move items
    key_set set = {.cap = table_size(largest_object(root))};
    set.slot = calloc(set.cap, sizeof *set.slot);
    if (!set.slot) {
        snprintf(err, errlen, "out of memory for a key table of %zu entries", set.cap);
        cJSON_Delete(root);
        return NULL;
    }
    keep_last_duplicates(root, &set);
    free(set.slot);
    return root;
}
