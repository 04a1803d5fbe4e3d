# CUDA kernels against the CPU reference kernels, on the same bf16-rounded values. Built only
# with the CUDA backend; without a GPU the test exits 77 and ctest reports it as skipped.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(test_kernels_cuda ${MT_TEST_DIR}/test_kernels_cuda.c)
  target_link_libraries(test_kernels_cuda PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart m)
  add_test(NAME kernels_cuda_vs_cpu COMMAND test_kernels_cuda)
  set_tests_properties(kernels_cuda_vs_cpu PROPERTIES SKIP_RETURN_CODE 77)
endif()

# The MoE routing kernels and the experts' GEMMs against kernels/cpu/moe.c and linear.c; the
# second run takes the grouped GEMM path (MT_EXPERT_GEMM=grouped).
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(test_moe_cuda ${MT_TEST_DIR}/test_moe_cuda.c)
  target_link_libraries(test_moe_cuda PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart m)
  add_test(NAME moe_cuda_vs_cpu COMMAND test_moe_cuda)
  add_test(NAME moe_cuda_vs_cpu_grouped COMMAND test_moe_cuda)
  set_tests_properties(moe_cuda_vs_cpu moe_cuda_vs_cpu_grouped PROPERTIES SKIP_RETURN_CODE 77)
  set_tests_properties(moe_cuda_vs_cpu_grouped PROPERTIES ENVIRONMENT MT_EXPERT_GEMM=grouped)
endif()

# The gated attention's ops (output_gate.cu: the split of q_proj's rows, the join of their
# gradients, att x sigmoid(gate) and its backward) against their host definition.
if(MT_HAVE_CUDA AND TARGET mt_kernels_cuda)
  add_executable(test_output_gate_cuda ${MT_TEST_DIR}/test_output_gate_cuda.c)
  target_link_libraries(test_output_gate_cuda PRIVATE mt_kernels mt_kernels_cuda CUDA::cudart m)
  add_test(NAME output_gate_cuda_vs_host COMMAND test_output_gate_cuda)
  set_tests_properties(output_gate_cuda_vs_host PROPERTIES SKIP_RETURN_CODE 77)
endif()
