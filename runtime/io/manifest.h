// manifest.json, private to io/: checkpoint.c's reading and writing of it.
#ifndef MT_MANIFEST_H
#define MT_MANIFEST_H

#include "runtime/io/io.h"
#include <cjson/cJSON.h>
#include <stdint.h>

typedef struct {
    uint64_t block, file_bytes, n;
    uint64_t *sums; // [n], malloc'd
} block_list;

// What the manifest says of the state it describes, for state.bin's header to be held to.
typedef struct {
    int version;
    double step, skipped;
    uint64_t seed;
} manifest_facts;

// step_dir/manifest.json parsed, its "self" checksum checked (version 3); NULL with err.
cJSON *manifest_load(const char *step_dir, char *path, size_t cap, char *err, size_t errlen);
// A whole number field of obj (prefix names its parent in messages), in [0, 2^53].
int manifest_get_uint(const cJSON *obj, const char *key, const char *path, const char *prefix,
                      double *out, char *err, size_t errlen);
// Everything resume needs from the manifest, checked against the job's config and the size
// state.bin must have; on success bl->sums is malloc'd.
int manifest_check(const char *step_dir, const mt_job *job, uint64_t file_bytes, block_list *bl,
                   manifest_facts *mf, char *err, size_t errlen);
// The manifest of a save at `step` whose state.bin has the block checksums bl, "self" filled
// in; to free().
// The key=value overrides a checkpoint's run was given (none when the manifest has none): at
// most max into out. 0; -1 with one line in err naming the file when the manifest does not load
// or check; -2 when its overrides are malformed.
int manifest_overrides(const char *step_dir, char out[][MT_OVERRIDE_MAX], int max, int *n,
                       char *err, size_t errlen);
char *manifest_text(const mt_job *job, int step, const block_list *bl);

#endif
