# runtime/comm.cmake: the communication layer of libshardrt (runtime/comm.c,
# runtime/comm_device.c: MPI on device memory through host staging, and the
# NCCL backend runtime/cuda/comm_nccl.c where the CUDA toolkit and NCCL are
# found). Included by the top CMakeLists.txt right after the
# `shardrt` target is defined.
#
# Sets SHARDC_HAVE_NCCL (ON/OFF) for tests/comm.cmake.
# Anything linking libshardrt links MPI (and, with NCCL, cudart and nccl):
# the dependencies are PUBLIC.

find_package(MPI REQUIRED COMPONENTS C)
target_sources(shardrt PRIVATE ${CMAKE_CURRENT_LIST_DIR}/comm.c ${CMAKE_CURRENT_LIST_DIR}/comm_device.c)
target_link_libraries(shardrt PUBLIC MPI::MPI_C)

# ---- NCCL backend ----------------------------------------------------------
find_package(CUDAToolkit QUIET)
set(_sr_nccl_found OFF)
if(CUDAToolkit_FOUND)
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS}
    PATHS /usr/include /usr/local/include)
  find_library(NCCL_LIBRARY nccl
    HINTS ${CUDAToolkit_LIBRARY_DIR}
    PATHS /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(_sr_nccl_found ON)
  endif()
endif()

option(SHARDC_NCCL "compile the NCCL backend of the communication layer (needs the CUDA toolkit and NCCL)"
  ${_sr_nccl_found})

set(SHARDC_HAVE_NCCL OFF)
if(SHARDC_NCCL)
  if(NOT _sr_nccl_found)
    message(FATAL_ERROR "SHARDC_NCCL is ON but the CUDA toolkit (${CUDAToolkit_FOUND}) or NCCL "
      "(nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY}) was not found; "
      "install them or configure with -DSHARDC_NCCL=OFF")
  endif()
  target_sources(shardrt PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda/comm_nccl.c)
  target_compile_definitions(shardrt PRIVATE SR_HAVE_NCCL=1)
  target_include_directories(shardrt PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(shardrt PUBLIC CUDA::cudart ${NCCL_LIBRARY})
  set(SHARDC_HAVE_NCCL ON)
  message(STATUS "shardrt comm: NCCL backend compiled in (CUDA ${CUDAToolkit_VERSION}, ${NCCL_LIBRARY})")
else()
  message(STATUS "shardrt comm: NCCL backend NOT compiled in (MPI only; "
    "CUDA toolkit found: ${CUDAToolkit_FOUND}, NCCL found: ${_sr_nccl_found}, SHARDC_NCCL=${SHARDC_NCCL})")
endif()
message(STATUS "shardrt comm: MPI ${MPI_C_VERSION} (${MPIEXEC_EXECUTABLE})")
