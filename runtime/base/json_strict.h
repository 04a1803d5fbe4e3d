// JSON read as Python's json reads it, so that a file means here what it means to transformers
// and HF datasets: one value and nothing after it but white space, a duplicate key keeps the
// last value (at the first one's place, as a Python dict does), and "\u0000" is refused rather
// than cutting the string short (cJSON's strings end at a NUL), as is a leading UTF-8 byte order
// mark (which cJSON skips). Linear in the text, however many keys an object has. Used by
// config.json and by mt-tokenize's --jsonl/--chat lines. Kept free of MPI so that tools/ can
// compile it alone.
#ifndef MT_JSON_STRICT_H
#define MT_JSON_STRICT_H

#include <stddef.h>

struct cJSON;

// A number written with a fraction or an exponent ("4.0", "4e0"), which Python reads as a float,
// carries this bit in its cJSON type, so that a reader can refuse it where transformers wants an
// int. cJSON's own type tests (cJSON_IsNumber, ...) read only the type's low byte.
#define JSON_FLOAT_TEXT (1 << 12)

// The parsed text[0..len) to cJSON_Delete(), or NULL with a one-line reason in err (without the
// file's name: the caller adds it), e.g. "not valid JSON at line 3, column 7" or "more data
// after the JSON value at line 1, column 12".
struct cJSON *json_parse_strict(const char *text, size_t len, char *err, size_t errlen);

#endif
