// Bad input that the ranks would only find after they start, caught here first, so that it is
// refused in one line with exit 2 like every other bad input, and nothing starts: a CUDA backend
// with no CUDA device, and a run folder the job cannot write or another user could change.
#include "launcher/launcher.h"
#include "runtime/base/base.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef MT_HAVE_CUDA
// Whether this host shows an NVIDIA GPU to its processes: the driver lists one under
// /proc/driver/nvidia/gpus, or a device node /dev/nvidia<N> is there (a container may have only
// those), and CUDA_VISIBLE_DEVICES does not hide them all.
static int host_has_gpu(void) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible && (!*visible || !strcmp(visible, "-1"))) return 0;
    const char *where[] = {"/proc/driver/nvidia/gpus", "/dev"};
    for (int k = 0; k < 2; k++) {
        DIR *d = opendir(where[k]);
        if (!d) continue;
        int found = 0;
        for (struct dirent *e; !found && (e = readdir(d));)
            found = k == 0 ? e->d_name[0] != '.'
                           : !strncmp(e->d_name, "nvidia", 6) && e->d_name[6] >= '0' &&
                                 e->d_name[6] <= '9';
        closedir(d);
        if (found) return 1;
    }
    return 0;
}

#endif

int check_backend_device(const mtrun_opts *o, const mt_config *cfg, char *err, size_t n) {
    if (cfg->backend != BACKEND_CUDA) return 0;
#ifndef MT_HAVE_CUDA
    (void)o;
    return failf(err, n,
                 "%s: backend = \"cuda\": this build has no CUDA backend (it was built without a "
                 "CUDA compiler); use backend = \"cpu\" or \"auto\"",
                 mt_shown(o->config));
#else
    // The ranks of a hostfile run elsewhere: only a job on this host is checked here.
    if (o->hostfile || host_has_gpu()) return 0;
    return failf(
        err, n,
        "%s: backend = \"cuda\": no usable CUDA device on this host%s; use backend = \"cpu\" "
        "or \"auto\"",
        mt_shown(o->config),
        getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES hides them)" : "");
#endif
}

// dir, or the nearest folder above it that exists (a fresh run folder is made there).
static void existing_folder(const char *dir, char *out, size_t n) {
    snprintf(out, n, "%s", dir);
    while (access(out, F_OK) != 0 && strcmp(out, "/") && strcmp(out, ".")) {
        char up[MT_PATH_MAX];
        snprintf(up, sizeof up, "%s", out);
        snprintf(out, n, "%s", dirname(up));
    }
}

int check_run_folder_writable(const char *dir, const char *what, char *err, size_t n) {
    char at[MT_PATH_MAX];
    existing_folder(dir, at, sizeof at);
    struct statvfs fs;
    if (statvfs(at, &fs) == 0 && (fs.f_flag & ST_RDONLY))
        return failf(err, n,
                     "%s %s: %s is on a read-only file system: the job writes its "
                     "checkpoints and metrics there",
                     what, mt_shown(dir), strcmp(at, dir) ? mt_shown(at) : "the folder");
    if (access(at, W_OK | X_OK) != 0)
        return failf(err, n,
                     "%s %s: %s is not writable (%s): the job writes its checkpoints "
                     "and metrics there",
                     what, mt_shown(dir), strcmp(at, dir) ? mt_shown(at) : "the folder",
                     strerror(errno));
    return 0;
}

int check_run_folder_trusted(const char *dir, const char *what, char *err, size_t n) {
    char why[MT_PATH_MAX + 256];
    if (path_trust_check(dir, 0, why, sizeof why) == 0) return 0;
    return failf(err, n,
                 "%s %s: %s: another user could swap or rewrite the job's checkpoints there and "
                 "steer a --resume from them; use a folder only you can change (one of your own, "
                 "chmod go-w)",
                 what, dir, why);
}
