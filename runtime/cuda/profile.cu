/* profile.cu: SHARDC_CUDA_PROFILE=1. Times every generated call (SRK_AT)
 * with a pair of CUDA events on the compute stream and prints, when the
 * program ends, where the device time went, by call site of the .model
 * ("nn.model:27 d matmul"), heaviest first. The first step is left out
 * (cuBLASLt's heuristics, first-touch allocations) once a second one starts.
 *
 * The events are resolved in batches (a host wait every PROF_BATCH calls),
 * which costs a little overlap between launching and running: a profiled
 * step is a little slower than an unprofiled one. The span from the first
 * timed call to the last also holds what SRK_AT does not wrap (the
 * optimizer, collectives, the bf16 parameter copy) and the launch gaps: the
 * report gives both so that the difference shows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "srk.cuh"

enum { PROF_BATCH = 16384 };

namespace {
struct pending {
    const char *what;
    cudaEvent_t a, b;
};
struct row {
    double ms = 0;
    long calls = 0;
};
struct profiler {
    std::vector<cudaEvent_t> pool;
    std::vector<pending> queued;
    std::map<const char *, row> rows; /* by the site's string (one literal per generated call) */
    pending cur = {NULL, NULL, NULL};
    cudaEvent_t first = NULL;         /* the first timed call's start */
    double span_ms = 0;               /* first start to the last resolved end */
    int have_step = 0, reset = 0, at_exit = 0;
    uint64_t step = 0;
    long steps = 0;                   /* steps begun since the reset (or the start) */
};
profiler *prof;

cudaEvent_t take(void)
{
    cudaEvent_t e = NULL;
    if (!prof->pool.empty()) {
        e = prof->pool.back();
        prof->pool.pop_back();
    } else if (!srk_check_cuda(cudaEventCreate(&e), "creating a profiling event")) {
        e = NULL;
    }
    return e;
}

void give(cudaEvent_t e)
{
    if (e) prof->pool.push_back(e);
}

/* waits for the queued calls and adds up their times */
void flush(void)
{
    if (!prof || prof->queued.empty()) return;
    pending &last = prof->queued.back();
    if (!srk_check_cuda(cudaEventSynchronize(last.b), "waiting for the profiled calls")) return;
    float ms = 0;
    if (prof->first && cudaEventElapsedTime(&ms, prof->first, last.b) == cudaSuccess) prof->span_ms = ms;
    for (pending &p : prof->queued) {
        if (cudaEventElapsedTime(&ms, p.a, p.b) == cudaSuccess) {
            row &r = prof->rows[p.what];
            r.ms += ms;
            r.calls++;
        }
        if (p.a != prof->first) give(p.a);
        give(p.b);
    }
    prof->queued.clear();
}
} // namespace

static void at_exit(void);

void srk_prof_begin(const char *what)
{
    if (!prof) prof = new profiler();
    if (!prof->at_exit) {
        prof->at_exit = 1;
        atexit(at_exit);
    }
    prof->cur.what = what;
    prof->cur.a = take();
    prof->cur.b = take();
    if (!prof->cur.a || !prof->cur.b) return;
    if (!prof->first) prof->first = prof->cur.a;
    srk_check_cuda(cudaEventRecord(prof->cur.a, srk_ctx.stream), "recording a profiling event");
}

void srk_prof_end(void)
{
    if (!prof || !prof->cur.a || !prof->cur.b) return;
    if (!srk_check_cuda(cudaEventRecord(prof->cur.b, srk_ctx.stream), "recording a profiling event")) return;
    prof->queued.push_back(prof->cur);
    prof->cur.a = prof->cur.b = NULL;
    if (prof->queued.size() >= PROF_BATCH) flush();
}

void srk_prof_step(uint64_t step)
{
    if (!srk_ctx.profile) return;
    if (!prof) prof = new profiler();
    if (prof->have_step && step == prof->step) return;
    if (prof->have_step && !prof->reset) { /* the second step begins: forget the first */
        flush();
        prof->rows.clear();
        if (prof->first) give(prof->first);
        prof->first = NULL;
        prof->span_ms = 0;
        prof->steps = 0;
        prof->reset = 1;
    }
    prof->have_step = 1;
    prof->step = step;
    prof->steps++;
}

static void report(void)
{
    if (!prof || srk_ctx.failed) return;
    flush();
    std::map<std::string, row> by_site; /* one site can be several literals */
    double total = 0;
    for (auto &kv : prof->rows) {
        row &r = by_site[kv.first];
        r.ms += kv.second.ms;
        r.calls += kv.second.calls;
        total += kv.second.ms;
    }
    std::vector<std::pair<std::string, row>> v(by_site.begin(), by_site.end());
    std::sort(v.begin(), v.end(), [](const auto &x, const auto &y) { return x.second.ms > y.second.ms; });
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("PMI_RANK");
    long steps = prof->steps > 0 ? prof->steps : 1;
    fprintf(stderr,
            "shardc cuda profile (rank %s; %ld step%s%s): %.3f ms of device time in %zu call sites, %.3f ms from the "
            "first timed call to the last (%.0f%%; the rest: optimizer, collectives, conversions, launch gaps)\n",
            rank ? rank : "0", steps, steps == 1 ? "" : "s", prof->reset ? ", the first left out" : "", total,
            v.size(), prof->span_ms, prof->span_ms > 0 ? 100.0 * total / prof->span_ms : 0.0);
    fprintf(stderr, "  %10s %6s %8s %10s  %s\n", "ms/step", "%", "calls", "us/call", "site");
    for (auto &kv : v)
        fprintf(stderr, "  %10.3f %6.2f %8ld %10.1f  %s\n", kv.second.ms / (double)steps,
                total > 0 ? 100.0 * kv.second.ms / total : 0.0, kv.second.calls / steps,
                kv.second.calls ? 1000.0 * kv.second.ms / (double)kv.second.calls : 0.0, kv.first.c_str());
}

static void release(void)
{
    if (!prof) return;
    for (pending &p : prof->queued) {
        if (p.a != prof->first) cudaEventDestroy(p.a);
        cudaEventDestroy(p.b);
    }
    for (cudaEvent_t e : prof->pool) cudaEventDestroy(e);
    if (prof->first) cudaEventDestroy(prof->first);
    if (prof->cur.a) cudaEventDestroy(prof->cur.a);
    if (prof->cur.b) cudaEventDestroy(prof->cur.b);
    delete prof;
    prof = NULL;
}

/* the report comes from exit (the backend's shutdown is not called on every
 * way out), registered once CUDA is up: after the CUDA runtime's own
 * handler, so that it runs before that one */
static void at_exit(void)
{
    if (srk_ctx.stream) cudaStreamSynchronize(srk_ctx.stream);
    report();
    release();
}
