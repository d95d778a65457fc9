/* srk_tp.cuh: tensor-parallel ops on the device, in forward/backward pairs,
 * as runtime/tp.c does them on the host: the activation all-reduce and
 * all-gather, the vocab-parallel embedding and cross-entropy.
 *
 * Collectives go through the comm layer (sr_comm.h) on device memory: NCCL
 * on a GPU, or MPI staged through host memory (--comm mpi, and the
 * emulator). The comm layer orders each collective after the kernels queued
 * before it, and sr_comm_wait_device orders the kernels queued after it
 * behind its result (NCCL: stream events, no host wait; MPI: the host
 * waits), so nothing here synchronizes. What a bf16 program sums or
 * gathers in bf16 moves as bf16 (2 bytes an element, as Megatron-LM's
 * activations do; NCCL and the MPI path sum a pair in float and round it);
 * float tensors, and a sum that a float tensor receives, move as float.
 * A failed collective inside a step cannot return through generated code:
 * like tp.c, it is fatal (message, then every rank aborted).
 */
#ifndef SRK_TP_CUH
#define SRK_TP_CUH

#include <stdio.h>
#include <stdlib.h>

#include "sr_comm.h"
#include "sr_program.h"
#include "srk_norm.cuh"

static inline void srk_tp_fatal(const char *what)
{
    fprintf(stderr, "error: tensor-parallel %s failed: %s\n", what, sr_errmsg());
    sr_comm_abort(1);
    exit(1);
}

/* a launched collective (its status, its request): kernels queued next see
 * its result. The request by address: the call that sets it is the other
 * argument, and arguments are evaluated in no fixed order */
static inline sr_status srk_tp_then(sr_status st, sr_req **q) { return st == SR_OK ? sr_comm_wait_device(*q) : st; }

/* the element type a tensor of T moves as, and the comm layer's name for it */
template <class T>
struct srk_wire {
    typedef float type;
    static constexpr sr_dtype dt = SR_F32;
};
template <>
struct srk_wire<bf16> {
    typedef bf16 type;
    static constexpr sr_dtype dt = SR_BF16;
};

/* buf (n) summed over the tensor group in place, in its type: started after the kernels
 * queued so far; its request (NULL: nothing to wait for), for sr_comm_wait_device */
template <class T>
sr_req *srk_tp_allreduce_start(sr_exec *e, T *buf, long n)
{
    sr_req *q = NULL;
    if (n <= 0 || e->tp <= 1 || srk_ctx.failed) return NULL;
    if (sr_comm_allreduce_t(e->tp_comm, srk_wire<T>::dt, buf, n, "activation", &q) != SR_OK) srk_tp_fatal("all-reduce");
    return q;
}
/* the kernels queued next see the result of q (NULL: nothing to wait for) */
static inline void srk_tp_wait(sr_req *q, const char *what)
{
    if (q && sr_comm_wait_device(q) != SR_OK) srk_tp_fatal(what);
}

/* out (n) = sum over the tensor group of in (n), summed in place in out's type */
template <class TO, class TI>
void srk_tp_allreduce(sr_exec *e, TO *out, const TI *in, long n)
{
    if (n <= 0) return;
    if ((const void *)out != (const void *)in) srk_copy(out, in, n);
    srk_tp_wait(srk_tp_allreduce_start(e, out, n), "all-reduce");
}

/* srk_matmul_bias_bwd (srk_matmul.cuh) whose da, a column-parallel layer's
 * input gradient, is then summed over the tensor group: the all-reduce is
 * started after da's GEMM and waited for after the weight gradient's (with
 * the bias's), so that on a GPU it runs on the communication stream while
 * that GEMM runs (Megatron-LM's asynchronous tensor-parallel all-reduce).
 * The same sums as the two calls one after the other;
 * SHARDC_CUDA_TP_OVERLAP=0 runs them so (for comparisons) */
template <class TDA, class TDB, class TDBias, class TG, class TA, class TB>
void srk_matmul_bias_bwd_ar(sr_exec *e, TDA *da, TDB *db, TDBias *dbias, const TG *dout, const TA *a, const TB *b,
                            long M, long K, long N, int fresh = 0)
{
    if (e->tp <= 1 || srk_ctx.no_tp_overlap || !da || !db || M <= 0 || N <= 0 || K <= 0) {
        srk_matmul_bias_bwd(da, db, dbias, dout, a, b, M, K, N, fresh);
        srk_tp_allreduce(e, da, da, M * K);
        return;
    }
    int gdt;
    const void *g = srk_grad_operand(dout, M * N, &gdt);
    srk_dgrad(da, g, gdt, b, M, K, N, fresh);
    sr_req *q = srk_tp_allreduce_start(e, da, M * K);
    srk_wgrad(db, dbias, dout, g, gdt, a, M, K, N, fresh);
    srk_tp_wait(q, "all-reduce");
}

/* tmp (tp, outer, local, inner) -> out (outer, tp*local, inner) */
template <class TO, class TT>
__global__ void tp_gather_permute_kernel(TO *out, const TT *tmp, long outer, long local, long inner, int tp)
{
    long blk = outer * local * inner, n = blk * tp;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long r = e / blk, rem = e - r * blk;
        long o = rem / (local * inner), li = rem - o * local * inner;
        out[(o * tp + r) * local * inner + li] = srk_to<TO>(srk_ld(tmp[e]));
    }
}
/* in is gathered as it is, in its own type (bf16: 2 bytes an element) */
template <class TO, class TI>
void srk_tp_allgather(sr_exec *e, TO *out, const TI *in, long outer, long local, long inner)
{
    typedef typename srk_wire<TI>::type TW;
    long blk = outer * local * inner;
    if (blk <= 0) return;
    int tp = e->tp > 0 ? e->tp : 1;
    const TW *send = in;
    TW *tmp = (TW *)srk_scratch(SRK_SCR_CONV_A, sizeof(TW) * (size_t)(blk * tp));
    if (!tmp || srk_ctx.failed) return;
    sr_req *q = NULL;
    if (tp > 1 &&
        srk_tp_then(sr_comm_allgather_t(e->tp_comm, srk_wire<TI>::dt, send, tmp, blk, "activation", &q), &q) != SR_OK)
        srk_tp_fatal("all-gather");
    if (tp == 1) srk_copy(tmp, send, blk);
    SR_LAUNCH((tp_gather_permute_kernel<TO, TW>), srk_blocks(blk * tp, SRK_EW_THREADS), SRK_EW_THREADS, 0,
              srk_ctx.stream, out, (const TW *)tmp, outer, local, inner, tp);
}

/* dx (outer, local, inner) += this rank's columns of dout (outer, tp*local, inner) */
template <class TD, class TG>
__global__ void tp_gather_bwd_kernel(TD *dx, const TG *dout, long outer, long local, long inner, int tp, int rank)
{
    long n = outer * local * inner;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long o = e / (local * inner), li = e - o * local * inner;
        srk_acc(&dx[e], srk_ld(dout[(o * tp + rank) * local * inner + li]));
    }
}
template <class TD, class TG>
void srk_tp_allgather_bwd(sr_exec *e, TD *dx, const TG *dout, long outer, long local, long inner)
{
    long n = outer * local * inner;
    if (!dx || n <= 0) return;
    SR_LAUNCH((tp_gather_bwd_kernel<TD, TG>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dx,
              dout, outer, local, inner, e->tp > 0 ? e->tp : 1, e->tp_rank);
}

/* ---- sequence parallelism ------------------------------------------------------------------ */
/* tmp (tp, outer, local, inner) = in (outer, tp*local, inner) regrouped by rank */
template <class TT, class TI>
__global__ void tp_scatter_permute_kernel(TT *tmp, const TI *in, long outer, long local, long inner, int tp)
{
    long blk = outer * local * inner, n = blk * tp;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long r = e / blk, rem = e - r * blk;
        long o = rem / (local * inner), li = rem - o * local * inner;
        tmp[e] = srk_to<TT>(srk_ld(in[(o * tp + r) * local * inner + li]));
    }
}
/* this rank's block of in (outer, tp*local, inner) summed over the group (outer, local,
 * inner) in scratch (slots send, recv), in bf16 for bf16 in, else float: started after
 * the kernels queued so far; *q its request (NULL: nothing to wait for). NULL after an
 * error (already reported) */
template <class TI>
const typename srk_wire<TI>::type *srk_tp_seq_rs_start(sr_exec *e, const TI *in, long outer, long local, long inner,
                                                        const char *what, int send, int recv_slot, sr_req **q)
{
    typedef typename srk_wire<TI>::type TW;
    long blk = outer * local * inner;
    int tp = e->tp > 0 ? e->tp : 1;
    *q = NULL;
    TW *tmp = (TW *)srk_scratch(send, sizeof(TW) * (size_t)(blk * tp));
    TW *recv = (TW *)srk_scratch(recv_slot, sizeof(TW) * (size_t)blk);
    if (!tmp || !recv) return NULL;
    SR_LAUNCH((tp_scatter_permute_kernel<TW, TI>), srk_blocks(blk * tp, SRK_EW_THREADS), SRK_EW_THREADS, 0,
              srk_ctx.stream, tmp, in, outer, local, inner, tp);
    if (srk_ctx.failed) return NULL;
    if (tp == 1) return tmp;
    if (sr_comm_reduce_scatter_t(e->tp_comm, srk_wire<TI>::dt, tmp, recv, blk, what, q) != SR_OK)
        srk_tp_fatal("reduce-scatter");
    return recv;
}
/* the same, its result waited for by the kernels queued next */
template <class TI>
const typename srk_wire<TI>::type *srk_tp_seq_reduce_scatter(sr_exec *e, const TI *in, long outer, long local,
                                                              long inner, const char *what)
{
    sr_req *q = NULL;
    const auto *sum = srk_tp_seq_rs_start(e, in, outer, local, inner, what, SRK_SCR_CONV_A, SRK_SCR_CONV_B, &q);
    srk_tp_wait(q, "reduce-scatter");
    return sum;
}
/* out (outer, local, inner) = this rank's block of in (outer, tp*local, inner) summed over the group */
template <class TO, class TI>
void srk_tp_reduce_scatter(sr_exec *e, TO *out, const TI *in, long outer, long local, long inner)
{
    long blk = outer * local * inner;
    if (blk <= 0) return;
    const auto *sum = srk_tp_seq_reduce_scatter(e, in, outer, local, inner, "activation");
    if (sum) srk_copy(out, sum, blk);
}
/* dx (outer, local, inner) += this rank's block of dout (outer, tp*local, inner) summed
 * over the group: the all-gather's backward on a partial dout, one reduce-scatter
 * (compiler/autodiff.c folds the all-reduce and the slice into it) */
template <class TD, class TG>
void srk_tp_allgather_bwd_rs(sr_exec *e, TD *dx, const TG *dout, long outer, long local, long inner)
{
    long blk = outer * local * inner;
    if (!dx || blk <= 0) return;
    typedef typename srk_wire<TG>::type TW;
    const TW *sum;
    if (srk_ctx.rs_pending.of == (const void *)dout) { /* started by srk_matmul_bias_bwd_rs */
        sum = (const TW *)srk_ctx.rs_pending.sum;
        srk_tp_wait(srk_ctx.rs_pending.q, "reduce-scatter");
        srk_ctx.rs_pending.of = NULL;
    } else {
        sum = srk_tp_seq_reduce_scatter(e, dout, outer, local, inner, "activation grad");
    }
    if (sum) srk_add_bwd(dx, (float *)NULL, sum, blk, blk);
}

/* srk_matmul_bias_bwd (srk_matmul.cuh) whose da (outer, tp*local, inner = M x K), a
 * sequence-parallel column-parallel layer's input gradient, is reduce-scattered over
 * the tensor group by the walk's next step (srk_tp_allgather_bwd_rs): the
 * reduce-scatter is started after da's GEMM, from scratch of its own (the GEMMs'
 * operand conversions use theirs), and left in flight during the weight gradient's
 * GEMM; the next step waits for it and adds this rank's block. Megatron-LM overlaps
 * sequence parallelism's reduce-scatter so. The same sums in the same order;
 * SHARDC_CUDA_TP_OVERLAP=0 leaves it all to the next step */
template <class TDA, class TDB, class TDBias, class TG, class TA, class TB>
void srk_matmul_bias_bwd_rs(sr_exec *e, TDA *da, TDB *db, TDBias *dbias, const TG *dout, const TA *a, const TB *b,
                            long M, long K, long N, int fresh, long outer, long local, long inner)
{
    srk_ctx.rs_pending.of = NULL;
    if (e->tp <= 1 || srk_ctx.no_tp_overlap || !da || !db || M <= 0 || N <= 0 || K <= 0 ||
        outer * local * inner * e->tp != M * K) {
        srk_matmul_bias_bwd(da, db, dbias, dout, a, b, M, K, N, fresh);
        return;
    }
    int gdt;
    const void *g = srk_grad_operand(dout, M * N, &gdt);
    srk_dgrad(da, g, gdt, b, M, K, N, fresh);
    sr_req *q = NULL;
    const void *sum = srk_tp_seq_rs_start(e, (const TDA *)da, outer, local, inner, "activation grad", SRK_SCR_RS_SEND,
                                          SRK_SCR_RS_RECV, &q);
    srk_wgrad(db, dbias, dout, g, gdt, a, M, K, N, fresh);
    if (!sum) return;
    srk_ctx.rs_pending.of = da;
    srk_ctx.rs_pending.sum = sum;
    srk_ctx.rs_pending.q = q;
}

/* dx (outer, tp*local, inner) += dout (outer, local, inner) gathered from the group */
template <class TD, class TG>
void srk_tp_reduce_scatter_bwd(sr_exec *e, TD *dx, const TG *dout, long outer, long local, long inner)
{
    long n = outer * local * inner * (e->tp > 0 ? e->tp : 1);
    if (!dx || n <= 0) return;
    float *full = (float *)srk_scratch(SRK_SCR_TP, sizeof(float) * (size_t)n);
    if (!full) return;
    srk_tp_allgather(e, full, dout, outer, local, inner);
    srk_add_bwd(dx, (float *)NULL, full, n, n);
}

/* BWD = 0: out (outer, local, inner) = this rank's block of in (outer, tp*local, inner);
 * BWD = 1: out (outer, tp*local, inner) block += in (outer, local, inner) */
template <int BWD, class TO, class TI>
__global__ void tp_slice_kernel(TO *out, const TI *in, long outer, long local, long inner, int tp, int rank)
{
    long n = outer * local * inner;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long o = e / (local * inner), li = e - o * local * inner, wide = (o * tp + rank) * local * inner + li;
        if (BWD) srk_acc(&out[wide], srk_ld(in[e]));
        else out[e] = srk_to<TO>(srk_ld(in[wide]));
    }
}
template <class TO, class TI>
void srk_tp_slice(sr_exec *e, TO *out, const TI *in, long outer, long local, long inner)
{
    long n = outer * local * inner;
    if (n <= 0) return;
    SR_LAUNCH((tp_slice_kernel<0, TO, TI>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out, in,
              outer, local, inner, e->tp > 0 ? e->tp : 1, e->tp_rank);
}
template <class TD, class TG>
void srk_tp_slice_bwd(sr_exec *e, TD *dx, const TG *dout, long outer, long local, long inner)
{
    long n = outer * local * inner;
    if (!dx || n <= 0) return;
    SR_LAUNCH((tp_slice_kernel<1, TD, TG>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dx, dout,
              outer, local, inner, e->tp > 0 ? e->tp : 1, e->tp_rank);
}

/* dropout of a (B, Tl, Cl) part of a (B, T, C) microbatch tensor, keyed as the host keys
 * the whole tensor: element (b, t, c) is element (row0 + b*T + rt*Tl + t, rc*Cl + c);
 * sequence parallelism cuts T (rt = rank), the column cut C (rc = rank) */
template <int BWD, class TO, class TX>
__global__ void dropout_part_kernel(TO *out, const TX *x, long B, long Tl, long Cl, long T, long rt, long C, long rc,
                                    long row0, float p, float scale, uint64_t key)
{
    long n = B * Tl * Cl;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long c = e % Cl, bt = e / Cl, t = bt % Tl, b = bt / Tl;
        uint64_t row = (uint64_t)(row0 + b * T + rt * Tl + t);
        float v = srk_rng_at(key, row * (uint64_t)C + (uint64_t)(rc * Cl + c)) >= p ? srk_ld(x[e]) * scale : 0.0f;
        if (BWD) srk_acc(&out[e], v);
        else out[e] = srk_to<TO>(v);
    }
}
template <int BWD, class TO, class TX>
void srk_dropout_part(sr_exec *e, TO *out, const TX *x, long B, long Tl, long Cl, int seq, unsigned op)
{
    long n = B * Tl * Cl;
    float p = e->dropout;
    int tp = e->tp > 0 ? e->tp : 1;
    if (!out || n <= 0 || (BWD && p >= 1.0f)) return;
    if (!(p > 0.0f)) {
        if (BWD) srk_add_bwd(out, (float *)NULL, x, n, n);
        else srk_copy(out, x, n);
        return;
    }
    if (p >= 1.0f) {
        srk_zero(out, n);
        return;
    }
    uint64_t key = srk_rng_key(e->seed, (e->step << 20) ^ (uint64_t)op);
    long T = seq ? Tl * tp : Tl, rt = seq ? e->tp_rank : 0, C = seq ? Cl : Cl * tp, rc = seq ? 0 : e->tp_rank;
    SR_LAUNCH((dropout_part_kernel<BWD, TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out,
              x, B, Tl, Cl, T, rt, C, rc, (long)e->row0, p, 1.0f / (1.0f - p), key);
}
/* sequence parallelism: x (B, T/tp, C) */
template <class TO, class TX>
void srk_dropout_seq_fwd(sr_exec *e, TO *out, const TX *x, long B, long Tl, long C, unsigned op)
{
    srk_dropout_part<0>(e, out, x, B, Tl, C, 1, op);
}
template <class TD, class TG>
void srk_dropout_seq_bwd(sr_exec *e, TD *dx, const TG *dout, long B, long Tl, long C, unsigned op)
{
    srk_dropout_part<1>(e, dx, dout, B, Tl, C, 1, op);
}
/* a tensor split along its columns: x (B, T, C/tp) */
template <class TO, class TX>
void srk_dropout_col_fwd(sr_exec *e, TO *out, const TX *x, long B, long T, long Cl, unsigned op)
{
    srk_dropout_part<0>(e, out, x, B, T, Cl, 0, op);
}
template <class TD, class TG>
void srk_dropout_col_bwd(sr_exec *e, TD *dx, const TG *dout, long B, long T, long Cl, unsigned op)
{
    srk_dropout_part<1>(e, dx, dout, B, T, Cl, 0, op);
}

/* ---- vocab-parallel embedding: rows [rank*Vl, (rank+1)*Vl) of the table here ----------------- */
template <class TO, class TW>
__global__ void embedding_vp_fwd_kernel(TO *out, const TW *w, const int32_t *idx, long N, int D, long lo, long Vl)
{
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < N * D; e += (long)gridDim.x * blockDim.x) {
        long i = e / D, row = (long)idx[i] - lo;
        int j = (int)(e - i * D);
        out[e] = srk_to<TO>(row >= 0 && row < Vl ? srk_ld(w[row * D + j]) : 0.0f);
    }
}
template <class TO, class TW>
void srk_embedding_vp_fwd(TO *out, const TW *w, const int32_t *idx, long N, long D, long Vl, int rank)
{
    if (N <= 0 || D <= 0) return;
    SR_LAUNCH((embedding_vp_fwd_kernel<TO, TW>), srk_blocks(N * D, SRK_EW_THREADS), SRK_EW_THREADS, 0,
              srk_ctx.stream, out, w, idx, N, (int)D, (long)rank * Vl, Vl);
}
template <class TD, class TG>
void srk_embedding_vp_bwd(TD *dw, const TG *dout, const int32_t *idx, long N, long D, long Vl, int rank)
{
    // this rank's rows [rank * Vl, (rank + 1) * Vl) of dw += dout, in position order
    srk_embedding_bwd_rows(dw, dout, idx, N, D, (long)rank * Vl, Vl);
}

/* ---- vocab-parallel cross-entropy (Megatron's): the logits never gathered -------------------- */
template <class TL>
__global__ void ce_vp_max_kernel(float *mx, const TL *logits, int Vl, int nc)
{
    // one block per row: mx (N) = max over this rank's columns that are classes (the first nc)
    const TL *lr = logits + (long)blockIdx.x * Vl;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < nc; j += blockDim.x) m = fmaxf(m, srk_ld(lr[j]));
    m = srk_block_max(m);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}
static __global__ void ce_vp_allmax_kernel(float *allmx, const float *g, long N, int tp)
{
    // g (tp, N) -> allmx (N)
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        float m = g[i];
        for (int r = 1; r < tp; r++) m = fmaxf(m, g[(long)r * N + i]);
        allmx[i] = m;
    }
}
template <class TL>
__global__ void ce_vp_sums_kernel(float *sums, const float *allmx, const TL *logits, const int32_t *targets, long N,
                                  int Vl, int nc, long lo)
{
    // one block per row: sums[i] = sum exp(l - max) over the first nc columns, sums[N + i] = the
    // target's logit if this rank has it
    long i = blockIdx.x;
    const TL *lr = logits + i * Vl;
    float s = 0.0f;
    for (int j = threadIdx.x; j < nc; j += blockDim.x) s += expf(srk_ld(lr[j]) - allmx[i]);
    s = srk_block_sum(s);
    if (threadIdx.x == 0) {
        long t = (long)targets[i] - lo;
        sums[i] = s;
        sums[N + i] = (t >= 0 && t < nc) ? srk_ld(lr[t]) : 0.0f;
    }
}
static __global__ void ce_vp_rows_kernel(float *lse, float *rowloss, const float *allmx, const float *sums,
                                         const int32_t *targets, long classes, long N)
{
    // a row whose target is not a class (-100, torch's ignore_index) adds no loss
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
        float l = allmx[i] + logf(sums[i]);
        lse[i] = l;
        rowloss[i] = targets[i] >= 0 && targets[i] < classes ? l - sums[N + i] : 0.0f;
    }
}
template <class TD, class TL>
__global__ void ce_vp_bwd_kernel(TD *dlogits, const TL *logits, const float *lse, const int32_t *targets,
                                 const float *dloss, float dl, long N, int Vl, int nc, long lo, long classes, int over)
{
    // one block per row: dlogits += dloss/N * (exp(l - lse) - onehot(target in this rank's columns)),
    // the first nc of them (the rest pad), nothing for an ignored row; over: written instead, into
    // zeros (padding and ignored rows 0), and dlogits may be the logits themselves (each element
    // read, then written, by one thread). dloss NULL: dl is d loss
    long i = blockIdx.x;
    float sc = (dloss ? dloss[0] : dl) / (float)N, l = lse[i];
    bool live = targets[i] >= 0 && targets[i] < classes;
    long t = (long)targets[i] - lo;
    const TL *lr = logits + i * Vl;
    TD *dr = dlogits + i * Vl;
    if (!live && !over) return;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
        float p = live && j < nc ? sc * expf(srk_ld(lr[j]) - l) - (j == t ? sc : 0.0f) : 0.0f;
        if (over) dr[j] = srk_to<TD>(p);
        else if (j < nc) srk_acc(&dr[j], p);
    }
}
/* the vocabulary's classes: nv, or every rank's columns */
static inline long srk_ce_vp_classes(const sr_exec *e, long Vl, long nv)
{
    return nv > 0 ? nv : Vl * (e->tp > 0 ? e->tp : 1);
}

template <class TL>
void srk_crossentropy_vp_fwd(sr_exec *e, float *loss, float *lse, const TL *logits, const int32_t *targets, long N,
                             long Vl, long nv)
{
    if (N <= 0) {
        srk_zero(loss, 1);
        return;
    }
    int tp = e->tp > 0 ? e->tp : 1;
    long lo = (long)e->tp_rank * Vl;
    int nc = sr_ce_classes(lo, (int)Vl, (int)nv);
    /* scratch: mx (N), gathered maxima (tp*N), allmx (N), sums (2N), row losses (N) */
    float *s = (float *)srk_scratch(SRK_SCR_ROWS, sizeof(float) * (size_t)(N * (tp + 5)));
    if (!s) return;
    float *mx = s, *g = mx + N, *allmx = g + (long)tp * N, *sums = allmx + N, *rows = sums + 2 * N;
    SR_LAUNCH(ce_vp_max_kernel<TL>, (unsigned)N, CE_THREADS, 0, srk_ctx.stream, mx, logits, (int)Vl, nc);
    if (tp > 1) {
        if (srk_ctx.failed) return;
        sr_req *q = NULL;
        if (srk_tp_then(sr_comm_allgather(e->tp_comm, mx, g, N, "cross-entropy max", &q), &q) != SR_OK)
            srk_tp_fatal("cross-entropy");
        SR_LAUNCH(ce_vp_allmax_kernel, srk_blocks(N, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, allmx,
                  (const float *)g, N, tp);
    } else {
        srk_copy(allmx, mx, N);
    }
    SR_LAUNCH(ce_vp_sums_kernel<TL>, (unsigned)N, CE_THREADS, 0, srk_ctx.stream, sums, (const float *)allmx, logits,
              targets, N, (int)Vl, nc, lo);
    if (tp > 1) {
        if (srk_ctx.failed) return;
        sr_req *q = NULL;
        if (srk_tp_then(sr_comm_allreduce(e->tp_comm, sums, 2 * N, "cross-entropy sums", &q), &q) != SR_OK)
            srk_tp_fatal("cross-entropy");
    }
    SR_LAUNCH(ce_vp_rows_kernel, srk_blocks(N, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, lse, rows,
              (const float *)allmx, (const float *)sums, targets, srk_ce_vp_classes(e, Vl, nv), N);
    SR_LAUNCH(mean_rows_kernel, 1, 1024, 0, srk_ctx.stream, loss, (const float *)rows, N);
}
/* dlogits (N, Vl) += the gradient; over 1: written instead (into zeros), dlogits may be logits */
template <class TD, class TL>
void srk_crossentropy_vp_bwd(sr_exec *e, TD *dlogits, const TL *logits, const float *lse, const int32_t *targets,
                             const float *dloss, long N, long Vl, long nv, int over = 0, float dl = 0.0f)
{
    if (!dlogits || N <= 0) return;
    long lo = (long)e->tp_rank * Vl;
    SR_LAUNCH((ce_vp_bwd_kernel<TD, TL>), (unsigned)N, CE_THREADS, 0, srk_ctx.stream, dlogits, logits, lse, targets,
              dloss, dl, N, (int)Vl, sr_ce_classes(lo, (int)Vl, (int)nv), lo, srk_ce_vp_classes(e, Vl, nv), over);
}
/* a training step's forward (compiler/lossfuse.c): the loss, then its gradient over the logits
 * (the statistics' collectives come between the passes, so a pass of its own) */
template <class TL>
void srk_crossentropy_vp_fwd_bwd(sr_exec *e, float *loss, float *lse, TL *logits, const int32_t *targets, float dloss,
                                 long N, long Vl, long nv)
{
    srk_crossentropy_vp_fwd(e, loss, lse, (const TL *)logits, targets, N, Vl, nv);
    srk_crossentropy_vp_bwd(e, logits, (const TL *)logits, lse, targets, (const float *)NULL, N, Vl, nv, 1, dloss);
}

#endif /* SRK_TP_CUH */
