add_executable(test_model_grad ${MT_TEST_DIR}/test_model_grad.c)
target_link_libraries(test_model_grad PRIVATE mt_runtime)
add_test(NAME model_gradcheck COMMAND test_model_grad)

# End-to-end tests through the real launcher, real processes and real shared memory.
foreach(t sharding_invariance resume shm_cleanup demo_loss recompute pinning device_groups
          stall_advice grad_dtype planted_links nonfinite disk stop watchdog segments seq_chunk
          data_parallel)
  add_test(NAME e2e_${t} COMMAND bash ${MT_TEST_DIR}/e2e_${t}.sh $<TARGET_FILE:mtrun>
           ${CMAKE_SOURCE_DIR})
  set_tests_properties(e2e_${t} PROPERTIES RUN_SERIAL TRUE TIMEOUT 1800 SKIP_RETURN_CODE 77)
endforeach()

add_test(NAME e2e_cuda_parity COMMAND bash ${MT_TEST_DIR}/e2e_cuda_parity.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_cuda_parity PROPERTIES RUN_SERIAL TRUE TIMEOUT 600 SKIP_RETURN_CODE 77)

# One decoder layer against transformers' LlamaDecoderLayer (skipped without torch).
add_executable(layer_check ${MT_TEST_DIR}/layer_check.c)
target_link_libraries(layer_check PRIVATE mt_runtime)
foreach(b cpu cuda)
  add_test(NAME layer_parity_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
           $<TARGET_FILE:layer_check> ${b})
  # Qwen2DecoderLayer: q/k/v biases (skipped on cuda until backend_cuda.c has them)
  add_test(NAME layer_parity_qwen2_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
           $<TARGET_FILE:layer_check> ${b} qwen2)
  set_tests_properties(layer_parity_${b} layer_parity_qwen2_${b} PROPERTIES SKIP_RETURN_CODE 77
                       TIMEOUT 300)
endforeach()

# optimizer.device_groups = "auto": what the plan and the engine pick.
add_executable(test_device_groups_auto ${MT_TEST_DIR}/test_device_groups_auto.c)
target_link_libraries(test_device_groups_auto PRIVATE mt_runtime)
add_test(NAME device_groups_auto COMMAND test_device_groups_auto)
