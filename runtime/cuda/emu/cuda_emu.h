/* cuda_emu.h: the CUDA execution model on the CPU, for testing kernels
 * without a GPU (what nvcc's old -deviceemu did).
 *
 * The same .cu kernel sources compile as C++20 against this header:
 *  - every thread of a block is a cooperative fiber with its own small stack,
 *    so __syncthreads() and the warp functions (__shfl*_sync, __ballot_sync,
 *    __all_sync, __any_sync, __syncwarp) block the calling fiber until the
 *    other threads of its block (or warp) get there;
 *  - __shared__ variables are per block (static thread_local: one block runs
 *    at a time on an OS thread); dynamic shared memory through
 *    SR_EXTERN_SHARED(type, name), which is `extern __shared__ type name[]`
 *    under nvcc;
 *  - atomics are real atomics (blocks may run on several OS threads);
 *  - __nv_bfloat16 is a 16-bit struct with round-to-nearest-even conversions,
 *    bit-compatible with cuda_bf16.h;
 *  - nvcuda::wmma fragments hold the whole tile in every lane (the real
 *    per-lane layout is unspecified, so code that is correct on the GPU only
 *    uses load/store/fill/mma and uniform element-wise ops, and those behave
 *    the same here); mma accumulates in float, like the tensor cores;
 *  - device memory is host memory; streams run their work at once, in order.
 *
 * Launches go through SR_LAUNCH (srk_common.cuh), which is <<<>>> under nvcc
 * and emu::launch here. A launch checks the configuration like the driver
 * does (threads per block, grid limits, dynamic shared memory above 48 KiB
 * without cudaFuncSetAttribute) and reports errors through cudaGetLastError.
 * A block whose threads do not all reach a barrier is a deadlock, reported
 * with the kernel's name (on a GPU it would hang or corrupt silently); lanes
 * of a warp at different warp operations, or threads at different
 * __syncthreads, fail the launch too (cuda_emu.cpp, "Warp calls").
 */
#ifndef SR_CUDA_EMU_H
#define SR_CUDA_EMU_H

#ifdef __CUDACC__
#error "cuda_emu.h is for host compilers; nvcc uses the real CUDA headers"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>

#define SR_CUDA_EMULATION 1

/* ---- qualifiers ---------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static thread_local
#define __constant__ static
#define SR_EXTERN_SHARED(type, name) type *name = (type *)::emu::dynamic_smem()

/* ---- vector types and indices --------------------------------------------- */
struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
struct int2 {
    int x, y;
};
struct int4 {
    int x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

/* ---- runtime API types (shared with C sources: c/cuda_runtime.h) ----------- */
#include "c/cuda_runtime.h"
typedef cudaError_t cudaError;
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int multiProcessorCount;
    int major, minor;
    int warpSize;
    int maxThreadsPerBlock;
};

/* ---- the emulator's engine (cuda_emu.cpp) ----------------------------------- */
namespace emu {

/* a barrier or warp operation as a thread calls it: its name, where in the kernel's source
 * (the caller's file and line, through EMU_HERE), and for a warp operation its mask (whole:
 * the operation needs all 32 lanes of the warp, as mma.sync and wmma do). At each barrier's
 * release the emulator checks the calls against each other (cuda_emu.cpp, "Warp calls") */
struct Site {
    const char *what;
    const char *file;
    int line;
    unsigned mask;
    bool whole;
};
/* the caller's position as trailing default arguments of an emulated intrinsic */
#define EMU_HERE const char *emu_file = __builtin_FILE(), int emu_line = __builtin_LINE()

struct Thread {
    void *sp;          /* saved stack pointer (or ucontext) while switched out */
    void *ctx;         /* ucontext_t on hosts without the fast switch */
    uint3 idx;         /* threadIdx */
    int lin;           /* linear index in the block */
    int state;         /* RUNNABLE, WAIT_BLOCK, WAIT_WARP, DONE */
    unsigned xphase;   /* warp exchanges so far (which of the two slot sets the next one uses) */
    unsigned bphase;   /* block barriers and warp barriers passed (ThreadSanitizer's */
    unsigned wphase;   /* order objects alternate with them: cuda_emu.cpp, "ThreadSanitizer") */
    void *tsan_fiber;  /* this thread as a ThreadSanitizer fiber (EMU_TSAN builds) */
    Site at;           /* the barrier or warp operation it waits at (or last waited at) */
    char *stack;
    size_t stack_size;
    void *asan_fake;
};

struct Block;

/* the calling fiber and its block, per OS thread */
Thread *self();
Block *block();
void *dynamic_smem();
/* the resume order of threads and blocks (EMU_SCHEDULE at start-up; tests
 * switch it): "forward", "reverse" or "shuffle[:SEED]"; false if unknown */
bool set_schedule(const char *order);
const char *schedule_name();

/* Streams. Kernels, copies and memsets run when they are issued, so most
 * stream work is finished at once; what is not is asynchronous work that
 * another part of the emulator queues (the emulated NCCL's collectives):
 * each stream keeps a queue of such work and of waits on events
 * (cudaStreamWaitEvent), run in order, one item at a time, the next one
 * started when the one before completes. A kernel, copy or memset issued
 * on a stream first waits for that stream's queue; on the legacy default
 * stream (0), for every stream created without cudaStreamNonBlocking.
 * cudaEventQuery is cudaErrorNotReady while work queued before the
 * event's record is unfinished. A wait longer than EMU_HANG_S (default
 * 300 s) is reported as an error (a GPU would hang). */
struct StreamWork {
    /* something is ordered after it (a stream waiting on an event recorded
     * after it, an event query or synchronization, a stream drain, the next
     * item of its stream): under the race check (below) its results land in
     * its buffers only then, the latest a GPU could deliver them */
    bool wanted = false;
    bool raced = false; /* a race of it was reported (once is enough) */
    virtual ~StreamWork() {}
    virtual void start() = 0; /* at the head of its stream */
    virtual bool test() = 0;  /* true once complete */
    /* started and not complete: a description of a buffer of it that device
     * work of another stream changed, or "" */
    virtual std::string race() { return std::string(); }
};
/* Race check (EMU_RACECHECK, default on; 0 turns it off): work in flight on
 * one stream (a collective) is unordered with the device work that other
 * streams run meanwhile, as on a GPU. The work fills its outputs with 0xff
 * (NaN in fp32 and bf16) while in flight and delivers its results only when
 * something is ordered after it, so a kernel reading a result too early
 * reads NaN; after each kernel, copy, memset and emulated GEMM of one stream,
 * device_work_ran asks every other stream's work in flight whether its
 * inputs or outputs changed, and a change is an error naming both. */
bool racecheck();
/* false (and the error recorded) when `what`, just run on s, raced */
bool device_work_ran(cudaStream_t s, const char *what);
/* takes ownership of w */
void stream_enqueue(cudaStream_t s, StreamWork *w);
/* advances every stream's queue without blocking */
void stream_progress();
/* waits for everything queued on s so far; false (and a sticky error) after EMU_HANG_S */
bool stream_drain(cudaStream_t s, const char *what);
/* a kernel launched on a stream created with cudaStreamNonBlocking whose
 * queue is not empty (it waits for a collective) is queued behind it, as on
 * a GPU: the host goes on, and finds out at its next synchronization */
bool stream_defers(cudaStream_t s);
void stream_enqueue_fn(cudaStream_t s, std::function<void()> run);

/* constinit: no dynamic initialization, so an access is a plain TLS load, not a call of the
 * variable's init wrapper (which GCC 12's -fsanitize=null also misreports as a null access) */
extern constinit thread_local uint3 tls_block_idx;
extern constinit thread_local dim3 tls_block_dim;
extern constinit thread_local dim3 tls_grid_dim;

/* barriers over the block and over the calling thread's warp, called at s */
void sync_block(const char *file, int line);
void sync_warp(const Site &s);
/* warp exchange: every lane of the warp puts 8 bytes, then reads lane `src`'s
 * (all bits set, the poison, when lane src did not take part or s.mask leaves
 * it out: a GPU returns an undefined value; its own when src is out of 0..31) */
uint64_t warp_exchange(uint64_t mine, int src, const Site &s);
/* every lane puts n <= EMU_GATHER_MAX words; all[32 * n] gets every lane's
 * (lane i's at all + i * n; zeros for lanes that are not live). One warp
 * barrier, where n shuffles would take n: the emulation of mma.sync's and
 * ldmatrix's fragment exchanges (srk_attention_mma.cuh) */
enum { EMU_GATHER_MAX = 8 };
void warp_gather(uint32_t *all, const uint32_t *mine, int n, const Site &s);
/* bit i: lane i of the warp took part and passed pred != 0; *took (if not null): the lanes
 * that took part (those that had not exited) */
unsigned warp_ballot(int pred, const Site &s, unsigned *took = nullptr);
/* cp.async (srk_cp_async, sm_80): the calling thread's copy of `bytes`
 * from global memory to shared memory, queued; commit closes the thread's
 * open group; wait(n) lands every group but the n newest (the copies run
 * then, in order). A GPU may land a copy at any time up to the wait, so
 * the emulator lands it as late as allowed: a kernel that reads its shared
 * memory before waiting (or without the barrier after other threads'
 * waits) reads what was there before, which the tests see. Copies still
 * queued when the thread ends land then. */
void cp_async(void *dst, const void *src, int bytes);
void cp_async_commit();
void cp_async_wait(int n);
unsigned warp_active_mask();
int lane_id();
/* a call with an argument CUDA leaves undefined (why: which, and what is allowed): the
 * launch fails naming the call, as a wrong warp call does */
void bad_call(const Site &s, const char *why);
/* a shuffle's width: a power of two from 1 to 32 */
inline void check_width(int width, const Site &s)
{
    if (width < 1 || width > 32 || (width & (width - 1))) {
        char why[96];
        snprintf(why, sizeof why, "width %d (a power of two from 1 to 32)", width);
        bad_call(s, why);
    }
}

typedef void (*body_fn)(void *);
/* runs a kernel body: grid x block threads; returns cudaSuccess or the error */
cudaError_t run_grid(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem, body_fn fn, void *arg);
/* the launch configuration checks run_grid starts with (the error recorded) */
cudaError_t check_launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem);
void set_last_error(cudaError_t e, const char *detail);
/* the detail of the last error reported with one (tests read what it names) */
std::string last_error_detail();

template <class F>
void call_body(void *p)
{
    (*static_cast<F *>(p))();
}

/* launch kernel k: each thread calls k(args...) with its own copies of the
 * arguments converted to k's parameter types, as a real launch does */
template <class... KArgs, class... Args>
cudaError_t launch(const char *name, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args &&...args)
{
    static_assert(sizeof...(KArgs) == sizeof...(Args), "kernel launched with the wrong number of arguments");
    if (stream_defers(s)) {
        cudaError_t e = check_launch(name, (const void *)k, grid, block, smem);
        if (e != cudaSuccess) return e;
        /* the arguments as the kernel takes them, copied now (a launch copies them) */
        std::tuple<std::decay_t<KArgs>...> t(static_cast<KArgs>(args)...);
        stream_enqueue_fn(s, [=]() {
            auto body = [&]() { std::apply(k, t); };
            if (run_grid(name, (const void *)k, grid, block, smem, &call_body<decltype(body)>, &body) == cudaSuccess)
                device_work_ran(s, name);
        });
        return cudaSuccess;
    }
    if (!stream_drain(s, name)) return cudaErrorLaunchFailure;
    auto body = [&]() { k(static_cast<KArgs>(args)...); };
    cudaError_t e = run_grid(name, (const void *)k, grid, block, smem, &call_body<decltype(body)>, &body);
    if (e == cudaSuccess && !device_work_ran(s, name)) return cudaErrorLaunchFailure;
    return e;
}

} /* namespace emu */

#define threadIdx (::emu::self()->idx)
#define blockIdx (::emu::tls_block_idx)
#define blockDim (::emu::tls_block_dim)
#define gridDim (::emu::tls_grid_dim)
static constexpr int warpSize = 32;

inline void __syncthreads(EMU_HERE) { emu::sync_block(emu_file, emu_line); }
inline int __syncthreads_or(int p, EMU_HERE)
{
    /* the block-wide OR through shared state: barriers around a flag */
    static thread_local int flag;
    emu::sync_block(emu_file, emu_line);
    if (emu::self()->lin == 0) flag = 0;
    emu::sync_block(emu_file, emu_line);
    if (p) flag = 1;
    emu::sync_block(emu_file, emu_line);
    int r = flag;
    emu::sync_block(emu_file, emu_line);
    return r;
}
inline void __syncwarp(unsigned mask = 0xffffffffu, EMU_HERE)
{
    emu::sync_warp(emu::Site{"__syncwarp", emu_file, emu_line, mask, false});
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __trap() { abort(); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ---- warp shuffles and votes ------------------------------------------------ */
namespace emu {
template <class T>
inline T shfl_from(T v, int src, const Site &s)
{
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    uint64_t r = warp_exchange(b, src, s);
    T out;
    std::memcpy(&out, &r, sizeof(T));
    return out;
}
} /* namespace emu */

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, EMU_HERE)
{
    const emu::Site s{"__shfl_sync", emu_file, emu_line, mask, false};
    emu::check_width(width, s);
    int lane = emu::lane_id();
    return emu::shfl_from(v, (lane & ~(width - 1)) + (src & (width - 1)), s);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, EMU_HERE)
{
    const emu::Site s{"__shfl_down_sync", emu_file, emu_line, mask, false};
    emu::check_width(width, s);
    int lane = emu::lane_id();
    int src = (lane % width) + (int)delta < width ? lane + (int)delta : lane;
    return emu::shfl_from(v, src, s);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, EMU_HERE)
{
    const emu::Site s{"__shfl_up_sync", emu_file, emu_line, mask, false};
    emu::check_width(width, s);
    int lane = emu::lane_id();
    int src = (lane % width) >= (int)delta ? lane - (int)delta : lane;
    return emu::shfl_from(v, src, s);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, EMU_HERE)
{
    const emu::Site s{"__shfl_xor_sync", emu_file, emu_line, mask, false};
    emu::check_width(width, s);
    int lane = emu::lane_id();
    int src = lane ^ lane_mask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
    return emu::shfl_from(v, src, s);
}
inline unsigned __ballot_sync(unsigned mask, int pred, EMU_HERE)
{
    return emu::warp_ballot(pred, emu::Site{"__ballot_sync", emu_file, emu_line, mask, false}) & mask;
}
/* over the lanes of mask that have not exited */
inline int __all_sync(unsigned mask, int pred, EMU_HERE)
{
    unsigned took = 0;
    unsigned yes = emu::warp_ballot(pred, emu::Site{"__all_sync", emu_file, emu_line, mask, false}, &took);
    return (yes & mask) == (took & mask);
}
inline int __any_sync(unsigned mask, int pred, EMU_HERE)
{
    return (emu::warp_ballot(pred, emu::Site{"__any_sync", emu_file, emu_line, mask, false}) & mask) != 0;
}
inline unsigned __activemask() { return emu::warp_active_mask(); }

/* ---- atomics (real ones: blocks may run on several OS threads) --------------- */
template <class T>
inline T atomicAdd(T *p, T v)
{
    if constexpr (std::is_integral<T>::value) {
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    } else {
        T old;
        __atomic_load(p, &old, __ATOMIC_RELAXED);
        T next = (T)(old + v);
        while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) next = (T)(old + v);
        return old;
    }
}
template <class T>
inline T atomicMax(T *p, T v)
{
    T old;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange(p, &old, &v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class T>
inline T atomicMin(T *p, T v)
{
    T old;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange(p, &old, &v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class T>
inline T atomicCAS(T *p, T cmp, T v)
{
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
template <class T>
inline T atomicExch(T *p, T v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
}

/* ---- math intrinsics -------------------------------------------------------------- */
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline int __float_as_int(float f)
{
    int i;
    std::memcpy(&i, &f, 4);
    return i;
}
inline unsigned __float_as_uint(float f)
{
    unsigned i;
    std::memcpy(&i, &f, 4);
    return i;
}
inline float __int_as_float(int i)
{
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline float __uint_as_float(unsigned i)
{
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
template <class T>
inline T __ldg(const T *p)
{
    return *p;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

/* ---- bfloat16 -------------------------------------------------------------------- */
struct __nv_bfloat16 {
    unsigned short __x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;

/* round to nearest, ties to even; NaN stays a (quiet) NaN */
inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.__x = (unsigned short)((u >> 16) | 0x0040u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.__x = (unsigned short)(u >> 16);
    return r;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }

/* ---- tensor cores: nvcuda::wmma, whole tiles in every lane --------------------------- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}

template <class Use, int M, int N, int K>
struct tile_dims;
template <int M, int N, int K>
struct tile_dims<matrix_a, M, N, K> {
    enum { rows = M, cols = K };
};
template <int M, int N, int K>
struct tile_dims<matrix_b, M, N, K> {
    enum { rows = K, cols = N };
};
template <int M, int N, int K>
struct tile_dims<accumulator, M, N, K> {
    enum { rows = M, cols = N };
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    enum { rows = tile_dims<Use, M, N, K>::rows, cols = tile_dims<Use, M, N, K>::cols };
    enum { num_elements = rows * cols };
    T x[num_elements]; /* logical row-major tile */
};

inline float wmma_f(float v) { return v; }
inline float wmma_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
inline T wmma_to(float v);
template <>
inline float wmma_to<float>(float v) { return v; }
template <>
inline __nv_bfloat16 wmma_to<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v)
{
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}
template <class Use, int M, int N, int K, class T, class L, class S>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, S v)
{
    for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma_to<T>((float)v);
}

/* the hardware's rules: 256-bit aligned pointers, ldm a multiple of 16 bytes */
template <class P>
inline void wmma_check(const P *p, unsigned ldm, const char *what)
{
    if (((uintptr_t)p & 31u) || (ldm * sizeof(P)) % 16u) {
        fprintf(stderr, "cuda_emu: %s: pointer %p must be 32-byte aligned and ldm %u a multiple of 16 bytes\n", what,
                (const void *)p, ldm);
        abort();
    }
}

/* a and b fragments carry their layout in the type */
template <class Use, int M, int N, int K, class T, class L, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm, EMU_HERE)
{
    typedef fragment<Use, M, N, K, T, L> Frag;
    wmma_check(p, ldm, "wmma::load_matrix_sync");
    const emu::Site s{"wmma::load_matrix_sync", emu_file, emu_line, 0xffffffffu, true};
    emu::sync_warp(s);
    for (int r = 0; r < Frag::rows; r++)
        for (int c = 0; c < Frag::cols; c++)
            f.x[r * Frag::cols + c] = std::is_same<L, col_major>::value ? (T)p[(size_t)c * ldm + r]
                                                                         : (T)p[(size_t)r * ldm + c];
    emu::sync_warp(s);
}
/* accumulators take the layout as an argument */
template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T, void> &f, const P *p, unsigned ldm, layout_t l,
                             EMU_HERE)
{
    wmma_check(p, ldm, "wmma::load_matrix_sync");
    const emu::Site s{"wmma::load_matrix_sync", emu_file, emu_line, 0xffffffffu, true};
    emu::sync_warp(s);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    emu::sync_warp(s);
}
/* one lane writes (the others would write the same values) */
template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P *p, const fragment<accumulator, M, N, K, T, void> &f, unsigned ldm, layout_t l,
                              EMU_HERE)
{
    wmma_check(p, ldm, "wmma::store_matrix_sync");
    const emu::Site s{"wmma::store_matrix_sync", emu_file, emu_line, 0xffffffffu, true};
    emu::sync_warp(s);
    if (emu::lane_id() == __builtin_ctz(emu::warp_active_mask()))
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++) {
                if (l == mem_col_major) p[(size_t)c * ldm + r] = f.x[r * N + c];
                else p[(size_t)r * ldm + c] = f.x[r * N + c];
            }
    emu::sync_warp(s);
}
/* d = a b + c, products of the (bf16) inputs accumulated in float; a warp operation as the
 * loads and stores are (every lane at the same call, all 32) */
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC, void> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
                     const fragment<matrix_b, M, N, K, TB, LB> &b, const fragment<accumulator, M, N, K, TC, void> &c,
                     EMU_HERE)
{
    emu::sync_warp(emu::Site{"wmma::mma_sync", emu_file, emu_line, 0xffffffffu, true});
    TC out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = wmma_f(c.x[i * N + j]);
            for (int k = 0; k < K; k++) s += wmma_f(a.x[i * K + k]) * wmma_f(b.x[k * N + j]);
            out[i * N + j] = wmma_to<TC>(s);
        }
    for (int i = 0; i < M * N; i++) d.x[i] = out[i];
}
} /* namespace wmma */
} /* namespace nvcuda */

/* ---- runtime API (host memory, synchronous streams) ---------------------------------- */
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
/* "emu-<pid>": every process is its own pretend GPU; EMU_SHARED_GPU=1 puts them all on one */
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMalloc(void **p, size_t n);
template <class T>
inline cudaError_t cudaMalloc(T **p, size_t n)
{
    return cudaMalloc((void **)p, n);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t emu_func_set_attribute(const void *k, cudaFuncAttribute a, int v);
template <class K>
inline cudaError_t cudaFuncSetAttribute(K *k, cudaFuncAttribute a, int v)
{
    return emu_func_set_attribute((const void *)k, a, v);
}

#endif /* SR_CUDA_EMU_H */
