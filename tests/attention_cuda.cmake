# CUDA flash attention against the CPU reference (both paths), then timed; skipped (exit 77)
# on machines without a GPU.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(test_attention_cuda ${MT_TEST_DIR}/test_attention_cuda.c)
  target_link_libraries(test_attention_cuda PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart m)
  add_test(NAME attention_cuda_vs_cpu COMMAND test_attention_cuda)
  set_tests_properties(attention_cuda_vs_cpu PROPERTIES SKIP_RETURN_CODE 77)
endif()
