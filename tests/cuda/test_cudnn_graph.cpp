/* test_cudnn_graph: the cuDNN attention's SDPA graphs (attention_cudnn.cpp),
 * forward and backward, for the examples' shapes, through the cuDNN
 * frontend's validate() on a machine without a GPU: fake_cudart.c answers
 * its device questions (SHARDC_FAKE_CC), libcudnn.so.9 is the real one
 * (SHARDC_CUDNN_LIB). What it checks: the shapes, strides, data types and
 * causal mask we hand cuDNN are within its fused attention's support
 * surface on sm_80 and sm_90, and the forward is refused on sm_75 (bf16
 * flash attention needs sm_80; the frontend checks the backward's
 * architecture later), so the check can fail; a non-unit innermost stride
 * or a Stats tensor of the wrong shape fails it too (tried). What it
 * cannot: lowering, plans and results, which need a GPU
 * (scripts/gpu-check.sh).
 * Exit 77 (skipped) when libcudnn cannot be loaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srk_cudnn.h"

static int failed = 0, passed = 0;

/* L: the row stride of q, k, v and their gradients (3C: the parts of one packed q|k|v) */
static void expect(int bwd, int B, int T, int C, int L, int NH, const char *cc, int ok)
{
    char err[1024] = "";
    setenv("SHARDC_FAKE_CC", cc, 1);
    int rc = srk_cudnn_attn_check(bwd, B, T, C, L, NH, 1.0f / sqrtf((float)(C / NH)), err, sizeof err);
    int good = ok ? rc == 0 : rc != 0;
    printf("%s %s B %d T %d C %d%s NH %d on sm_%s: %s%s%s\n", good ? "ok  " : "FAIL", bwd ? "backward" : "forward ", B,
           T, C, L != C ? " (q|k|v packed)" : "", NH, cc, ok ? "valid" : "refused", rc ? " -- " : "", rc ? err : "");
    good ? passed++ : failed++;
}

int main(void)
{
    char err[1024];
    if (srk_cudnn_attn_check(0, 1, 64, 64, 64, 1, 0.125f, err, sizeof err) && strstr(err, "cannot load")) {
        printf("skipped: %s\n", err);
        return 77;
    }
    /* GPT-2 124M at seq 1024, tinygpt, Llama-style head 128, a sequence not a multiple of 64 */
    static const int shapes[][4] = {{8, 1024, 768, 12}, {4, 64, 128, 4}, {2, 256, 1024, 8}, {3, 100, 256, 4}};
    for (const auto &s : shapes)
        for (int bwd = 0; bwd < 2; bwd++) {
            for (int packed = 0; packed < 2; packed++) {
                int L = packed ? 3 * s[2] : s[2];
                expect(bwd, s[0], s[1], s[2], L, s[3], "90", 1);
                expect(bwd, s[0], s[1], s[2], L, s[3], "80", 1);
            }
        }
    expect(0, 8, 1024, 768, 768, 12, "75", 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
