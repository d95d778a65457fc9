# Tests, through ctest. Multi-rank tests run under mpirun --oversubscribe.
set(SHARDC_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

add_test(NAME diag COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/diag/run.sh $<TARGET_FILE:shardc>)
add_test(NAME cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/run.sh $<TARGET_FILE:shardc>
  ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(diag cli PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}")

# front-end robustness: sanitizers and fuzzing (tests/fuzz/fuzz.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz.cmake OPTIONAL)

# ---- unit: runtime kernels, data, checkpoints, the training driver ---------------
foreach(t test_kernels test_data test_safetensors)
  add_executable(${t} tests/unit/${t}.c)
  target_link_libraries(${t} PRIVATE shardrt)
  target_compile_options(${t} PRIVATE ${SHARDC_WARN})
  target_compile_definitions(${t} PRIVATE _POSIX_C_SOURCE=200809L)
  target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests) # check.h
  add_test(NAME unit_${t} COMMAND ${t} WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endforeach()
add_executable(test_tokenizer tests/unit/test_tokenizer.c)
target_link_libraries(test_tokenizer PRIVATE shardrt)
target_compile_options(test_tokenizer PRIVATE ${SHARDC_WARN})
target_include_directories(test_tokenizer PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
add_test(NAME unit_test_tokenizer COMMAND test_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/tests/unit/tokenizer)
add_executable(fake_program tests/unit/fake_program.c)
target_link_libraries(fake_program PRIVATE shardrt)
target_compile_options(fake_program PRIVATE ${SHARDC_WARN})
target_compile_definitions(fake_program PRIVATE _POSIX_C_SOURCE=200809L)
add_test(NAME unit_train_driver COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/unit/test_train.sh
  $<TARGET_FILE:fake_program>)
# the start-up check of the host kernels' x86-64 level: a backend.c that says
# x86-64-v4 (its objects take the place of libshardrt's backend.o)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  add_executable(fake_program_v4 tests/unit/fake_program.c runtime/host/backend.c)
  target_link_libraries(fake_program_v4 PRIVATE shardrt)
  target_compile_options(fake_program_v4 PRIVATE ${SHARDC_WARN})
  target_compile_definitions(fake_program_v4 PRIVATE _POSIX_C_SOURCE=200809L SR_HOST_ARCH="x86-64-v4")
  add_test(NAME unit_host_isa COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/unit/test_host_isa.sh
    $<TARGET_FILE:fake_program_v4>)
endif()

# ---- e2e: programs built by shardc --------------------------------------------
add_test(NAME e2e_build COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/build.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
# ---- reference: PyTorch computes the same model from the same weights and data --
add_test(NAME reference_pytorch COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/reference/run.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(unit_train_driver e2e_build reference_pytorch unit_test_kernels
  PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}")

# the communication layer under mpirun (tests/comm.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/comm.cmake OPTIONAL)
add_test(NAME e2e_data_parallel COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/dp.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(e2e_data_parallel PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 900)
add_test(NAME e2e_tensor_parallel COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/tp.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(e2e_tensor_parallel PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 900)
add_test(NAME e2e_pipeline_parallel COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/pp.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(e2e_pipeline_parallel PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 900)
# text in and out through a GPT-2 tokenizer (tests/unit/tokenizer's fixture)
add_test(NAME e2e_text COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/text.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(e2e_text PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 600)
# a private one-node Slurm cluster: srun --mpi=pmix and salloc + mpirun
add_test(NAME e2e_slurm COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/slurm.sh
  $<TARGET_FILE:shardc> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(e2e_slurm PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 300)
# scripts/gpu-check.sh's way to MPI, OpenBLAS, bison and flex on a GPU machine
# with no package registry: fetched .deb files unpacked into a private prefix
# (skipped, not passed, when apt cannot download)
add_test(NAME e2e_gpu_deps COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/e2e/gpu_deps.sh ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(e2e_gpu_deps PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 600 SKIP_RETURN_CODE 77)

# pipeline schedules: property tests of the generator and checker
add_executable(test_schedule tests/unit/test_schedule.c)
target_link_libraries(test_schedule PRIVATE shardrt)
target_compile_options(test_schedule PRIVATE ${SHARDC_WARN})
target_compile_definitions(test_schedule PRIVATE _POSIX_C_SOURCE=200809L)
add_test(NAME unit_test_schedule COMMAND test_schedule)
add_test(NAME plan COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/plan/run.sh $<TARGET_FILE:shardc>
  ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(plan PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 300)
add_test(NAME unit_timeline COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/unit/test_timeline.sh $<TARGET_FILE:shardc>)

# the CUDA backend: kernels and whole steps on the CPU emulator; nvcc builds of the examples
include(${CMAKE_CURRENT_LIST_DIR}/cuda/cuda.cmake)

# ---- ctest -j: scripts/test.sh runs as many tests at once as there are cores -------------
# Most tests keep under one core busy (mpirun's start-up, timeouts on purpose, fsync,
# Python, single-threaded compiles: 1411 s of CPU in 1230 s serial on 2 cores) and share
# the machine. These keep every core busy (the emulator's blocks on OpenMP's threads, the
# ThreadSanitizer build) or run 4 to 8 emulated ranks under a --comm-timeout that a
# neighbour's load must not stretch, and run alone: a PROCESSORS above ctest's level
# counts as all of it.
foreach(t cuda_kernels_emu cuda_kernels_emu_reverse cuda_kernels_emu_shuffle cuda_kernels_emu_cudnn
          cuda_kernels_racecheck cuda_pipeline_nccl_emu cuda_gpu_check_dry
          cuda_comm_device_np2 cuda_comm_device_np3 cuda_comm_device_np3_lag
          cuda_comm_nccl_emu_np2 cuda_comm_nccl_emu_np3)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES PROCESSORS 64)
  endif()
endforeach()
# The shared tests start longest first (ctest runs in descending COST where it has no
# timings of its own yet, as on CI's fresh clone): cuda_train_emu started late ran its last
# three minutes beside an idle core, as the tests that run alone wait for every other to end.
# The figures are seconds at -j2 on two cores (CI's machine), roughly.
foreach(tc cuda_train_emu:260 e2e_pipeline_parallel:110 reference_pytorch:105 cuda_nvcc_resources:100
           cuda_kernels_racecheck_build:90 cuda_comm_mpi:75 fuzz_front_60s:65 e2e_tensor_parallel:56
           e2e_gpu_deps:50 e2e_build:49 plan:39)
  string(REPLACE ":" ";" tc "${tc}")
  list(GET tc 0 t)
  list(GET tc 1 c)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES COST ${c})
  endif()
endforeach()
