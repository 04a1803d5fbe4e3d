# Checkpoints (runtime/io/checkpoint.c): the hash and checkpoint.keep's pruning without MPI, then
# end to end through mtrun: corrupted or mismatched checkpoints refused, keep-last-K.
add_executable(test_checkpoint ${MT_TEST_DIR}/test_checkpoint.c)
target_link_libraries(test_checkpoint PRIVATE mt_runtime)
add_test(NAME checkpoint_unit COMMAND test_checkpoint)

foreach(t verify keep)
  add_test(NAME e2e_ckpt_${t} COMMAND bash ${MT_TEST_DIR}/e2e_ckpt_${t}.sh $<TARGET_FILE:mtrun>
           ${CMAKE_SOURCE_DIR})
  set_tests_properties(e2e_ckpt_${t} PROPERTIES TIMEOUT 600 LABELS e2e)
endforeach()
