add_executable(test_model_grad ${MT_TEST_DIR}/test_model_grad.c)
target_link_libraries(test_model_grad PRIVATE mt_runtime)
add_test(NAME model_gradcheck COMMAND test_model_grad)

# End-to-end tests through the real launcher, real processes and real shared memory. Each checks
# only what its own jobs made (tests/e2e_lib.sh), so they may run side by side (ctest -j) and
# beside a user's job (e2e_beside). Those that time signals and the watchdog in seconds run
# alone, so that a loaded 2-core machine does not stretch what they time.
foreach(t sharding_invariance resume shm_cleanup demo_loss recompute pinning device_groups
          stall_advice grad_dtype planted_links nonfinite disk stop watchdog segments seq_chunk
          data_parallel run_lock beside overrides tensorboard grad_ring storage
          foreign_names run_lock_user run_swap run_trust window o_bias
          metrics_full mpirun_killed mla)
  add_test(NAME e2e_${t} COMMAND bash ${MT_TEST_DIR}/e2e_${t}.sh $<TARGET_FILE:mtrun>
           ${CMAKE_SOURCE_DIR})
  set_tests_properties(e2e_${t} PROPERTIES TIMEOUT 1800 SKIP_RETURN_CODE 77 LABELS e2e)
endforeach()
set_tests_properties(e2e_shm_cleanup e2e_stop e2e_watchdog e2e_run_lock e2e_beside PROPERTIES
                     RUN_SERIAL TRUE)
# The tests above, again beside a running job: once is enough (make test), not under sanitizers.
set_tests_properties(e2e_beside PROPERTIES LABELS "e2e;beside")

add_test(NAME e2e_cuda_parity COMMAND bash ${MT_TEST_DIR}/e2e_cuda_parity.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_cuda_parity PROPERTIES RUN_SERIAL TRUE TIMEOUT 900 SKIP_RETURN_CODE 77)
# Attention sinks on the CUDA backend (skipped without a GPU).
add_test(NAME e2e_cuda_sinks COMMAND bash ${MT_TEST_DIR}/e2e_cuda_sinks.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_cuda_sinks PROPERTIES RUN_SERIAL TRUE TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS e2e)
# The NVMe tier's CUDA halves against the CUDA job in host memory (skipped without a GPU).
add_test(NAME e2e_storage_cuda COMMAND bash ${MT_TEST_DIR}/e2e_storage_cuda.sh
         $<TARGET_FILE:mtrun> ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_storage_cuda PROPERTIES RUN_SERIAL TRUE TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS e2e)

# One decoder layer against transformers' LlamaDecoderLayer (skipped without torch).
add_executable(layer_check ${MT_TEST_DIR}/layer_check.c)
target_link_libraries(layer_check PRIVATE mt_runtime)
foreach(b cpu cuda)
  add_test(NAME layer_parity_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
           $<TARGET_FILE:layer_check> ${b})
  # Qwen2DecoderLayer: q/k/v biases (skipped on cuda until backend_cuda.c has them)
  add_test(NAME layer_parity_qwen2_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
           $<TARGET_FILE:layer_check> ${b} qwen2)
  # gpt-oss's MoE MLP (GptOssMLP) after the Llama attention
  add_test(NAME layer_parity_gpt_oss_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
           $<TARGET_FILE:layer_check> ${b} gpt_oss)
  # DeepSeek-V3's MoE (DeepseekV3MoE: the sigmoid router, groups, correction bias, scale,
  # ungated shared experts) after the Llama attention
  add_test(NAME layer_parity_deepseek_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
           $<TARGET_FILE:layer_check> ${b} deepseek)
  set_tests_properties(layer_parity_${b} layer_parity_qwen2_${b} layer_parity_gpt_oss_${b}
                       layer_parity_deepseek_${b} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
# Qwen3_5DecoderLayer: the gated full attention, and the Gated DeltaNet, on both backends
foreach(b cpu cuda)
  foreach(kind attention linear)
    add_test(NAME layer_parity_qwen35_${kind}_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
             $<TARGET_FILE:layer_check> ${b} qwen35_${kind})
    set_tests_properties(layer_parity_qwen35_${kind}_${b} PROPERTIES SKIP_RETURN_CODE 77
                         TIMEOUT 300)
  endforeach()
endforeach()
# DeepseekV3DecoderLayer (a dense MLP): multi-head latent attention with q_proj and plain RoPE,
# and with the low-rank query path, interleaved RoPE and YaRN's mscale_all_dim (cuda: skipped
# without a GPU)
foreach(b cpu cuda)
  foreach(kind deepseek_v3 deepseek_v3_lora)
    add_test(NAME layer_parity_${kind}_${b} COMMAND python3 ${MT_TEST_DIR}/layer_parity.py
             $<TARGET_FILE:layer_check> ${b} ${kind})
    set_tests_properties(layer_parity_${kind}_${b} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  endforeach()
endforeach()
# A whole tiny Qwen3_5ForCausalLM (hybrid layers) against the CPU templates: loss and every
# parameter's gradient (skipped without torch).
add_executable(model_check ${MT_TEST_DIR}/model_check.c)
target_link_libraries(model_check PRIVATE mt_runtime)
add_test(NAME model_parity_qwen35_cpu COMMAND python3 ${MT_TEST_DIR}/model_parity.py
         $<TARGET_FILE:model_check>)
set_tests_properties(model_parity_qwen35_cpu PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# optimizer.device_groups = "auto": what the plan and the engine pick.
add_executable(test_device_groups_auto ${MT_TEST_DIR}/test_device_groups_auto.c)
target_link_libraries(test_device_groups_auto PRIVATE mt_runtime)
add_test(NAME device_groups_auto COMMAND test_device_groups_auto ${CMAKE_SOURCE_DIR})

# The bytes each backend's allocator gives its working sets against the plan's (buffers.h's
# lists): plan_matches_allocation on the GPU (skipped, exit 77, without one), _cpu on the CPU.
add_executable(test_plan_allocation ${MT_TEST_DIR}/test_plan_allocation.c)
target_link_libraries(test_plan_allocation PRIVATE mt_runtime)
add_test(NAME plan_matches_allocation COMMAND test_plan_allocation cuda)
add_test(NAME plan_matches_allocation_cpu COMMAND test_plan_allocation cpu)
set_tests_properties(plan_matches_allocation PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
