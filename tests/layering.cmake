# The shape of runtime/ (tests/layering.py): subsystem folders used only from above and only
# through their face headers, no circle between files by #include or by call, files <= 600 lines.
add_test(NAME layering COMMAND python3 ${MT_TEST_DIR}/layering.py ${CMAKE_SOURCE_DIR}
         ${CMAKE_BINARY_DIR})
