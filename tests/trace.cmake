# trace_steps: a real 3-rank job writes a Chrome/Perfetto trace.json of the chosen steps
# (trace_check.sh), and bad ranges fail the config check with one line (trace_errors.sh).
add_test(NAME e2e_trace COMMAND bash ${MT_TEST_DIR}/trace_check.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_trace PROPERTIES TIMEOUT 600 LABELS e2e)
add_test(NAME trace_errors COMMAND bash ${MT_TEST_DIR}/trace_errors.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
set_tests_properties(trace_errors PROPERTIES TIMEOUT 60)
