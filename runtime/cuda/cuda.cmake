# runtime/cuda/cuda.cmake: the CUDA backend. Included by the top
# CMakeLists.txt after the shardrt, shardc_front and shardc targets (and
# after runtime/comm.cmake, whose NCCL findings it reuses).
#
#  - compiler/codegen_cuda.c joins the compiler, always: `shardc build
#    --backend cuda` emits CUDA sources and can build them against the CPU
#    emulator without nvcc.
#  - shardrt_cuda_emu: the CUDA runtime pieces (context, gemm, backend) and
#    the emulator, compiled by the host C++ compiler: what the tests without
#    a GPU link (SHARDC_CUDA_EMU, on by default).
#  - shardrt_cuda (libshardrt_cuda.a): the same sources compiled by nvcc for
#    SHARDC_CUDA_ARCHS; only where nvcc is found, otherwise one status line
#    and nothing else.
#  - attention_cudnn.cpp (cuDNN's fused attention, SHARDC_CUDA_ATTN=cudnn):
#    host C++ in both; in libshardrt_cuda.a built against cuDNN's frontend
#    (header-only; scripts/setup.sh puts it in /opt/cudnn-frontend, or set
#    SHARDC_CUDNN_FRONTEND_INCLUDE) where it and cudnn.h are found, else the
#    stub that says it is not built. The programs dlopen libcudnn.so.9.
# The paths the compiler needs to build CUDA programs are compiled into
# codegen_cuda.c (each can be overridden by the environment variable of the
# same name, see drv_build_cuda).

set(_srk_dir ${CMAKE_CURRENT_LIST_DIR})
get_filename_component(_srk_root ${_srk_dir}/../.. ABSOLUTE)
set(_srk_cu ${_srk_dir}/context.cu ${_srk_dir}/gemm.cu ${_srk_dir}/backend.cu ${_srk_dir}/profile.cu)
file(GLOB _srk_headers ${_srk_dir}/*.cuh ${_srk_dir}/emu/*.h ${_srk_dir}/emu/c/*.h ${_srk_root}/runtime/include/*.h)

target_sources(shardc_front PRIVATE ${_srk_root}/compiler/codegen_cuda.c)

option(SHARDC_CUDA_EMU "build the CUDA backend's CPU emulation (CUDA tests without a GPU)" ON)
# C++ for the emulator and as nvcc's host compiler (-ccbin), with or without
# the emulation
enable_language(CXX)
set(SHARDC_CUDA_ARCHS "80;90" CACHE STRING "GPU architectures (compute capabilities) of libshardrt_cuda")

find_program(SHARDC_NVCC_EXECUTABLE nvcc
  HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)

# what programs built by shardc link besides libshardrt: MPI, and with an
# NCCL comm backend in libshardrt, NCCL and the CUDA runtime
set(_srk_link "")
if(MPI_C_LIBRARIES)
  list(APPEND _srk_link ${MPI_C_LIBRARIES})
endif()
set(_srk_libdir "")
if(SHARDC_NVCC_EXECUTABLE)
  get_filename_component(_srk_cuda_home ${SHARDC_NVCC_EXECUTABLE} DIRECTORY)
  get_filename_component(_srk_cuda_home ${_srk_cuda_home} DIRECTORY)
  if(EXISTS ${_srk_cuda_home}/lib64)
    set(_srk_libdir ${_srk_cuda_home}/lib64)
  endif()
endif()
if(SHARDC_HAVE_NCCL)
  list(APPEND _srk_link ${NCCL_LIBRARY} -lcudart)
  if(NOT _srk_libdir AND CUDAToolkit_LIBRARY_DIR)
    set(_srk_libdir ${CUDAToolkit_LIBRARY_DIR})
  endif()
endif()
list(APPEND _srk_link -ldl) # attention_cudnn.cpp opens libcudnn (libc has dlopen from glibc 2.34)
list(JOIN _srk_link " " _srk_link_str)

set(_srk_defs
  SHARDC_CUDA_RUNTIME_INCLUDE="${_srk_root}/runtime/include"
  SHARDC_CUDA_KERNEL_INCLUDE="${_srk_dir}"
  SHARDC_CUDA_SHARDRT_LIB="$<TARGET_FILE:shardrt>"
  SHARDC_CUDA_LIBDIR="${_srk_libdir}"
  SHARDC_CUDA_LINK_EXTRA="${_srk_link_str}")

# ---- the emulated runtime (host C++ compiler) --------------------------------
if(SHARDC_CUDA_EMU)
  find_package(OpenMP REQUIRED COMPONENTS CXX)
  # the NCCL backend's own source against the emulator's cuda_runtime.h and
  # nccl.h (emu/c; NCCL over MPI in emu/nccl_emu.cpp), as srcomm_nccl_emu_ops:
  # emulated programs run it for --comm nccl. Its own target so that the real
  # CUDA headers (which shardrt's NCCL link would bring) are not on its path.
  add_library(comm_nccl_emu OBJECT ${_srk_root}/runtime/cuda/comm_nccl.c)
  target_include_directories(comm_nccl_emu PRIVATE ${_srk_dir}/emu/c ${_srk_root}/runtime/include)
  target_compile_definitions(comm_nccl_emu PRIVATE SR_HAVE_NCCL=1 srcomm_nccl_ops=srcomm_nccl_emu_ops)
  target_compile_options(comm_nccl_emu PRIVATE ${SHARDC_WARN})
  target_link_libraries(comm_nccl_emu PRIVATE MPI::MPI_C)
  # the kernel wrappers' instances that generated programs use (emu/srk_prebuilt.inc), compiled
  # here once, in four parts side by side: an emulated program's compile leaves them out. Not
  # in the race check's build, whose kernel test compiles its instances itself, as before
  set(_srk_prebuilt "")
  if(SHARDC_SANITIZE_THREAD)
    add_compile_definitions(SRK_NO_PREBUILT)
  else()
    foreach(_k 0 1 2 3)
      file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/srk_prebuilt_${_k}.cpp
        CONTENT "#define SRK_PREBUILT_PART ${_k}\n#include \"emu/srk_prebuilt.cpp\"\n")
      list(APPEND _srk_prebuilt ${CMAKE_CURRENT_BINARY_DIR}/srk_prebuilt_${_k}.cpp)
    endforeach()
  endif()
  add_library(shardrt_cuda_emu STATIC ${_srk_cu} ${_srk_dir}/attention_cudnn.cpp ${_srk_dir}/emu/cuda_emu.cpp ${_srk_dir}/emu/nccl_emu.cpp
    ${_srk_prebuilt} $<TARGET_OBJECTS:comm_nccl_emu>)
  # .cu sources as C++ against emu/cuda_emu.h
  set_source_files_properties(${_srk_cu} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-x;c++")
  set_target_properties(shardrt_cuda_emu PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  target_include_directories(shardrt_cuda_emu PUBLIC ${_srk_root}/runtime/include ${_srk_dir})
  target_compile_options(shardrt_cuda_emu PRIVATE ${SHARDC_WARN})
  target_link_libraries(shardrt_cuda_emu PUBLIC shardrt OpenMP::OpenMP_CXX)
  if(SHARDC_SANITIZE_THREAD)
    # the kernels instrumented, the emulator's engine not (its bookkeeping is shared by
    # the fibers without CUDA's orders); it tells TSan the orders CUDA gives (EMU_TSAN)
    target_compile_options(shardrt_cuda_emu PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    set_source_files_properties(${_srk_dir}/emu/cuda_emu.cpp ${_srk_dir}/emu/nccl_emu.cpp
      PROPERTIES COMPILE_OPTIONS "-fno-sanitize=thread" COMPILE_DEFINITIONS "EMU_TSAN=1")
  endif()
  list(APPEND _srk_defs
    SHARDC_CUDA_EMU_LIB="$<TARGET_FILE:shardrt_cuda_emu>"
    SHARDC_CXX="${CMAKE_CXX_COMPILER}")
  add_dependencies(shardc shardrt_cuda_emu)
  message(STATUS "shardc cuda: CPU emulation of the CUDA backend (${CMAKE_CXX_COMPILER})")
endif()

# ---- the GPU runtime (nvcc) ---------------------------------------------------
set(SHARDC_CUDA_LIBRARY "")
if(NOT SHARDC_NVCC_EXECUTABLE)
  message(STATUS "shardc cuda: nvcc not found: libshardrt_cuda and CUDA binaries are not built "
    "(set CUDA_HOME or SHARDC_NVCC_EXECUTABLE); the emulated CUDA tests still run")
else()
  set(_srk_gencode "")
  foreach(_a ${SHARDC_CUDA_ARCHS})
    list(APPEND _srk_gencode -gencode arch=compute_${_a},code=sm_${_a})
  endforeach()
  set(_srk_objs "")
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/shardrt_cuda)
  foreach(_src ${_srk_cu})
    get_filename_component(_name ${_src} NAME_WE)
    set(_obj ${CMAKE_BINARY_DIR}/shardrt_cuda/${_name}.o)
    add_custom_command(OUTPUT ${_obj}
      COMMAND ${SHARDC_NVCC_EXECUTABLE} -ccbin ${CMAKE_CXX_COMPILER} -std=c++20 -O3 -lineinfo -cudart shared
        ${_srk_gencode} -Xcompiler -fPIC,-Wall,-Wextra
        -I${_srk_root}/runtime/include -I${_srk_dir} -c ${_src} -o ${_obj}
      DEPENDS ${_src} ${_srk_headers}
      COMMENT "nvcc ${_name}.cu (sm ${SHARDC_CUDA_ARCHS})"
      VERBATIM)
    list(APPEND _srk_objs ${_obj})
  endforeach()
  # cuDNN's attention: host C++ against the frontend's headers and cudnn.h
  find_path(SHARDC_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
    HINTS ENV CUDNN_FRONTEND_INCLUDE PATHS /opt/cudnn-frontend/include)
  find_path(SHARDC_CUDNN_INCLUDE cudnn.h HINTS ENV CUDNN_INCLUDE PATHS ${_srk_cuda_home}/include /usr/local/include)
  set(_srk_cudnn_flags "")
  if(SHARDC_CUDNN_FRONTEND_INCLUDE AND SHARDC_CUDNN_INCLUDE)
    set(_srk_cudnn_flags -DSRK_HAVE_CUDNN_FE=1 -isystem ${SHARDC_CUDNN_FRONTEND_INCLUDE} -isystem ${SHARDC_CUDNN_INCLUDE})
    message(STATUS "shardc cuda: cuDNN attention (SHARDC_CUDA_ATTN=cudnn) against ${SHARDC_CUDNN_FRONTEND_INCLUDE}")
  else()
    message(STATUS "shardc cuda: cuDNN attention NOT built (no cudnn_frontend.h or cudnn.h; scripts/setup.sh "
      "installs the frontend, or set SHARDC_CUDNN_FRONTEND_INCLUDE)")
  endif()
  set(_obj ${CMAKE_BINARY_DIR}/shardrt_cuda/attention_cudnn.o)
  add_custom_command(OUTPUT ${_obj}
    COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -O2 -fPIC -Wall -Wextra ${SHARDC_WARN} ${_srk_cudnn_flags}
      -isystem ${_srk_cuda_home}/include -c ${_srk_dir}/attention_cudnn.cpp -o ${_obj}
    DEPENDS ${_srk_dir}/attention_cudnn.cpp ${_srk_dir}/srk_cudnn.h
    COMMENT "attention_cudnn.cpp (cuDNN attention)"
    VERBATIM)
  list(APPEND _srk_objs ${_obj})
  set(SHARDC_CUDA_LIBRARY ${CMAKE_BINARY_DIR}/libshardrt_cuda.a)
  add_custom_command(OUTPUT ${SHARDC_CUDA_LIBRARY}
    COMMAND ${CMAKE_COMMAND} -E rm -f ${SHARDC_CUDA_LIBRARY}
    COMMAND ${CMAKE_AR} rcs ${SHARDC_CUDA_LIBRARY} ${_srk_objs}
    DEPENDS ${_srk_objs}
    COMMENT "libshardrt_cuda.a"
    VERBATIM)
  add_custom_target(shardrt_cuda ALL DEPENDS ${SHARDC_CUDA_LIBRARY})
  add_dependencies(shardc shardrt_cuda)
  list(APPEND _srk_defs
    SHARDC_CUDA_LIB="${SHARDC_CUDA_LIBRARY}"
    SHARDC_NVCC="${SHARDC_NVCC_EXECUTABLE}")
  message(STATUS "shardc cuda: nvcc ${SHARDC_NVCC_EXECUTABLE}, architectures ${SHARDC_CUDA_ARCHS}")
endif()

target_compile_definitions(shardc_front PRIVATE ${_srk_defs})
