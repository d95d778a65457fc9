/* srk_common.cuh: what every CUDA kernel file of libshardrt's CUDA backend
 * shares: the CUDA headers (or the CPU emulator), the launch macro, element
 * types and conversions, reductions, and the process-wide context (stream,
 * precision, the first error, scratch memory, the bf16 parameter shadow).
 *
 * Kernel wrappers (srk_*) mirror the host kernels of shardrt.h operand for
 * operand, so ops.def's CUDA templates read like the host ones. They are
 * templates over the element type of each tensor operand: a program built
 * for bf16 passes __nv_bfloat16 activations and float parameters, one built
 * for fp32 passes float everywhere, and the compiler picks the instance from
 * the pointer types of the generated call. Backward wrappers ACCUMULATE into
 * their gradient outputs and skip NULL ones, exactly as the host kernels do.
 * All wrappers run on srk_ctx.stream and return at once.
 */
#ifndef SRK_COMMON_CUH
#define SRK_COMMON_CUH

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#define SR_EXTERN_SHARED(type, name) extern __shared__ __align__(128) type name[]
#else
#include "emu/cuda_emu.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include "shardrt.h"

typedef __nv_bfloat16 bf16;

/* ---- the process-wide context (context.cu) -------------------------------- */
enum srk_dtype { SRK_F32 = 0, SRK_BF16 = 1 };

/* scratch buffers, one of each, kept between calls and grown when needed */
enum srk_scratch_id {
    SRK_SCR_PART = 0, /* partial column sums (rows-chunks x columns) */
    SRK_SCR_PART2,    /* second set of partial sums (layernorm db) */
    SRK_SCR_ROWS,     /* one float per row (cross-entropy losses) */
    SRK_SCR_RED,      /* partials of whole-tensor reductions (double) */
    SRK_SCR_CONV_A,   /* operand conversions for the matmuls */
    SRK_SCR_CONV_B,
    SRK_SCR_CONV_C,
    SRK_SCR_LT_WS,    /* cuBLASLt workspace */
    SRK_SCR_TP,       /* tensor-parallel staging (reduce-scatter backward) */
    SRK_SCR_HOST,     /* device-side scalars read back by the host */
    SRK_SCR_CUDNN_WS, /* cuDNN attention's workspace */
    SRK_SCR_ATTN_DQ,  /* cuDNN attention's gradients where they cannot go to their tensors */
    SRK_SCR_ATTN_DK,
    SRK_SCR_ATTN_DV,
    SRK_SCR_BGRAD,    /* a bias gradient from a GEMM's epilogue, before it is added */
    SRK_SCR_RS_SEND,  /* a sequence-parallel reduce-scatter in flight during a weight gradient's */
    SRK_SCR_RS_RECV,  /* GEMM (srk_matmul_bias_bwd_rs): its own, not the GEMMs' conversions' */
    SRK_SCR_EMB_KEYS, /* the embedding backward's sorted (row, position) keys */
    SRK_SCR__COUNT
};

/* causal attention kernels in bf16 programs (fp32 programs always take SIMT); AUTO: a trial on
 * the device picks one of the others per head layout (srk_attention_pick.cuh) */
enum { SRK_ATTN_WMMA = 0, SRK_ATTN_SIMT, SRK_ATTN_MMA, SRK_ATTN_CUDNN, SRK_ATTN_AUTO };
enum { SRK_ATTN_PICKS = 8 }; /* head layouts whose trial is kept */

typedef struct srk_context {
    int bf16;               /* 1: bf16 compute (the program's precision) */
    cudaStream_t stream;    /* compute stream */
    int sync_each;          /* SHARDC_CUDA_SYNC=1: wait after every launch */
    int profile;            /* SHARDC_CUDA_PROFILE=1: time every generated call (profile.cu) */
    int num_sms;
    int cc_major;           /* compute capability of the device (tensor-core paths need 8) */
    /* the generated call being run, for error messages */
    const char *site_file;
    int site_line;
    const char *site_what;
    /* the first error; later work is skipped */
    int failed;
    char err[640];
    int quiet;               /* errors recorded, not printed (a path the attention trial tries) */
    /* the parameter arena and its bf16 shadow (matmul weights in bf16 mode) */
    const float *params;
    int64_t nparams;
    __nv_bfloat16 *shadow;
    uint64_t param_version;  /* bumped by everything that writes parameters */
    uint64_t shadow_version; /* the version the shadow was made from */
    uint64_t shadow_step;
    int attn_mode;           /* SRK_ATTN_*: SHARDC_CUDA_ATTN, read by srk_configure */
    struct {
        int C, NH, L, mode;
    } attn_pick[SRK_ATTN_PICKS]; /* under SRK_ATTN_AUTO: each head layout's trial's choice */
    int attn_picks;
    char attn_note[1024];    /* the trials' verdicts, a line each (sr_backend.note) */
    int no_tp_overlap;       /* SHARDC_CUDA_TP_OVERLAP=0: a column-parallel input gradient's all-reduce
                              * (or reduce-scatter) after its matmul's weight gradient, not during it */
    struct {                 /* the reduce-scatter srk_matmul_bias_bwd_rs left in flight */
        const void *of;      /* the input gradient it sums (the walk's next step names it) */
        const void *sum;     /* where this rank's block arrives */
        struct sr_req *q;    /* NULL: no collective to wait for (tp = 1) */
    } rs_pending;
    int no_bgrad;            /* SHARDC_CUDA_BGRAD=0: bias gradients by their own column sums, not in the
                              * weight gradient's GEMM (srk_wgrad; for comparisons) */
    int gemm_tune;           /* SHARDC_CUDA_GEMM=tune: each GEMM problem's cuBLASLt candidates timed at its
                              * first call, the fastest kept (gemm.cu); 0: the heuristic's first */
    int tp;                  /* the program's tensor-parallel size (srk_configure) */
    long gemm_tuned;         /* problems tuned, of those another algorithm than the heuristic's first, */
    long gemm_changed;       /* and those left untried (no room for a trial output) */
    long gemm_untried;
    double gemm_saved_ms;    /* the changed problems' summed gain per call, ms */
    long attn_tc_launches;   /* tensor-core attention kernels launched (tests) */
    long attn_mma_launches;  /* of those, the mma.sync ones */
    long attn_cudnn_calls;   /* attention forwards and backwards run by cuDNN */
} srk_context;

extern srk_context srk_ctx;

/* records where the generated code is (its __FILE__:__LINE__ and what) */
static inline void srk_site(const char *file, int line, const char *what)
{
    srk_ctx.site_file = file;
    srk_ctx.site_line = line;
    srk_ctx.site_what = what;
}
/* generated code: SRK_AT("model.model:12 layernorm", srk_layernorm_fwd(...)); */
#define SRK_AT(what, ...)                          \
    do {                                           \
        srk_site(__FILE__, __LINE__, what);        \
        if (!srk_ctx.failed) {                     \
            if (srk_ctx.profile) srk_prof_begin(what); \
            __VA_ARGS__;                           \
            if (srk_ctx.profile) srk_prof_end();   \
        }                                          \
    } while (0)
/* the profiler (profile.cu): events around each SRK_AT call; a step begins
 * (the first one is left out of the report, printed on stderr at exit) */
void srk_prof_begin(const char *what);
void srk_prof_end(void);
void srk_prof_step(uint64_t step);

/* after a launch: a configuration error now, an execution error with
 * SHARDC_CUDA_SYNC=1; both name the kernel and the generated line */
void srk_after_launch(const char *kernel);
/* records an error (the first one is kept and printed) */
void srk_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* checks a runtime call; false (and the error recorded) when it failed */
int srk_check_cuda(cudaError_t e, const char *what);
/* the host waits for the compute stream (after checking, under their
 * timeouts, the collectives it waits for); false on an error */
int srk_stream_sync(const char *what);
void *srk_scratch(int id, size_t bytes);
/* device memory from the arena (backend.cu); NULL when exhausted */
void *srk_dev_alloc(size_t bytes);
void srk_dev_free(void *p);
/* the bf16 copy of a float tensor: the shadow when p is inside the parameter
 * arena (refreshed per step), else a conversion into scratch buffer id */
const bf16 *srk_bf16_view(const float *p, int64_t n, int scratch_id);
/* the generated forward/backward tell the context where the parameters are */
void srk_bind_params(const float *params, int64_t n, uint64_t step);
/* device memory [p, p + bytes) was written: the shadow is stale where that is parameters */
void srk_params_written(const void *p, size_t bytes);
/* parameters p[0..n) were written by the comm layer, the stream ordered
 * after it (ZeRO-1's gather during the forward): their part of the shadow
 * converted again */
void srk_params_arrived(const float *p, int64_t n);
/* program set-up (generated main): precision, tensor-parallel size, and the
 * SHARDC_CUDA_* settings; nonzero (the error printed) when one of those is bad */
int srk_configure(int use_bf16, int tp);

/* milliseconds per call of run (a callable that queues work on srk_ctx.stream and returns false
 * when it could not), over reps calls between two events; -1 when a call or the timing failed.
 * what: the timing's failures are the program's errors, so named; NULL: not errors (a candidate
 * the library refuses) */
template <class F>
static inline double srk_time_ms(F run, int reps, const char *what)
{
    cudaEvent_t e0, e1;
    auto fine = [&](cudaError_t e) { return what ? srk_check_cuda(e, what) != 0 : e == cudaSuccess; };
    if (!fine(cudaEventCreate(&e0))) return -1.0;
    if (!fine(cudaEventCreate(&e1))) return cudaEventDestroy(e0), -1.0;
    bool ok = true;
    cudaEventRecord(e0, srk_ctx.stream);
    for (int i = 0; i < reps && ok; i++) ok = run();
    cudaEventRecord(e1, srk_ctx.stream);
    float ms = -1.0f;
    if (ok && fine(cudaEventSynchronize(e1)) && !(what && srk_ctx.failed)) cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms < 0.0f ? -1.0 : (double)ms / reps;
}

/* SHARDC_CUDA_GEMM=tune's choice among n candidates timed ms[0..n) (ms < 0: the candidate
 * failed; 0 is the heuristic's first): the fastest, where it beats candidate 0 by more than
 * `margin` (a fraction), so that timing noise does not trade the heuristic's pick for an equal
 * one; 0 when nothing does (or nothing ran) */
static inline int srk_tune_pick(const float *ms, int n, float margin)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (ms[i] > 0.0f && (best < 0 || ms[i] < ms[best])) best = i;
    if (best <= 0) return 0;
    return ms[0] > 0.0f && ms[best] >= ms[0] * (1.0f - margin) ? 0 : best;
}
/* a device scalar to the host / from the host */
float srk_get_scalar(const float *dev);
void srk_set_scalar(float *dev, float v);
/* float <-> bf16 conversion kernels (n elements) */
void srk_f32_to_bf16(bf16 *out, const float *x, int64_t n);
void srk_bf16_to_f32(float *out, const bf16 *x, int64_t n);

/* unrolled under nvcc (register arrays indexed by the loop stay in registers) */
#ifdef __CUDACC__
#define SRK_UNROLL _Pragma("unroll")
#else
#define SRK_UNROLL
#endif

#ifdef __CUDACC__
#define SR_LAUNCH(kern, grid, block, smem, stream, ...)                      \
    do {                                                                     \
        kern<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__);            \
        srk_after_launch(#kern);                                             \
    } while (0)
#define SRK_SET_SMEM(kern, bytes) srk_check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes)), #kern)
#else
#define SR_LAUNCH(kern, grid, block, smem, stream, ...)                                     \
    do {                                                                                    \
        ::emu::launch(#kern, kern, dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__); \
        srk_after_launch(#kern);                                                            \
    } while (0)
#define SRK_SET_SMEM(kern, bytes) srk_check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes)), #kern)
#endif

/* ---- element types ------------------------------------------------------------- */
template <class T>
struct srk_dt;
template <>
struct srk_dt<float> {
    static constexpr int value = SRK_F32;
};
template <>
struct srk_dt<bf16> {
    static constexpr int value = SRK_BF16;
};

__host__ __device__ __forceinline__ float srk_ld(float x) { return x; }
__host__ __device__ __forceinline__ float srk_ld(bf16 x) { return __bfloat162float(x); }
template <class T>
__host__ __device__ __forceinline__ T srk_to(float v);
template <>
__host__ __device__ __forceinline__ float srk_to<float>(float v) { return v; }
template <>
__host__ __device__ __forceinline__ bf16 srk_to<bf16>(float v) { return __float2bfloat16(v); }

/* p[i] += v in p's type */
template <class T>
__device__ __forceinline__ void srk_acc(T *p, float v)
{
    *p = srk_to<T>(srk_ld(*p) + v);
}
/* fresh: *p = v without reading p (a gradient whose clearing was left out); else srk_acc */
template <class T>
__device__ __forceinline__ void srk_put(T *p, float v, int fresh)
{
    *p = srk_to<T>(fresh ? v : srk_ld(*p) + v);
}

/* ---- reductions ----------------------------------------------------------------- */
__device__ __forceinline__ float srk_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double srk_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float srk_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* whole-block sum / max (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. Fixed order: the result depends on the data only. */
__device__ __forceinline__ float srk_block_sum(float v)
{
    __shared__ float red[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = srk_warp_sum(v);
    __syncthreads(); /* red[] may still be read by a previous call */
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return srk_warp_sum(v);
}
__device__ __forceinline__ double srk_block_sum_d(double v)
{
    __shared__ double redd[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = srk_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) redd[w] = v;
    __syncthreads();
    v = lane < nw ? redd[lane] : 0.0;
    return srk_warp_sum_d(v);
}
__device__ __forceinline__ float srk_block_max(float v)
{
    __shared__ float redm[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = srk_warp_max(v);
    __syncthreads();
    if (lane == 0) redm[w] = v;
    __syncthreads();
    v = lane < nw ? redm[lane] : -INFINITY;
    return srk_warp_max(v);
}

/* blocks for n elements at `threads` per block, grid-stride beyond the cap */
static inline unsigned srk_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(srk_ctx.num_sms > 0 ? srk_ctx.num_sms : 8) * 32;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* dims of a transposed tensor, by value (generated code: srk_dims6{{a, b}}) */
struct srk_dims6 {
    long d[6];
};

#endif /* SRK_COMMON_CUH */
