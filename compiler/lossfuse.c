/* lossfuse.c: the loss's gradient written by its forward, over the logits.
 *
 * Needs: the backward program after gradalias.c (which leaves the logits'
 * gradient in storage of its own), before the memory plan.
 * Guarantees: where the model's loss is a cross_entropy whose logits nothing
 * else reads, and whose logits' gradient only its backward writes, that
 * backward step is gone: in a training step the forward computes the loss
 * and overwrites the logits with their gradient, dloss/N (softmax - onehot),
 * in the same pass over each row (llm.c's fused classifier), and every step
 * that read d(logits) reads the logits' buffer. The logits are read once
 * instead of twice and their gradient takes no memory of its own (at GPT-2's
 * batch 128 x 1024, 13 GB in bf16). Evaluation and sampling run the plain
 * forward (e->train is 0) and keep the logits; a backward after such a
 * forward first writes the gradient over them itself (the code generators,
 * after the seed), so the flag saves a pass and never changes a result.
 * Ir.fused_loss names the op. The vocab-parallel loss (tensor parallelism,
 * Megatron's vocab_parallel_cross_entropy) is fused too: its statistics need
 * the tensor group's collectives between the passes, so its gradient takes
 * a pass of its own after them, but still no buffer and no clearing. The
 * losses and their calls are codegen.c's table (cg_fused_loss).
 */
#include "shardc.h"

int lf_fuse(Program *P)
{
    Ir *ir = &P->ir;
    ir->fused_loss = -1;
    int j = -1;
    for (int k = 0; k < ir->bwd.n && j < 0; k++) {
        IrBwd *b = ir->bwd.v[k];
        if (b->kind == BWD_RULE && cg_loss_fusable(BWD_OP(ir, b)->kind) && BWD_OP(ir, b)->out == ir->output) j = k;
    }
    if (j < 0) return 0;
    IrBwd *b = ir->bwd.v[j];
    IrOp *op = BWD_OP(ir, b);
    int logits = op->in[0], d = b->din[0];
    if (d < 0 || b->gate || b->rs || b->op || ir_value(ir, d)->dtype != ir_value(ir, logits)->dtype) return 0;
    if (ir_value(ir, logits)->kind != VK_OP) return 0;
    for (int s = 0; s < ir->nstages; s++)
        if (ir->stages[s].act_in == logits || ir->stages[s].act_out == logits) return 0;
    for (int i = 0; i < ir->ops.n; i++) { /* the loss is the logits' only reader */
        IrOp *o = ir->ops.v[i];
        for (int k = 0; k < o->nin; k++)
            if (o->in[k] == logits && o != op) return 0;
    }
    for (int k = 0; k < ir->bwd.n; k++) /* and its backward the only writer of their gradient */
        if (k != j && ir_bwd_writes(ir->bwd.v[k], d)) return 0;
    Vec kept = {0};
    for (int k = 0; k < ir->bwd.n; k++) {
        IrBwd *c = ir->bwd.v[k];
        if (k == j) continue;
        if (c->dout == d) c->dout = logits;
        vec_push(&kept, c);
    }
    ir->bwd = kept;
    for (int i = 0; ir->rate0_view && i < ir->values.n; i++) /* a dropout that made the logits */
        if (ir->rate0_view[i] == d) ir->rate0_view[i] = logits;
    ir->fused_loss = op->id;
    return 0;
}
