/* sr_backend.h: where a program's tensors live and how the training driver
 * touches them. The driver (train.c) keeps parameters, gradients, optimizer
 * state, the activation workspace and the token buffers in the backend's
 * memory and never dereferences them itself: it stages through host memory
 * (initialization, checkpoints, sampling) with h2d/d2h and runs the
 * optimizer through the backend.
 *
 * The host backend (sr_backend_host, runtime/host/backend.c) is plain memory; the CUDA
 * backend (runtime/cuda) keeps everything in one device's memory and uses
 * NCCL for collectives, or MPI staged through host memory (a program's
 * --comm mpi). A generated program names its backend in sr_program.backend
 * (NULL means host).
 */
#ifndef SR_BACKEND_H
#define SR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "shardrt.h"
#include "sr_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_backend {
    const char *name;                 /* "host", "cuda" */
    sr_comm_backend comm;             /* the comm backend a program uses by default */
    unsigned comms;                   /* bit 1 << b for each sr_comm_backend b that can move
                                       * this memory (comm is one of them) */
    const char *comm_why;             /* why the others cannot: the reason a program's
                                       * usage error gives (e.g. "... has no NCCL") */
    const sr_comm_device *device;     /* how the comm layer reaches this memory
                                       * (sr_grid_init_device); NULL: host memory */
    /* picks the device for this rank; an error (no GPU, ...) is one line */
    sr_status (*init)(int local_rank);
    void (*shutdown)(void);
    void *(*alloc)(size_t bytes);     /* zeroed, 256-byte aligned; NULL on failure */
    void (*free)(void *p);
    void (*h2d)(void *dst, const void *src, size_t bytes);
    void (*d2h)(void *dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within the backend's memory */
    void (*zero)(float *x, int64_t n);
    double (*sumsq)(const float *x, int64_t n);      /* accumulated in double */
    void (*scale)(float *x, float s, int64_t n);      /* x *= s */
    void (*add)(float *y, const float *x, int64_t n); /* y += x */
    /* torch.optim.AdamW, as sr_adamw_step in shardrt.h */
    void (*adamw)(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float wd, long t);
    /* waits for all queued device work; reports the first asynchronous error */
    sr_status (*sync)(void);
    /* the most bytes this backend had allocated at once (the run's peak) */
    int64_t (*peak_bytes)(void);
    /* what the backend decided while running that the user should know (the CUDA
     * backend's attention trial), a line each, printed after the first step; NULL:
     * nothing to say */
    const char *(*note)(void);
    /* the comm layer wrote parameters p[0..n) (the device is ordered after
     * it): refresh what the backend derives from them (the CUDA backend's
     * bf16 copy); NULL: nothing derived */
    void (*params_arrived)(float *p, int64_t n);
} sr_backend;

extern const sr_backend sr_backend_host;

/* the host kernels are built for an x86-64 level (CMake's SHARDC_HOST_ARCH):
 * SR_OK where this CPU has it, else an error that names it (before any
 * kernel runs: not an illegal instruction later) */
sr_status sr_host_isa_check(void);

#ifdef __cplusplus
}
#endif
#endif /* SR_BACKEND_H */
