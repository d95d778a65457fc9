# tests/comm.cmake: the communication layer under mpirun (tests/unit/test_comm.c)
# and its bandwidth benchmark (bench/allreduce_bw.c). Included at the end of
# tests/tests.cmake; needs runtime/comm.cmake (MPI, SHARDC_HAVE_NCCL).
#
#   comm_np2, comm_np4            every grid shape of 2 and 4 ranks, every op
#   dp_buckets_np2, _np3          the gradient buckets of runtime/dp.c, both
#                                 modes (tests/unit/test_dp.c)
#   comm_timeout_np2, _np4        rank 1 skips a collective: the others must
#                                 fail with SR_ERR_COMM after the 1 s timeout,
#                                 then all sr_comm_abort(3); passes only when
#                                 mpirun exits with 3, the timeout message was
#                                 printed and no check failed

set(SHARDC_COMM_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

# a test program under mpirun that ends with "N passed, M failed" and prints
# FAIL for a failed check
function(shardc_mpi_checks name np target timeout)
  add_test(NAME ${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "${SHARDC_COMM_TEST_ENV}"
    TIMEOUT ${timeout}
    PASS_REGULAR_EXPRESSION "[1-9][0-9]* passed, 0 failed"
    FAIL_REGULAR_EXPRESSION "FAIL")
endfunction()

add_executable(test_comm ${CMAKE_CURRENT_LIST_DIR}/unit/test_comm.c)
target_link_libraries(test_comm PRIVATE shardrt)
target_compile_options(test_comm PRIVATE ${SHARDC_WARN})
target_compile_definitions(test_comm PRIVATE _POSIX_C_SOURCE=200809L)
if(SHARDC_HAVE_NCCL)
  target_compile_definitions(test_comm PRIVATE SR_HAVE_NCCL=1)
endif()

foreach(np 2 4)
  shardc_mpi_checks(comm_np${np} ${np} test_comm 300)

  # the expected failure: mpirun's status and output are checked together
  add_test(NAME comm_timeout_np${np}
    COMMAND bash -c [=[out=$("$@" 2>&1); rc=$?; printf '%s\n' "$out"; echo "mpirun exit status: $rc"
[ "$rc" -eq 3 ] || { echo "expected exit status 3 (sr_comm_abort(3))"; exit 1; }
printf '%s\n' "$out" | grep -q "did not complete within 1 s at step 12: another rank may have died or hung" || { echo "no timeout message"; exit 1; }
printf '%s\n' "$out" | grep -Eq "^[1-9][0-9]* passed, 0 failed$" || { echo "checks failed"; exit 1; }]=]
            bash ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm> --timeout ${MPIEXEC_POSTFLAGS})
  set_tests_properties(comm_timeout_np${np} PROPERTIES
    ENVIRONMENT "${SHARDC_COMM_TEST_ENV}"
    TIMEOUT 60)
endforeach()

# the data-parallel buckets (runtime/dp.c): 3 ranks put ZeRO-1's cuts inside parameters
add_executable(test_dp ${CMAKE_CURRENT_LIST_DIR}/unit/test_dp.c)
target_link_libraries(test_dp PRIVATE shardrt)
target_compile_options(test_dp PRIVATE ${SHARDC_WARN})
foreach(np 2 3)
  shardc_mpi_checks(dp_buckets_np${np} ${np} test_dp 120)
endforeach()

# all-reduce bus bandwidth of the MPI comm layer (bench/README.md)
add_executable(allreduce_bw ${CMAKE_CURRENT_LIST_DIR}/../bench/allreduce_bw.c)
target_link_libraries(allreduce_bw PRIVATE shardrt)
target_compile_options(allreduce_bw PRIVATE ${SHARDC_WARN})
target_compile_definitions(allreduce_bw PRIVATE _POSIX_C_SOURCE=200809L)
