# CPU reference kernels: finite-difference gradient checks, naive forward references and
# bitwise determinism across OpenMP thread counts.
add_executable(test_kernels_cpu ${MT_TEST_DIR}/test_kernels_cpu.c)
target_link_libraries(test_kernels_cpu PRIVATE mt_kernels)
add_test(NAME kernels_cpu_gradcheck COMMAND test_kernels_cpu)
# The kernels gpt-oss adds: its experts' clamped SwiGLU (gradient checks, the clamp's edges) and
# YaRN's RoPE table.
add_executable(test_kernels_gptoss ${MT_TEST_DIR}/test_kernels_gptoss.c)
target_link_libraries(test_kernels_gptoss PRIVATE mt_kernels)
add_test(NAME kernels_cpu_gptoss COMMAND test_kernels_gptoss)
# Gated DeltaNet's kernels (Qwen3.5, Qwen3-Next): gradient checks of the conv, l2norm, gates,
# gated RMSNorm and the delta rule (recurrent and chunked, over chunk and document boundaries),
# the chunked form against the recurrent one, packed documents against each one alone.
add_executable(test_kernels_gdn ${MT_TEST_DIR}/test_kernels_gdn.c)
target_link_libraries(test_kernels_gdn PRIVATE mt_kernels)
add_test(NAME kernels_cpu_gdn COMMAND test_kernels_gdn)
