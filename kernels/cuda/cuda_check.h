// One check macro per library: CUDA runtime and cuBLAS(Lt). A failure ends the process with one
// line naming the call, the place and the library's own message.
#ifndef MT_CUDA_CHECK_H
#define MT_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t cuda_rc_ = (call);                                                             \
        if (cuda_rc_ != cudaSuccess) {                                                             \
            fprintf(stderr, "megatrain: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString(cuda_rc_));                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// After a kernel launch: launch errors show up here, not at the launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t cublas_rc_ = (call);                                                        \
        if (cublas_rc_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "megatrain: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, \
                    (int)cublas_rc_);                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
