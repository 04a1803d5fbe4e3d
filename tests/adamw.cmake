# AdamW (issue 4): the PyTorch transcription, and the SIMD paths against the scalar one and an
# exact reference (bitwise), across thread counts, shard boundaries and bf16 edge cases.
add_executable(test_adamw ${MT_TEST_DIR}/test_adamw.c)
target_link_libraries(test_adamw PRIVATE mt_kernels)
add_test(NAME adamw_vs_pytorch_transcription COMMAND test_adamw)

add_executable(test_adamw_simd ${MT_TEST_DIR}/test_adamw_simd.c)
target_link_libraries(test_adamw_simd PRIVATE mt_kernels)
# Their references must not be contracted into FMAs either (see the files' heads).
set_source_files_properties(${MT_TEST_DIR}/test_adamw.c ${MT_TEST_DIR}/test_adamw_simd.c
                            PROPERTIES COMPILE_OPTIONS -ffp-contract=off)
add_test(NAME adamw_simd_bitwise COMMAND test_adamw_simd)
