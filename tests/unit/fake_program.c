/* fake_program.c: a hand-written stand-in for a shardc-generated program,
 * used to test the runtime (tests/unit/test_train.sh) without the compiler.
 *
 * The model is a bigram table: logits(N, 256) = dropout(W[idx]) + bias,
 * loss = cross-entropy. Two parameters: "wte.weight" (256, 256) and "bias"
 * (256). Setting FAKE_PREFIX in the environment prepends it to both names
 * (e.g. "transformer."), to test --init across Hugging Face name styles;
 * FAKE_INF_GRAD_STEP=k makes one gradient infinite at step k (the loss stays
 * finite), to test the driver's check of the gradient norm.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_program.h"

#define V 256

static sr_param_desc params[2] = {
    {"wte.weight", 2, {V, V, 0, 0}, V * V, 0, SR_INIT_NORMAL, 0.02f, 1, -1, SR_AXIS_NONE,
     "fake.model:3", {V, V, 0, 0}, 1, 1},
    {"bias", 1, {V, 0, 0, 0}, V, V * V, SR_INIT_ZEROS, 0.0f, 0, -1, SR_AXIS_NONE, "fake.model:4",
     {V, 0, 0, 0}, 1, 0},
};

/* workspace: emb, h, logits, dlogits, dh, demb (N, V) and lse (N) */
static size_t work_bytes(int B, int T)
{
    size_t N = (size_t)B * T;
    return (6 * N * V + N) * sizeof(float);
}

typedef struct bufs {
    float *emb, *h, *logits, *dlogits, *dh, *demb, *lse;
} bufs;

static bufs carve(const sr_exec *e)
{
    size_t N = (size_t)e->B * e->T;
    float *w = (float *)e->work;
    bufs b;
    b.emb = w;           // (N, V)
    b.h = w + N * V;     // (N, V)
    b.logits = w + 2 * N * V;
    b.dlogits = w + 3 * N * V;
    b.dh = w + 4 * N * V;
    b.demb = w + 5 * N * V;
    b.lse = w + 6 * N * V; // (N)
    return b;
}

static void forward(sr_exec *e)
{
    int N = e->B * e->T;
    bufs b = carve(e);
    const float *W = e->params, *bias = e->params + V * V;
    sr_embedding_fwd(b.emb, W, e->inputs, N, V);
    sr_dropout_fwd(b.h, b.emb, (long)N * V, e->dropout, e->seed, e->step, 0,
                   (uint64_t)e->row0 * V);
    sr_add_fwd(b.logits, b.h, bias, (long)N * V, V);
    e->loss = sr_crossentropy_fwd(b.lse, b.logits, e->targets, N, V, 0);
    e->logits = b.logits;
}

static void backward(sr_exec *e)
{
    int N = e->B * e->T;
    bufs b = carve(e);
    float *dW = e->grads, *dbias = e->grads + V * V;
    sr_zero(b.dlogits, (long)N * V);
    sr_zero(b.dh, (long)N * V);
    sr_zero(b.demb, (long)N * V);
    sr_crossentropy_bwd(b.dlogits, b.logits, b.lse, e->targets, e->dloss, N, V, 0);
    sr_add_bwd(b.dh, dbias, b.dlogits, (long)N * V, V);
    sr_dropout_bwd(b.demb, b.dh, (long)N * V, e->dropout, e->seed, e->step, 0,
                   (uint64_t)e->row0 * V);
    sr_embedding_bwd(dW, b.demb, e->inputs, N, V);
    const char *inf_step = getenv("FAKE_INF_GRAD_STEP");
    if (inf_step && atol(inf_step) == (long)e->step) dbias[0] = 1.0f / 0.0f;
}

int main(int argc, char **argv)
{
    static char names[2][128];
    const char *prefix = getenv("FAKE_PREFIX");
    if (prefix && *prefix) {
        for (int i = 0; i < 2; i++) {
            snprintf(names[i], sizeof names[i], "%s%s", prefix, params[i].name);
            params[i].name = names[i];
        }
    }
    sr_program prog;
    memset(&prog, 0, sizeof prog);
    prog.name = "Bigram";
    prog.source = "tests/unit/fake_program.c";
    prog.n_params = 2;
    prog.params = params;
    prog.n_param_floats = V * V + V;
    prog.vocab = V;
    prog.tp = 1;
    prog.max_seq = 0;
    prog.work_bytes = work_bytes;
    prog.forward = forward;
    prog.backward = backward;
    prog.defaults.steps = 50;
    prog.defaults.batch = 8;
    prog.defaults.seq = 32;
    prog.defaults.lr = 1e-2f;
    prog.defaults.lr_schedule = "constant";
    prog.defaults.beta1 = 0.9f;
    prog.defaults.beta2 = 0.999f;
    prog.defaults.eps = 1e-8f;
    prog.defaults.microbatches = 1;
    prog.config_json = "{\"vocab_size\": 256}";
    return sr_main(&prog, argc, argv);
}
