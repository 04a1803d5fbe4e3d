# Kernel benchmarks on the GPU. Causal flash attention TFLOP/s per kernel path (issue 16);
# bench/attention_torch.py times PyTorch's SDPA on the same shapes.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c)
  target_link_libraries(attention_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
  # The same bench built with its own copy of attention_bwd_tma.cu, linked ahead of the
  # library's: attention_bench_prof with the per-CTA profile (MT_ATTN_PROFILE). Further variants
  # are one more "suffix;DEFINE" here (bench/attn_variants.sh runs them by suffix).
  foreach(variant "prof;MT_ATTN_PROFILE")
    list(GET variant 0 suffix)
    list(GET variant 1 define)
    add_executable(attention_bench_${suffix} ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c
                   ${PROJECT_SOURCE_DIR}/kernels/cuda/attention_bwd_tma.cu)
    target_compile_definitions(attention_bench_${suffix} PRIVATE ${define})
    target_compile_options(attention_bench_${suffix} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo>)
    target_link_libraries(attention_bench_${suffix} PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
  endforeach()
endif()

# cuBLASLt's algorithms for the bench models' GEMM shapes, against the heuristic's first choice.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(gemm_bench ${CMAKE_CURRENT_SOURCE_DIR}/gemm_bench.c)
  target_link_libraries(gemm_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
endif()
