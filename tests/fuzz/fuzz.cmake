# fuzz.cmake: front-end robustness (included from tests/tests.cmake).
#
#   fuzz_replay_asan   the front end + tests/fuzz/replay.c built with the
#                      project's C compiler and -fsanitize=address,undefined
#   ctest front_asan   replays tests/fuzz/corpus/*, examples/*.model,
#                      stdlib/*.model, tests/diag/*.model and
#                      tests/diag/modules/*.model with leak checking on, each
#                      input in its own process with a 5 s timeout, and lists
#                      every input that fails
#   fuzz_front         a libFuzzer binary (clang -fsanitize=fuzzer,address,
#                      undefined) over the same sources, when clang has libFuzzer
#   ctest fuzz_front_60s
#                      fuzzes for about 60 s (tests/fuzz/run_fuzz.sh); fails on
#                      a crash, leak or timeout and saves the input as
#                      tests/fuzz/corpus/crash-<sha1>; skipped (not failed)
#                      when clang or libFuzzer is absent
#
# Both binaries compile their own copy of SHARDC_FRONT_SOURCES (CMakeLists.txt),
# which includes the bison/flex outputs.

set(SHARDC_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
set(SHARDC_FUZZ_STDLIB "${PROJECT_SOURCE_DIR}/stdlib")
set(SHARDC_FUZZ_HARNESS ${SHARDC_FUZZ_DIR}/fuzz_front.c)

# ---- (a) the sanitized replay binary, with the project's compiler ------------
include(CheckCSourceCompiles)
set(_fuzz_saved_flags "${CMAKE_REQUIRED_FLAGS}")
set(_fuzz_saved_link "${CMAKE_REQUIRED_LINK_OPTIONS}")
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined,float-cast-overflow")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined,float-cast-overflow")
check_c_source_compiles("int main(void) { return 0; }" SHARDC_HAVE_ASAN_UBSAN_FCO)
set(CMAKE_REQUIRED_FLAGS "${_fuzz_saved_flags}")
set(CMAKE_REQUIRED_LINK_OPTIONS "${_fuzz_saved_link}")

if(SHARDC_HAVE_ASAN_UBSAN_FCO)
  add_executable(fuzz_replay_asan ${SHARDC_FUZZ_DIR}/replay.c ${SHARDC_FUZZ_HARNESS}
    ${SHARDC_FRONT_SOURCES})
  target_include_directories(fuzz_replay_asan PRIVATE
    ${PROJECT_SOURCE_DIR}/compiler ${PROJECT_SOURCE_DIR}/runtime/include ${PROJECT_BINARY_DIR})
  target_compile_definitions(fuzz_replay_asan PRIVATE _POSIX_C_SOURCE=200809L
    SHARDC_FUZZ_STDLIB_DIR="${SHARDC_FUZZ_STDLIB}")
  # float-cast-overflow is not part of gcc's -fsanitize=undefined
  target_compile_options(fuzz_replay_asan PRIVATE -g -O1 -fno-omit-frame-pointer
    -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all)
  target_link_options(fuzz_replay_asan PRIVATE -fsanitize=address,undefined,float-cast-overflow)
  target_link_libraries(fuzz_replay_asan PRIVATE m)

  add_test(NAME front_asan
    COMMAND fuzz_replay_asan --fork --timeout=5
      ${SHARDC_FUZZ_DIR}/corpus
      --ext=.model
      ${PROJECT_SOURCE_DIR}/examples
      ${PROJECT_SOURCE_DIR}/stdlib
      ${PROJECT_SOURCE_DIR}/tests/diag
      ${PROJECT_SOURCE_DIR}/tests/diag/modules
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/diag)
  set_tests_properties(front_asan PROPERTIES
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
    TIMEOUT 600)
else()
  message(STATUS "fuzz: ${CMAKE_C_COMPILER} cannot build with -fsanitize=address,undefined; "
                 "front_asan is skipped")
  add_test(NAME front_asan COMMAND ${CMAKE_COMMAND} -E echo
    "front_asan skipped: the C compiler has no AddressSanitizer/UBSan")
  set_tests_properties(front_asan PROPERTIES SKIP_REGULAR_EXPRESSION "skipped")
endif()

# ---- (b) the libFuzzer binary, with clang invoked directly ---------------------
if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(_fuzz_clang_hint ${CMAKE_C_COMPILER})
endif()
find_program(SHARDC_CLANG NAMES ${_fuzz_clang_hint} clang clang-18 clang-17 clang-16 clang-15 clang-14
  DOC "clang with libFuzzer, for the fuzz_front target")

set(SHARDC_HAVE_LIBFUZZER OFF)
set(SHARDC_FUZZ_SKIP_REASON "")
if(NOT SHARDC_CLANG)
  set(SHARDC_FUZZ_SKIP_REASON "clang not found")
else()
  # does this clang link a libFuzzer target with the sanitizers?
  set(_probe_dir ${PROJECT_BINARY_DIR}/fuzz/probe)
  file(MAKE_DIRECTORY ${_probe_dir})
  file(WRITE ${_probe_dir}/probe.c
    "#include <stddef.h>\n#include <stdint.h>\n"
    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  # a success is cached; a failure is probed again on the next configure
  if(NOT SHARDC_LIBFUZZER_WORKS OR NOT SHARDC_LIBFUZZER_WORKS_CLANG STREQUAL SHARDC_CLANG)
    execute_process(
      COMMAND ${SHARDC_CLANG} -fsanitize=fuzzer,address,undefined ${_probe_dir}/probe.c
              -o ${_probe_dir}/probe
      RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_VARIABLE _probe_err)
    if(_probe_rc EQUAL 0)
      set(SHARDC_LIBFUZZER_WORKS ON CACHE INTERNAL "")
    else()
      set(SHARDC_LIBFUZZER_WORKS OFF CACHE INTERNAL "")
    endif()
    set(SHARDC_LIBFUZZER_WORKS_CLANG ${SHARDC_CLANG} CACHE INTERNAL "")
  endif()
  if(SHARDC_LIBFUZZER_WORKS)
    set(SHARDC_HAVE_LIBFUZZER ON)
  else()
    set(SHARDC_FUZZ_SKIP_REASON "${SHARDC_CLANG} cannot link -fsanitize=fuzzer (install libclang-rt-dev)")
  endif()
endif()

# the binary lives in build/fuzz/ so that its path is not the target's name
set(SHARDC_FUZZ_BIN ${PROJECT_BINARY_DIR}/fuzz/fuzz_front)
if(SHARDC_HAVE_LIBFUZZER)
  message(STATUS "fuzz: libFuzzer target fuzz_front with ${SHARDC_CLANG}")
  set(_fuzz_srcs ${SHARDC_FUZZ_HARNESS})
  set(_fuzz_gen_headers)
  foreach(_s IN LISTS SHARDC_FRONT_SOURCES)
    if(NOT IS_ABSOLUTE "${_s}")
      set(_s "${PROJECT_SOURCE_DIR}/${_s}")
    endif()
    # the list also names generated headers (parser.h): depend on them, do not compile them
    if(_s MATCHES "\\.c$")
      list(APPEND _fuzz_srcs "${_s}")
    else()
      list(APPEND _fuzz_gen_headers "${_s}")
    endif()
  endforeach()
  file(GLOB _fuzz_headers ${PROJECT_SOURCE_DIR}/compiler/*.h ${PROJECT_SOURCE_DIR}/compiler/*.def
    ${PROJECT_SOURCE_DIR}/runtime/include/*.h)
  add_custom_command(OUTPUT ${SHARDC_FUZZ_BIN}
    COMMAND ${SHARDC_CLANG} -std=c11 -g -O1 -fno-omit-frame-pointer
      -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
      -D_POSIX_C_SOURCE=200809L "-DSHARDC_FUZZ_STDLIB_DIR=\"${SHARDC_FUZZ_STDLIB}\""
      -I${PROJECT_SOURCE_DIR}/compiler -I${PROJECT_SOURCE_DIR}/runtime/include
      -I${PROJECT_BINARY_DIR}
      ${_fuzz_srcs} -lm -o ${SHARDC_FUZZ_BIN}
    DEPENDS ${_fuzz_srcs} ${_fuzz_gen_headers} ${_fuzz_headers}
    COMMENT "Building the libFuzzer target fuzz_front with ${SHARDC_CLANG}"
    VERBATIM)
  add_custom_target(fuzz_front ALL DEPENDS ${SHARDC_FUZZ_BIN})

  add_test(NAME fuzz_front_60s
    COMMAND ${SHARDC_FUZZ_DIR}/run_fuzz.sh ${SHARDC_FUZZ_BIN} 60 ${PROJECT_SOURCE_DIR}
      ${PROJECT_BINARY_DIR}/fuzz)
  set_tests_properties(fuzz_front_60s PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
else()
  message(STATUS "fuzz: no libFuzzer (${SHARDC_FUZZ_SKIP_REASON}); fuzz_front_60s is skipped")
  add_test(NAME fuzz_front_60s
    COMMAND ${SHARDC_FUZZ_DIR}/run_fuzz.sh --skip "${SHARDC_FUZZ_SKIP_REASON}")
  set_tests_properties(fuzz_front_60s PROPERTIES SKIP_RETURN_CODE 77)
endif()
