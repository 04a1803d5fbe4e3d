# Token-shard data (runtime/io/data.c): formats read back, windows across shards, "bytes"
# unchanged, data.val_path's own validation stream, bad input refused with one line naming the
# file (test_data.c); and a job on shards of the demo text that trains exactly like the same job
# on the text, and a job with data.val_path that trains and evaluates exactly like the
# val_fraction split it replaces (data_e2e.sh).
add_executable(test_data ${MT_TEST_DIR}/test_data.c)
target_link_libraries(test_data PRIVATE mt_runtime)
add_test(NAME data_shards COMMAND test_data)
set_tests_properties(data_shards PROPERTIES TIMEOUT 60 LABELS data)
add_test(NAME data_e2e COMMAND bash ${MT_TEST_DIR}/data_e2e.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:test_data>)
set_tests_properties(data_e2e PROPERTIES TIMEOUT 600 LABELS "data;e2e")
# Loss masks: MTCTOKS1 version 2 shards with a target mask, end to end (data_masks.sh).
add_test(NAME data_masks COMMAND bash ${MT_TEST_DIR}/data_masks.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(data_masks PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "data;e2e")
# Packed documents: document-masked attention and per-document positions (data_pack.sh).
add_test(NAME data_pack COMMAND bash ${MT_TEST_DIR}/data_pack.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(data_pack PROPERTIES TIMEOUT 300 LABELS "data;e2e")
