# Bad input refused in one line with exit 2, before anything starts where it can be (the cases
# of issue 41's D11-D19): each script checks only its own job's folders and names.
add_test(NAME config_one_value COMMAND bash ${MT_TEST_DIR}/config_one_value.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
add_test(NAME config_int64 COMMAND bash ${MT_TEST_DIR}/config_int64.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
add_test(NAME config_dense_layers COMMAND bash ${MT_TEST_DIR}/config_dense_layers.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
add_test(NAME config_router COMMAND bash ${MT_TEST_DIR}/config_router.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
set_tests_properties(config_one_value config_int64 config_dense_layers config_router
                     PROPERTIES TIMEOUT 120 LABELS launcher)
# Exit code 2 for bad input that a rank finds (or that mtrun now finds before the ranks start).
add_test(NAME e2e_bad_input_exit COMMAND bash ${MT_TEST_DIR}/e2e_bad_input_exit.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
# A shard truncated or rewritten under a running job: one line naming it, exit 2.
add_test(NAME e2e_shard_changed COMMAND bash ${MT_TEST_DIR}/e2e_shard_changed.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
# Data with no target at all is refused.
add_test(NAME data_no_target COMMAND bash ${MT_TEST_DIR}/data_no_target.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_bad_input_exit e2e_shard_changed data_no_target PROPERTIES TIMEOUT 300
                     SKIP_RETURN_CODE 77 LABELS e2e)
# mt-tokenize: an earlier run's shards are refused or (--force) replaced whole; empty input;
# JSONL lines read as Python's json reads them.
add_test(NAME tokenize_prefix COMMAND bash ${MT_TEST_DIR}/tokenize_prefix.sh
         $<TARGET_FILE:mt-tokenize>)
add_test(NAME tokenize_json COMMAND bash ${MT_TEST_DIR}/tokenize_json.sh $<TARGET_FILE:mt-tokenize>)
set_tests_properties(tokenize_prefix tokenize_json PROPERTIES TIMEOUT 60 LABELS tokenize)
