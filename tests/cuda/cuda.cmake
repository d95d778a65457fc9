# tests/cuda/cuda.cmake: tests of the CUDA backend. Included by
# tests/tests.cmake (after runtime/cuda/cuda.cmake ran from the top
# CMakeLists.txt). Without a GPU everything runs on the CPU emulator; with
# nvcc the examples' CUDA binaries and the GPU kernel test are built too
# (scripts/gpu-check.sh runs them on a GPU).
#
# ctest names:
#   cuda_kernels_emu           every CUDA kernel vs its host kernel (fp32, bf16, odd sizes);
#                              device memory starts as NaN (the emulator poisons it)
#   cuda_kernels_emu_reverse,  the same with the threads of each block and the blocks of
#   _shuffle                   each grid resumed in reverse / shuffled order: a kernel that
#                              races (reads a value another thread writes without a barrier)
#                              gives a different result under one of the three orders
#   cuda_kernels_emu_cudnn     the kernel test under SHARDC_CUDA_ATTN=cudnn with a host stand-in
#                              for cuDNN (tests/cuda/cudnn_standin.cpp): the cuDNN path's
#                              wrapper (scratch gradients and their adds, the output's copy,
#                              lse from forward to backward) in every attention case
#   cuda_step_emu_fp32         tinygpt: 3 steps of the CUDA program vs the host program, fp32
#   cuda_step_emu_fp32_dropout the same with dropout 0.1 (same random masks)
#   cuda_step_emu_bf16         the bf16 program vs the host program (2e-2)
#   cuda_step_emu_fp32_shuffle cuda_step_emu_fp32 with threads and blocks in shuffled order
#   cuda_train_emu             the emulated CUDA binary under the runtime's training
#                              driver: losses vs the host binary; dp, tp, pp over the emulated
#                              NCCL (the default, as on a GPU); no-GPU error
#   cuda_comm_device_np2, _np3 the comm layer on (emulated) device memory under mpirun: every op
#                              staged through page-locked host buffers (MPI, what --comm mpi
#                              runs), async forms, wait_device, groups, host buffers, chunks;
#                              async calls queue their copy and start in issue order
#   cuda_comm_device_np3_lag   the same with rank 0's copies "not ready" at their first 3 queries
#   cuda_comm_device_timeout   rank 1 skips a device all-reduce: the others time out after 1 s
#   cuda_comm_nccl_emu_np2,    the same suites over the NCCL backend (runtime/cuda/comm_nccl.c)
#   _np3, _timeout             on the emulator's NCCL (emu/nccl_emu.cpp, MPI underneath): every
#                              op, nothing staged, groups; timeouts abort the communicator; two
#                              ranks that both send first outside a group deadlock, as on a GPU
#   cuda_comm_nccl_emu_race    a copy into an all-reduce in flight, unordered: the emulator's race
#                              check names both, and the program's sync reports an error
#   cuda_pipeline_nccl_emu     pp=4 gpipe, 1f1b, zb-h1, interleaved over the emulated NCCL (serial
#                              streams, rendezvous sends): they finish, = --comm mpi exactly;
#                              dp=2 x pp=2, and dp=2 x tp=2 x pp=2 on 8 ranks (ZeRO-1, seq. par.)
#   cuda_comm_mpi              --comm mpi / SHARDC_COMM=mpi: the emulated CUDA binary at dp=2,
#                              tp=2, pp=2 matches the host binary's losses; --comm nccl is a
#                              usage error on host builds; dp=2 --comm nccl on the emulator;
#                              ranks sharing a GPU told to use --comm mpi (tests/cuda/comm_mpi.sh)
#   cuda_gpu_check_dry         scripts/gpu-check.sh with a stand-in nvidia-smi, the emulated
#                              programs and a stand-in GPT-2: its checks, fallbacks and MFU sum
#   cuda_nvcc_examples         (nvcc only) every example's CUDA binary was built and, on a
#                              machine without a GPU, says so in one line and exits non-zero
#   cuda_cudnn_graph           (nvcc and cuDNN's frontend) the cuDNN attention's graphs, forward
#                              and backward, for the examples' shapes, accepted by the frontend's
#                              validate() for sm_80 and sm_90 (a stand-in libcudart answers its
#                              device questions), the forward refused for sm_75
#   cuda_nvcc_resources        (nvcc only) every kernel of GPT-2's bf16 and fp32 programs, per
#                              architecture: registers x block size and static shared memory
#                              within what a launch may use (tests/cuda/nvcc_resources.sh)

set(_tc ${CMAKE_CURRENT_LIST_DIR})
get_filename_component(_root ${_tc}/../.. ABSOLUTE)

# the compiler's passes + cg_cuda/cg_host/drv_build_cuda, without the driver
add_executable(gen_cuda ${_tc}/gen_cuda.c)
target_link_libraries(gen_cuda PRIVATE shardc_front m)
target_include_directories(gen_cuda PRIVATE ${_root}/compiler)
target_compile_options(gen_cuda PRIVATE ${SHARDC_WARN})
target_compile_definitions(gen_cuda PRIVATE _POSIX_C_SOURCE=200809L GEN_STDLIB_DIR="${_root}/stdlib")

if(TARGET shardrt_cuda_emu)
  # ---- kernels --------------------------------------------------------------------
  add_executable(test_kernels_emu ${_tc}/test_kernels_emu.cpp)
  set_target_properties(test_kernels_emu PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  target_link_libraries(test_kernels_emu PRIVATE shardrt_cuda_emu shardrt)
  target_include_directories(test_kernels_emu PRIVATE ${_root}/tests) # check.h
  target_compile_options(test_kernels_emu PRIVATE ${SHARDC_WARN})
  if(SHARDC_SANITIZE_THREAD)
    target_compile_options(test_kernels_emu PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
  endif()
  add_test(NAME cuda_kernels_emu COMMAND test_kernels_emu)
  add_test(NAME cuda_kernels_emu_reverse COMMAND test_kernels_emu)
  add_test(NAME cuda_kernels_emu_shuffle COMMAND test_kernels_emu)
  set_tests_properties(cuda_kernels_emu_reverse PROPERTIES ENVIRONMENT "EMU_SCHEDULE=reverse")
  set_tests_properties(cuda_kernels_emu_shuffle PROPERTIES ENVIRONMENT "EMU_SCHEDULE=shuffle:20261202")
  # the test prints the order it ran under: a typo in EMU_SCHEDULE must not pass as forward
  set_tests_properties(cuda_kernels_emu_reverse PROPERTIES PASS_REGULAR_EXPRESSION "resume order of threads and blocks: reverse.* 0 failed")
  set_tests_properties(cuda_kernels_emu_shuffle PROPERTIES PASS_REGULAR_EXPRESSION "resume order of threads and blocks: shuffle.* 0 failed")

  # the race check: test_kernels_emu built again with the kernels under ThreadSanitizer, in a
  # build directory of its own (racecheck.sh; not from a build that is that one). The build
  # (one large compile: a core for a minute and a half) is a test of its own that shares the
  # machine; the runs, which keep both cores busy, run alone after it
  if(NOT SHARDC_SANITIZE_THREAD)
    add_test(NAME cuda_kernels_racecheck_build
      COMMAND bash ${_tc}/racecheck.sh ${_root} ${CMAKE_BINARY_DIR}/racecheck build)
    add_test(NAME cuda_kernels_racecheck
      COMMAND bash ${_tc}/racecheck.sh ${_root} ${CMAKE_BINARY_DIR}/racecheck check)
    set_tests_properties(cuda_kernels_racecheck_build cuda_kernels_racecheck PROPERTIES TIMEOUT 900
      ENVIRONMENT "${SHARDC_TEST_ENV};CC=${CMAKE_C_COMPILER};CXX=${CMAKE_CXX_COMPILER}"
      PASS_REGULAR_EXPRESSION "[1-9][0-9]* passed, 0 failed" FAIL_REGULAR_EXPRESSION "FAIL")
    set_tests_properties(cuda_kernels_racecheck_build PROPERTIES FIXTURES_SETUP racecheck)
    set_tests_properties(cuda_kernels_racecheck PROPERTIES FIXTURES_REQUIRED racecheck)
  endif()

  # the same with cudnn_standin.cpp answering srk_cudnn.h on the host: SHARDC_CUDA_ATTN=cudnn's
  # wrapper through every attention case (cuDNN itself runs only on a GPU)
  add_executable(test_kernels_emu_cudnn ${_tc}/test_kernels_emu.cpp ${_tc}/cudnn_standin.cpp)
  set_target_properties(test_kernels_emu_cudnn PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  target_link_libraries(test_kernels_emu_cudnn PRIVATE shardrt_cuda_emu shardrt)
  target_include_directories(test_kernels_emu_cudnn PRIVATE ${_root}/tests)
  target_compile_options(test_kernels_emu_cudnn PRIVATE ${SHARDC_WARN})
  add_test(NAME cuda_kernels_emu_cudnn COMMAND test_kernels_emu_cudnn)
  set_tests_properties(cuda_kernels_emu_cudnn PROPERTIES ENVIRONMENT "SHARDC_CUDA_ATTN=cudnn"
    PASS_REGULAR_EXPRESSION "attention bf16 hd 64 runs on cuDNN.* 0 failed")

  # ---- whole steps: the host and CUDA programs of tinygpt side by side ---------------
  # generated at build time of these (test-only) targets, built by a ctest fixture so
  # that a code generator bug fails a test, not everybody's build
  set(_gen ${CMAKE_CURRENT_BINARY_DIR}/cuda_gen)
  file(MAKE_DIRECTORY ${_gen})
  add_custom_command(OUTPUT ${_gen}/tinygpt_host.c ${_gen}/tinygpt_fp32.cu
    COMMAND gen_cuda ${_root}/examples/tinygpt.model --host ${_gen}/tinygpt_host.c --cuda ${_gen}/tinygpt_fp32.cu
    DEPENDS gen_cuda ${_root}/examples/tinygpt.model ${_root}/stdlib/nn.model VERBATIM)
  add_custom_command(OUTPUT ${_gen}/tinygpt_bf16.cu
    COMMAND gen_cuda ${_root}/examples/tinygpt.model --bf16 --cuda ${_gen}/tinygpt_bf16.cu
    DEPENDS gen_cuda ${_root}/examples/tinygpt.model ${_root}/stdlib/nn.model VERBATIM)
  set_source_files_properties(${_gen}/tinygpt_host.c PROPERTIES
    COMPILE_DEFINITIONS "main=host_main;sr_main=host_capture" GENERATED ON)
  set_source_files_properties(${_gen}/tinygpt_fp32.cu ${_gen}/tinygpt_bf16.cu PROPERTIES
    LANGUAGE CXX COMPILE_OPTIONS "-x;c++" COMPILE_DEFINITIONS "SR_NO_MAIN;main=cuda_main" GENERATED ON)
  foreach(_p fp32 bf16)
    add_executable(step_compare_${_p} EXCLUDE_FROM_ALL ${_tc}/step_compare.cpp ${_gen}/tinygpt_host.c
      ${_gen}/tinygpt_${_p}.cu)
    set_target_properties(step_compare_${_p} PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
    target_link_libraries(step_compare_${_p} PRIVATE shardrt_cuda_emu shardrt)
    target_include_directories(step_compare_${_p} PRIVATE ${_root}/tests) # check.h
  endforeach()
  add_test(NAME cuda_step_emu_build
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target step_compare_fp32 step_compare_bf16)
  set_tests_properties(cuda_step_emu_build PROPERTIES FIXTURES_SETUP cuda_step)
  add_test(NAME cuda_step_emu_fp32 COMMAND step_compare_fp32 --steps 3 --batch 4 --seq 32)
  add_test(NAME cuda_step_emu_fp32_dropout COMMAND step_compare_fp32 --steps 2 --batch 2 --seq 48 --dropout 0.1)
  add_test(NAME cuda_step_emu_bf16 COMMAND step_compare_bf16 --bf16 --steps 3 --batch 4 --seq 32)
  add_test(NAME cuda_step_emu_fp32_shuffle COMMAND step_compare_fp32 --steps 2 --batch 4 --seq 32)
  set_tests_properties(cuda_step_emu_fp32 cuda_step_emu_fp32_dropout cuda_step_emu_bf16 PROPERTIES
    FIXTURES_REQUIRED cuda_step ENVIRONMENT "OMP_NUM_THREADS=1")
  set_tests_properties(cuda_step_emu_fp32_shuffle PROPERTIES
    FIXTURES_REQUIRED cuda_step ENVIRONMENT "OMP_NUM_THREADS=1;EMU_SCHEDULE=shuffle:7")

  # ---- the comm layer on device memory (the MPI path: staging) --------------------------
  add_executable(test_comm_device ${_tc}/test_comm_device.c)
  set_target_properties(test_comm_device PROPERTIES LINKER_LANGUAGE CXX)
  target_link_libraries(test_comm_device PRIVATE shardrt_cuda_emu shardrt)
  target_compile_options(test_comm_device PRIVATE ${SHARDC_WARN})
  target_compile_definitions(test_comm_device PRIVATE _POSIX_C_SOURCE=200809L)
  foreach(np 2 3)
    add_test(NAME cuda_comm_device_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_device> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(cuda_comm_device_np${np} PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 120
      PASS_REGULAR_EXPRESSION "[1-9][0-9]* passed, 0 failed" FAIL_REGULAR_EXPRESSION "FAIL")
  endforeach()
  # the MPI path with rank 0's staging copies still running at their first
  # three queries: its async calls start later than the others', in order
  add_test(NAME cuda_comm_device_np3_lag
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 --oversubscribe
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_device> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(cuda_comm_device_np3_lag PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV};EMU_EVENT_LAG=3"
    TIMEOUT 120 PASS_REGULAR_EXPRESSION "EMU_EVENT_LAG on rank 0: its copies were still running.*[1-9][0-9]* passed, 0 failed"
    FAIL_REGULAR_EXPRESSION "FAIL")
  # the same over the NCCL backend (comm_nccl.c) on the emulator's NCCL
  foreach(np 2 3)
    add_test(NAME cuda_comm_nccl_emu_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_device> --nccl ${MPIEXEC_POSTFLAGS})
    set_tests_properties(cuda_comm_nccl_emu_np${np} PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 120
      PASS_REGULAR_EXPRESSION "over NCCL.*[1-9][0-9]* passed, 0 failed" FAIL_REGULAR_EXPRESSION "FAIL")
  endforeach()
  # the expected failure: mpirun's status (sr_comm_abort(3)) and the output together
  foreach(_b mpi nccl)
    set(_name cuda_comm_device_timeout)
    set(_flag "")
    if(_b STREQUAL "nccl")
      set(_name cuda_comm_nccl_emu_timeout)
      set(_flag --nccl)
    endif()
    add_test(NAME ${_name}
      COMMAND bash -c [=[out=$("$@" 2>&1); rc=$?; printf '%s\n' "$out"; echo "mpirun exit status: $rc"
[ "$rc" -eq 3 ] && printf '%s\n' "$out" | grep -q "^1 passed, 0 failed$"]=]
              bash ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_device> --timeout ${_flag} ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${_name} PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 60)
  endforeach()
  # the race check: a write into an all-reduce in flight is reported, naming both
  add_test(NAME cuda_comm_nccl_emu_race
    COMMAND bash -c [=[out=$("$@" 2>&1); rc=$?; printf '%s\n' "$out"; echo "mpirun exit status: $rc"
[ "$rc" -eq 3 ] && printf '%s\n' "$out" | grep -q "^1 passed, 0 failed$" &&
printf '%s\n' "$out" | grep -q "cuda_emu: a stream race: cudaMemcpy changed byte 0 of the output of ncclAllReduce (256 elements, rank 0 of 2) while that was in flight"]=]
            bash ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_device> --race --nccl ${MPIEXEC_POSTFLAGS})
  set_tests_properties(cuda_comm_nccl_emu_race PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 60)

  # ---- the emulated binary under the training driver ----------------------------------
  add_test(NAME cuda_train_emu COMMAND bash ${_tc}/train_emu.sh $<TARGET_FILE:gen_cuda> $<TARGET_FILE:shardc>
    ${_root})
  set_tests_properties(cuda_train_emu PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}")
  # every pipeline schedule at pp=4 over the emulated NCCL: no GPU-style deadlock
  add_test(NAME cuda_pipeline_nccl_emu COMMAND bash ${_tc}/pipeline_nccl.sh $<TARGET_FILE:gen_cuda>
    $<TARGET_FILE:shardc> ${_root})
  set_tests_properties(cuda_pipeline_nccl_emu PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 600)
  # scripts/gpu-check.sh on a stand-in nvidia-smi and the emulated programs
  add_test(NAME cuda_gpu_check_dry COMMAND bash ${_tc}/gpu_check_dry.sh $<TARGET_FILE:gen_cuda>
    $<TARGET_FILE:shardc> ${_root} $<TARGET_FILE:test_kernels_emu> $<TARGET_FILE:step_compare_bf16>)
  set_tests_properties(cuda_gpu_check_dry PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 600
    FIXTURES_REQUIRED cuda_step)
  # --comm mpi / SHARDC_COMM (the nvcc examples' --help too, where they are built)
  add_test(NAME cuda_comm_mpi COMMAND bash ${_tc}/comm_mpi.sh $<TARGET_FILE:gen_cuda> $<TARGET_FILE:shardc>
    ${_root} ${CMAKE_BINARY_DIR}/cuda_examples)
  set_tests_properties(cuda_comm_mpi PROPERTIES ENVIRONMENT "${SHARDC_TEST_ENV}" TIMEOUT 300)
endif()

# ---- nvcc: every example's CUDA binary, and the kernel test for the GPU -------------
if(SHARDC_CUDA_LIBRARY)
  string(REPLACE ";" "," _archs "${SHARDC_CUDA_ARCHS}")
  option(SHARDC_CUDA_EXAMPLES "build every example's CUDA binary with nvcc" ON)
  if(SHARDC_CUDA_EXAMPLES)
    set(_ex ${CMAKE_BINARY_DIR}/cuda_examples)
    file(MAKE_DIRECTORY ${_ex})
    set(_bins "")
    # for the newest architecture only: this is a check that each builds, and every kernel's code
    # for each architecture is compiled by test_kernels_cuda and, GPT-2's, by nvcc_resources
    list(GET SHARDC_CUDA_ARCHS -1 _ex_arch)
    foreach(_m tinygpt mlp gpt2 llama llama3 qwen2)
      foreach(_p bf16 fp32)
        set(_flag "")
        if(_p STREQUAL "bf16")
          set(_flag --bf16)
        endif()
        add_custom_command(OUTPUT ${_ex}/${_m}_${_p}
          COMMAND gen_cuda ${_root}/examples/${_m}.model ${_flag} --cuda ${_ex}/${_m}_${_p}.cu
            --build ${_ex}/${_m}_${_p} --arch ${_ex_arch}
          DEPENDS gen_cuda shardrt shardrt_cuda ${_root}/examples/${_m}.model ${_root}/stdlib/nn.model
            ${SHARDC_CUDA_LIBRARY} ${_srk_headers} # the kernels it compiles in
          COMMENT "nvcc: examples/${_m}.model (${_p})"
          VERBATIM)
        list(APPEND _bins ${_ex}/${_m}_${_p})
      endforeach()
    endforeach()
    # the tensor-parallel kernels (vocab-parallel embedding and loss, sequence parallelism) only
    # a tp > 1 program instantiates: tinygpt at tp=2 in bf16, with sequence parallelism, and
    # without it (the column-parallel matmuls' backward overlapping their input gradient's
    # all-reduce, srk_matmul_bias_bwd_ar)
    foreach(_v tp2sp tp2)
      set(_flags --tp 2)
      set(_what "at tp=2")
      if(_v STREQUAL "tp2sp")
        list(APPEND _flags --sequence-parallel)
        set(_what "at tp=2 with sequence parallelism")
      endif()
      add_custom_command(OUTPUT ${_ex}/tinygpt_${_v}_bf16
        COMMAND gen_cuda ${_root}/examples/tinygpt.model --bf16 ${_flags}
          --cuda ${_ex}/tinygpt_${_v}_bf16.cu --build ${_ex}/tinygpt_${_v}_bf16
          --arch ${_ex_arch}
        DEPENDS gen_cuda shardrt shardrt_cuda ${_root}/examples/tinygpt.model ${_root}/stdlib/nn.model
          ${SHARDC_CUDA_LIBRARY} ${_srk_headers}
        COMMENT "nvcc: examples/tinygpt.model ${_what} (bf16)"
        VERBATIM)
      list(APPEND _bins ${_ex}/tinygpt_${_v}_bf16)
    endforeach()
    add_custom_target(cuda_examples ALL DEPENDS ${_bins})
    add_test(NAME cuda_nvcc_examples COMMAND bash ${_tc}/nvcc_examples.sh ${_ex})
    # registers and static shared memory per kernel against the launch limits
    add_test(NAME cuda_nvcc_resources COMMAND bash ${_tc}/nvcc_resources.sh ${SHARDC_NVCC_EXECUTABLE}
      "${_archs}" ${_root} ${_ex})
    set_tests_properties(cuda_nvcc_resources PROPERTIES TIMEOUT 600)
  endif()
  # the kernel test compiled for the GPU (gpu-check.sh runs it)
  set(_tk ${CMAKE_BINARY_DIR}/test_kernels_cuda)
  # nvcc takes CUDA sources by their suffix
  configure_file(${_tc}/test_kernels_emu.cpp ${CMAKE_CURRENT_BINARY_DIR}/test_kernels_cuda.cu COPYONLY)
  set(_gencode "")
  foreach(_a ${SHARDC_CUDA_ARCHS})
    list(APPEND _gencode -gencode arch=compute_${_a},code=sm_${_a})
  endforeach()
  add_custom_command(OUTPUT ${_tk}
    COMMAND ${SHARDC_NVCC_EXECUTABLE} -ccbin ${CMAKE_CXX_COMPILER} -std=c++20 -O3 -lineinfo -cudart shared
      ${_gencode} ${CMAKE_CURRENT_BINARY_DIR}/test_kernels_cuda.cu -I${_root}/runtime/include -I${_root}/runtime/cuda -I${_root}/tests
      ${SHARDC_CUDA_LIBRARY} $<TARGET_FILE:shardrt> -lcublasLt -lcublas -lcudart -Xcompiler -fopenmp
      ${_srk_link} -lopenblas -lm -o ${_tk}
    DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/test_kernels_cuda.cu ${_root}/tests/check.h shardrt shardrt_cuda ${_srk_headers}
    COMMENT "nvcc: test_kernels_cuda"
    VERBATIM)
  # (a target named as its output file in the build directory is a cycle to make)
  add_custom_target(test_kernels_cuda_nvcc ALL DEPENDS ${_tk})
  # the bf16 step comparison compiled for the GPU (gpu-check.sh runs it): every parameter's
  # gradient of the nvcc-built tinygpt against the host program's, where a loss comparison
  # at bf16's 2e-2 would not see a wrong gradient
  if(TARGET step_compare_bf16) # its generated sources come from the emulator's section
    set(_sc ${CMAKE_BINARY_DIR}/step_compare_cuda)
    set(_scd ${CMAKE_CURRENT_BINARY_DIR}/step_compare_cuda.d)
    file(MAKE_DIRECTORY ${_scd})
    configure_file(${_tc}/step_compare.cpp ${_scd}/step_compare.cu COPYONLY)
    set(_nvcc_common ${SHARDC_NVCC_EXECUTABLE} -ccbin ${CMAKE_CXX_COMPILER} -std=c++20 -O3 -lineinfo -cudart shared
      ${_gencode} -I${_root}/runtime/include -I${_root}/runtime/cuda -I${_root}/tests)
    add_custom_command(OUTPUT ${_sc}
      COMMAND ${CMAKE_C_COMPILER} -std=c11 -O2 -fopenmp -c -Dmain=host_main -Dsr_main=host_capture
        -I${_root}/runtime/include ${_gen}/tinygpt_host.c -o ${_scd}/host.o
      COMMAND ${_nvcc_common} -DSR_NO_MAIN -Dmain=cuda_main -c ${_gen}/tinygpt_bf16.cu -o ${_scd}/tinygpt_bf16.o
      COMMAND ${_nvcc_common} ${_scd}/step_compare.cu ${_scd}/tinygpt_bf16.o ${_scd}/host.o
        ${SHARDC_CUDA_LIBRARY} $<TARGET_FILE:shardrt> -lcublasLt -lcublas -lcudart -Xcompiler -fopenmp
        ${_srk_link} -lopenblas -lm -o ${_sc}
      DEPENDS ${_scd}/step_compare.cu ${_gen}/tinygpt_host.c ${_gen}/tinygpt_bf16.cu ${_root}/tests/check.h shardrt
        shardrt_cuda ${_srk_headers}
      COMMENT "nvcc: step_compare_cuda (tinygpt bf16 against the host program)"
      VERBATIM)
    add_custom_target(step_compare_cuda_nvcc ALL DEPENDS ${_sc})
  endif()
  # the cuDNN attention's graphs through the cuDNN frontend's validate() without a GPU:
  # fake_cudart answers its device questions, libcudnn.so.9 is the real one (skipped without it)
  if(SHARDC_CUDNN_FRONTEND_INCLUDE AND SHARDC_CUDNN_INCLUDE)
    find_library(SHARDC_CUDNN_LIBRARY NAMES libcudnn.so.9 HINTS ${_srk_cuda_home}/lib64 ${_srk_cuda_home}/lib)
    add_library(fake_cudart SHARED ${_tc}/fake_cudart.c)
    target_compile_options(fake_cudart PRIVATE ${SHARDC_WARN})
    # the object libshardrt_cuda.a holds, not a second 1-minute compile of the frontend
    add_executable(test_cudnn_graph ${_tc}/test_cudnn_graph.cpp ${CMAKE_BINARY_DIR}/shardrt_cuda/attention_cudnn.o)
    target_include_directories(test_cudnn_graph PRIVATE ${_root}/runtime/cuda)
    target_compile_options(test_cudnn_graph PRIVATE ${SHARDC_WARN})
    target_link_libraries(test_cudnn_graph PRIVATE ${CMAKE_DL_LIBS})
    add_test(NAME cuda_cudnn_graph COMMAND test_cudnn_graph)
    set_tests_properties(cuda_cudnn_graph PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT
      "CUDNN_FRONTEND_CUDART_LIB_NAME=$<TARGET_FILE:fake_cudart>;SHARDC_CUDNN_LIB=${SHARDC_CUDNN_LIBRARY}")
  endif()
endif()
