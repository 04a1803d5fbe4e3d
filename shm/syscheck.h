// One macro per library for error checks; this one is for system calls (-1 and errno).
// A failed call ends the process with one line naming the call, the place and the reason:
// in an MPI job, mpirun then takes the other ranks down too.
#ifndef MT_SYSCHECK_H
#define MT_SYSCHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define mt_die(...)                                                                                \
    do {                                                                                           \
        fprintf(stderr, "megatrain: " __VA_ARGS__);                                                \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

// For calls that return -1 (or NULL for the _PTR variant) and set errno.
#define SYS_CHECK(call)                                                                            \
    do {                                                                                           \
        if ((call) == -1) mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, strerror(errno));     \
    } while (0)

#endif
