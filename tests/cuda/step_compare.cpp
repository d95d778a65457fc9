/* step_compare.cpp: whole training steps of one model, built twice by shardc
 * (cg_host: the host program; cg_cuda: the CUDA program, here compiled
 * against the CPU emulator or, on a GPU, with nvcc), run side by side from
 * the same parameters and tokens: losses, logits and every parameter's
 * gradient are compared step by step, with AdamW updates in between (the
 * host's sr_adamw_step and the CUDA backend's fused kernel).
 *
 * It drives forward/backward directly through the two sr_program
 * descriptors (the generated mains are renamed at compile time), so it tests
 * the generated code, the kernels and the backend without the training
 * driver.
 *
 *   step_compare [--steps N] [--batch B] [--seq T] [--dropout P] [--bf16]
 * fp32: losses to 1e-5 relative, step 1's gradients to 1e-4 of each
 * tensor's largest (later steps 1e-3: the parameters have drifted apart by
 * round-off amplified by Adam). bf16: losses to 2e-2, gradients to 1e-1
 * (bf16 activations).
 * Prints one line per check and "N passed, M failed".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "sr_cuda.h"
#include "sr_program.h"
#include "srk.cuh"

extern "C" int host_main(int argc, char **argv);
int cuda_main(int argc, char **argv); /* C++: the generated .cu */

static const sr_program *host_prog;
/* the host program's main calls sr_main, renamed to this */
extern "C" int host_capture(const sr_program *p, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    host_prog = p;
    return 0;
}

#include "check.h"

static uint64_t rng_state = 0x243f6a8885a308d3ULL;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void)
{
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, long n)
{
    double mx = 0.0, d = 0.0;
    for (long i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN wins */
    }
    return mx > 0 ? d / mx : d;
}

int main(int argc, char **argv)
{
    int steps = 3, B = 4, T = 32, use_bf16 = 0;
    float dropout = 0.0f;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bf16")) use_bf16 = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch")) B = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seq")) T = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--dropout")) dropout = (float)atof(argv[++i]);
        else {
            fprintf(stderr, "usage: step_compare [--steps N] [--batch B] [--seq T] [--dropout P] [--bf16]\n");
            return 2;
        }
    }
    const sr_program *cuda_prog = NULL;
    host_main(0, NULL);
    cuda_main(0, (char **)&cuda_prog); /* built with SR_NO_MAIN: hands the descriptor over */
    const sr_program *H = host_prog, *C = cuda_prog;
    if (!H || !C) {
        printf("FAIL the two programs did not hand over their descriptors\n0 passed, 1 failed\n");
        return 1;
    }
    bool same = H->n_params == C->n_params && H->vocab == C->vocab;
    for (int i = 0; same && i < H->n_params; i++)
        same = !strcmp(H->params[i].name, C->params[i].name) && H->params[i].numel == C->params[i].numel;
    check(same, "%s: the host and CUDA programs have the same %d parameters", H->name, H->n_params);
    if (!same) return 1;
    if (H->max_seq && T > H->max_seq) T = H->max_seq;
    const sr_backend *be = C->backend;
    check(be == &sr_backend_cuda, "the CUDA program names sr_backend_cuda as its backend");
    if (be->init(0) != SR_OK) {
        printf("FAIL backend init: %s\n", sr_errmsg());
        return 1;
    }
    printf("# %s, %s, B=%d T=%d, %d steps, dropout %g\n", C->name, use_bf16 ? "bf16" : "fp32", B, T, steps, dropout);

    /* parameters: the same values at each program's offsets */
    long hn = (long)H->n_param_floats, cn = (long)C->n_param_floats;
    std::vector<float> hp((size_t)hn), hg((size_t)hn), hm((size_t)hn), hv((size_t)hn), cstage((size_t)cn);
    for (int i = 0; i < H->n_params; i++) {
        const sr_param_desc *d = &H->params[i];
        for (long j = 0; j < d->numel; j++) {
            float x = d->init == SR_INIT_ZEROS ? 0.0f : d->init == SR_INIT_ONES ? 1.0f : d->std * nrand();
            /* non-trivial norm and bias parameters, so their gradients matter */
            if (d->init != SR_INIT_NORMAL) x += 0.1f * nrand();
            hp[(size_t)(d->offset + j)] = x;
            cstage[(size_t)(C->params[i].offset + j)] = x;
        }
    }
    size_t cbytes = sizeof(float) * (size_t)cn;
    float *cp = (float *)be->alloc(cbytes), *cg = (float *)be->alloc(cbytes), *cm = (float *)be->alloc(cbytes),
          *cv = (float *)be->alloc(cbytes);
    be->h2d(cp, cstage.data(), cbytes);
    size_t hw = H->work_bytes(B, T), cw = C->work_bytes(B, T);
    std::vector<char> hwork(hw + 64);
    char *cwork = (char *)be->alloc(cw);
    printf("# workspace: host %.2f MB, cuda %.2f MB\n", hw / 1e6, cw / 1e6);
    std::vector<int32_t> tok((size_t)(B * T)), tgt((size_t)(B * T));
    int32_t *ctok = (int32_t *)be->alloc(sizeof(int32_t) * tok.size()), *ctgt = (int32_t *)be->alloc(sizeof(int32_t) * tok.size());
    check(cp && cg && cm && cv && cwork && ctok && ctgt, "device memory for parameters, state and workspace");

    double tol_loss = use_bf16 ? 2e-2 : 1e-5, tol_grad = use_bf16 ? 1e-1 : 1e-4;
    std::vector<float> cgrad_h((size_t)cn), logits_c;
    for (int s = 1; s <= steps; s++) {
        for (auto &t : tok) t = (int32_t)(urand() * H->vocab);
        for (size_t i = 0; i < tgt.size(); i++) tgt[i] = i + 1 < tok.size() ? tok[i + 1] : 0;
        be->h2d(ctok, tok.data(), sizeof(int32_t) * tok.size());
        be->h2d(ctgt, tgt.data(), sizeof(int32_t) * tgt.size());
        std::fill(hg.begin(), hg.end(), 0.0f);
        be->zero(cg, cn);
        sr_exec he, ce;
        memset(&he, 0, sizeof he);
        he.B = B, he.T = T, he.inputs = tok.data(), he.targets = tgt.data(), he.dloss = 1.0f;
        he.dropout = dropout, he.seed = 1337, he.step = (uint64_t)s, he.tp = 1;
        /* a training step's forward writes the loss's gradient over the logits (lossfuse.c); one not
         * told it trains keeps them, and the backward computes that gradient itself. Step 1 runs
         * so on both sides (its logits are compared), then each side's fused path meets the
         * other's unfused one: the CUDA program trains so at even steps, the host at odd ones */
        ce = he;
        he.train = s > 1 && s % 2 == 1;
        ce.train = s > 1 && s % 2 == 0;
        he.params = hp.data(), he.grads = hg.data(), he.work = hwork.data();
        ce.params = cp, ce.grads = cg, ce.work = cwork, ce.inputs = ctok, ce.targets = ctgt;
        H->forward(&he);
        C->forward(&ce);
        double lr = fabs((double)ce.loss - he.loss) / fabs((double)he.loss);
        check(lr <= tol_loss, "step %d loss: host %.7f cuda %.7f (rel %.2g)", s, he.loss, ce.loss, lr);
        if (s == 1) {
            long nl = (long)B * T * H->vocab;
            logits_c.resize((size_t)nl);
            if (ce.logits_bf16) { /* a bf16 program's: widened here */
                std::vector<uint16_t> bits((size_t)nl);
                be->d2h(bits.data(), ce.logits_bf16, sizeof(uint16_t) * (size_t)nl);
                for (long i = 0; i < nl; i++) {
                    uint32_t u = (uint32_t)bits[(size_t)i] << 16;
                    memcpy(&logits_c[(size_t)i], &u, sizeof u);
                }
            } else {
                be->d2h(logits_c.data(), ce.logits, sizeof(float) * (size_t)nl);
            }
            double e = rel_err(logits_c.data(), he.logits, nl);
            check(e <= tol_grad, "step 1 logits (B, T, vocab): rel err %.2g", e);
        }
        H->backward(&he);
        C->backward(&ce);
        check(be->sync() == SR_OK, "step %d: no CUDA error%s%s", s, srk_ctx.failed ? ": " : "", srk_ctx.failed ? srk_ctx.err : "");
        be->d2h(cgrad_h.data(), cg, cbytes);
        double worst = 0.0;
        const char *wname = "";
        for (int i = 0; i < H->n_params; i++) {
            const sr_param_desc *hd = &H->params[i], *cd = &C->params[i];
            double e = rel_err(cgrad_h.data() + cd->offset, hg.data() + hd->offset, hd->numel);
            if (!(e <= worst)) {
                worst = e;
                wname = hd->name;
            }
        }
        /* from step 2 on the two programs start from parameters that differ (Adam's sign-like first steps,
         * see the end), so their gradients are compared 10x looser than step 1's */
        double tg = s == 1 || use_bf16 ? tol_grad : 10 * tol_grad;
        check(worst <= tg, "step %d gradients of all %d parameters: worst rel err %.2g (%s; tolerance %.0g)", s,
              H->n_params, worst, wname, tg);
        /* AdamW on both */
        for (int i = 0; i < H->n_params; i++) {
            const sr_param_desc *hd = &H->params[i], *cd = &C->params[i];
            float wd = hd->decay ? 0.1f : 0.0f;
            sr_adamw_step(hp.data() + hd->offset, hg.data() + hd->offset, hm.data() + hd->offset,
                          hv.data() + hd->offset, hd->numel, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, s);
            be->adamw(cp + cd->offset, cg + cd->offset, cm + cd->offset, cv + cd->offset, cd->numel, 1e-3f, 0.9f,
                      0.95f, 1e-8f, wd, s);
        }
    }
    /* Adam's early steps are sign-like (m / sqrt(v) = +-1 for any |g| >> eps): a gradient element that
     * round-off leaves near 0 can flip, moving that parameter by up to 2 lr per step. So the bound is
     * absolute: |dp| <= 2 lr steps, and the typical element must agree far better (mean). */
    be->d2h(cstage.data(), cp, cbytes);
    double worst = 0.0, sum = 0.0;
    long cnt = 0;
    for (int i = 0; i < H->n_params; i++)
        for (long j = 0; j < H->params[i].numel; j++) {
            double d = fabs((double)cstage[(size_t)(C->params[i].offset + j)] - hp[(size_t)(H->params[i].offset + j)]);
            worst = fmax(worst, d);
            sum += d;
            cnt++;
        }
    double bound = 2.0 * 1e-3 * steps, mean_bound = use_bf16 ? 1e-3 : 1e-6;
    check(worst <= bound && sum / cnt <= mean_bound,
          "parameters after %d AdamW steps: max |diff| %.2g (bound %.2g), mean %.2g (bound %.0g)", steps, worst,
          bound, sum / cnt, mean_bound);
    be->shutdown();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
