// mtrun's parts: the hostfile check and the mpirun command line. main and the arguments
// live in mtrun.c.
#ifndef MT_LAUNCHER_H
#define MT_LAUNCHER_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    int np;                                       // processes: 1 compute + np-1 optimizers
    const char *config, *hostfile, *resume, *out; // NULL when not given
    const char *stop_at;                          // passed through to mt-rank
    char **extra;                                 // the mpirun arguments after "--"
    int nextra;
} mtrun_opts;

// hostfile.c: checks an Open MPI hostfile, one "host [slots=N] [max_slots=N]" per line.
// Returns 0 and the number of hosts and slots (a host without slots= counts as
// default_slots, which is what Open MPI does on a host like this one), or -1 with a
// one-line message in err.
int hostfile_check(const char *path, int default_slots, int *hosts, long *slots, char *err,
                   size_t errlen);

// mpirun_cmd.c
typedef struct {
    int numa_nodes; // configured NUMA nodes (1 without NUMA support)
    int cores;      // physical cores this process may run on
    long slots;     // what the job may use without oversubscribing
    int oversubscribe;
} placement;

typedef struct {
    char *argv[256];
    int argc;
} cmdline;

void placement_detect(placement *p, const mtrun_opts *o, long hostfile_slots);
// The absolute path of an executable found on PATH (or name itself when it holds a '/').
// Returns -1 when there is none.
int find_in_path(const char *name, char *out, size_t n);
// "mpirun ... mt-rank CONFIG ...": pointers into o and into the given strings.
void mpirun_cmd_build(cmdline *c, const mtrun_opts *o, const placement *p, const char *mpirun,
                      const char *rank_prog);
// One line that a POSIX shell reads back as the same words.
void cmd_print_quoted(FILE *f, const char *prefix, const cmdline *c);

#endif
