# Hugging Face folders in and out (runtime/hf.c): fixtures are written at test time by
# hf_fixture.py (standard library only).
add_executable(test_hf ${MT_TEST_DIR}/test_hf.c)
target_link_libraries(test_hf PRIVATE mt_runtime)
add_test(NAME hf_roundtrip COMMAND bash ${MT_TEST_DIR}/hf_roundtrip.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR})
add_test(NAME hf_errors COMMAND bash ${MT_TEST_DIR}/hf_errors.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR})
add_test(NAME e2e_hf COMMAND bash ${MT_TEST_DIR}/hf_e2e.sh $<TARGET_FILE:mtrun> ${CMAKE_SOURCE_DIR}
         $<TARGET_FILE:test_hf>)
set_tests_properties(e2e_hf PROPERTIES RUN_SERIAL TRUE TIMEOUT 900)
