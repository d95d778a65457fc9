/* codegen_cuda.h: the CUDA back end (codegen_cuda.c). */
#ifndef CODEGEN_CUDA_H
#define CODEGEN_CUDA_H

#include "shardc.h"

/* Writes the CUDA source (.cu) of P's training program to out: the same
 * program as cg_host's (parameter table, defaults, config, forward and
 * backward per block instance), with every kernel call expanded from the op
 * table's CUDA templates and run on the device (runtime/cuda). precision_bf16:
 * activations in bf16 and matmuls/attention on bf16 tensor cores, with fp32
 * parameters, gradients and AdamW state; 0: fp32 everywhere (for exact
 * comparison with the host backend). Returns 0, or 1 after a diagnostic. */
int cg_cuda(Program *P, FILE *out, const char *source_path, int precision_bf16);

/* Compiles and links the generated source into out_bin: with nvcc for the
 * GPU architectures in archs ("80,90"; NULL or "" = "80,90"), or, when
 * emulate is set, with the host C++ compiler against the CPU emulator (the
 * binary runs the same kernels on the CPU, slowly: for tests). Links
 * libshardrt, the CUDA runtime library of libshardrt, cuBLASLt, NCCL and MPI.
 * Returns 0, or 1 after a message on stderr. */
int drv_build_cuda(Program *P, const char *c_or_cu_path, const char *out_bin, const char *archs, int emulate);

#endif /* CODEGEN_CUDA_H */
