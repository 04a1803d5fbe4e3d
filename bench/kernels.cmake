# Kernel benchmarks on the GPU. Causal flash attention TFLOP/s per kernel path (issue 16);
# bench/attention_torch.py times PyTorch's SDPA on the same shapes.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c)
  target_link_libraries(attention_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
  # The same bench with the fused backward's per-CTA profile (MT_ATTN_PROFILE in
  # attention_bwd_tma.cu): its own copy of that file, linked ahead of the library's.
  add_executable(attention_bench_prof ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c
                                      ${PROJECT_SOURCE_DIR}/kernels/cuda/attention_bwd_tma.cu)
  target_compile_definitions(attention_bench_prof PRIVATE MT_ATTN_PROFILE)
  target_compile_options(attention_bench_prof PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo>)
  target_link_libraries(attention_bench_prof PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
endif()

# cuBLASLt's algorithms for the bench models' GEMM shapes, against the heuristic's first choice.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(gemm_bench ${CMAKE_CURRENT_SOURCE_DIR}/gemm_bench.c)
  target_link_libraries(gemm_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
endif()
