# Gated DeltaNet's kernels against transformers (skipped, exit 77, without torch/transformers):
# the conv, the delta rule with its l2norm, the gates, the gated RMSNorm and the whole
# Qwen3_5GatedDeltaNet composed from them, on gdn_ops_dump's fixed inputs, packed documents
# against transformers on each document alone.
add_executable(gdn_ops_dump ${MT_TEST_DIR}/gdn_ops_dump.c)
target_link_libraries(gdn_ops_dump PRIVATE mt_kernels)
add_test(NAME gdn_ops_parity COMMAND python3 ${MT_TEST_DIR}/gdn_ops_parity.py ${CMAKE_BINARY_DIR})
set_tests_properties(gdn_ops_parity PROPERTIES SKIP_RETURN_CODE 77)
