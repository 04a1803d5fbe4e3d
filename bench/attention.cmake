# Causal flash attention TFLOP/s per kernel path (issue 16); bench/attention_torch.py times
# PyTorch's SDPA on the same shapes.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c)
  target_link_libraries(attention_bench PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart)
endif()
