/* qkvpack.c: attention reads q, k and v where the fused projection wrote them.
 *
 * GPT-2's attention splits one q|k|v projection with three slices and hands
 * them to causal_attention. Each slice is a copy (a read and a write of a
 * third of the projection's output), and in the backward each slice's rule
 * adds its gradient into a third of d(qkv), which is cleared first. When
 * causal_attention's q, k and v are slice(X, 0, 3), slice(X, 1, 3) and
 * slice(X, 2, 3) of one X, in that order, and nothing else reads the three
 * slices, the attention becomes $attention_qkv(X): its kernels read the
 * three parts in place (rows 3C apart), its backward writes dq|dk|dv into
 * d(X), and the slices are removed (Megatron's and llm.c's attention read
 * q, k, v as views of the projection's output too).
 *
 * Needs: the lowered forward IR (local shapes after shard_lower), before
 * autodiff, so every later pass (recomputation, the pipeline cut, the
 * memory plan, shardc plan's counts) sees the op that runs.
 * Guarantees: the same arithmetic as the unpacked ops (the kernels only
 * read and write rows at another stride): the same losses bit for bit.
 * The slices' outputs stay in the value table as VK_DEAD: no op defines or
 * reads them, so nothing plans or emits them.
 */
#include "shardc.h"

/* the slices feeding attention op `a` when they can be folded into it, else 0; readers: the
 * forward's reads of each value */
static int packable(Ir *ir, const IrOp *a, const int *readers, IrOp *sl[3])
{
    if (a->kind != OP_ATTENTION) return 0;
    for (int k = 0; k < 3; k++) {
        int v = a->in[k];
        const IrValue *x = ir_value(ir, v);
        if (x->kind != VK_OP || x->def < 0 || v == ir->output) return 0;
        IrOp *s = ir_op(ir, x->def);
        if (s->kind != OP_SLICE || (int)s->k[0] != k || (int)s->k[1] != 3) return 0;
        if (k && s->in[0] != sl[0]->in[0]) return 0;
        if (s->stage != a->stage || s->rgroup != a->rgroup || s->recomp || readers[v] != 1) return 0;
        sl[k] = s;
    }
    const IrValue *X = ir_value(ir, sl[0]->in[0]);
    return X->shape.nd == 3 && X->dtype == ir_value(ir, a->in[0])->dtype;
}

int qp_pack(Program *P)
{
    Ir *ir = &P->ir;
    char *drop = sx_alloc((size_t)ir->ops.n + 1);
    int *readers = sx_alloc(sizeof(int) * (size_t)(ir->values.n + 1));
    for (int i = 0; i < ir->ops.n; i++) {
        const IrOp *op = ir->ops.v[i];
        for (int k = 0; k < op->nin; k++) readers[op->in[k]]++;
    }
    int n = 0;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *a = ir->ops.v[i], *sl[3];
        if (!packable(ir, a, readers, sl)) continue;
        for (int k = 0; k < 3; k++) {
            IrValue *x = ir_value(ir, a->in[k]);
            x->kind = VK_DEAD;
            x->def = -1;
            drop[sl[k]->id] = 1;
        }
        a->kind = OP_ATTENTION_QKV;
        a->nin = 1;
        a->in[0] = sl[0]->in[0];
        a->in[1] = a->in[2] = -1;
        n++;
    }
    if (!n) return 0;
    Vec ops = {0};
    for (int i = 0; i < ir->ops.n; i++)
        if (!drop[i]) vec_push(&ops, ir->ops.v[i]);
    ir_set_ops(ir, ops);
    return 0;
}
