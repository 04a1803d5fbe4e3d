# The hub's MXFP4 expert weights (runtime/io/mxfp4.c): dequantized values against the formats'
# definitions, transformers' layout, the shape checks.
add_executable(test_mxfp4 ${MT_TEST_DIR}/test_mxfp4.c)
target_link_libraries(test_mxfp4 PRIVATE mt_io)
add_test(NAME mxfp4_dequantize COMMAND test_mxfp4)
