/* sr_cuda.h: the CUDA backend's interface to the rest of libshardrt (C).
 *
 * sr_backend_cuda keeps a program's tensors in one device's memory, all of
 * it carved out of one cudaMalloc'd arena; the kernels run on one compute
 * stream. Collectives (NCCL, runtime/cuda/comm_nccl.c) run on their own
 * stream and must order themselves after the compute stream's work on the
 * buffers they move: record an event on sr_cuda_stream() and make the NCCL
 * stream wait for it (cudaEventRecord + cudaStreamWaitEvent) before each
 * collective; the compute stream must likewise wait for a collective before
 * reading its result (the optimizer does, through sync()).
 */
#ifndef SR_CUDA_H
#define SR_CUDA_H

#include <stddef.h>

#include "sr_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const sr_backend sr_backend_cuda;

/* called by a generated main() first: without a GPU, prints the one-line
 * "no CUDA device: ..." error (rank 0) and returns 1; --help and --version
 * pass */
int sr_cuda_preflight(int argc, char **argv);

/* the compute stream, a cudaStream_t (NULL before init) */
void *sr_cuda_stream(void);

/* 0 (default): before every collective and every grad_ready hook the
 * generated code waits for the compute stream (cudaStreamSynchronize), so a
 * comm layer that only orders itself after the legacy default stream reads
 * finished buffers. A comm layer that makes its stream wait for an event
 * recorded on sr_cuda_stream() sets this to 1 and the waits go away. */
extern int sr_cuda_comm_ordered;

/* Sizes the arena before the first allocation (bytes; 0 = the default: the
 * device's free memory less 10% (at least 2 GiB) for cuBLAS, NCCL and the
 * CUDA context, shared by the ranks on the device). SHARDC_CUDA_ARENA_MB
 * overrides both. SR_ERR_STATE once the arena exists. */
sr_status sr_cuda_arena_reserve(size_t bytes);
/* bytes in use, the high-water mark, the arena's capacity */
void sr_cuda_arena_stats(size_t *used, size_t *high, size_t *cap);

#ifdef __cplusplus
}
#endif
#endif /* SR_CUDA_H */
