# mtrun: bad input fails early with one line that names the problem (launcher_errors.sh
# holds the cases), and --help / --version / --dry-run do what they say.
add_test(NAME launcher_errors
         COMMAND sh ${MT_TEST_DIR}/launcher_errors.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
add_test(NAME launcher_dry_run
         COMMAND sh ${MT_TEST_DIR}/launcher_dry_run.sh ${MTRUN} ${CMAKE_SOURCE_DIR})
set_tests_properties(launcher_errors launcher_dry_run PROPERTIES TIMEOUT 60 LABELS launcher)
