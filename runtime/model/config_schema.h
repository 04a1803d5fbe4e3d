// train.cfg's schema: every key, its type, range and default, and where it lives in
// mt_config. Private to model/: config.c walks a file against it.
#ifndef MT_CONFIG_SCHEMA_H
#define MT_CONFIG_SCHEMA_H

#include "runtime/model/model.h"
#include <stddef.h>

// range: [a, b]; enum: a string from a fixed list, stored as its index (model.h's choices)
typedef enum { K_INT, K_INT64, K_FLOAT, K_BOOL, K_STRING, K_RANGE, K_ENUM } kind_t;

enum {
    REQUIRED = 1 << 0, // no default: the file must set it
    DERIVED = 1 << 1,  // default computed from other keys (see apply_derived)
    MIN_OPEN = 1 << 2, // range excludes min
    MAX_OPEN = 1 << 3, // range excludes max
};

typedef struct {
    const char *key; // "group.name" or "name"
    kind_t kind;
    double min, max; // numbers; for strings, max is ignored (the field's size bounds it)
    unsigned flags;
    double def;               // default of a number or bool
    const char *sdef;         // default of a string
    size_t off, size;         // where it lives in mt_config
    const char *const *names; // an enum's names, its values in order (def: the default's)
} field_t;

#define CONFIG_FIELDS 109 // entries of config_schema (checked where it is defined)
extern const field_t config_schema[];

const field_t *find_field(const char *key);
int is_group(const char *name); // a group of settings such as "model" or "model.rope_scaling"
// The closest known key to a misspelled one, or NULL when none is close.
const char *suggest(const char *key);
const char *type_name(int t); // a libconfig CONFIG_TYPE_*, as a user would call it
void range_text(const field_t *f, char *out, size_t n);
int in_range(const field_t *f, double v);

#endif
