# Fuzz targets of the parsers that read files from strangers (tests/fuzz/README.md):
# train.cfg, config.json, safetensors headers, token shard headers, tokenizer.json and the
# checkpoint manifest. The parsers are compiled a second time, instrumented, into one static
# library, so that a target's sanitizers see inside them and not only at its own calls.
#   default build: each target is linked with replay.c and `make test` replays the seed corpus
#     and the reproducers of past bugs under gcc's ASan and UBSan;
#   -DMT_FUZZ=ON with clang (`make fuzz`): each target is a libFuzzer binary.
option(MT_FUZZ "Build the fuzz targets as libFuzzer binaries (clang)" OFF)
set(MT_FUZZ_TARGETS train_cfg config_json safetensors shard tokenizer manifest chat)
set(MT_FUZZ_DIR ${MT_TEST_DIR}/fuzz)

set(sanitize -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
if(MT_FUZZ)
  set(instrument ${sanitize} -fsanitize=fuzzer-no-link)
  set(link_driver -fsanitize=fuzzer)
else()
  set(instrument ${sanitize})
  set(link_driver)
endif()

file(GLOB fuzz_parser_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/base/*.c
     ${CMAKE_SOURCE_DIR}/runtime/model/*.c ${CMAKE_SOURCE_DIR}/runtime/job/*.c
     ${CMAKE_SOURCE_DIR}/runtime/io/*.c)
add_library(mt_fuzz_parsers STATIC ${fuzz_parser_sources} ${CMAKE_SOURCE_DIR}/tools/tokenize/bpe.c
                                   ${CMAKE_SOURCE_DIR}/tools/tokenize/chat.c
                                   ${CMAKE_SOURCE_DIR}/tools/tokenize/strmap.c
                                   ${MT_FUZZ_DIR}/fuzz_scratch.c)
target_compile_options(mt_fuzz_parsers PRIVATE ${instrument})
target_link_libraries(mt_fuzz_parsers PUBLIC mt_shm mt_kernels MPI::MPI_C PkgConfig::UCX
  PkgConfig::LIBCONFIG PkgConfig::CJSON PkgConfig::XXHASH PkgConfig::PCRE2 OpenMP::OpenMP_C m)

foreach(t ${MT_FUZZ_TARGETS})
  if(MT_FUZZ)
    add_executable(fuzz_${t} ${MT_FUZZ_DIR}/fuzz_${t}.c)
  else()
    add_executable(fuzz_${t} ${MT_FUZZ_DIR}/fuzz_${t}.c ${MT_FUZZ_DIR}/replay.c)
  endif()
  target_compile_options(fuzz_${t} PRIVATE ${instrument})
  target_link_options(fuzz_${t} PRIVATE ${sanitize} ${link_driver})
  target_link_libraries(fuzz_${t} PRIVATE mt_fuzz_parsers)
  if(NOT MT_FUZZ)
    # The seeds, then every reproducer of a bug found (crashes/<target>/, one file each).
    set(inputs ${MT_FUZZ_DIR}/corpus/${t})
    if(EXISTS ${MT_FUZZ_DIR}/crashes/${t})
      list(APPEND inputs ${MT_FUZZ_DIR}/crashes/${t})
    endif()
    add_test(NAME fuzz_replay_${t} COMMAND fuzz_${t} ${inputs})
    set_tests_properties(fuzz_replay_${t} PROPERTIES ENVIRONMENT
      "ASAN_OPTIONS=abort_on_error=1:detect_leaks=1;LSAN_OPTIONS=suppressions=${MT_FUZZ_DIR}/lsan.supp;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
endforeach()
