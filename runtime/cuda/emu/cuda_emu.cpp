/* cuda_emu.cpp: the engine of the CUDA emulator (see cuda_emu.h).
 *
 * A block runs on one OS thread as cooperative fibers, one per CUDA thread.
 * The scheduler resumes runnable fibers in thread order, warp by warp (a
 * warp's lanes again as soon as its barrier releases them); a fiber runs until
 * it finishes or waits at a barrier (block or warp). The last thread to arrive
 * releases the barrier and goes on without switching. Finished threads count
 * as arrived, as exited threads do on the hardware. A full pass with nobody
 * runnable while threads still wait is a deadlock.
 *
 * Context switches: on x86-64 a 16-instruction switch of the callee-saved
 * general registers (no signal-mask syscall, unlike swapcontext; not the
 * floating-point control words, see emu_switch), elsewhere ucontext.
 * Blocks of one launch spread over OpenMP threads when built with -fopenmp
 * (EMU_THREADS sets how many, by default OpenMP's; 1 = serial).
 *
 * Hazards a GPU would hide or show only sometimes are made to show here:
 *  - EMU_SCHEDULE=forward|reverse|shuffle[:SEED] sets the order in which the
 *    runnable threads of a block are resumed and the blocks of a grid are run
 *    (default forward: warp by warp, see above; reverse and shuffle: over the
 *    whole block at each pass). A kernel whose result changes with the order reads
 *    shared or global memory that another thread or block writes without a
 *    barrier in between (a race); the kernel tests run under each order.
 *  - warp calls: every lane that a warp operation's mask names (and that has
 *    not exited) must make the same call, same operation at the same source
 *    line with the same mask, and a lane must be in its own mask; mma.sync,
 *    ldmatrix and wmma need all 32 lanes; a shuffle's width is a power of two
 *    up to 32; every thread at a __syncthreads must be at the same one. A GPU gives undefined results or hangs; here
 *    the launch fails with both calls named (see "Warp calls" below). A
 *    shuffle from a lane that did not take part returns all bits set (NaN).
 *  - device and page-locked allocations and each block's dynamic shared
 *    memory start filled with 0xff bytes (NaN as fp32 and bf16), since the GPU
 *    does not clear them either: a kernel or program that reads memory nobody
 *    wrote gets NaN, not a lucky zero. EMU_POISON=0 turns it off.
 */
#include "cuda_emu.h"

#include <algorithm>
#include <cstdarg>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace emu {

enum { RUNNABLE = 0, WAIT_BLOCK, WAIT_WARP, DONE };
enum { MAX_THREADS = 1024, NWARPS = MAX_THREADS / 32 };

struct Block {
    const char *name;
    int n;                 /* threads */
    std::vector<Thread> *th;
    int ndone;
    int bar_arrived;       /* block barrier */
    int warp_size[NWARPS]; /* lanes of each warp */
    int warp_done[NWARPS];
    int warp_arrived[NWARPS];
    unsigned warp_live[NWARPS]; /* bit i: lane i has not finished */
    /* the exchanges' slots, two of each: a lane's k-th exchange (Thread::xphase) uses set k & 1, so
     * one warp barrier suffices: set k & 1 is written again only at exchange k + 2, which no lane
     * starts before every live lane has reached exchange k + 1's barrier, after its reads of k */
    uint64_t xchg[2][NWARPS][32];
    uint32_t gather[2][NWARPS][32][EMU_GATHER_MAX];
    int32_t vote[2][NWARPS][32];
    body_fn fn;
    void *arg;
    unsigned rel_live[NWARPS]; /* the lanes that took part in the warp's last released barrier */
    char *smem;
    int deadlock;
    char tsan_bar[2];          /* ThreadSanitizer's order objects: the block barrier's and */
    char tsan_warp[NWARPS][2]; /* each warp's, by the barrier's parity (below) */
    char fault[480]; /* the first wrong warp or block call, "" if none */
};

constinit thread_local uint3 tls_block_idx{0, 0, 0};
constinit thread_local dim3 tls_block_dim;
constinit thread_local dim3 tls_grid_dim;

static thread_local Block *cur_block;
static thread_local Thread *cur_thread;
static thread_local void *sched_sp;   /* the scheduler's saved stack pointer */
#if !defined(__x86_64__)
static thread_local void *sched_ctx; /* ucontext of the scheduler */
#endif

Thread *self()
{
    if (!cur_thread) {
        fprintf(stderr, "cuda_emu: a device function ran outside a kernel launch\n");
        abort();
    }
    return cur_thread;
}
Block *block() { return cur_block; }
void *dynamic_smem() { return cur_block ? cur_block->smem : nullptr; }

/* ---- context switch -------------------------------------------------------- */
#if defined(__x86_64__)
extern "C" void emu_switch(void **save_sp, void *to_sp);
/* saves rbp rbx r12-r15 on the current stack, stores rsp in *save_sp,
 * loads to_sp and restores the same. Not mxcsr and the x87 control word,
 * which the ABI also has a callee keep: every fiber runs on the OS thread
 * that started it, nothing in a kernel changes them (no fesetround), and
 * loading them (ldmxcsr, fldcw) was most of a switch's time */
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n");
#endif

static void fiber_main();

#if defined(__x86_64__)
extern "C" void emu_fiber_entry();
/* the first "return" of a new fiber lands here, rsp = 8 mod 16 as after a
 * call; one more slot so that emu_fiber_main_c is entered as the ABI wants
 * (rsp + 8 a multiple of 16: SSE spills to the stack need it) */
asm(".text\n"
    ".globl emu_fiber_entry\n"
    ".type emu_fiber_entry,@function\n"
    "emu_fiber_entry:\n"
    "  subq $8, %rsp\n"
    "  call emu_fiber_main_c\n"
    "  ud2\n"
    ".size emu_fiber_entry, .-emu_fiber_entry\n");
extern "C" void emu_fiber_main_c() { fiber_main(); }
#else
static void fiber_trampoline() { fiber_main(); }
#endif

#ifdef EMU_ASAN
/* AddressSanitizer follows the stack switches: the scheduler's stack bounds
 * come back from the first switch into a fiber */
static thread_local const void *asan_sched_bottom;
static thread_local size_t asan_sched_size;
#endif

/* ---- ThreadSanitizer (EMU_TSAN) --------------------------------------------------
 * With the kernels built with -fsanitize=thread (CMake SHARDC_SANITIZE_THREAD) and this
 * file without (its bookkeeping is not the kernels' business), TSan reports each pair of
 * accesses to one address by two CUDA threads, one a write, that CUDA does not order:
 * compute-sanitizer's racecheck, on the CPU. Every emulated thread is a TSan fiber, and a
 * switch between fibers orders nothing (no_sync): TSan sees only the orders a GPU gives.
 *  - __syncthreads: every arriving thread releases the barrier's object, every thread
 *    leaving it acquires it; __syncwarp and the warp operations (shuffles, votes, wmma,
 *    the emulated mma.sync) the same per warp. The object alternates with the barrier's
 *    parity: a thread that leaves barrier k and runs on to k + 1 before a slower one has
 *    left k must not hand that one its later writes.
 *  - a launch: the host's accesses before it are ordered before the kernel's, the
 *    kernel's before the host's after it (streams are not modelled: kernels on two
 *    streams are ordered as the emulator ran them).
 *  - blocks that one OS thread runs one after another share its static __shared__
 *    variables, dynamic shared memory and fiber stacks, and are ordered; a race between
 *    blocks on global memory is seen between blocks that ran on different OS threads
 *    (EMU_THREADS >= 2; blocks are dealt out dynamically). */
static thread_local char tsan_block_start; /* the OS thread's set-up before a block's fibers */
static thread_local char tsan_block_end;   /* the fibers' accesses before its next block */
static char tsan_grid_start, tsan_grid_end; /* the host before a launch, the launch before the host */
#ifdef EMU_TSAN
static thread_local void *tsan_sched;      /* the OS thread's own TSan context */
static void tsan_release(void *o) { __tsan_release(o); }
static void tsan_acquire(void *o) { __tsan_acquire(o); }
#else
static void tsan_release(void *) {}
static void tsan_acquire(void *) {}
#endif

static void to_fiber(Thread *t)
{
    cur_thread = t;
#ifdef EMU_TSAN
    tsan_sched = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(t->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, t->stack, t->stack_size);
#endif
#if defined(__x86_64__)
    emu_switch(&sched_sp, t->sp);
#else
    swapcontext((ucontext_t *)sched_ctx, (ucontext_t *)t->ctx);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur_thread = nullptr;
}

static void to_scheduler(Thread *t, bool finished)
{
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(tsan_sched, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &t->asan_fake, asan_sched_bottom, asan_sched_size);
#else
    (void)finished;
#endif
#if defined(__x86_64__)
    emu_switch(&t->sp, sched_sp);
#else
    swapcontext((ucontext_t *)t->ctx, (ucontext_t *)sched_ctx);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(t->asan_fake, &asan_sched_bottom, &asan_sched_size);
#endif
}

static void init_fiber(Thread *t)
{
#if defined(__x86_64__)
    /* from the top: [pad][entry return address][6 callee-saved] */
    uintptr_t top = ((uintptr_t)(t->stack + t->stack_size)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                              /* fake return address of the entry */
    *--sp = (uint64_t)(uintptr_t)&emu_fiber_entry;
    for (int i = 0; i < 6; i++) *--sp = 0;  /* rbp rbx r12..r15 */
    t->sp = sp;
#else
    ucontext_t *uc = (ucontext_t *)t->ctx;
    getcontext(uc);
    uc->uc_stack.ss_sp = t->stack;
    uc->uc_stack.ss_size = t->stack_size;
    uc->uc_link = nullptr;
    makecontext(uc, (void (*)())fiber_trampoline, 0);
#endif
}

static bool schedule_poisons(); /* EMU_POISON is not 0 */

/* ---- Warp calls -------------------------------------------------------------------
 * A barrier is released when every thread (of the block, or of the warp) that has
 * not exited waits at one; the calls they wait at are checked then. CUDA's rules
 * (the programming guide's warp intrinsics): each calling lane is in its mask, and
 * every non-exited lane the mask names executes the same intrinsic with the same
 * mask; __syncthreads is reached by all threads or none. The emulator merges any
 * warp barriers into one, so a kernel breaking a rule often still gives the right
 * numbers here; on a GPU it gives undefined values or hangs. Lanes whose masks do
 * not name each other may be at different calls. A call is identified by its name
 * and source line: two lanes in one helper (a warp sum) called from two places
 * look alike, a limit of the check. */
static bool same_call(const Site &a, const Site &b)
{
    return a.line == b.line && a.mask == b.mask && (a.what == b.what || !strcmp(a.what, b.what)) &&
           (a.file == b.file || !strcmp(a.file, b.file));
}

static const char *short_file(const char *f)
{
    const char *s = strrchr(f, '/');
    return s ? s + 1 : f;
}

static void fault(Block *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fault(Block *b, const char *fmt, ...)
{
    if (b->fault[0]) return; /* the first is enough */
    int n = snprintf(b->fault, sizeof b->fault, "block (%u,%u,%u): ", tls_block_idx.x, tls_block_idx.y,
                     tls_block_idx.z);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->fault + n, sizeof b->fault - (size_t)n, fmt, ap);
    va_end(ap);
}

void bad_call(const Site &s, const char *why)
{
    fault(cur_block, "thread %d calls %s at %s:%d with %s", self()->lin, s.what, short_file(s.file), s.line, why);
}

static void check_warp_calls(Block *b, int w)
{
    int lo = w * 32, hi = lo + b->warp_size[w];
    std::vector<Thread> &th = *b->th;
    const Site *first = nullptr;
    bool same = true;
    for (int i = lo; i < hi; i++) {
        if (th[(size_t)i].state != WAIT_WARP) continue;
        const Site &s = th[(size_t)i].at;
        if (!(s.mask >> (i - lo) & 1u))
            fault(b, "warp %d lane %d calls %s at %s:%d with mask 0x%08x, which leaves the lane itself out", w, i - lo,
                  s.what, short_file(s.file), s.line, s.mask);
        if (!first) first = &s;
        else if (same && !same_call(s, *first)) same = false;
    }
    if (!first) return;
    if (first->whole && b->rel_live[w] != 0xffffffffu)
        fault(b, "warp %d: %s at %s:%d needs all 32 lanes of the warp, and only lanes 0x%08x take part (the others "
                 "exited or do not exist)", w, first->what, short_file(first->file), first->line, b->rel_live[w]);
    if (same) return;
    /* a lane's mask names another that waits at another call */
    for (int i = lo; i < hi; i++) {
        if (th[(size_t)i].state != WAIT_WARP) continue;
        const Site &s = th[(size_t)i].at;
        for (int k = lo; k < hi; k++) {
            const Site &o = th[(size_t)k].at;
            if (k == i || th[(size_t)k].state != WAIT_WARP || !(s.mask >> (k - lo) & 1u) || same_call(s, o)) continue;
            fault(b, "warp %d diverges: lane %d calls %s at %s:%d (mask 0x%08x) while lane %d, which that mask names, "
                     "calls %s at %s:%d (mask 0x%08x); every lane a warp operation's mask names must make the same "
                     "call", w, i - lo, s.what, short_file(s.file), s.line, s.mask, k - lo, o.what,
                  short_file(o.file), o.line, o.mask);
            return;
        }
    }
}

static void check_block_calls(Block *b)
{
    const Site *first = nullptr;
    int first_t = 0;
    for (auto &t : *b->th) {
        if (t.state != WAIT_BLOCK) continue;
        if (!first) {
            first = &t.at;
            first_t = t.lin;
        } else if (!same_call(t.at, *first)) {
            fault(b, "threads %d and %d wait at different __syncthreads (%s:%d and %s:%d); every thread of the "
                     "block that has not exited must reach the same one", first_t, t.lin, short_file(first->file),
                  first->line, short_file(t.at.file), t.at.line);
            return;
        }
    }
}

/* ---- barriers ---------------------------------------------------------------- */
static void release_block(Block *b)
{
    check_block_calls(b);
    b->bar_arrived = 0;
    for (auto &t : *b->th)
        if (t.state == WAIT_BLOCK) t.state = RUNNABLE;
}

static void release_warp(Block *b, int w)
{
    b->rel_live[w] = b->warp_live[w];
    check_warp_calls(b, w);
    b->warp_arrived[w] = 0;
    int lo = w * 32, hi = lo + b->warp_size[w];
    for (int i = lo; i < hi; i++)
        if ((*b->th)[i].state == WAIT_WARP) (*b->th)[i].state = RUNNABLE;
}

void sync_block(const char *file, int line)
{
    Block *b = cur_block;
    Thread *t = self();
    t->at = Site{"__syncthreads", file, line, 0u, false};
    t->state = WAIT_BLOCK; /* the release (below, or by the last to arrive) makes it runnable */
    char *o = &b->tsan_bar[t->bphase++ & 1];
    tsan_release(o);
    b->bar_arrived++;
    if (b->bar_arrived + b->ndone >= b->n) release_block(b);
    else to_scheduler(t, false);
    tsan_acquire(o);
}

void sync_warp(const Site &s)
{
    Block *b = cur_block;
    Thread *t = self();
    int w = t->lin / 32;
    t->at = s;
    t->state = WAIT_WARP;
    char *o = &b->tsan_warp[w][t->wphase++ & 1];
    tsan_release(o);
    b->warp_arrived[w]++;
    if (b->warp_arrived[w] + b->warp_done[w] >= b->warp_size[w]) release_warp(b, w);
    else to_scheduler(t, false);
    tsan_acquire(o);
}

int lane_id() { return self()->lin & 31; }

unsigned warp_active_mask() { return cur_block->warp_live[self()->lin / 32]; }

uint64_t warp_exchange(uint64_t mine, int src, const Site &s)
{
    Block *b = cur_block;
    Thread *t = self();
    int w = t->lin / 32, lane = t->lin & 31, ph = t->xphase++ & 1;
    b->xchg[ph][w][lane] = mine;
    sync_warp(s); /* everybody's value is in */
    if (src < 0 || src >= 32) return mine;
    /* rel_live is this barrier's until this lane waits at the next one */
    if ((b->rel_live[w] & s.mask) >> src & 1u) return b->xchg[ph][w][src];
    return schedule_poisons() ? ~(uint64_t)0 : mine;
}

void warp_gather(uint32_t *all, const uint32_t *mine, int n, const Site &s)
{
    if (n < 0 || n > EMU_GATHER_MAX) {
        fprintf(stderr, "emu: warp_gather of %d words (at most %d)\n", n, (int)EMU_GATHER_MAX);
        abort();
    }
    Block *b = cur_block;
    Thread *t = self();
    int w = t->lin / 32, lane = t->lin & 31, ph = t->xphase++ & 1;
    memcpy(b->gather[ph][w][lane], mine, sizeof(uint32_t) * (size_t)n);
    sync_warp(s); /* everybody's words are in */
    unsigned live = b->rel_live[w];
    for (int i = 0; i < 32; i++) {
        if (live >> i & 1u) memcpy(all + i * n, b->gather[ph][w][i], sizeof(uint32_t) * (size_t)n);
        else memset(all + i * n, 0, sizeof(uint32_t) * (size_t)n);
    }
}

unsigned warp_ballot(int pred, const Site &s, unsigned *took)
{
    Block *b = cur_block;
    Thread *t = self();
    int w = t->lin / 32, lane = t->lin & 31, ph = t->xphase++ & 1;
    b->vote[ph][w][lane] = pred != 0;
    sync_warp(s);
    unsigned live = b->rel_live[w];
    if (took) *took = live;
    unsigned m = 0;
    for (int i = 0; i < b->warp_size[w]; i++)
        if ((live >> i & 1u) && b->vote[ph][w][i]) m |= 1u << i;
    return m;
}

/* ---- cp.async: copies queued per thread, landed at the wait --------------------- */
struct AsyncCopy {
    void *dst;
    const void *src;
    int bytes;
};
struct AsyncQueue {
    std::vector<AsyncCopy> open;                /* issued since the last commit */
    std::deque<std::vector<AsyncCopy>> groups;  /* committed, oldest first */
};
static thread_local std::vector<AsyncQueue> async_q; /* per thread of the block running on this OS thread */

static void land(std::vector<AsyncCopy> &g)
{
    for (const AsyncCopy &c : g) memcpy(c.dst, c.src, (size_t)c.bytes);
    g.clear();
}

void cp_async(void *dst, const void *src, int bytes)
{
    if ((bytes != 4 && bytes != 8 && bytes != 16) || ((uintptr_t)dst | (uintptr_t)src) % (uintptr_t)bytes) {
        fprintf(stderr, "cuda_emu: kernel %s: cp.async of %d bytes from %p to %p (4, 8 or 16 bytes, both aligned "
                        "to the size)\n", cur_block ? cur_block->name : "?", bytes, src, dst);
        abort(); /* the GPU faults on a misaligned cp.async */
    }
    async_q[(size_t)self()->lin].open.push_back(AsyncCopy{dst, src, bytes});
}

void cp_async_commit()
{
    AsyncQueue &q = async_q[(size_t)self()->lin];
    q.groups.push_back(std::move(q.open));
    q.open.clear();
}

void cp_async_wait(int n)
{
    AsyncQueue &q = async_q[(size_t)self()->lin];
    while ((int)q.groups.size() > (n > 0 ? n : 0)) {
        land(q.groups.front());
        q.groups.pop_front();
    }
}

static void fiber_main()
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &asan_sched_bottom, &asan_sched_size);
#endif
    Thread *t = cur_thread;
    Block *b = cur_block;
    tsan_acquire(&tsan_block_start);
    b->fn(b->arg);
    {
        AsyncQueue &q = async_q[(size_t)t->lin];
        if (!q.groups.empty()) {
            for (auto &g : q.groups) land(g);
            q.groups.clear();
        }
        if (!q.open.empty()) land(q.open);
    }
    t->state = DONE;
    b->ndone++;
    int w = t->lin / 32;
    b->warp_done[w]++;
    b->warp_live[w] &= ~(1u << (t->lin & 31));
    /* a finished thread counts as arrived at the barriers others wait on */
    if (b->bar_arrived > 0 && b->bar_arrived + b->ndone >= b->n) release_block(b);
    if (b->warp_arrived[w] > 0 && b->warp_arrived[w] + b->warp_done[w] >= b->warp_size[w]) release_warp(b, w);
    tsan_release(&tsan_block_end);
    to_scheduler(t, true);
    abort(); /* never resumed */
}

/* ---- resume order and poisoning (see the top of the file) --------------------- */
enum { ORDER_FORWARD = 0, ORDER_REVERSE, ORDER_SHUFFLE };
struct Schedule {
    int order = ORDER_FORWARD;
    uint64_t seed = 1;
    bool poison = true;
};
/* parses forward|reverse|shuffle[:SEED]; false when it is none of them */
static bool parse_order(const char *e, Schedule &s)
{
    if (!e || !*e || !strcmp(e, "forward")) s.order = ORDER_FORWARD;
    else if (!strcmp(e, "reverse")) s.order = ORDER_REVERSE;
    else if (!strncmp(e, "shuffle", 7) && (e[7] == 0 || e[7] == ':')) {
        s.order = ORDER_SHUFFLE;
        s.seed = e[7] == ':' ? strtoull(e + 8, nullptr, 10) | 1 : 1;
    } else
        return false;
    return true;
}
static Schedule &schedule()
{
    static Schedule s = [] {
        Schedule r;
        const char *e = getenv("EMU_SCHEDULE");
        if (!parse_order(e, r)) {
            fprintf(stderr, "cuda_emu: EMU_SCHEDULE=%s: expected forward, reverse or shuffle[:SEED]\n", e);
            exit(2);
        }
        const char *p = getenv("EMU_POISON");
        r.poison = !(p && !strcmp(p, "0"));
        return r;
    }();
    return s;
}
static bool schedule_poisons() { return schedule().poison; }
bool set_schedule(const char *order)
{
    return parse_order(order, schedule());
}
const char *schedule_name()
{
    static const char *names[] = {"forward", "reverse", "shuffle"};
    return names[schedule().order];
}

/* a permutation of 0..n-1 for the configured order; shuffles differ per key
 * (block index, pass) but repeat from run to run for the same seed */
static void order_indices(std::vector<int> &ix, int n, uint64_t key)
{
    ix.resize((size_t)n);
    const Schedule &s = schedule();
    for (int i = 0; i < n; i++) ix[(size_t)i] = s.order == ORDER_REVERSE ? n - 1 - i : i;
    if (s.order != ORDER_SHUFFLE) return;
    uint64_t x = s.seed * 0x9E3779B97F4A7C15ull ^ (key + 1) * 0xD1B54A32D192ED03ull;
    for (int i = n - 1; i > 0; i--) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27; /* xorshift64* */
        int j = (int)((x * 0x2545F4914F6CDD1Dull >> 33) % (uint64_t)(i + 1));
        int t = ix[(size_t)i];
        ix[(size_t)i] = ix[(size_t)j];
        ix[(size_t)j] = t;
    }
}

static void poison(void *p, size_t n)
{
    if (p && n && schedule().poison) memset(p, 0xff, n);
}

/* ---- the per-OS-thread fiber pool and the block runner ----------------------- */
struct Pool {
    std::vector<Thread> th;
    std::vector<char *> stacks;
    std::vector<void *> ctxs;
    std::vector<char> smem;
    std::vector<int> order; /* resume order of the threads, when not forward */
    std::unique_ptr<Block> blk; /* the block being run (~90 KiB: on the heap, not an OpenMP thread's stack) */
    std::vector<void *> fibers; /* TSan's fiber of each thread index (EMU_TSAN) */
    size_t stack_size = 0;
    ~Pool()
    {
        drop_fibers();
        for (char *s : stacks) free(s);
#if !defined(__x86_64__)
        for (void *c : ctxs) free(c);
#endif
    }
    void drop_fibers()
    {
#ifdef EMU_TSAN
        for (void *f : fibers) __tsan_destroy_fiber(f);
#endif
        fibers.clear();
    }
};
static thread_local Pool pool;

static size_t fiber_stack_size()
{
    static size_t sz = [] {
        const char *e = getenv("EMU_STACK_KB");
        long kb = e ? atol(e) : 0;
        return (size_t)(kb >= 16 ? kb : 256) * 1024;
    }();
    return sz;
}

static bool run_block(Block &b, uint3 bidx, dim3 bdim, dim3 gdim)
{
    Pool &p = pool;
    size_t ss = fiber_stack_size();
    if ((int)p.stacks.size() < b.n) {
        while ((int)p.stacks.size() < b.n) {
            p.stacks.push_back((char *)malloc(ss));
#if !defined(__x86_64__)
            p.ctxs.push_back(calloc(1, sizeof(ucontext_t)));
#endif
        }
    }
    p.th.assign((size_t)b.n, Thread());
#ifdef EMU_TSAN
    while ((int)p.fibers.size() < b.n) p.fibers.push_back(__tsan_create_fiber(0));
#endif
    async_q.resize((size_t)b.n);
    for (int i = 0; i < b.n; i++) { /* left by an abandoned (deadlocked) block; most kernels never queue */
        AsyncQueue &q = async_q[(size_t)i];
        if (!q.open.empty()) q.open.clear();
        if (!q.groups.empty()) q.groups.clear();
    }
    b.th = &p.th;
    b.ndone = 0;
    b.bar_arrived = 0;
    b.deadlock = 0;
    b.fault[0] = 0;
    int nw = (b.n + 31) / 32;
    for (int w = 0; w < nw; w++) {
        b.warp_size[w] = b.n - w * 32 < 32 ? b.n - w * 32 : 32;
        b.warp_live[w] = b.warp_size[w] == 32 ? 0xffffffffu : (1u << b.warp_size[w]) - 1u;
        b.warp_done[w] = 0;
        b.warp_arrived[w] = 0;
    }
    tls_block_idx = bidx;
    tls_block_dim = bdim;
    tls_grid_dim = gdim;
    cur_block = &b;
    int i = 0;
    for (unsigned z = 0; z < bdim.z; z++)
        for (unsigned y = 0; y < bdim.y; y++)
            for (unsigned x = 0; x < bdim.x; x++, i++) {
                Thread &t = p.th[(size_t)i];
                t.idx = uint3{x, y, z};
                t.lin = i;
                t.state = RUNNABLE;
                t.stack = p.stacks[(size_t)i];
                t.stack_size = ss;
                t.tsan_fiber = p.fibers.empty() ? nullptr : p.fibers[(size_t)i];
#if !defined(__x86_64__)
                t.ctx = p.ctxs[(size_t)i];
#endif
                init_fiber(&t);
            }
#if !defined(__x86_64__)
    ucontext_t sched;
    sched_ctx = &sched;
#endif
    bool ok = true;
    bool forward = schedule().order == ORDER_FORWARD;
    std::vector<int> &ix = p.order;
    uint64_t pass = 0;
    uint64_t bkey = ((uint64_t)bidx.z * gdim.y + bidx.y) * gdim.x + bidx.x;
    tsan_release(&tsan_block_start);
    while (b.ndone < b.n) {
        bool progress = false;
        if (forward) {
            /* warp by warp: a warp's lanes run again as soon as its barrier releases them, until they
             * wait at the block's barrier or finish (32 fibers' stacks stay in cache: a warp's
             * shuffles no longer cycle through every fiber of the block) */
            for (int lo = 0; lo < b.n; lo += 32) {
                int hi = lo + 32 < b.n ? lo + 32 : b.n;
                for (bool ran = true; ran;) {
                    ran = false;
                    for (int k = lo; k < hi; k++)
                        if (p.th[(size_t)k].state == RUNNABLE) {
                            to_fiber(&p.th[(size_t)k]);
                            ran = progress = true;
                        }
                }
            }
        } else {
            order_indices(ix, b.n, bkey * 1000003u + pass++);
            for (int k = 0; k < b.n; k++) {
                Thread &t = p.th[(size_t)ix[(size_t)k]];
                if (t.state == RUNNABLE) {
                    to_fiber(&t);
                    progress = true;
                }
            }
        }
        if (!progress) {
            ok = false;
            p.drop_fibers(); /* abandoned inside the kernel: TSan's call stacks of these fibers are left open */
            break;
        }
    }
    tsan_acquire(&tsan_block_end);
    cur_block = nullptr;
    return ok;
}

/* ---- errors, attributes, launches ---------------------------------------------- */
static std::mutex mu;
static cudaError_t last_error = cudaSuccess;
static std::string last_detail;
static std::map<const void *, int> max_dyn_smem;

void set_last_error(cudaError_t e, const char *detail)
{
    std::lock_guard<std::mutex> g(mu);
    if (last_error == cudaSuccess) last_error = e;
    if (detail) {
        fprintf(stderr, "cuda_emu: %s\n", detail);
        last_detail = detail;
    }
}
std::string last_error_detail()
{
    std::lock_guard<std::mutex> g(mu);
    return last_detail;
}

cudaError_t check_launch(const char *name, const void *kernel, dim3 grid, dim3 blk, size_t smem)
{
    unsigned long nt = (unsigned long)blk.x * blk.y * blk.z;
    char msg[256];
    if (nt == 0 || nt > MAX_THREADS || blk.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
        snprintf(msg, sizeof msg, "kernel %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u)", name,
                 grid.x, grid.y, grid.z, blk.x, blk.y, blk.z);
        set_last_error(cudaErrorInvalidConfiguration, msg);
        return cudaErrorInvalidConfiguration;
    }
    int limit = 48 * 1024;
    {
        std::lock_guard<std::mutex> g(mu);
        auto it = max_dyn_smem.find(kernel);
        if (it != max_dyn_smem.end()) limit = it->second;
    }
    if (smem > (size_t)limit) {
        snprintf(msg, sizeof msg,
                 "kernel %s: %zu bytes of dynamic shared memory, more than the %d allowed (cudaFuncSetAttribute "
                 "cudaFuncAttributeMaxDynamicSharedMemorySize raises it up to 227 KiB)",
                 name, smem, limit);
        set_last_error(cudaErrorInvalidValue, msg);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

cudaError_t run_grid(const char *name, const void *kernel, dim3 grid, dim3 blk, size_t smem, body_fn fn, void *arg)
{
    cudaError_t ce = check_launch(name, kernel, grid, blk, smem);
    if (ce != cudaSuccess) return ce;
    unsigned long nt = (unsigned long)blk.x * blk.y * blk.z;
    char msg[256];
    long nblocks = (long)grid.x * grid.y * grid.z;
    std::vector<int> border;
    if (schedule().order != ORDER_FORWARD && nblocks <= (1L << 24)) order_indices(border, (int)nblocks, 0x5eed);
    int fail = 0; /* bit 0: a block deadlocked; bit 1: a wrong warp or block call (fault_msg) */
    std::string fault_msg;
    int threads = 1;
#ifdef _OPENMP
    static int cap = [] {
        const char *e = getenv("EMU_THREADS");
        return e ? atoi(e) : 0;
    }();
    /* EMU_THREADS above OMP_NUM_THREADS too: the race check runs the host kernels on one
     * thread (ThreadSanitizer does not see libgomp's orders) and the blocks on several */
    threads = cap > 0 ? cap : omp_get_max_threads();
    if (nblocks < 4) threads = 1;
#endif
    tsan_release(&tsan_grid_start);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(| : fail) if (threads > 1)
    for (long bi = 0; bi < nblocks; bi++) {
        tsan_acquire(&tsan_grid_start);
        if (!pool.blk) pool.blk.reset(new Block());
        Block &b = *pool.blk;
        b.name = name;
        b.n = (int)nt;
        b.fn = fn;
        b.arg = arg;
        /* dynamic shared memory starts 128-byte aligned, as on the GPU */
        if (pool.smem.size() < smem + 128) pool.smem.resize(smem + 128);
        uintptr_t base = ((uintptr_t)pool.smem.data() + 127) & ~(uintptr_t)127;
        b.smem = smem ? (char *)base : nullptr;
        poison(b.smem, smem);
        long li = border.empty() ? bi : border[(size_t)bi];
        uint3 bidx{(unsigned)(li % grid.x), (unsigned)(li / grid.x % grid.y), (unsigned)(li / ((long)grid.x * grid.y))};
        if (!fail && !run_block(b, bidx, blk, grid)) {
            /* the fibers still waiting are abandoned: their stacks are reused */
            fail = 1;
        }
        if (b.fault[0]) {
            fail |= 2;
#pragma omp critical(emu_fault)
            if (fault_msg.empty()) fault_msg = b.fault;
            b.fault[0] = 0;
        }
        tsan_release(&tsan_grid_end);
    }
    tsan_acquire(&tsan_grid_end);
    if (fail & 2) {
        std::string m = std::string("kernel ") + name + ": " + fault_msg +
                         " (on a GPU: undefined results or a hang)";
        set_last_error(cudaErrorLaunchFailure, m.c_str());
    }
    if (fail & 1) {
        snprintf(msg, sizeof msg,
                 "kernel %s: deadlock: some threads of a block wait at __syncthreads or a warp operation that "
                 "the others never reach",
                 name);
        set_last_error(cudaErrorLaunchFailure, msg);
    }
    return fail ? cudaErrorLaunchFailure : cudaSuccess;
}

} /* namespace emu */

/* ---- runtime API ------------------------------------------------------------------ */
/* ---- streams and events (see "Streams" in cuda_emu.h) ----------------------------------- */
struct StreamItem {
    emu::StreamWork *work;  /* or, when NULL, a wait for (src, seq) */
    CUstream_st *src;
    uint64_t seq;
    bool started;
};
struct CUstream_st {
    unsigned flags;
    std::deque<StreamItem> q;
    uint64_t issued = 0, done = 0; /* items queued and completed, ever */
};
struct CUevent_st {
    double t_ms;
    CUstream_st *s; /* the stream it was recorded on and the item count then */
    uint64_t seq;
    int queries;    /* cudaEventQuery calls since the record (EMU_EVENT_LAG) */
};

static double now_ms()
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace emu {
/* the streams that exist (plus the legacy default stream, `legacy`); only
 * the host thread calls the runtime API, so no lock */
static CUstream_st legacy_stream{cudaStreamDefault, {}, 0, 0};
static std::vector<CUstream_st *> streams{&legacy_stream};
static CUstream_st *real(cudaStream_t s) { return s ? s : &legacy_stream; }

bool racecheck()
{
    static const bool on = [] {
        const char *e = getenv("EMU_RACECHECK");
        return !(e && !strcmp(e, "0"));
    }();
    return on;
}

/* the work of s queued before its item number `seq` is waited for */
static void want(CUstream_st *s, uint64_t seq)
{
    uint64_t at = s->done;
    for (StreamItem &it : s->q) {
        if (at++ >= seq) break;
        if (it.work) it.work->wanted = true;
    }
}

bool device_work_ran(cudaStream_t st, const char *what)
{
    if (!racecheck()) return true;
    CUstream_st *s = real(st);
    for (CUstream_st *x : streams) {
        if (x == s || x->q.empty()) continue;
        StreamItem &it = x->q.front();
        if (!it.work || !it.started || it.work->raced) continue;
        std::string r = it.work->race();
        if (r.empty()) continue;
        it.work->raced = true;
        std::string msg = "a stream race: " + std::string(what) + " changed " + r +
                          " while that was in flight on another stream, with nothing ordering the two (an event "
                          "recorded after it and waited for, or a synchronization); on a GPU the result would "
                          "depend on timing";
        set_last_error(cudaErrorLaunchFailure, msg.c_str());
        return false;
    }
    return true;
}

static bool item_done(StreamItem &it)
{
    if (!it.work) {
        if (it.src->done < it.seq) want(it.src, it.seq);
        return it.src->done >= it.seq;
    }
    if (!it.started) {
        it.started = true;
        it.work->start();
    }
    return it.work->test();
}

void stream_progress()
{
    for (bool moved = true; moved;) {
        moved = false;
        for (CUstream_st *s : streams)
            while (!s->q.empty()) {
                StreamItem &f = s->q.front();
                if (f.work && s->q.size() > 1) f.work->wanted = true; /* the next item waits for it */
                if (!item_done(f)) break;
                delete s->q.front().work;
                s->q.pop_front();
                s->done++;
                moved = true;
            }
    }
}

void stream_enqueue(cudaStream_t st, StreamWork *w)
{
    CUstream_st *s = real(st);
    s->q.push_back(StreamItem{w, nullptr, 0, false});
    s->issued++;
    stream_progress();
}

static double hang_s()
{
    static double v = [] {
        const char *e = getenv("EMU_HANG_S");
        double x = e ? atof(e) : 0.0;
        return x > 0 ? x : 300.0;
    }();
    return v;
}

/* waits until `ready` holds, progressing the streams; false after EMU_HANG_S */
template <class F>
static bool wait_until(F ready, const char *what)
{
    stream_progress();
    if (ready()) return true;
    double t0 = now_ms();
    long ns = 1000;
    while (!ready()) {
        if (now_ms() - t0 > hang_s() * 1e3) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "%s waited %g s for stream work (an NCCL operation) that never completed: on a GPU this "
                     "would hang",
                     what, hang_s());
            set_last_error(cudaErrorLaunchFailure, msg);
            return false;
        }
        std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
        ns = std::min(ns * 2, 1000000L);
        stream_progress();
    }
    return true;
}

/* empty; what it still holds is waited for */
static bool drained(CUstream_st *s)
{
    want(s, UINT64_MAX);
    return s->q.empty();
}

/* every stream's queue empty (blocking_only: those without cudaStreamNonBlocking) */
static bool streams_drained(bool blocking_only)
{
    bool all = true; /* every stream asked, so that each one's work is wanted at once */
    for (CUstream_st *x : streams)
        if (!(blocking_only && (x->flags & cudaStreamNonBlocking)) && !drained(x)) all = false;
    return all;
}

bool stream_defers(cudaStream_t st)
{
    static const bool off = [] {
        const char *e = getenv("EMU_DEFER");
        return e && !strcmp(e, "0");
    }();
    if (off || !st || !(st->flags & cudaStreamNonBlocking)) return false;
    stream_progress();
    return !st->q.empty();
}

/* a kernel queued behind a collective: runs when it reaches the head */
struct FnWork : StreamWork {
    std::function<void()> run;
    explicit FnWork(std::function<void()> r) : run(std::move(r)) {}
    void start() override { run(); }
    bool test() override { return true; }
};

void stream_enqueue_fn(cudaStream_t s, std::function<void()> run) { stream_enqueue(s, new FnWork(std::move(run))); }

bool stream_drain(cudaStream_t st, const char *what)
{
    CUstream_st *s = real(st);
    if (s != &legacy_stream) {
        /* a blocking stream also waits for the legacy stream, and it for them */
        if (!(s->flags & cudaStreamNonBlocking) && !wait_until([] { return drained(&legacy_stream); }, what))
            return false;
        return wait_until([s] { return drained(s); }, what);
    }
    return wait_until([] { return streams_drained(true); }, what);
}

static bool all_drained(const char *what)
{
    return wait_until([] { return streams_drained(false); }, what);
}
} /* namespace emu */

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
    }
    return "unknown error";
}
const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    }
    return "cudaErrorUnknown";
}
cudaError_t cudaGetLastError()
{
    std::lock_guard<std::mutex> g(emu::mu);
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError()
{
    std::lock_guard<std::mutex> g(emu::mu);
    return emu::last_error;
}
/* EMU_DEVICES=0 pretends there is no GPU (to test that path) */
cudaError_t cudaGetDeviceCount(int *n)
{
    const char *e = getenv("EMU_DEVICES");
    *n = e ? atoi(e) : 1;
    return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}
static int cur_dev = 0;
cudaError_t cudaSetDevice(int d)
{
    int n;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n) return cudaErrorInvalidDevice;
    cur_dev = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d)
{
    *d = cur_dev;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    (void)d;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "shardc CUDA emulator (CPU)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->multiProcessorCount = 8;
    p->major = 9;
    p->minor = 0;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize()
{
    emu::all_drained("cudaDeviceSynchronize");
    return cudaPeekAtLastError();
}
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    const char *shared = getenv("EMU_SHARED_GPU");
    if (d != 0 || len < 1) return cudaErrorInvalidDevice;
    if (shared && !strcmp(shared, "1")) snprintf(bus, (size_t)len, "emu-shared");
    else snprintf(bus, (size_t)len, "emu-%ld", (long)getpid());
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = (size_t)8 << 30;
    *total_b = (size_t)16 << 30;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = nullptr;
    if (posix_memalign(p, 256, n ? n : 1) != 0) return cudaErrorMemoryAllocation;
    emu::poison(*p, n); /* the GPU does not clear it either */
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    /* it synchronizes the device first, as on a GPU: queued kernels may use p */
    if (p) emu::all_drained("cudaFree");
    free(p);
    return cudaSuccess;
}
/* page-locked host memory is plain host memory here */
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t s)
{
    if (!emu::stream_drain(s, "cudaMemcpy")) return cudaErrorLaunchFailure;
    if (n && dst != src) memmove(dst, src, n);
    return emu::device_work_ran(s, "cudaMemcpy") ? cudaSuccess : cudaErrorLaunchFailure;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    return cudaMemcpyAsync(dst, src, n, k, 0);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    if (!emu::stream_drain(s, "cudaMemset")) return cudaErrorLaunchFailure;
    if (n) memset(p, v, n);
    return emu::device_work_ran(s, "cudaMemset") ? cudaSuccess : cudaErrorLaunchFailure;
}
cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = new CUstream_st{flags, {}, 0, 0};
    emu::streams.push_back(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s) return cudaErrorInvalidValue;
    /* queued work still runs to the end, as on a GPU */
    emu::wait_until([s] { return emu::drained(s); }, "cudaStreamDestroy");
    emu::streams.erase(std::remove(emu::streams.begin(), emu::streams.end(), s), emu::streams.end());
    /* not freed: events recorded on it still point here (and read it as complete) */
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    emu::stream_drain(s, "cudaStreamSynchronize");
    return cudaPeekAtLastError();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned)
{
    CUstream_st *s = emu::real(st);
    if (!e) return cudaErrorInvalidValue;
    emu::stream_progress();
    if (e->s && e->s->done < e->seq) {
        s->q.push_back(StreamItem{nullptr, e->s, e->seq, false});
        s->issued++;
    }
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new CUevent_st{0.0, nullptr, 0, 0};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st)
{
    if (!e) return cudaErrorInvalidValue;
    e->t_ms = now_ms();
    e->s = emu::real(st);
    e->seq = e->s->issued;
    e->queries = 0;
    return cudaSuccess;
}
static bool event_done(cudaEvent_t e)
{
    if (e->s) emu::want(e->s, e->seq);
    return !e->s || e->s->done >= e->seq;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e) return cudaErrorInvalidValue;
    emu::wait_until([e] { return event_done(e); }, "cudaEventSynchronize");
    return cudaPeekAtLastError();
}
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e) return cudaErrorInvalidValue;
    /* EMU_EVENT_LAG=N: the first N queries after a record say "not ready",
     * as of a device behind the host, so the callers' waiting paths run */
    static int lag = -1;
    if (lag < 0) {
        const char *v = getenv("EMU_EVENT_LAG");
        lag = v && atoi(v) > 0 ? atoi(v) : 0;
    }
    if (e->queries < lag) {
        e->queries++;
        return cudaErrorNotReady;
    }
    if (e->s) emu::want(e->s, e->seq);
    emu::stream_progress();
    return event_done(e) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(b->t_ms - a->t_ms);
    return cudaSuccess;
}
cudaError_t emu_func_set_attribute(const void *k, cudaFuncAttribute a, int v)
{
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > 227 * 1024) return cudaErrorInvalidValue;
        std::lock_guard<std::mutex> g(emu::mu);
        emu::max_dyn_smem[k] = v;
    }
    return cudaSuccess;
}

/* ---- the C view (c/cuda_runtime.h): what runtime/cuda/comm_nccl.c calls ----------------- */
extern "C" {
const char *emuc_cudaGetErrorString(cudaError_t e) { return cudaGetErrorString(e); }
cudaError_t emuc_cudaGetLastError(void) { return cudaGetLastError(); }
cudaError_t emuc_cudaGetDeviceCount(int *n) { return cudaGetDeviceCount(n); }
cudaError_t emuc_cudaSetDevice(int d) { return cudaSetDevice(d); }
cudaError_t emuc_cudaDeviceGetPCIBusId(char *bus, int len, int d) { return cudaDeviceGetPCIBusId(bus, len, d); }
cudaError_t emuc_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { return cudaStreamCreateWithFlags(s, f); }
cudaError_t emuc_cudaStreamDestroy(cudaStream_t s) { return cudaStreamDestroy(s); }
cudaError_t emuc_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { return cudaStreamWaitEvent(s, e, f); }
cudaError_t emuc_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { return cudaEventCreateWithFlags(e, f); }
cudaError_t emuc_cudaEventDestroy(cudaEvent_t e) { return cudaEventDestroy(e); }
cudaError_t emuc_cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecord(e, s); }
cudaError_t emuc_cudaEventQuery(cudaEvent_t e) { return cudaEventQuery(e); }
}
