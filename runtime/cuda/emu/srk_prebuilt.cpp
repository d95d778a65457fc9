/* srk_prebuilt.cpp: the kernel wrappers' instances that generated programs use
 * (emu/srk_prebuilt.inc), compiled once into libshardrt_cuda_emu, so that an
 * emulated program's compile (shardc build --cuda-emulate) leaves them out.
 * Built four times (runtime/cuda/cuda.cmake), SRK_PREBUILT_PART 0 to 3: each
 * a quarter of the list, the four compiled side by side. */
#define SRK_PREBUILT(...) template __VA_ARGS__;
#include "srk.cuh"
