// Error checks for MPI and UCX calls; SYS_CHECK for system calls comes from shm/syscheck.h.
#ifndef MT_CHECK_H
#define MT_CHECK_H

#include "shm/syscheck.h"
#include <mpi.h>
#include <ucs/type/status.h>

#define MPI_CHECK(call)                                                                            \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) {                                                              \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                   \
            int mpi_len_ = 0;                                                                      \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                        \
            mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, mpi_msg_);                          \
        }                                                                                          \
    } while (0)

#define UCS_CHECK(call)                                                                            \
    do {                                                                                           \
        ucs_status_t ucs_rc_ = (call);                                                             \
        if (ucs_rc_ != UCS_OK)                                                                     \
            mt_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, ucs_status_string(ucs_rc_));        \
    } while (0)

#endif
