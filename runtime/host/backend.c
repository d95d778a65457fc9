/* backend.c: the host backend: tensors in ordinary memory, the optimizer
 * through the host kernels. See sr_backend.h. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "sr_backend.h"

/* compiled for the baseline, as the whole file is: only kernels.c and tp.c
 * take -march (CMakeLists.txt) */
sr_status sr_host_isa_check(void)
{
#if defined(SR_HOST_ARCH) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    const char *isa = !strcmp(SR_HOST_ARCH, "x86-64-v4") ? "AVX-512" : !strcmp(SR_HOST_ARCH, "x86-64-v3") ? "AVX2, FMA"
                                                                                                         : "SSE4.2";
    if (!__builtin_cpu_supports(SR_HOST_ARCH))
        return sr_seterr(SR_ERR_STATE, "this CPU lacks %s (%s), which libshardrt's host kernels were built for; "
                         "rebuild shardc on this machine, or with cmake -DSHARDC_HOST_ARCH=none", SR_HOST_ARCH, isa);
#endif
    return SR_OK;
}

static sr_status host_init(int local_rank)
{
    (void)local_rank;
    return SR_OK;
}

static void host_shutdown(void) {}

/* every block carries its size in a 256-byte header, for the peak count */
#define HDR 256
static int64_t cur_bytes, peak;

static void *host_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes + HDR) != 0) return NULL;
    memset(p, 0, bytes + HDR);
    *(size_t *)p = bytes;
    cur_bytes += (int64_t)bytes;
    if (cur_bytes > peak) peak = cur_bytes;
    return (char *)p + HDR;
}

static void host_free(void *p)
{
    if (!p) return;
    char *base = (char *)p - HDR;
    cur_bytes -= (int64_t)*(size_t *)base;
    free(base);
}

static int64_t host_peak(void) { return peak; }

static void host_copy(void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes) memmove(dst, src, bytes);
}

static void host_zero(float *x, int64_t n) { sr_zero(x, (long)n); }
static double host_sumsq(const float *x, int64_t n) { return sr_sumsq(x, (long)n); }
static void host_scale(float *x, float s, int64_t n) { sr_scale_fwd(x, x, s, (long)n); }
static void host_add(float *y, const float *x, int64_t n) { sr_add_fwd(y, y, x, (long)n, (long)n); }

static void host_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                       float beta1, float beta2, float eps, float wd, long t)
{
    sr_adamw_step(p, g, m, v, (long)n, lr, beta1, beta2, eps, wd, t);
}

static sr_status host_sync(void) { return SR_OK; }

const sr_backend sr_backend_host = {
    .name = "host",
    .comm = SR_COMM_MPI,
    .comms = 1u << SR_COMM_MPI,
    .comm_why = "this program was built for the CPU (shardc build --backend host); its tensors are "
                "in host memory, which MPI moves",
    .init = host_init,
    .shutdown = host_shutdown,
    .alloc = host_alloc,
    .free = host_free,
    .h2d = host_copy,
    .d2h = host_copy,
    .copy = host_copy,
    .zero = host_zero,
    .sumsq = host_sumsq,
    .scale = host_scale,
    .add = host_add,
    .adamw = host_adamw,
    .sync = host_sync,
    .peak_bytes = host_peak,
};
