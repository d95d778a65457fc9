/* gradalias.c: gradients that are copies of another, not stored twice.
 *
 * The backward of add (both inputs), sub (its first input) and reshape
 * hands its output's gradient on unchanged: d(a) += d(out). When that step
 * is the only one writing d(a), d(a) is a copy of d(out): the pass points
 * every step that reads d(a) at d(out) instead and drops the write, so the
 * copy (a write and a read of the whole tensor) and its clearing go away
 * and the memory plan keeps d(out) alive for those readers. In a
 * transformer block that is the gradient through every bias add and the
 * branch side of every residual add.
 *
 * A gradient with other writers (the residual stream's, which its branch's
 * LayerNorm adds to later) can still live in d(out)'s storage when the
 * pass-through is its first write and every other step that reads d(out)
 * runs before its next write: the copy goes, and the later writers add
 * into d(out) in place (llm.c's residual gradient). Not with zb-h1's split
 * backward, whose W pass reads d(out) after the B pass has added to it.
 *
 * Dropout's backward is a copy when the run's rate is 0 (GPT-2's default):
 * then its input gradient can be its output gradient itself, chosen at run
 * time (rate0_view; codegen.c skips the step and reads either buffer). That
 * needs the step to be the gradient's only writer and no step between it and
 * the gradient's last reader to write d(out); the memory plan keeps d(out)
 * alive until that reader.
 *
 * Left alone: broadcast inputs (their gradient is a column sum),
 * parameters, the pipeline's sent and received values and the model's
 * output, the rank-0-only contributions of tensor parallelism, the
 * reduce-scatter steps, and values of another element type. Runs after the
 * pipeline partition (which fixes the boundary values) and before the
 * memory plan.
 */
#include "shardc.h"

/* the step's input k receives d(out) unchanged (no broadcast, no sign) */
static int passes_through(Ir *ir, IrBwd *b, int k)
{
    IrOp *op = BWD_OP(ir, b);
    if (b->kind != BWD_RULE || b->rs) return 0;
    if (op->kind == OP_ADD || (op->kind == OP_SUB && k == 0)) {
        IrValue *in = ir_value(ir, op->in[k]), *out = ir_value(ir, op->out);
        return dim_eq(shape_numel(&in->shape), shape_numel(&out->shape));
    }
    return op->kind == OP_RESHAPE && k == 0;
}

/* a value the runtime or another stage reads by name */
static int pinned(Ir *ir, int v)
{
    if (v == ir->output) return 1;
    for (int s = 0; s < ir->nstages; s++)
        if (ir->stages[s].act_in == v || ir->stages[s].act_out == v) return 1;
    for (int i = 0; i < ir->ops.n; i++) { /* the logits: their gradient has its own storage */
        IrOp *op = ir->ops.v[i];
        if ((op->kind == OP_CROSS_ENTROPY || op->kind == OP_CROSS_ENTROPY_VP) && op->in[0] == v) return 1;
    }
    return 0;
}

/* writes[d]: the steps that write gradient d (rules and in-place sums) */
static void count_writes(const Ir *ir, int *writes)
{
    memset(writes, 0, sizeof(int) * (size_t)(ir->values.n + 1));
    for (int j = 0; j < ir->bwd.n; j++) {
        const IrBwd *b = ir->bwd.v[j];
        if (b->kind == BWD_ALLREDUCE) writes[b->dout]++; /* summed in place */
        for (int k = 0; k < 4 && b->kind == BWD_RULE; k++)
            if (b->din[k] >= 0) writes[b->din[k]]++;
    }
}

/* d(a) = d(out) at step j, d(a)'s first write, with later writers: d(out) may hold d(a) when no
 * step after j writes d(out) and every other reader of d(out) runs before d(a)'s next write */
static int shareable(Ir *ir, int j, int d)
{
    IrBwd *b = ir->bwd.v[j];
    if (ir->nstages > 1 && ir->split_backward) return 0;
    for (int m = 0; m < j; m++)
        if (ir_bwd_writes(ir->bwd.v[m], d)) return 0;
    int next = ir->bwd.n;
    for (int m = j + 1; m < ir->bwd.n && next == ir->bwd.n; m++)
        if (ir_bwd_writes(ir->bwd.v[m], d)) next = m;
    for (int m = j + 1; m < ir->bwd.n; m++) {
        IrBwd *c = ir->bwd.v[m];
        if (ir_bwd_writes(c, b->dout) || (m >= next && c->kind == BWD_RULE && c->dout == b->dout)) return 0;
    }
    return 1;
}

/* step j, a dropout's backward, may be skipped at rate 0, its input gradient d(out) itself */
static int rate0_viewable(Ir *ir, int j, const int *writes)
{
    IrBwd *b = ir->bwd.v[j];
    if (b->kind != BWD_RULE || b->rs || (b->gate & 1) || BWD_OP(ir, b)->kind != OP_DROPOUT) return 0;
    if (ir->nstages > 1 && ir->split_backward) return 0; /* W would read d(in) after B wrote d(out) */
    int d = b->din[0], o = b->dout;
    if (d < 0 || d == o || writes[d] != 1 || (ir->rate0_view && ir->rate0_view[o] >= 0)) return 0;
    IrValue *dv = ir_value(ir, d), *ov = ir_value(ir, o);
    IrValue *pv = ir_value(ir, dv->primal), *po = ir_value(ir, ov->primal);
    if (pv->kind != VK_OP || po->kind != VK_OP || dv->dtype != ov->dtype) return 0;
    if (pinned(ir, pv->id) || pinned(ir, po->id)) return 0;
    int last = j; /* d(in)'s last reader */
    for (int m = j + 1; m < ir->bwd.n; m++) {
        IrBwd *c = ir->bwd.v[m];
        if (c->kind == BWD_RULE && c->dout == d) last = m;
    }
    for (int m = j + 1; m <= last; m++)
        if (ir_bwd_writes(ir->bwd.v[m], o)) return 0;
    return 1;
}

int ga_alias(Program *P)
{
    Ir *ir = &P->ir;
    int nv = ir->values.n;
    int *writes = sx_alloc(sizeof(int) * (size_t)(nv + 1));
    count_writes(ir, writes);
    /* first the copies with one writer (their readers then read d(out)'s original value), then
     * the shared storage, whose check needs every such reader of d(out) in place */
    for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (b->kind != BWD_RULE) continue;
        IrOp *op = BWD_OP(ir, b);
        for (int k = 0; k < op->nin; k++) {
            int d = b->din[k];
            if (d < 0 || d == b->dout || writes[d] < 1 || ((b->gate >> k) & 1) || !passes_through(ir, b, k)) continue;
            if ((writes[d] > 1) != pass) continue;
            IrValue *dv = ir_value(ir, d), *ov = ir_value(ir, b->dout);
            IrValue *pv = ir_value(ir, dv->primal), *po = ir_value(ir, ov->primal);
            if (pv->kind != VK_OP || po->kind != VK_OP || dv->dtype != ov->dtype) continue;
            if (pinned(ir, pv->id) || pinned(ir, po->id)) continue;
            if (pass && !shareable(ir, j, d)) continue;
            b->din[k] = -1;
            for (int m = 0; m < ir->bwd.n; m++) { /* d's readers and its other writers: d(out)'s storage */
                IrBwd *c = ir->bwd.v[m];
                if (c->dout == d) c->dout = b->dout;
                for (int i = 0; i < 4 && c->kind == BWD_RULE; i++)
                    if (c->din[i] == d) c->din[i] = b->dout;
            }
            writes[b->dout] += writes[d] - 1;
            writes[d] = 0;
        }
    }
    /* a step whose every gradient now lives in d(out) has nothing left to do: dropped, so that the
     * memory plan does not keep d(out) alive for it */
    Vec kept = {0};
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (b->kind == BWD_RULE && b->din[0] < 0 && b->din[1] < 0 && b->din[2] < 0 && b->din[3] < 0) continue;
        vec_push(&kept, b);
    }
    ir->bwd = kept;
    count_writes(ir, writes);
    ir->rate0_view = NULL;
    for (int j = 0; j < ir->bwd.n; j++) {
        if (!rate0_viewable(ir, j, writes)) continue;
        if (!ir->rate0_view) {
            ir->rate0_view = sx_alloc(sizeof(int) * (size_t)(nv + 1));
            for (int i = 0; i < nv; i++) ir->rate0_view[i] = -1;
        }
        IrBwd *b = ir->bwd.v[j];
        ir->rate0_view[b->din[0]] = b->dout;
    }
    return 0;
}
