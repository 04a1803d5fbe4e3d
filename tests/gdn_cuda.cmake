# Gated DeltaNet's CUDA kernels (the chunked delta rule, conv1d, l2norm, gates, gated RMSNorm)
# against the CPU reference ops; skipped (exit 77) on machines without a GPU. The same binary
# times the delta rule: test_gdn_cuda --bench.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(test_gdn_cuda ${MT_TEST_DIR}/test_gdn_cuda.c)
  target_link_libraries(test_gdn_cuda PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart PkgConfig::XXHASH m)
  add_test(NAME gdn_cuda_vs_cpu COMMAND test_gdn_cuda)
  set_tests_properties(gdn_cuda_vs_cpu PROPERTIES SKIP_RETURN_CODE 77)
endif()
