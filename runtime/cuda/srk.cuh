/* srk.cuh: the CUDA kernels of libshardrt, everything a generated .cu file
 * (or a kernel test) includes. Under nvcc it is CUDA; any other C++17
 * compiler gets the CPU emulator (emu/cuda_emu.h) and the same sources.
 *
 *   srk_common.cuh     context, launch macro, types, reductions
 *   srk_pointwise.cuh  add/sub/mul/scale, activations, dropout, embedding,
 *                      slice, transpose, copy, zero, column sums
 *   srk_norm.cuh       layernorm, rmsnorm, softmax, softmax + cross-entropy
 *   srk_attention.cuh  causal attention (flash-style, SIMT and tensor cores)
 *   srk_matmul.cuh     matmuls and fused bias / GELU epilogues (gemm.cu)
 *   srk_tp.cuh         tensor parallelism: all-reduce, all-gather, the
 *                      vocab-parallel embedding and cross-entropy
 *   (srk_optim.cuh: the optimizer kernels, for backend.cu only)
 */
#ifndef SRK_CUH
#define SRK_CUH

#include <type_traits>

#include "srk_common.cuh"
#include "srk_pointwise.cuh"
#include "srk_norm.cuh"
#include "srk_attention.cuh"
#include "srk_matmul.cuh"
#include "srk_tp.cuh"

/* On the emulator the wrapper instances that generated programs use are compiled once, into
 * libshardrt_cuda_emu (emu/srk_prebuilt.cpp, the list in emu/srk_prebuilt.inc): a program's
 * compile declares them and leaves them out (seconds, not fifteen). An instance not on the
 * list is compiled where it is used, as before. nvcc builds compile every one in place.
 * SRK_NO_PREBUILT turns it off (scripts/emu-prebuilt.sh, which remakes the list). */
#if !defined(__CUDACC__) && !defined(SRK_NO_PREBUILT)
#ifndef SRK_PREBUILT
#define SRK_PREBUILT(...) extern template __VA_ARGS__;
#endif
#include "emu/srk_prebuilt.inc"
#endif

#endif /* SRK_CUH */
