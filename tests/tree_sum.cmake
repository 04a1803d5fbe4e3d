# The fixed-order allreduce that data-parallel gradients use (runtime/job/tree_sum.c), on 1 to 5
# real MPI processes (oversubscribed: CI has 2 cores).
add_executable(test_tree_sum ${MT_TEST_DIR}/test_tree_sum.c)
target_link_libraries(test_tree_sum PRIVATE mt_job m)
foreach(np 1 2 3 4 5)
  add_test(NAME tree_sum_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${np}
                   $<TARGET_FILE:test_tree_sum>)
  set_tests_properties(tree_sum_np${np} PROPERTIES TIMEOUT 120)
endforeach()
