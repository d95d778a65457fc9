/* recompute.c: activation recomputation per block.
 *
 * Needs: the backward program (autodiff) and the blocks: the instances or
 * repetitions marked @recompute (op->rgroup), or with `--recompute block`
 * and no such mark, the repetitions of the @pipeline repeat (op->stage).
 * Guarantees: the backward of every block starts by running the block's
 * forward ops again as clones that write new values, and the block's
 * gradient rules read the clones. The originals inside a block are then dead
 * once the block's forward is done, so the memory plan gives their memory
 * back and only each block's input stays saved. The clones run the same
 * kernels on the same inputs with the same dropout keys (an op's uid), so
 * the numbers are bit-identical to no recomputation. Clones are appended to
 * Ir.ops marked `recomp`; forward passes skip them.
 */
#include "shardc.h"

/* a copy of op whose values defined inside block `blk` are the clones */
static IrOp *remap(const IrOp *op, const int *clone)
{
    IrOp *c = sx_alloc(sizeof *c);
    *c = *op;
    for (int k = 0; k < c->nin; k++)
        if (clone[c->in[k]] >= 0) c->in[k] = clone[c->in[k]];
    if (clone[op->out] >= 0) c->out = clone[op->out];
    for (int a = 0; a < ir_ops[op->kind].naux; a++)
        if (clone[op->aux[a]] >= 0) c->aux[a] = clone[op->aux[a]];
    return c;
}

static int clone_value(Ir *ir, int v, int def)
{
    IrValue *o = ir_value(ir, v);
    int n = ir_new_value(ir, o->kind, o->dtype, &o->shape);
    IrValue *c = ir_value(ir, n);
    c->sh = o->sh;
    c->def = def;
    c->name = o->name;
    return n;
}

/* the block an op is recomputed with: its @recompute block, else (with
 * --recompute block) its repetition of the @pipeline repeat */
static int block_of(const IrOp *op, int marked) { return marked ? op->rgroup : op->stage; }

int rc_recompute(Program *P)
{
    if (!P->layout.recompute) return 0;
    Ir *ir = &P->ir;
    int marked = 0, nblocks = P->layout_repeats;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->rgroup >= 0) marked = 1;
        if (op->rgroup + 1 > nblocks) nblocks = op->rgroup + 1;
    }
    if (!marked && !P->layout_repeats) {
        sx_error(&ir->model_loc, "--recompute block recomputes the repetitions of the repeat marked "
                 "@pipeline, and '%s' has none", ir->model_name);
        return 1;
    }
    int nops = ir->ops.n;
    int *clone = NULL;
    char *done = sx_alloc((size_t)nblocks + 1);
    Vec out = {0};
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        int blk = b->fwd >= 0 ? block_of(ir_op(ir, b->fwd), marked) : -1;
        if (blk >= 0 && !done[blk]) {
            /* the block's forward again, before its first gradient rule */
            done[blk] = 1;
            int nv = ir->values.n;
            clone = sx_alloc(sizeof(int) * (size_t)(nv + 1));
            for (int v = 0; v < nv; v++) clone[v] = -1;
            for (int i = 0; i < nops; i++) {
                IrOp *op = ir->ops.v[i];
                if (block_of(op, marked) != blk) continue;
                IrOp *c = sx_alloc(sizeof *c);
                *c = *op;
                c->id = ir->ops.n;
                c->recomp = 1;
                for (int k = 0; k < c->nin; k++)
                    if (c->in[k] < nv && clone[c->in[k]] >= 0) c->in[k] = clone[c->in[k]];
                clone[op->out] = c->out = clone_value(ir, op->out, c->id);
                for (int a = 0; a < ir_ops[op->kind].naux; a++)
                    clone[op->aux[a]] = c->aux[a] = clone_value(ir, op->aux[a], c->id);
                vec_push(&ir->ops, c);
                IrBwd *f = sx_alloc(sizeof *f);
                f->kind = BWD_FORWARD;
                f->fwd = op->id;
                f->op = c;
                f->dout = -1;
                for (int k = 0; k < 4; k++) f->din[k] = -1;
                vec_push(&out, f);
            }
        }
        if (blk >= 0 && b->kind == BWD_RULE) b->op = remap(ir_op(ir, b->fwd), clone);
        vec_push(&out, b);
    }
    ir->bwd = out;
    return 0;
}
