# Hugging Face folders in and out (runtime/model/hf_config.c, runtime/io/safetensors.c, export.c): fixtures are written at test time by
# hf_fixture.py (standard library only).
add_executable(test_hf ${MT_TEST_DIR}/test_hf.c)
target_link_libraries(test_hf PRIVATE mt_runtime)
add_test(NAME hf_roundtrip COMMAND bash ${MT_TEST_DIR}/hf_roundtrip.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR})
add_test(NAME hf_errors COMMAND bash ${MT_TEST_DIR}/hf_errors.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR})
# A million keys in one config.json object, read under a time bound that a quadratic duplicate
# check cannot meet (hf_json_keys.sh).
add_test(NAME hf_json_keys COMMAND bash ${MT_TEST_DIR}/hf_json_keys.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR})
set_tests_properties(hf_json_keys PROPERTIES TIMEOUT 900)
# MoE config.json keys as transformers reads them: the experts' two names, Qwen3-MoE without
# head_dim, ints written as floats (hf_moe_config.sh).
add_test(NAME hf_moe_config COMMAND bash ${MT_TEST_DIR}/hf_moe_config.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR})
# gpt-oss folders (hf_oss.sh, standard library only): fused and MXFP4 experts in, the hub's
# layout out, the refusals; against transformers when torch is there (hf_oss_transformers.py).
add_test(NAME hf_oss COMMAND bash ${MT_TEST_DIR}/hf_oss.sh $<TARGET_FILE:test_hf> ${MT_TEST_DIR}
         $<TARGET_FILE:mtrun>)
add_test(NAME hf_oss_transformers COMMAND python3 ${MT_TEST_DIR}/hf_oss_transformers.py
         $<TARGET_FILE:test_hf> ${MT_TEST_DIR})
set_tests_properties(hf_oss_transformers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# Qwen3.5, Qwen3.5-MoE, Qwen3-Next and Qwen3.5's VLM folders (hf_qwen35.sh, standard library
# only): the hub's layouts in and out, the vision tower and mtp.* carried, the refusals, mtrun
# --dry-run; against transformers when torch is there (hf_qwen35_transformers.py).
add_test(NAME hf_qwen35 COMMAND bash ${MT_TEST_DIR}/hf_qwen35.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR} $<TARGET_FILE:mtrun>)
add_test(NAME hf_qwen35_transformers COMMAND python3 ${MT_TEST_DIR}/hf_qwen35_transformers.py
         $<TARGET_FILE:test_hf>)
set_tests_properties(hf_qwen35_transformers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
add_test(NAME e2e_hf COMMAND bash ${MT_TEST_DIR}/hf_e2e.sh $<TARGET_FILE:mtrun> ${CMAKE_SOURCE_DIR}
         $<TARGET_FILE:test_hf>)
set_tests_properties(e2e_hf PROPERTIES TIMEOUT 900 LABELS e2e)
# Parity with transformers (skipped, exit 77, without torch/transformers or without the backend):
# the first-step loss of a Llama with llama3 rope_scaling, a Mistral and a Qwen2 (q/k/v biases)
# against transformers' on the same batch, and our RoPE table bitwise (hf_family_parity.py); a
# 50-step training curve against a PyTorch AdamW loop over the same Llama
# (bench/hf_train_parity.py).
foreach(b cpu cuda)
  add_test(NAME hf_family_parity_${b} COMMAND python3 ${MT_TEST_DIR}/hf_family_parity.py
           ${CMAKE_BINARY_DIR} ${b})
  add_test(NAME hf_train_parity_${b} COMMAND python3 ${CMAKE_SOURCE_DIR}/bench/hf_train_parity.py
           ${CMAKE_BINARY_DIR} ${b})
  # Loss masks: the same over a masked shard, against labels = -100 and the step's target count.
  add_test(NAME hf_train_parity_masked_${b} COMMAND python3
           ${CMAKE_SOURCE_DIR}/bench/hf_train_parity.py --masked ${CMAKE_BINARY_DIR} ${b})
  set_tests_properties(hf_family_parity_${b} hf_train_parity_${b} hf_train_parity_masked_${b}
                       PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE TIMEOUT 600)
endforeach()
# The fine-tuning walk-through of docs/huggingface.md: configs/sft-example.cfg on a tiny model and
# chat data made from the demo text, through mt-tokenize --chat, the masked loss and the export.
add_test(NAME sft_example COMMAND bash ${MT_TEST_DIR}/sft_example.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:mt-tokenize>)
set_tests_properties(sft_example PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS e2e)
# Packed documents (with a mask too): transformers on each document alone, positions from 0.
foreach(b cpu cuda)
  add_test(NAME hf_train_parity_packed_${b} COMMAND python3
           ${CMAKE_SOURCE_DIR}/bench/hf_train_parity.py --masked --packed ${CMAKE_BINARY_DIR} ${b})
  set_tests_properties(hf_train_parity_packed_${b} PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       TIMEOUT 600)
endforeach()
# MoE parity with transformers (hf_moe_parity.py): the load-balancing loss against
# load_balancing_loss_func, then Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE: step 1 and 20
# AdamW steps with the aux loss on against a PyTorch loop, and the export read back.
add_executable(moe_aux_check ${MT_TEST_DIR}/moe_aux_check.c)
target_link_libraries(moe_aux_check PRIVATE mt_runtime)
foreach(b cpu cuda)
  add_test(NAME hf_moe_parity_${b} COMMAND python3 ${MT_TEST_DIR}/hf_moe_parity.py
           ${CMAKE_BINARY_DIR} ${b})
  # gpt-oss the same way (hf_oss_parity.py): skipped (77) while the backend refuses gpt-oss
  add_test(NAME hf_oss_parity_${b} COMMAND python3 ${MT_TEST_DIR}/hf_oss_parity.py
           ${CMAKE_BINARY_DIR} ${b})
  # Qwen3.5, Qwen3.5-MoE, Qwen3-Next and Qwen3.5's VLM the same way (hf_qwen35_parity.py):
  # skipped (77) without torch, and on cuda without a GPU
  add_test(NAME hf_qwen35_parity_${b} COMMAND python3 ${MT_TEST_DIR}/hf_qwen35_parity.py
           ${CMAKE_BINARY_DIR} ${b})
  # DeepSeek-V3 (q_lora_rank set and null), GLM-4.5 and GLM-4.7-Flash the same way
  # (hf_deepseek_parity.py): skipped (77) while config.c refuses MLA and DeepSeek's router
  add_test(NAME hf_deepseek_parity_${b} COMMAND python3 ${MT_TEST_DIR}/hf_deepseek_parity.py
           ${CMAKE_BINARY_DIR} ${b})
  set_tests_properties(hf_moe_parity_${b} hf_oss_parity_${b} hf_qwen35_parity_${b}
                       hf_deepseek_parity_${b} PROPERTIES
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE TIMEOUT 900)
endforeach()
# MoE end to end on the CPU backend (e2e_moe.sh): bitwise across -np 2/3/5 and resume with idle
# experts, the HF round trip of Mixtral, Qwen2-MoE and OLMoE folders, and the refusals. Here
# rather than in runtime.cmake's e2e list because it needs test_hf beside mtrun.
add_test(NAME e2e_moe COMMAND bash ${MT_TEST_DIR}/e2e_moe.sh $<TARGET_FILE:mtrun> ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_moe PROPERTIES TIMEOUT 1800 SKIP_RETURN_CODE 77 LABELS e2e)
# DeepSeek's correction bias is frozen: exported bitwise after steps with weight decay, on the
# optimizer ranks and in device groups (e2e_moe_frozen.sh)
add_test(NAME e2e_moe_frozen COMMAND bash ${MT_TEST_DIR}/e2e_moe_frozen.sh $<TARGET_FILE:mtrun>
         ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_moe_frozen PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS e2e)
# Qwen3.5's hybrid layers end to end on the CPU backend (e2e_qwen35.sh): Gated DeltaNet and gated
# attention train, bitwise across -np 2/3, resume and the memory modes.
add_test(NAME e2e_qwen35 COMMAND bash ${MT_TEST_DIR}/e2e_qwen35.sh $<TARGET_FILE:mtrun> ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_qwen35 PROPERTIES TIMEOUT 600 LABELS e2e)
# DeepSeek's block-scaled FP8 (runtime/io/fp8.c): all 256 E4M3 codes and a ragged scale grid
# against the format's definition.
add_executable(test_fp8 ${MT_TEST_DIR}/test_fp8.c)
target_link_libraries(test_fp8 PRIVATE mt_io)
add_test(NAME fp8_dequantize COMMAND test_fp8)
# DeepSeek-V3 (q_lora_rank set and null), GLM-4.5 and GLM-4.7-Flash folders made by transformers,
# and a block-scaled FP8 DeepSeek-V3 (hf_deepseek_transformers.py; skipped, exit 77, without
# torch and transformers): import, export, re-import bitwise; transformers loads the export with
# every tensor and the logits bitwise; the MTP layers carried byte for byte; FP8 dequantized.
add_test(NAME hf_deepseek_transformers COMMAND python3 ${MT_TEST_DIR}/hf_deepseek_transformers.py
         $<TARGET_FILE:test_hf>)
set_tests_properties(hf_deepseek_transformers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# DeepSeek-V3, GLM-4.5 and GLM-4.7-Flash folders without torch (hf_deepseek.sh, standard library
# only): import, export and re-import bitwise, FP8 dequantized, the MTP layer carried, the
# refusals; mtrun --dry-run takes the folders (SKIP lines while MLA and the router are refused).
add_test(NAME hf_deepseek COMMAND bash ${MT_TEST_DIR}/hf_deepseek.sh $<TARGET_FILE:test_hf>
         ${MT_TEST_DIR} $<TARGET_FILE:mtrun>)
