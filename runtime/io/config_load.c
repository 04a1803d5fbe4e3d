// train.cfg with every file it names checked: the model and training fields (model/), then
// model_dir's weights, the data and export_dir (ours to read), in the order that makes the
// first message the most useful one.
#include "runtime/io/io.h"
#include <cjson/cJSON.h>
#include "runtime/base/base.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

// An export never writes over a folder that holds anything.
static int check_export_dir(config_source *src, mt_config *cfg) {
    char err[MT_PATH_MAX + 512];
    if (!cfg->export_dir[0]) return 0;
    if (config_resolve(src, "export_dir", cfg->export_dir, sizeof cfg->export_dir) < 0) return -1;
    if (hf_export_dir_check(cfg->export_dir, err, sizeof err) < 0)
        return config_fail(src, "export_dir", "%s", err);
    // The export is renamed into place at the end: no other user may swap a folder in on the way.
    if (path_trust_check(cfg->export_dir, 0, err, sizeof err) < 0)
        return config_fail(src, "export_dir",
                           "%s: %s: another user could take the exported weights or swap in "
                           "their own; export to a folder that only you can change",
                           cfg->export_dir, err);
    return 0;
}

// The weights' headers, once the shape is known to be sane: mtrun reports bad files before
// anything starts (the ranks check them again before any shared memory exists).
// The folder's layout that config.json does not give (fused experts) is read here too.
static int check_hf_weights(config_source *src, mt_config *cfg) {
    char err[MT_PATH_MAX + 512];
    if (!cfg->model_dir[0]) return 0;
    hf_index *ix = hf_index_open(cfg->model_dir, err, sizeof err);
    if (ix) hf_index_layout(ix, &cfg->model);
    int rc = ix ? hf_index_check(ix, &cfg->model, err, sizeof err) : -1;
    hf_index_close(ix);
    return rc < 0 ? config_fail(src, "model_dir", "%s", err) : 0;
}

// Enough tokens for one window in the training head and, when evaluating, in the validation
// tail; with data.val_path, one in each file.
static int check_data_size(config_source *src, const mt_config *cfg, long n, long n_val) {
    long need = cfg->seq_len + 1L;
    long val = (long)((double)n * cfg->val_fraction); // 0 with val_path
    long train = n - val;
    if (train < need)
        return config_fail(src, "data.path",
                           "%s: %ld training tokens, fewer than batch.seq_len + 1 = %ld",
                           cfg->data_path, train, need);
    if (cfg->val_path[0] && n_val < need)
        return config_fail(src, "data.val_path",
                           "%s: %ld tokens, fewer than batch.seq_len + 1 = %ld", cfg->val_path,
                           n_val, need);
    if (!cfg->val_path[0] && cfg->eval_interval > 0 && val < need)
        return config_fail(src, "data.path",
                           "%s: %ld validation tokens (data.val_fraction %g), fewer than "
                           "batch.seq_len + 1 = %ld",
                           cfg->data_path, val, cfg->val_fraction, need);
    return 0;
}

// The token count of key's path (data.path or data.val_path) in data.format, known before any
// token is read: shards' headers only (the token scan is at load), a text file's size.
static int count_tokens(config_source *src, const mt_config *cfg, const char *key, const char *path,
                        long *n) {
    if (cfg->data_format == DATA_TOKENS) {
        char msg[MT_PATH_MAX + 256];
        size_t count;
        if (dataset_check_shards(path, &count, msg, sizeof msg) < 0)
            return config_fail(src, key, "%s", msg);
        *n = (long)count;
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return config_fail(src, key, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc < 0) return config_fail(src, key, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return config_fail(src, key, "%s: not a regular file", path);
    *n = (long)st.st_size; // bytes: one token per byte
    return 0;
}

static int check_data_file(config_source *src, const mt_config *cfg) {
    long n, n_val = 0;
    if (cfg->data_format == DATA_SYNTHETIC) return 0; // tokens from a hash: no file
    if (!cfg->data_path[0]) return config_fail(src, "data.path", "missing (required)");
    if (count_tokens(src, cfg, "data.path", cfg->data_path, &n) < 0) return -1;
    if (cfg->val_path[0] && count_tokens(src, cfg, "data.val_path", cfg->val_path, &n_val) < 0)
        return -1;
    if (check_data_size(src, cfg, n, n_val) < 0) return -1;
    char msg[MT_PATH_MAX + 256];
    const char *key;
    if (dataset_check_targets(cfg, (size_t)n, (size_t)n_val, &key, msg, sizeof msg) < 0)
        return config_fail(src, key, "%s", msg);
    return 0;
}

// The filesystems the NVMe tier refuses, by statfs(2)'s f_type: memory (the tier exists to
// spare it) and network filesystems (their bandwidth and O_DIRECT are not a local disk's).
static const char *unfit_filesystem(long type) {
    switch ((unsigned long)type) {
    case 0x01021994:
        return "tmpfs, which is host memory";
    case 0x858458f6:
        return "ramfs, which is host memory";
    case 0x6969:
        return "NFS, a network filesystem";
    case 0xff534d42:
    case 0x517b:
    case 0xfe534d42:
        return "SMB/CIFS, a network filesystem";
    case 0x00c36400:
        return "CephFS, a network filesystem";
    case 0x01021997:
        return "9p, a network filesystem";
    case 0x47504653:
        return "GPFS, a network filesystem";
    case 0x0bd00bd0:
        return "Lustre, a network filesystem";
    default:
        return NULL;
    }
}

static int check_storage_dir(config_source *src, const mt_config *cfg) {
    if (!cfg->storage_grads && !cfg->storage_adam) return 0;
    struct stat st;
    struct statfs fs;
    const char *dir = cfg->storage_dir, *why;
    if (stat(dir, &st) != 0) return config_fail(src, "storage.dir", "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return config_fail(src, "storage.dir", "%s: not a folder", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return config_fail(src, "storage.dir", "%s: not writable: %s", dir, strerror(errno));
    if (statfs(dir, &fs) != 0)
        return config_fail(src, "storage.dir", "%s: %s", dir, strerror(errno));
    if ((why = unfit_filesystem((long)fs.f_type)))
        return config_fail(src, "storage.dir", "%s is on %s; the tier needs a local disk", dir,
                           why);
    // The tier's files are made O_EXCL, 0600 and unlinked at once, so a sticky folder that every
    // user may write to (as /tmp) is fine; one another user owns or can swap is not.
    char whose[MT_PATH_MAX + 256];
    if (path_trust_check(dir, 1, whose, sizeof whose) < 0)
        return config_fail(src, "storage.dir",
                           "%s: %s: another user could swap the folder the optimizer state goes "
                           "to; use a folder that only you (or root) can change",
                           dir, whose);
    return 0;
}

// The export writes a config.json at the end: a model no architecture we write can describe
// (a window on some layers only, say) is refused now, not after training.
static int check_export_family(config_source *src, const mt_config *cfg) {
    if (!cfg->export_dir[0]) return 0;
    cJSON *probe = cJSON_CreateObject();
    if (!probe) mt_die("out of memory");
    int rc = hf_write_family(probe, &cfg->model, cfg->model_dir);
    cJSON_Delete(probe);
    if (rc == 0) return 0;
    return config_fail(src, "export_dir",
                       "no Hugging Face architecture we write has this model's fields (qk_norm "
                       "%s, experts %d, sliding_window %d%s): train without export_dir",
                       mt_choice_name(QK_NORM_NAMES, cfg->model.qk_norm), cfg->model.experts,
                       cfg->model.sliding_window,
                       cfg->model.layer_types[0] ? " on the layers of model.layer_types" : "");
}

int mt_config_load_with(mt_config *cfg, const char *path, const char *const *overrides, int n,
                        char *err, size_t errlen) {
    config_source *src = NULL;
    int rc = config_parse(cfg, path, overrides, n, &src, err, errlen);
    if (rc == 0) rc = check_export_dir(src, cfg);
    if (rc == 0) rc = config_apply_model_dir(src, cfg);
    if (rc == 0) rc = config_check(src, cfg);
    if (rc == 0) model_describe_layers(&cfg->model);
    if (rc == 0) rc = check_export_family(src, cfg);
    if (rc == 0) rc = check_hf_weights(src, cfg);
    if (rc == 0) rc = config_resolve_paths(src, cfg);
    if (rc == 0) rc = check_data_file(src, cfg);
    if (rc == 0) rc = check_storage_dir(src, cfg);
    config_source_free(src);
    return rc;
}

int mt_config_load(mt_config *cfg, const char *path, char *err, size_t errlen) {
    return mt_config_load_with(cfg, path, NULL, 0, err, errlen);
}
