/* cudnn_standin.cpp: srk_cudnn.h's three calls answered on the host, linked
 * into test_kernels_emu_cudnn in place of attention_cudnn.cpp, so that the
 * emulator can run SHARDC_CUDA_ATTN=cudnn's wrapper (srk_attention_cudnn.cuh)
 * through every attention case of the kernel test: which gradients go to
 * their tensors and which through scratch and an add, the output's copy
 * in the aux buffer, the lse handed from the forward to the backward.
 *
 * It keeps cuDNN's contract as srk_cudnn.h states it: the forward writes o
 * and lse (natural log), the backward overwrites dq, dk, dv and reads the
 * o and lse the forward wrote; it checks the latter (recomputing both from
 * q, k, v) and fails, with a message, on a backward handed anything else
 * or no workspace. It says nothing about cuDNN itself: the GPU runs that
 * (scripts/gpu-check.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "emu/cuda_emu.h" /* cudaMemcpy: the emulator's */
#include "shardrt.h"
#include "srk_cudnn.h"

namespace {

const long WS_BYTES = 4096;

float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

std::vector<float> down(const void *d, size_t n)
{
    std::vector<uint16_t> h(n);
    cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = from_bf16(h[i]);
    return f;
}
void up(void *d, const std::vector<float> &f)
{
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); i++) h[i] = to_bf16(f[i]);
    cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
}
/* rows of C elements L apart on the device <-> (rows, C) on the host; up_rows leaves the
 * elements between the rows as they are (the other parts of a packed q|k|v) */
std::vector<float> down_rows(const void *d, size_t rows, int C, int L)
{
    std::vector<float> all = down(d, (rows - 1) * L + C), f(rows * C);
    for (size_t r = 0; r < rows; r++) memcpy(&f[r * C], &all[r * L], C * sizeof(float));
    return f;
}
void up_rows(void *d, const std::vector<float> &f, size_t rows, int C, int L)
{
    std::vector<float> all = down(d, (rows - 1) * L + C);
    for (size_t r = 0; r < rows; r++) memcpy(&all[r * L], &f[r * C], C * sizeof(float));
    up(d, all);
}

/* lse (B, NH, T) of the scaled causal scores */
std::vector<float> lse_of(const std::vector<float> &q, const std::vector<float> &k, int B, int T, int C, int NH,
                          float scale)
{
    int hd = C / NH;
    std::vector<float> lse((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                std::vector<double> s((size_t)i + 1);
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += (double)q[((size_t)b * T + i) * C + h * hd + e] * k[((size_t)b * T + j) * C + h * hd + e];
                    s[j] = d * scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = 0; j <= i; j++) sum += exp(s[j] - m);
                lse[((size_t)b * NH + h) * T + i] = (float)(m + log(sum));
            }
    return lse;
}

int fail(char *err, size_t n, const char *msg)
{
    snprintf(err, n, "cuDNN stand-in: %s", msg);
    return -1;
}

} /* namespace */

extern "C" long srk_cudnn_version(char *, size_t) { return 0; }

extern "C" long srk_cudnn_attn_workspace(int, int, int, int, int, int, float, char *, size_t) { return WS_BYTES; }

extern "C" int srk_cudnn_attn_fwd(void *, void *ws, void *o, float *lse, const void *q, const void *k, const void *v,
                                  int B, int T, int C, int L, int NH, float scale, char *err, size_t errlen)
{
    if (!ws) return fail(err, errlen, "no workspace");
    size_t n = (size_t)B * T * C, rows = (size_t)B * T;
    std::vector<float> hq = down_rows(q, rows, C, L), hk = down_rows(k, rows, C, L), hv = down_rows(v, rows, C, L);
    std::vector<float> out(n), att((size_t)B * NH * T * T);
    sr_attention_fwd(out.data(), att.data(), hq.data(), hk.data(), hv.data(), B, T, C, NH);
    up(o, out);
    std::vector<float> l = lse_of(hq, hk, B, T, C, NH, scale);
    cudaMemcpy(lse, l.data(), l.size() * sizeof(float), cudaMemcpyHostToDevice);
    return 0;
}

extern "C" int srk_cudnn_attn_bwd(void *, void *ws, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                  const void *k, const void *v, const void *o, const float *lse, int B, int T, int C,
                                  int L, int NH, float scale, char *err, size_t errlen)
{
    if (!ws) return fail(err, errlen, "no workspace");
    if (!dq || !dk || !dv) return fail(err, errlen, "cuDNN writes all three gradients: one is NULL");
    size_t n = (size_t)B * T * C, nl = (size_t)B * NH * T, rows = (size_t)B * T;
    std::vector<float> hq = down_rows(q, rows, C, L), hk = down_rows(k, rows, C, L), hv = down_rows(v, rows, C, L);
    std::vector<float> hg = down(dout, n), ho = down(o, n);
    std::vector<float> out(n), att(nl * T), gq(n), gk(n), gv(n), hl(nl);
    sr_attention_fwd(out.data(), att.data(), hq.data(), hk.data(), hv.data(), B, T, C, NH);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(from_bf16(to_bf16(out[i])) - ho[i]) <= 1e-2f * (fabsf(out[i]) + 1e-2f))) /* NaN fails */
            return fail(err, errlen, "the o handed to the backward is not the forward's output");
    cudaMemcpy(hl.data(), lse, nl * sizeof(float), cudaMemcpyDeviceToHost);
    std::vector<float> want = lse_of(hq, hk, B, T, C, NH, scale);
    for (size_t i = 0; i < nl; i++)
        if (!(fabsf(hl[i] - want[i]) <= 1e-4f * (fabsf(want[i]) + 1.0f)))
            return fail(err, errlen, "the lse handed to the backward is not the forward's");
    sr_attention_bwd(gq.data(), gk.data(), gv.data(), hg.data(), hq.data(), hk.data(), hv.data(), att.data(), B, T, C,
                     NH);
    up_rows(dq, gq, rows, C, L), up_rows(dk, gk, rows, C, L), up_rows(dv, gv, rows, C, L);
    return 0;
}
