/* srk_attention_pick.cuh: SHARDC_CUDA_ATTN=auto, the default: which of the
 * bf16 attention paths (wmma, mma.sync, cuDNN) a program runs is decided on
 * the device it runs on, at the first attention call of each head layout
 * (C, NH, L), by a trial: the forward and backward of each path on the same
 * random inputs (batch min(B, 8192/T) at the call's T), compared with the
 * SIMT kernels' (fp32 math, the reference); a path whose output, lse or
 * gradients differ by more than bf16's rounding explains (SRK_PICK_TOL), or
 * that fails (cuDNN not found, no plan for the shape), is dropped; of the
 * rest the fastest (timed with events) is kept, a later one of wmma,
 * mma.sync, cuDNN replacing an earlier only when 10% faster, so that near
 * ties do not flip between runs. As cudnn.benchmark in PyTorch: the fastest
 * correct kernel for this GPU, cuDNN and shape, without a measurement made
 * elsewhere. The trial's verdict is one line (srk_ctx.attn_note, printed
 * after the first training step by train.c through sr_backend.note).
 *
 * Timing makes the choice a fact of the run: SHARDC_CUDA_ATTN=wmma, mma,
 * cudnn or simt pins it (bit-reproducible runs, comparisons). fp32 programs,
 * GPUs before sm_80 and other element types run as before (SIMT, or wmma's
 * dispatch), with no trial.
 */
#ifndef SRK_ATTENTION_PICK_CUH
#define SRK_ATTENTION_PICK_CUH

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

/* a path's largest difference from the SIMT reference, over the largest |reference| of the
 * tensor: bf16 rounds to 2^-9 relative, and the tensor-core paths round the probabilities to
 * bf16 before the second product, so honest paths stay near 1e-2 here (the trial's note prints
 * them); a wrong mask, tile or stride is of order 1 */
#define SRK_PICK_TOL 0.05

namespace srk_pick {

static inline const char *name(int mode)
{
    switch (mode) {
    case SRK_ATTN_WMMA: return "wmma";
    case SRK_ATTN_SIMT: return "simt";
    case SRK_ATTN_MMA: return "mma.sync";
    case SRK_ATTN_CUDNN: return "cudnn";
    default: return "auto";
    }
}

/* Everything below that launches kernels is a template over the element type (bf16), so that
 * only a file that calls the attention (a generated program, a test) instantiates it, not every
 * file of the runtime that includes srk.cuh. */

/* x[i] uniform in [-amp, amp), a hash of (seed, i): the same inputs for every path */
template <class TX>
static __global__ void fill_kernel(TX *x, long n, unsigned seed, float amp)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 0x9E3779B1u ^ seed;
        h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
        x[i] = __float2bfloat16(amp * ((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}

/* which path ran since the counters were (tc, mma, cd) */
static inline int path_since(long tc, long mma, long cd)
{
    return srk_ctx.attn_cudnn_calls > cd ? SRK_ATTN_CUDNN
           : srk_ctx.attn_mma_launches > mma ? SRK_ATTN_MMA
           : srk_ctx.attn_tc_launches > tc ? SRK_ATTN_WMMA
                                            : SRK_ATTN_SIMT;
}

/* max |got - ref| / max |ref| (NaN and Inf count as far off) */
static inline double rel_diff(const std::vector<float> &ref, const std::vector<float> &got)
{
    double top = 0.0, d = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        top = fmax(top, fabs((double)ref[i]));
        double e = fabs((double)got[i] - (double)ref[i]);
        if (!(e <= 1e30)) return INFINITY;
        d = fmax(d, e);
    }
    return top > 0.0 ? d / top : d;
}

/* the tensors one path produced: out, lse, the gradients (q|k|v's parts) */
struct Result {
    std::vector<float> out, lse, grad;
};

/* the trial's device buffers: q|k|v (three parts of one row when packed, three tensors else), dout,
 * out, aux, the gradients laid out as q|k|v, a float copy for reading bf16 back */
template <class TX>
struct Bufs {
    TX *x = NULL, *g = NULL, *o = NULL, *d = NULL;
    float *aux = NULL, *f = NULL;
    long B, T, C, NH, L;
    bool ok(void) const { return x && g && o && d && aux && f; }
    void release(void)
    {
        for (void *p : {(void *)x, (void *)g, (void *)o, (void *)d, (void *)aux, (void *)f}) srk_dev_free(p);
    }
};

/* n elements back as floats (through b.f) */
template <class TX>
static void fetch(const Bufs<TX> &b, std::vector<float> &v, const TX *p, long n)
{
    v.resize((size_t)n);
    srk_bf16_to_f32(b.f, p, n);
    srk_check_cuda(cudaMemcpyAsync(v.data(), b.f, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost, srk_ctx.stream),
                   "reading the attention trial's results");
    srk_stream_sync("the attention trial");
}

/* one forward and backward on the current srk_ctx.attn_mode */
template <class TX>
static void run_once(const Bufs<TX> &b)
{
    long n = b.B * b.T * b.C;
    if (b.L != b.C) {
        srk_attention_qkv_fwd(b.o, b.aux, b.x, b.B, b.T, b.C, b.NH);
        srk_attention_qkv_bwd(b.d, b.g, b.x, b.aux, b.B, b.T, b.C, b.NH, 1);
    } else {
        srk_attention_fwd(b.o, b.aux, b.x, b.x + n, b.x + 2 * n, b.B, b.T, b.C, b.NH);
        srk_attention_bwd(b.d, b.d + n, b.d + 2 * n, b.g, b.x, b.x + n, b.x + 2 * n, b.aux, b.B, b.T, b.C, b.NH, 7);
    }
}

template <class TX>
static void result(const Bufs<TX> &b, Result &r)
{
    long n = b.B * b.T * b.C;
    fetch(b, r.out, b.o, n);
    fetch(b, r.grad, b.d, 3 * n);
    r.lse.resize((size_t)(b.B * b.NH * b.T));
    srk_check_cuda(cudaMemcpyAsync(r.lse.data(), b.aux, sizeof(float) * r.lse.size(), cudaMemcpyDeviceToHost,
                                   srk_ctx.stream),
                   "reading the attention trial's lse");
    srk_stream_sync("the attention trial");
}

/* milliseconds a forward and backward take on the current mode (reps calls, after the one run before) */
template <class TX>
static double time_it(const Bufs<TX> &b, int reps)
{
    return srk_time_ms(
        [&]() {
            run_once(b);
            return true; /* a failure shows in srk_ctx.failed, checked after the runs */
        },
        reps, "the attention trial");
}

/* why cuDNN cannot take this layout, or NULL */
static inline const char *cudnn_why_not(long C, long NH, char *err, size_t cap)
{
    long hd = C / NH;
    if (hd % 16 || hd < 32 || hd > 128) return "head size not 32..128 in steps of 16";
    if (srk_cudnn_version(err, cap) < 0) return err;
    return NULL;
}

/* The trial for layout (C, NH, L) at (B, T): the mode to run, and its one-line account in
 * note. spoil (tests only; -1 none): a mode whose results are altered before they are compared,
 * as a wrong kernel's would be. */
template <class TX = bf16>
static int trial(long B, long T, long C, long NH, long L, int spoil, char *note, size_t cap)
{
    Bufs<TX> b;
    b.B = B < 8192 / T ? B : (8192 / T > 0 ? 8192 / T : 1), b.T = T, b.C = C, b.NH = NH, b.L = L;
    long n = b.B * T * C, hd = C / NH;
    b.x = (TX *)srk_dev_alloc(sizeof(TX) * 3 * n), b.g = (TX *)srk_dev_alloc(sizeof(TX) * n);
    b.o = (TX *)srk_dev_alloc(sizeof(TX) * n), b.d = (TX *)srk_dev_alloc(sizeof(TX) * 3 * n);
    b.aux = (float *)srk_dev_alloc(srk_attention_aux_bytes(b.B, T, C, NH, sizeof(TX)));
    b.f = (float *)srk_dev_alloc(sizeof(float) * 3 * n);
    int len = snprintf(note, cap, "attention (%ld heads of %ld%s; tried at batch %ld x %ld, forward and backward):",
                       NH, hd, L != C ? ", q|k|v packed" : "", b.B, T);
    auto add = [&](const char *fmt, auto... a) {
        if (len >= 0 && (size_t)len < cap) len += snprintf(note + len, cap - (size_t)len, fmt, a...);
    };
    if (!b.ok()) {
        b.release();
        add(" not tried (no device memory for it); wmma");
        return SRK_ATTN_WMMA;
    }
    SR_LAUNCH(fill_kernel<TX>, srk_blocks(3 * n, 256), 256, 0, srk_ctx.stream, b.x, 3 * n, 0x51u, 1.5f);
    SR_LAUNCH(fill_kernel<TX>, srk_blocks(n, 256), 256, 0, srk_ctx.stream, b.g, n, 0xA7u, 1.0f);
    Result ref, got;
    srk_ctx.attn_mode = SRK_ATTN_SIMT;
    run_once(b);
    result(b, ref);
    int best = SRK_ATTN_SIMT, compared = 0;
    double best_ms = 0.0;
    if (srk_ctx.failed) {
        b.release();
        return best;
    }
#ifdef SR_CUDA_EMULATION
    const int reps = 1; /* the emulator's times say nothing: the choice is exercised, not meaningful */
#else
    const int reps = 3;
#endif
    for (int mode : {SRK_ATTN_WMMA, SRK_ATTN_MMA, SRK_ATTN_CUDNN}) {
        char err[512];
        if (mode == SRK_ATTN_MMA && hd != 32 && hd != 64) continue; /* the wmma kernels' shapes */
        if (mode == SRK_ATTN_CUDNN) {
            const char *why = cudnn_why_not(C, NH, err, sizeof err);
            if (why) {
                add(" cudnn unavailable (%.160s);", why);
                continue;
            }
        }
        long tc = srk_ctx.attn_tc_launches, mma = srk_ctx.attn_mma_launches, cd = srk_ctx.attn_cudnn_calls;
        srk_ctx.attn_mode = mode;
        srk_ctx.quiet = 1;
        run_once(b);
        if (!srk_ctx.failed) result(b, got);
        srk_ctx.quiet = 0;
        if (srk_ctx.failed) {
            if (cudaDeviceSynchronize() != cudaSuccess) { /* a fault: the context is gone; say it now */
                fprintf(stderr, "shardc cuda: error: %s\n", srk_ctx.err);
                b.release();
                return mode;
            }
            add(" %s failed (%.200s);", name(mode), srk_ctx.err);
            srk_ctx.failed = 0, srk_ctx.err[0] = 0;
            continue;
        }
        if (path_since(tc, mma, cd) != mode) continue; /* it fell back to another path for this shape */
        compared++;
        if (mode == spoil) got.grad[got.grad.size() / 2] += 1.0f;
        double eo = rel_diff(ref.out, got.out), el = rel_diff(ref.lse, got.lse), eg = rel_diff(ref.grad, got.grad);
        double worst = fmax(eo, fmax(el, eg));
        if (!(worst <= SRK_PICK_TOL)) {
            add(" %s differs from simt (out %.2g, lse %.2g, gradients %.2g; tolerance %g): not used;", name(mode), eo,
                el, eg, SRK_PICK_TOL);
            continue;
        }
        double ms = time_it(b, reps);
        if (srk_ctx.failed) break;
        add(" %s %.3f ms (differs %.1e);", name(mode), ms, worst);
        if (best == SRK_ATTN_SIMT || ms < 0.9 * best_ms) best = mode, best_ms = ms;
    }
    b.release();
    if (!compared) add(" no other path takes this layout: simt");
    else if (best == SRK_ATTN_SIMT) add(" no other path agrees with simt: simt (slow)");
    else add(" using %s", name(best));
    return best;
}

} /* namespace srk_pick */

/* SHARDC_CUDA_ATTN=auto: the mode for this call's head layout, from the trial run at the
 * layout's first call (see above); the mode set before is returned, for the caller to restore */
template <class TQ>
static int srk_attn_auto_begin(long B, long T, long C, long NH, long L)
{
    int saved = srk_ctx.attn_mode;
    if constexpr (srk_dt<TQ>::value == SRK_BF16) { /* else auto runs as wmma's dispatch */
        if (saved != SRK_ATTN_AUTO || !srk_ctx.bf16 || srk_ctx.cc_major < 8 || srk_ctx.failed) return saved;
        for (int i = 0; i < srk_ctx.attn_picks; i++)
            if (srk_ctx.attn_pick[i].C == C && srk_ctx.attn_pick[i].NH == NH && srk_ctx.attn_pick[i].L == L) {
                srk_ctx.attn_mode = srk_ctx.attn_pick[i].mode;
                return saved;
            }
        if (srk_ctx.attn_picks == SRK_ATTN_PICKS) { /* more layouts than a program has: the first's choice */
            srk_ctx.attn_mode = srk_ctx.attn_pick[0].mode;
            return saved;
        }
        /* the tests' counters count the program's calls, not the trial's */
        long tc = srk_ctx.attn_tc_launches, mma = srk_ctx.attn_mma_launches, cd = srk_ctx.attn_cudnn_calls;
        char line[sizeof srk_ctx.attn_note];
        int mode = srk_pick::trial<TQ>(B, T, C, NH, L, -1, line, sizeof line);
        srk_ctx.attn_tc_launches = tc, srk_ctx.attn_mma_launches = mma, srk_ctx.attn_cudnn_calls = cd;
        srk_ctx.attn_pick[srk_ctx.attn_picks++] = {(int)C, (int)NH, (int)L, mode};
        size_t at = strlen(srk_ctx.attn_note); /* one line per layout */
        snprintf(srk_ctx.attn_note + at, sizeof srk_ctx.attn_note - at, "%s%s", at ? "\n" : "", line);
        srk_ctx.attn_mode = mode;
    }
    return saved;
}

#endif /* SRK_ATTENTION_PICK_CUH */
