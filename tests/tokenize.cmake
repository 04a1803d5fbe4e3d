# mt-tokenize (tools/tokenize): the BPE core on a hand-written tokenizer.json and its load
# errors (test_tokenize, no Python); the command line's shards and one-line errors
# (tokenize_errors.sh); and token-for-token agreement with the Hugging Face tokenizers library
# on tokenizers trained at test time (tokenize_check.py; skipped, exit 77, without tokenizers).
add_test(NAME tokenize_unit COMMAND test_tokenize ${CMAKE_CURRENT_BINARY_DIR}/tokenize_unit)
set_tests_properties(tokenize_unit PROPERTIES TIMEOUT 60 LABELS tokenize)
add_test(NAME tokenize_errors COMMAND bash ${MT_TEST_DIR}/tokenize_errors.sh
         $<TARGET_FILE:mt-tokenize>)
set_tests_properties(tokenize_errors PROPERTIES TIMEOUT 60 LABELS tokenize)
add_test(NAME tokenize_vs_hf COMMAND python3 ${MT_TEST_DIR}/tokenize_check.py
         $<TARGET_FILE:mt-tokenize> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/tokenize_check)
set_tests_properties(tokenize_vs_hf PROPERTIES TIMEOUT 300 LABELS tokenize SKIP_RETURN_CODE 77)
# mt-tokenize --chat against transformers' apply_chat_template for ChatML, Llama 3 and Mistral:
# ids and assistant masks (chat_check.py; skipped, exit 77, without transformers).
add_test(NAME tokenize_chat_vs_hf COMMAND python3 ${MT_TEST_DIR}/chat_check.py
         $<TARGET_FILE:mt-tokenize> ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/chat_check)
set_tests_properties(tokenize_chat_vs_hf PROPERTIES TIMEOUT 300 LABELS tokenize SKIP_RETURN_CODE 77)
