/* context.cu: the CUDA backend's process-wide state: the compute stream and
 * precision, error reporting that names the kernel and the generated line,
 * scratch buffers, the bf16 shadow of the parameters, scalar transfers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_cuda.h"
#include "srk.cuh"

srk_context srk_ctx;

/* The compute stream may wait for collectives the host never waited for
 * (sr_comm_wait_device): check those first, under their timeouts, so that a
 * dead peer is an error here rather than a hang in cudaStreamSynchronize. */
int srk_stream_sync(const char *what)
{
    if (sr_comm_settle_all() != SR_OK) {
        srk_fail("%s", sr_errmsg());
        return 0;
    }
    return srk_check_cuda(cudaStreamSynchronize(srk_ctx.stream), what);
}

void srk_fail(const char *fmt, ...)
{
    if (srk_ctx.failed) return; /* the first error is the one that matters */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(srk_ctx.err, sizeof srk_ctx.err, fmt, ap);
    va_end(ap);
    srk_ctx.failed = 1;
    if (!srk_ctx.quiet) fprintf(stderr, "shardc cuda: error: %s\n", srk_ctx.err);
}

static const char *site_file(void)
{
    const char *f = srk_ctx.site_file ? srk_ctx.site_file : "(runtime)";
    const char *s = strrchr(f, '/');
    return s ? s + 1 : f;
}

void srk_after_launch(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && srk_ctx.sync_each) e = cudaStreamSynchronize(srk_ctx.stream);
    if (e != cudaSuccess)
        srk_fail("%s (%s) in kernel %s, launched at %s:%d (%s)", cudaGetErrorString(e), cudaGetErrorName(e), kernel,
                 site_file(), srk_ctx.site_line, srk_ctx.site_what ? srk_ctx.site_what : "runtime");
}

int srk_check_cuda(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    srk_fail("%s (%s) in %s, at %s:%d (%s)", cudaGetErrorString(e), cudaGetErrorName(e), what, site_file(),
             srk_ctx.site_line, srk_ctx.site_what ? srk_ctx.site_what : "runtime");
    return 0;
}

int srk_configure(int use_bf16, int tp)
{
    srk_ctx.bf16 = use_bf16 != 0;
    srk_ctx.tp = tp;
    const char *s = getenv("SHARDC_CUDA_SYNC");
    srk_ctx.sync_each = s && *s && strcmp(s, "0") != 0;
    s = getenv("SHARDC_CUDA_PROFILE");
    srk_ctx.profile = s && *s && strcmp(s, "0") != 0;
    s = getenv("SHARDC_CUDA_BGRAD");
    srk_ctx.no_bgrad = s && !strcmp(s, "0");
    if (s && *s && strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
        srk_fail("SHARDC_CUDA_BGRAD=%s: expected 1 (the default: bias gradients in the weight GEMM's epilogue) or 0", s);
    s = getenv("SHARDC_CUDA_TP_OVERLAP");
    srk_ctx.no_tp_overlap = s && !strcmp(s, "0");
    if (s && *s && strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
        srk_fail("SHARDC_CUDA_TP_OVERLAP=%s: expected 1 (the default: a column-parallel input gradient's all-reduce "
                 "or reduce-scatter during the weight gradient's GEMM) or 0", s);
    s = getenv("SHARDC_CUDA_GEMM");
    srk_ctx.gemm_tune = s && !strcmp(s, "tune");
    srk_ctx.gemm_tuned = srk_ctx.gemm_changed = srk_ctx.gemm_untried = 0, srk_ctx.gemm_saved_ms = 0.0;
    if (s && *s && strcmp(s, "tune") != 0 && strcmp(s, "heuristic") != 0)
        srk_fail("SHARDC_CUDA_GEMM=%s: expected heuristic (the default: cuBLASLt's first algorithm for each GEMM) "
                 "or tune (its candidates timed at each GEMM's first call, the fastest kept)", s);
    else if (srk_ctx.gemm_tune && tp > 1)
        /* ranks that compute the same result (a row-parallel bias's gradient) must add in the same order */
        srk_fail("SHARDC_CUDA_GEMM=tune: not with tensor parallelism (this program is built for tp=%d): its ranks "
                 "compute replicated parameters' gradients, which must come from the same algorithm on every "
                 "rank, and each rank's timings may pick another; use heuristic", tp);
    s = getenv("SHARDC_CUDA_ATTN");
    srk_ctx.attn_mode = SRK_ATTN_AUTO;
    srk_ctx.attn_picks = 0, srk_ctx.attn_note[0] = 0;
    if (s && !strcmp(s, "wmma")) srk_ctx.attn_mode = SRK_ATTN_WMMA;
    else if (s && !strcmp(s, "simt")) srk_ctx.attn_mode = SRK_ATTN_SIMT;
    else if (s && !strcmp(s, "mma")) srk_ctx.attn_mode = SRK_ATTN_MMA;
    else if (s && !strcmp(s, "cudnn")) srk_ctx.attn_mode = SRK_ATTN_CUDNN;
    else if (s && *s && strcmp(s, "auto") != 0)
        srk_fail("SHARDC_CUDA_ATTN=%s: expected auto (the default: the fastest path that agrees with simt), wmma, "
                 "mma, cudnn or simt", s);
    return srk_ctx.failed;
}

/* ---- scratch ----------------------------------------------------------------------- */
static struct {
    void *p;
    size_t cap;
} scratch[SRK_SCR__COUNT];

void *srk_scratch(int id, size_t bytes)
{
    if (id < 0 || id >= SRK_SCR__COUNT) return NULL;
    if (bytes <= scratch[id].cap && scratch[id].p) return scratch[id].p;
    /* the old buffer is only used by work queued before on the same stream */
    if (scratch[id].p) srk_dev_free(scratch[id].p);
    size_t cap = bytes + bytes / 4 + 256;
    scratch[id].p = srk_dev_alloc(cap);
    scratch[id].cap = scratch[id].p ? cap : 0;
    if (!scratch[id].p) srk_fail("out of device memory for %zu bytes of scratch (at %s:%d)", cap, site_file(),
                                 srk_ctx.site_line);
    return scratch[id].p;
}

/* ---- conversions ---------------------------------------------------------------------- */
static __global__ void f32_to_bf16_kernel(bf16 *out, const float *x, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(x[i]);
}
static __global__ void bf16_to_f32_kernel(float *out, const bf16 *x, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = __bfloat162float(x[i]);
}
void srk_f32_to_bf16(bf16 *out, const float *x, int64_t n)
{
    if (n <= 0) return;
    SR_LAUNCH(f32_to_bf16_kernel, srk_blocks(n, 256), 256, 0, srk_ctx.stream, out, x, (long)n);
}
void srk_bf16_to_f32(float *out, const bf16 *x, int64_t n)
{
    if (n <= 0) return;
    SR_LAUNCH(bf16_to_f32_kernel, srk_blocks(n, 256), 256, 0, srk_ctx.stream, out, x, (long)n);
}

/* ---- the parameters' bf16 shadow ------------------------------------------------------------ */
void srk_params_written(const void *p, size_t bytes)
{
    /* a write elsewhere (a batch's tokens, the gradients) leaves the shadow as it is: it would
     * otherwise be converted again at every microbatch's forward */
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)srk_ctx.params, hi = lo + sizeof(float) * (size_t)srk_ctx.nparams;
    if (!srk_ctx.params || (a < hi && a + bytes > lo)) srk_ctx.param_version++;
}

void srk_bind_params(const float *params, int64_t n, uint64_t step)
{
    srk_prof_step(step);
    if (!srk_ctx.bf16 || n <= 0) return;
    if (params != srk_ctx.params || n != srk_ctx.nparams) {
        if (srk_ctx.shadow) srk_dev_free(srk_ctx.shadow);
        srk_ctx.shadow = (bf16 *)srk_dev_alloc(sizeof(bf16) * (size_t)n);
        if (!srk_ctx.shadow) {
            srk_fail("out of device memory for the bf16 copy of the parameters (%lld bytes)",
                     (long long)(sizeof(bf16) * (size_t)n));
            return;
        }
        srk_ctx.params = params;
        srk_ctx.nparams = n;
        srk_ctx.shadow_version = srk_ctx.param_version - 1; /* stale */
    }
    /* refreshed per step (the comm layer may have written parameters) and
     * after anything the backend wrote into them */
    if (srk_ctx.shadow_version != srk_ctx.param_version || srk_ctx.shadow_step != step) {
        srk_f32_to_bf16(srk_ctx.shadow, params, n);
        srk_ctx.shadow_version = srk_ctx.param_version;
        srk_ctx.shadow_step = step;
    }
}

void srk_params_arrived(const float *p, int64_t n)
{
    if (srk_ctx.shadow && p >= srk_ctx.params && p + n <= srk_ctx.params + srk_ctx.nparams)
        srk_f32_to_bf16(srk_ctx.shadow + (p - srk_ctx.params), p, n);
}

const bf16 *srk_bf16_view(const float *p, int64_t n, int scratch_id)
{
    if (srk_ctx.shadow && p >= srk_ctx.params && p + n <= srk_ctx.params + srk_ctx.nparams)
        return srk_ctx.shadow + (p - srk_ctx.params);
    bf16 *t = (bf16 *)srk_scratch(scratch_id, sizeof(bf16) * (size_t)n);
    if (t) srk_f32_to_bf16(t, p, n);
    return t;
}

/* ---- scalars ---------------------------------------------------------------------------------- */
float srk_get_scalar(const float *dev)
{
    float v = NAN;
    if (srk_ctx.failed) return v;
    if (srk_check_cuda(cudaMemcpyAsync(&v, dev, sizeof v, cudaMemcpyDeviceToHost, srk_ctx.stream), "reading the loss"))
        srk_stream_sync("the kernels before reading the loss");
    return srk_ctx.failed ? NAN : v;
}

void srk_set_scalar(float *dev, float v)
{
    if (srk_ctx.failed) return;
    srk_check_cuda(cudaMemcpyAsync(dev, &v, sizeof v, cudaMemcpyHostToDevice, srk_ctx.stream), "setting d loss");
    /* pageable source: the copy is staged before the call returns, but be
     * explicit, v is a local */
    srk_stream_sync("setting d loss");
}
