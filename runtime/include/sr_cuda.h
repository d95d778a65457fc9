/* sr_cuda.h: the CUDA backend's interface to the rest of libshardrt (C).
 *
 * sr_backend_cuda keeps a program's tensors in one device's memory, all of
 * it carved out of one cudaMalloc'd arena; the kernels run on one compute
 * stream. The comm layer reaches that memory through sr_backend_cuda.device
 * (an sr_comm_device, given to sr_grid_init_device) and orders itself:
 * NCCL (runtime/cuda/comm_nccl.c) records an event on the compute stream and
 * makes its own stream wait for it before each collective, and
 * sr_comm_wait_device makes the compute stream wait for a collective's
 * completion event; the MPI path (--comm mpi) copies device buffers to
 * page-locked host memory on the compute stream and back. So neither the
 * generated code nor the runtime synchronizes the stream around a
 * collective. Before the host waits for the compute stream (reading the
 * loss, copies, sync()), the backend settles the collectives that stream
 * waits for (sr_comm_settle_all), so their timeouts still hold.
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
