# gpt-oss's leaf functions. test_mxfp4: the hub's MXFP4 expert weights (runtime/io/mxfp4.c),
# dequantized values against the formats' definitions, transformers' layout, the shape checks.
add_executable(test_mxfp4 ${MT_TEST_DIR}/test_mxfp4.c)
target_link_libraries(test_mxfp4 PRIVATE mt_io)
add_test(NAME mxfp4_dequantize COMMAND test_mxfp4)
# Parity with transformers (skipped, exit 77, without torch/transformers): YaRN's table, the
# clamped SwiGLU and its gradient, MXFP4 dequantization, on gptoss_ops_dump's fixed inputs.
add_executable(gptoss_ops_dump ${MT_TEST_DIR}/gptoss_ops_dump.c)
target_link_libraries(gptoss_ops_dump PRIVATE mt_io mt_kernels)
add_test(NAME gptoss_ops_parity COMMAND python3 ${MT_TEST_DIR}/gptoss_ops_parity.py
         ${CMAKE_BINARY_DIR})
set_tests_properties(gptoss_ops_parity PROPERTIES SKIP_RETURN_CODE 77)
