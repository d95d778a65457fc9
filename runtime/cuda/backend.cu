/* backend.cu: sr_backend_cuda, the CUDA memory/optimizer backend (see
 * sr_backend.h and sr_cuda.h).
 *
 * Memory: one cudaMalloc'd arena, created at the first allocation and carved
 * first-fit (256-byte aligned blocks, neighbours coalesced on free): the
 * parameters, gradients, AdamW state, the compiler-planned workspace, the
 * token buffers, the bf16 shadow and the kernels' scratch all live in it.
 * An allocation that does not fit falls back to cudaMalloc with a one-line
 * warning, so a wrong size estimate costs fragmentation, not the run.
 *
 * Without a GPU, init fails with one line; emulated builds (the CPU
 * emulator) have one pretend device, EMU_DEVICES=0 gives none.
 *
 * The comm layer reaches this memory through cuda_comm_device (sr_comm.h):
 * the compute stream (NCCL orders itself after it with events), which
 * pointers are device memory (the arena and what fell outside it), and the
 * page-locked staging copies of the MPI path (--comm mpi).
 */
#include <map>
#include <vector>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_cuda.h"
#include "srk.cuh"
#include "srk_optim.cuh"

/* ---- the arena ------------------------------------------------------------------ */
enum { ARENA_ALIGN = 256 };

static struct {
    char *base;
    size_t cap, used, high;
    size_t reserve;                 /* requested size, 0 = default */
    std::map<size_t, size_t> *free_blocks;  /* offset -> size */
    std::map<void *, size_t> *taken;         /* pointer -> size (arena or fallback) */
    std::map<void *, int> *outside;          /* fallback cudaMallocs */
    int warned;
} arena;

static size_t default_arena_bytes(void)
{
    const char *mb = getenv("SHARDC_CUDA_ARENA_MB");
    if (mb && atol(mb) > 0) return (size_t)atol(mb) << 20;
    if (arena.reserve) return arena.reserve;
#ifdef SR_CUDA_EMULATION
    return (size_t)1 << 30; /* host memory; larger needs fall back */
#else
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return (size_t)1 << 30;
    size_t head = total_b / 10 > ((size_t)2 << 30) ? total_b / 10 : ((size_t)2 << 30);
    size_t avail = free_b > head ? free_b - head : free_b / 2;
    /* ranks sharing this device (more ranks than GPUs on a node) */
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!ls) ls = getenv("MPI_LOCALNRANKS");
    if (!ls) ls = getenv("SLURM_NTASKS_PER_NODE");
    int local = ls ? atoi(ls) : 1, ndev = 1;
    cudaGetDeviceCount(&ndev);
    int share = ndev > 0 && local > ndev ? (local + ndev - 1) / ndev : 1;
    return avail / (size_t)share;
#endif
}

static int arena_create(void)
{
    arena.free_blocks = new std::map<size_t, size_t>();
    arena.taken = new std::map<void *, size_t>();
    arena.outside = new std::map<void *, int>();
    size_t want = default_arena_bytes() & ~(size_t)(ARENA_ALIGN - 1);
    void *p = NULL;
    while (want >= ((size_t)64 << 20) && cudaMalloc(&p, want) != cudaSuccess) {
        cudaGetLastError();
        p = NULL;
        want = want / 4 * 3 & ~(size_t)(ARENA_ALIGN - 1);
    }
    if (!p) return 0;
    arena.base = (char *)p;
    arena.cap = want;
    (*arena.free_blocks)[0] = want;
    return 1;
}

void *srk_dev_alloc(size_t bytes)
{
    if (!arena.free_blocks && !arena_create() && !arena.free_blocks) return NULL;
    size_t n = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (n == 0) n = ARENA_ALIGN;
    for (auto it = arena.free_blocks->begin(); it != arena.free_blocks->end(); ++it) {
        if (it->second < n) continue;
        size_t off = it->first, sz = it->second;
        arena.free_blocks->erase(it);
        if (sz > n) (*arena.free_blocks)[off + n] = sz - n;
        void *p = arena.base + off;
        (*arena.taken)[p] = n;
        arena.used += n;
        if (arena.used > arena.high) arena.high = arena.used;
        return p;
    }
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (!arena.warned) {
        fprintf(stderr, "shardc cuda: warning: the %zu MiB arena is full; allocating %zu MiB outside it "
                        "(set SHARDC_CUDA_ARENA_MB to size it)\n", arena.cap >> 20, n >> 20);
        arena.warned = 1;
    }
    (*arena.taken)[p] = n;
    (*arena.outside)[p] = 1;
    arena.used += n;
    if (arena.used > arena.high) arena.high = arena.used;
    return p;
}

void srk_dev_free(void *p)
{
    if (!p || !arena.taken) return;
    auto t = arena.taken->find(p);
    if (t == arena.taken->end()) return;
    size_t n = t->second;
    arena.taken->erase(t);
    arena.used -= n;
    if (arena.outside->erase(p)) {
        cudaFree(p);
        return;
    }
    size_t off = (size_t)((char *)p - arena.base);
    auto nx = arena.free_blocks->lower_bound(off);
    if (nx != arena.free_blocks->end() && nx->first == off + n) { /* merge with the next block */
        n += nx->second;
        nx = arena.free_blocks->erase(nx);
    }
    if (nx != arena.free_blocks->begin()) { /* and with the previous one */
        auto pv = std::prev(nx);
        if (pv->first + pv->second == off) {
            pv->second += n;
            return;
        }
    }
    (*arena.free_blocks)[off] = n;
}

extern "C" sr_status sr_cuda_arena_reserve(size_t bytes)
{
    if (arena.free_blocks) return sr_seterr(SR_ERR_STATE, "the CUDA arena already exists (%zu MiB)", arena.cap >> 20);
    arena.reserve = bytes;
    return SR_OK;
}

extern "C" void sr_cuda_arena_stats(size_t *used, size_t *high, size_t *cap)
{
    if (used) *used = arena.used;
    if (high) *high = arena.high;
    if (cap) *cap = arena.cap;
}

extern "C" void *sr_cuda_stream(void) { return (void *)srk_ctx.stream; }

/* ---- the backend ------------------------------------------------------------------- */
static int dev_ready;

#define NO_DEVICE_MSG                                                                           \
    "no CUDA device: this program was built for NVIDIA GPUs (--backend cuda); rebuild with " \
    "--backend host to run on the CPU"

/* before anything else (MPI, NCCL): a program that needs a GPU on a machine
 * without one says so in one line (rank 0 only) and exits 1; --help and
 * --version still work */
extern "C" int sr_cuda_preflight(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--version")) return 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return 0;
    cudaGetLastError();
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("PMI_RANK");
    if (!rank) rank = getenv("SLURM_PROCID");
    if (!rank || atoi(rank) == 0) fprintf(stderr, "%s: error: " NO_DEVICE_MSG "\n", argc > 0 ? argv[0] : "shardc");
    return 1;
}

static sr_status cuda_init(int local_rank)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        cudaGetLastError();
        return sr_seterr(SR_ERR_STATE, NO_DEVICE_MSG);
    }
    int dev = (local_rank < 0 ? 0 : local_rank) % n;
    if ((e = cudaSetDevice(dev)) != cudaSuccess)
        return sr_seterr(SR_ERR_STATE, "cannot use CUDA device %d: %s", dev, cudaGetErrorString(e));
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        srk_ctx.num_sms = prop.multiProcessorCount;
        srk_ctx.cc_major = prop.major;
    }
    if (!srk_ctx.stream && (e = cudaStreamCreateWithFlags(&srk_ctx.stream, cudaStreamNonBlocking)) != cudaSuccess)
        return sr_seterr(SR_ERR_STATE, "cannot create a CUDA stream on device %d: %s", dev, cudaGetErrorString(e));
    const char *s = getenv("SHARDC_CUDA_SYNC");
    srk_ctx.sync_each = s && *s && strcmp(s, "0") != 0;
    dev_ready = 1;
    return SR_OK;
}

/* comm_to_host_async's stream, the event it waits for (re-recorded at each
 * copy: a wait takes the record current when it is queued) and the copies'
 * completion events, kept for reuse as a step issues the same copies again */
static cudaStream_t copy_stream;
static cudaEvent_t copy_after;
static std::vector<cudaEvent_t> *copy_events;

static void cuda_shutdown(void)
{
    if (!dev_ready) return;
    cudaStreamSynchronize(srk_ctx.stream);
    if (arena.outside)
        for (auto &kv : *arena.outside) cudaFree(kv.first);
    if (arena.base) cudaFree(arena.base);
    delete arena.free_blocks;
    delete arena.taken;
    delete arena.outside;
    memset(&arena, 0, sizeof arena);
    if (srk_ctx.stream) cudaStreamDestroy(srk_ctx.stream);
    if (copy_stream) {
        cudaStreamSynchronize(copy_stream);
        cudaStreamDestroy(copy_stream);
        copy_stream = NULL;
    }
    if (copy_after) cudaEventDestroy(copy_after);
    copy_after = NULL;
    if (copy_events)
        for (cudaEvent_t e : *copy_events) cudaEventDestroy(e);
    delete copy_events;
    copy_events = NULL;
    srk_ctx.stream = 0;
    srk_ctx.shadow = NULL;
    srk_ctx.params = NULL;
    srk_ctx.nparams = 0;
    dev_ready = 0;
}

static void *cuda_alloc(size_t bytes)
{
    void *p = srk_dev_alloc(bytes);
    if (p && !srk_check_cuda(cudaMemsetAsync(p, 0, bytes, srk_ctx.stream), "zeroing new memory")) return NULL;
    return p;
}

static void cuda_free(void *p)
{
    srk_stream_sync("freeing device memory"); /* nothing queued may still use it */
    srk_dev_free(p);
}

static void cuda_h2d(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return;
    srk_site(NULL, 0, "host to device copy");
    srk_check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, srk_ctx.stream), "cudaMemcpyAsync");
    /* the source may be reused by the caller as soon as we return */
    srk_stream_sync("a host to device copy");
    srk_params_written(dst, bytes);
}

static void cuda_d2h(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return;
    srk_site(NULL, 0, "device to host copy");
    srk_check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, srk_ctx.stream), "cudaMemcpyAsync");
    srk_stream_sync("a device to host copy");
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src) return;
    srk_site(NULL, 0, "device copy");
    srk_check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, srk_ctx.stream), "cudaMemcpyAsync");
    srk_params_written(dst, bytes);
}

static void cuda_zero(float *x, int64_t n)
{
    srk_site(NULL, 0, "zero");
    srk_zero(x, (long)n);
}

static double cuda_sumsq(const float *x, int64_t n)
{
    if (n <= 0) return 0.0;
    srk_site(NULL, 0, "gradient norm");
    int nb = srk_sumsq_blocks((long)n);
    double *part = (double *)srk_scratch(SRK_SCR_RED, sizeof(double) * (size_t)(nb + 1));
    if (!part) return NAN;
    SR_LAUNCH(sumsq_part_kernel, nb, SQ_THREADS, 0, srk_ctx.stream, part + 1, x, (long)n);
    SR_LAUNCH(sumsq_finish_kernel, 1, SQ_THREADS, 0, srk_ctx.stream, part, (const double *)(part + 1), nb);
    double r = NAN;
    if (srk_check_cuda(cudaMemcpyAsync(&r, part, sizeof r, cudaMemcpyDeviceToHost, srk_ctx.stream), "gradient norm"))
        srk_stream_sync("gradient norm");
    return srk_ctx.failed ? NAN : r;
}

static void cuda_scale(float *x, float s, int64_t n)
{
    srk_site(NULL, 0, "scale");
    srk_scale_fwd(x, x, s, (long)n);
    srk_params_written(x, sizeof(float) * (size_t)n);
}

static void cuda_add(float *y, const float *x, int64_t n)
{
    srk_site(NULL, 0, "add");
    srk_add_fwd(y, y, x, (long)n, (long)n);
}

static void cuda_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                       float eps, float wd, long t)
{
    // as sr_adamw_step: bias corrections and step size in double on the host
    if (n <= 0) return;
    if (t < 1) t = 1;
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = (float)(1.0 - (double)lr * (double)wd);
    srk_site(NULL, 0, "AdamW");
    SR_LAUNCH(adamw_kernel, srk_blocks(n, 256), 256, 0, srk_ctx.stream, p, g, m, v, (long)n, beta1, beta2, eps,
              step_size, bc2_sqrt, decay);
    srk_params_written(p, sizeof(float) * (size_t)n);
}

static void cuda_params_arrived(float *p, int64_t n)
{
    srk_site(NULL, 0, "bf16 copy of gathered parameters");
    srk_params_arrived(p, n);
}

/* the arena's high-water mark (with any allocation that fell outside it) */
static int64_t cuda_peak_bytes(void) { return (int64_t)arena.high; }

static sr_status cuda_sync(void)
{
    /* the collectives the stream waits for first, under their timeouts */
    if (dev_ready && sr_comm_settle_all() != SR_OK) return SR_ERR_COMM;
    if (!srk_ctx.failed && dev_ready) {
        cudaError_t e = cudaStreamSynchronize(srk_ctx.stream);
        if (e != cudaSuccess)
            srk_fail("%s (%s) in a kernel queued before %s:%d (%s); run with SHARDC_CUDA_SYNC=1 to name it",
                     cudaGetErrorString(e), cudaGetErrorName(e), srk_ctx.site_file ? srk_ctx.site_file : "?",
                     srk_ctx.site_line, srk_ctx.site_what ? srk_ctx.site_what : "");
    }
    if (srk_ctx.failed) return sr_seterr(SR_ERR_STATE, "CUDA: %s", srk_ctx.err);
    return SR_OK;
}

/* ---- what the comm layer needs (sr_comm_device) ---------------------------------------- */
static void *comm_stream(void) { return dev_ready ? (void *)srk_ctx.stream : NULL; }

/* every buffer the runtime hands the comm layer is in the arena or outside it
 * (tracked); anything else is host memory, or on a GPU asked of CUDA */
static int comm_on_device(const void *p)
{
    const char *c = (const char *)p;
    if (arena.base && c >= arena.base && c < arena.base + arena.cap) return 1;
    if (arena.outside && !arena.outside->empty()) {
        auto it = arena.outside->upper_bound((void *)p);
        if (it != arena.outside->begin()) {
            --it;
            auto t = arena.taken->find(it->first);
            if (t != arena.taken->end() && c < (const char *)it->first + t->second) return 1;
        }
    }
#ifndef SR_CUDA_EMULATION
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess)
        return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    cudaGetLastError();
#endif
    return 0;
}

static void *comm_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void comm_host_free(void *p) { cudaFreeHost(p); }

/* the copies run on the compute stream, so they come after the kernels that
 * wrote the buffer and before the ones that read the result; both wait on
 * the host: the staging buffer goes straight to MPI, or back to the pool */
static sr_status comm_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *what)
{
    if (srk_ctx.failed) return sr_seterr(SR_ERR_STATE, "CUDA: %s", srk_ctx.err);
    if (!bytes) return SR_OK;
    srk_site(NULL, 0, what);
    if (srk_check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, srk_ctx.stream), what))
        srk_check_cuda(cudaStreamSynchronize(srk_ctx.stream), what);
    return srk_ctx.failed ? sr_seterr(SR_ERR_STATE, "CUDA: %s", srk_ctx.err) : SR_OK;
}

static sr_status comm_to_host(void *dst, const void *src, size_t bytes)
{
    return comm_copy(dst, src, bytes, cudaMemcpyDeviceToHost, "staging a transfer's data for MPI");
}

static sr_status comm_to_device(void *dst, const void *src, size_t bytes)
{
    sr_status st = comm_copy(dst, src, bytes, cudaMemcpyHostToDevice, "a transfer's result from MPI");
    srk_params_written(dst, bytes); /* it may have been the parameters (ZeRO-1's all-gather) */
    return st;
}

/* the asynchronous staging copy (MPI on device memory, an async call): on a
 * stream of its own (copy_stream) that waits for the compute stream's work
 * so far, so the host goes on queueing kernels; the comm layer starts the
 * MPI transfer once the copy's event has fired */
static sr_status comm_to_host_async(void *dst, const void *src, size_t bytes, void **token)
{
    *token = NULL;
    if (srk_ctx.failed) return sr_seterr(SR_ERR_STATE, "CUDA: %s", srk_ctx.err);
    const char *what = "staging a transfer's data for MPI";
    srk_site(NULL, 0, what);
    if (!copy_events) copy_events = new std::vector<cudaEvent_t>();
    cudaEvent_t done = NULL;
    if (!copy_events->empty()) {
        done = copy_events->back();
        copy_events->pop_back();
    }
    int ok = (copy_stream || srk_check_cuda(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking), what)) &&
             (copy_after || srk_check_cuda(cudaEventCreateWithFlags(&copy_after, cudaEventDisableTiming), what)) &&
             (done || srk_check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what)) &&
             srk_check_cuda(cudaEventRecord(copy_after, srk_ctx.stream), what) &&
             srk_check_cuda(cudaStreamWaitEvent(copy_stream, copy_after, 0), what) &&
             srk_check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream), what) &&
             srk_check_cuda(cudaEventRecord(done, copy_stream), what);
    if (!ok) {
        if (done) cudaEventDestroy(done);
        return sr_seterr(SR_ERR_STATE, "CUDA: %s", srk_ctx.err);
    }
    *token = (void *)done;
    return SR_OK;
}

static int comm_copy_done(void *token)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)token);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    return e == cudaSuccess ? 1 : -1;
}

static sr_status comm_copy_wait(void *token)
{
    cudaEvent_t done = (cudaEvent_t)token;
    int ok = srk_check_cuda(cudaEventSynchronize(done), "staging a transfer's data for MPI");
    if (ok && copy_events) copy_events->push_back(done); /* for the next copy */
    else cudaEventDestroy(done);
    return ok ? SR_OK : sr_seterr(SR_ERR_STATE, "CUDA: %s", srk_ctx.err);
}

#ifdef SR_CUDA_EMULATION
/* the NCCL backend compiled against the emulator (emu/nccl_emu.cpp: NCCL over MPI) */
extern "C" const struct srcomm_ops srcomm_nccl_emu_ops;
#endif

static const sr_comm_device cuda_comm_device = {
    .stream = comm_stream,
    .on_device = comm_on_device,
    .host_alloc = comm_host_alloc,
    .host_free = comm_host_free,
    .to_host = comm_to_host,
    .to_device = comm_to_device,
    .to_host_async = comm_to_host_async,
    .copy_done = comm_copy_done,
    .copy_wait = comm_copy_wait,
#ifdef SR_CUDA_EMULATION
    .nccl = &srcomm_nccl_emu_ops,
#else
    .nccl = NULL,
#endif
};

/* designated initializers (C++20): fields added to sr_backend stay zero */
/* the attention trials' verdicts, and what SHARDC_CUDA_GEMM=tune changed */
static const char *cuda_note(void)
{
    static char note[sizeof srk_ctx.attn_note + 320];
    if (!srk_ctx.gemm_tune) return srk_ctx.attn_note;
#ifdef SR_CUDA_EMULATION
    snprintf(note, sizeof note, "%s%sGEMMs (SHARDC_CUDA_GEMM=tune): nothing to tune on the emulator (its GEMM is the "
             "host BLAS, one algorithm)", srk_ctx.attn_note, srk_ctx.attn_note[0] ? "\n" : "");
#else
    snprintf(note, sizeof note,
             "%s%sGEMMs (SHARDC_CUDA_GEMM=tune): %ld problems timed on their first call, %ld on another algorithm "
             "than cuBLASLt's first (%.3f ms a call faster in all)%s",
             srk_ctx.attn_note, srk_ctx.attn_note[0] ? "\n" : "", srk_ctx.gemm_tuned, srk_ctx.gemm_changed,
             srk_ctx.gemm_saved_ms, srk_ctx.gemm_untried ? "; some not timed (no room for a trial's output)" : "");
#endif
    return note;
}

extern "C" const sr_backend sr_backend_cuda = {
    .name = "cuda",
    .comm = SR_COMM_NCCL, /* emulated: the emulator's NCCL over MPI */
    .comms = 1u << SR_COMM_MPI | 1u << SR_COMM_NCCL,
    .comm_why = NULL,
    .device = &cuda_comm_device,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .h2d = cuda_h2d,
    .d2h = cuda_d2h,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sumsq = cuda_sumsq,
    .scale = cuda_scale,
    .add = cuda_add,
    .adamw = cuda_adamw,
    .sync = cuda_sync,
    .peak_bytes = cuda_peak_bytes,
    .note = cuda_note,
    .params_arrived = cuda_params_arrived,
};
