# Tests, through ctest. Multi-rank tests run under mpirun --oversubscribe.
set(SHARDC_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

add_test(NAME diag COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/diag/run.sh $<TARGET_FILE:shardc>)
add_test(NAME cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/run.sh $<TARGET_FILE:shardc>
  ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(diag cli PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}")

# front-end robustness: sanitizers and fuzzing (tests/fuzz/fuzz.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz.cmake OPTIONAL)
