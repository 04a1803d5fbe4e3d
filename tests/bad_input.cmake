# Bad input refused in one line with exit 2, before anything starts where it can be (the cases
# of issue 41's D11-D19): each script checks only its own job's folders and names.
add_test(NAME config_one_value COMMAND bash ${MT_TEST_DIR}/config_one_value.sh ${MTRUN}
         ${CMAKE_SOURCE_DIR})
add_test(NAME config_int64 COMMAND bash ${MT_TEST_DIR}/config_int64.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
set_tests_properties(config_one_value config_int64 PROPERTIES TIMEOUT 120 LABELS launcher)
