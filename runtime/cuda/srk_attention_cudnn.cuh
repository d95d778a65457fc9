/* srk_attention_cudnn.cuh: SHARDC_CUDA_ATTN=cudnn, causal attention through
 * cuDNN's fused flash attention (srk_cudnn.h, attention_cudnn.cpp) in bf16
 * programs. The forward writes out and lse (cuDNN's Stats: the same
 * natural-log log-sum-exp the other paths keep) and copies out into the aux
 * buffer's copy of the output, which the backward hands cuDNN as O; the
 * backward needs no delta (cuDNN forms it). cuDNN overwrites dq, dk, dv: a
 * gradient that is not fresh bf16 goes through a scratch tensor and is added
 * (with q|k|v packed, dq|dk|dv are the parts of one d(qkv): one scratch of
 * its size and one add).
 *
 * Head sizes 32 to 128 in steps of 16 (within what cuDNN's flash attention
 * takes, a multiple of 8, and where its kernels are tuned) with 16-byte
 * aligned tensors, on sm_80 and later (its bf16 flash attention's floor);
 * other shapes and GPUs stay on the other kernels. cuDNN
 * failing (not found, no plan for the shape) is an error, not a fallback:
 * the user asked for it.
 */
#ifndef SRK_ATTENTION_CUDNN_CUH
#define SRK_ATTENTION_CUDNN_CUH

#include "srk_cudnn.h"

static inline int srk_attn_cudnn_fits(int C, int NH, const void *a, const void *b, const void *c, const void *d,
                                      const void *e)
{
    int hd = C / NH;
    return srk_ctx.attn_mode == SRK_ATTN_CUDNN && srk_ctx.bf16 && srk_ctx.cc_major >= 8 && hd % 16 == 0 && hd >= 32 &&
           hd <= 128 && srk_tc::aligned16(a) && srk_tc::aligned16(b) && srk_tc::aligned16(c) && srk_tc::aligned16(d) &&
           srk_tc::aligned16(e);
}

/* cuDNN's error, with the .model site and the generated line it ran for (as a kernel's error names them) */
static inline void srk_attn_cudnn_fail(const char *err)
{
    const char *f = srk_ctx.site_file ? srk_ctx.site_file : "(runtime)", *base = strrchr(f, '/');
    srk_fail("SHARDC_CUDA_ATTN=cudnn: %s (%s, at %s:%d)", err, srk_ctx.site_what ? srk_ctx.site_what : "attention",
             base ? base + 1 : f, srk_ctx.site_line);
}

/* the workspace of one direction, or NULL with the error recorded */
static inline void *srk_attn_cudnn_ws(int bwd, int B, int T, int C, int L, int NH, float scale, int *ok)
{
    char err[512];
    long n = srk_cudnn_attn_workspace(bwd, B, T, C, L, NH, scale, err, sizeof err);
    *ok = n >= 0;
    if (n < 0) {
        srk_attn_cudnn_fail(err);
        return NULL;
    }
    void *w = n > 0 ? srk_scratch(SRK_SCR_CUDNN_WS, (size_t)n) : NULL;
    if (n > 0 && !w) *ok = 0;
    return w;
}

/* 1 when cuDNN ran the forward (or failed, recorded): out (B,T,C), q, k, v rows L apart, aux as
 * srk_attention.cuh lays it out */
template <class TO, class TQ, class TK, class TV>
static inline int srk_attn_cudnn_fwd(TO *out, TO *copy, float *lse, const TQ *q, const TK *k, const TV *v, int B, int T,
                                     int C, int L, int NH, float scale)
{
    if constexpr (srk_dt<TO>::value == SRK_BF16 && srk_dt<TQ>::value == SRK_BF16 && srk_dt<TK>::value == SRK_BF16 &&
                  srk_dt<TV>::value == SRK_BF16) {
        if (!srk_attn_cudnn_fits(C, NH, q, k, v, out, copy)) return 0;
        int ok;
        void *ws = srk_attn_cudnn_ws(0, B, T, C, L, NH, scale, &ok);
        if (!ok) return 1;
        char err[512];
        if (srk_cudnn_attn_fwd((void *)srk_ctx.stream, ws, out, lse, q, k, v, B, T, C, L, NH, scale, err, sizeof err)) {
            srk_attn_cudnn_fail(err);
            return 1;
        }
        srk_ctx.attn_cudnn_calls++;
        srk_copy(copy, (const TO *)out, (long)B * T * C);
        return 1;
    }
    return 0;
}

/* where cuDNN writes one gradient: the tensor itself when fresh bf16, else scratch id */
template <class TD>
static inline bf16 *srk_attn_cudnn_dst(TD *d, int fresh, size_t n, int scratch_id)
{
    if constexpr (srk_dt<TD>::value == SRK_BF16)
        if (d && fresh && srk_tc::aligned16(d)) return (bf16 *)d;
    return (bf16 *)srk_scratch(scratch_id, n * sizeof(bf16));
}
template <class TD>
static inline void srk_attn_cudnn_add(TD *d, const bf16 *got, int fresh, long n)
{
    if (d && (const void *)d != (const void *)got) srk_axpy(d, got, 1.0f, n, fresh);
}

/* 1 when cuDNN ran the backward (or failed, recorded); fresh as srk_attention_bwd's. With L != C,
 * dq, dk, dv are the parts of one packed d(qkv) (dk = dq + C, dv = dq + 2C, L = 3C; fresh 0 or 7,
 * srk_attention_qkv_bwd) */
template <class TDQ, class TDK, class TDV, class TG, class TQ, class TK, class TV>
static inline int srk_attn_cudnn_bwd(TDQ *dq, TDK *dk, TDV *dv, const TG *dout, const TQ *q, const TK *k, const TV *v,
                                     const TG *o, const float *lse, int B, int T, int C, int L, int NH, float scale,
                                     int fresh)
{
    if constexpr (srk_dt<TG>::value == SRK_BF16 && srk_dt<TQ>::value == SRK_BF16 && srk_dt<TK>::value == SRK_BF16 &&
                  srk_dt<TV>::value == SRK_BF16) {
        if (!srk_attn_cudnn_fits(C, NH, q, k, v, dout, o)) return 0;
        int ok;
        void *ws = srk_attn_cudnn_ws(1, B, T, C, L, NH, scale, &ok);
        if (!ok) return 1;
        size_t n = (size_t)B * T * C;
        bf16 *gq, *gk, *gv;
        if (L != C) { /* packed: d(qkv) itself, or one scratch laid out as it */
            if (!dq || (const void *)dk != (const void *)(dq + C) || (const void *)dv != (const void *)(dq + 2 * C) ||
                L != 3 * C || (fresh != 0 && fresh != 7)) {
                srk_fail("cuDNN attention: packed gradients must be the three parts of one d(qkv)");
                return 1;
            }
            gq = srk_attn_cudnn_dst(dq, fresh & 1, (size_t)B * T * L, SRK_SCR_ATTN_DQ);
            gk = gq ? gq + C : NULL;
            gv = gq ? gq + 2 * C : NULL;
        } else {
            gq = srk_attn_cudnn_dst(dq, fresh & 1, n, SRK_SCR_ATTN_DQ);
            gk = srk_attn_cudnn_dst(dk, fresh >> 1 & 1, n, SRK_SCR_ATTN_DK);
            gv = srk_attn_cudnn_dst(dv, fresh >> 2 & 1, n, SRK_SCR_ATTN_DV);
        }
        if (!gq || !gk || !gv) return 1;
        char err[512];
        if (srk_cudnn_attn_bwd((void *)srk_ctx.stream, ws, gq, gk, gv, dout, q, k, v, o, lse, B, T, C, L, NH, scale,
                               err, sizeof err)) {
            srk_attn_cudnn_fail(err);
            return 1;
        }
        srk_ctx.attn_cudnn_calls++;
        if (L != C) {
            srk_attn_cudnn_add(dq, gq, fresh & 1, (long)B * T * L);
            return 1;
        }
        srk_attn_cudnn_add(dq, gq, fresh & 1, (long)n);
        srk_attn_cudnn_add(dk, gk, fresh >> 1 & 1, (long)n);
        srk_attn_cudnn_add(dv, gv, fresh >> 2 & 1, (long)n);
        return 1;
    }
    return 0;
}

#endif /* SRK_ATTENTION_CUDNN_CUH */
