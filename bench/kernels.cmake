# Kernel benchmarks on the GPU. Causal flash attention TFLOP/s per kernel path (issue 16);
# bench/attention_torch.py times PyTorch's SDPA on the same shapes.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c)
  target_link_libraries(attention_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
endif()

# cuBLASLt's algorithms for the bench models' GEMM shapes, against the heuristic's first choice.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(gemm_bench ${CMAKE_CURRENT_SOURCE_DIR}/gemm_bench.c)
  target_link_libraries(gemm_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
endif()
