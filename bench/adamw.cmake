# AdamW throughput (issue 4): paths x threads vs a STREAM triad, store policies, N processes.
# Run it through bench/run_adamw_bench.sh, which also times PyTorch's fused CPU AdamW.
add_executable(adamw_bench ${CMAKE_CURRENT_SOURCE_DIR}/adamw_bench.c)
target_link_libraries(adamw_bench PRIVATE mt_kernels pthread)
