/* codegen_cuda.c: CUDA source for the cuda backend (CUDA + cuBLASLt + NCCL +
 * libshardrt), and the nvcc (or emulator) build of it.
 *
 * Needs: the forward IR, the backward program and the memory plan, as
 * cg_host does; its structure is cg_host's, function for function (keep the
 * two in step).
 * Guarantees: one .cu file that nvcc compiles for the GPU and any C++20
 * compiler compiles against the CPU emulator (runtime/cuda/emu), defining the
 * program's sr_program with .backend = &sr_backend_cuda. Every kernel call is
 * expanded from ops.def's CUDA templates inside SRK_AT("file:line op", ...),
 * so a CUDA error names the kernel, the generated line and the .model line.
 *
 * Storage: parameters, their gradients, aux buffers (norm statistics, loss
 * lse, attention lse) and the loss are float. Activations and their
 * gradients are `act_t`: __nv_bfloat16 in a bf16 program, float in an fp32
 * one, except the loss (the logits too are bf16: sr_exec.logits_bf16 for the
 * sampler).
 * The kernel wrappers are templates over each operand's type, so a call
 * picks its instance from the buffer types written here.
 * Workspace slots are memplan's; their bytes are recomputed from the storage
 * types (a bf16 slot is half the size), and the attention aux is its lse and
 * a copy of the output, not the host's (B, NH, T, T) probabilities.
 * Fusions: matmul -> add(bias parameter) [-> gelu], adjacent and with no
 * other reader of the intermediate, become one GEMM with a cuBLASLt epilogue;
 * dropout -> add (the residual add) one element-wise pass; in the backward,
 * d matmul + d gelu (c_fuse).
 */
#define _POSIX_C_SOURCE 200809L
#include "codegen_cuda.h"

#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ST_F32 = 0, ST_ACT = 1, ST_I32 = 2 };

typedef struct CGen {
    Program *P;
    Ir *ir;
    FILE *f;
    int bf16;
    ParamLayout L;      /* where the parameters live */
    int64_t *param_off; /* float offset of each parameter in the arena of the stage being emitted */
    char *zeroed;       /* activation gradients already zeroed in this backward */
    char *store;        /* ST_* of every value */
    int *aux_of_attn;   /* value -> the attention op whose aux it is, -1 */
    int logits;
    int stage;          /* the pipeline stage being emitted */
    int mode;           /* backward: BW_FULL, BW_INPUT (zb-h1 B) or BW_WEIGHT (zb-h1 W) */
    IrBwd *ar_taken;    /* the all-reduce step the last matmul call runs (overlap) */
    IrBwd *rs_taken;    /* the reduce-scatter step the last matmul call started (overlap) */
    Vec fnames;         /* char*: every function name used in the file */
} CGen;



static const char *elem_type(CGen *g, int id)
{
    int s = g->store[id];
    return s == ST_I32 ? "int32_t" : s == ST_ACT ? "act_t" : "float";
}

/* the C++ expression of a value's own buffer */
static char *buf_own(CGen *g, int id)
{
    IrValue *v = ir_value(g->ir, id);
    switch (v->kind) {
    case VK_INPUT:
        return v->input == 0 ? "e->inputs" : "e->targets";
    case VK_PARAM:
        return sx_fmt("P(%lld)", (long long)g->param_off[v->param]);
    case VK_GRAD: {
        IrValue *p = ir_value(g->ir, v->primal);
        if (p->kind == VK_PARAM) return sx_fmt("G(%lld)", (long long)g->param_off[p->param]);
        break;
    }
    default:
        break;
    }
    if (g->ir->nstages > 1) { /* pipeline boundaries are the runtime's buffers: bf16 in a bf16 program */
        const IrStage *st = &g->ir->stages[g->stage];
        const char *as = g->store[id] == ST_ACT ? "((bf16 *)e->%s)" : "e->%s";
        if (id == st->act_in) return sx_fmt(as, "act_in");
        if (v->kind == VK_GRAD && v->primal == st->act_in) return sx_fmt(as, "act_in_grad");
        if (v->kind == VK_GRAD && v->primal == st->act_out) return sx_fmt(as, "act_out_grad");
    }
    if (v->slot < 0) sx_ice("value %%%d has no workspace slot", id);
    int s = g->store[id];
    return sx_fmt("%s(%d)", s == ST_I32 ? "I" : s == ST_ACT ? "A" : "F", v->slot);
}


static char *buf_cb(void *g, int id);
/* the C++ expression of a value's buffer (at dropout rate 0 some gradients are another's) */
static char *buf(CGen *g, int id) { return cg_view_buf(g->ir, id, buf_own(g, id), buf_cb, g); }
static char *buf_cb(void *g, int id) { return buf(g, id); }

/* expands a template of ops.def (compiler/codegen.c) */
static char *expand(CGen *g, const char *t, IrOp *op, const IrBwd *b, unsigned fresh)
{
    CgExpander x = {g->ir, g, buf_cb, "srk_dims6{{", "}}", 6, "(float *)0", "nullptr", g->mode, fresh};
    return cg_expand(&x, t, op, b);
}

/* ---- storage ------------------------------------------------------------------------ */
/* a pipeline boundary activation: sent from its slot, received into the runtime's buffer */
static int boundary(const Ir *ir, int id)
{
    for (int s = 0; ir->nstages > 1 && s < ir->nstages; s++)
        if (ir->stages[s].act_out == id || ir->stages[s].act_in == id) return 1;
    return 0;
}

static void plan_storage(CGen *g)
{
    Ir *ir = g->ir;
    int nv = ir->values.n;
    g->store = sx_alloc((size_t)nv + 1);
    g->aux_of_attn = sx_alloc(sizeof(int) * (size_t)(nv + 1));
    for (int i = 0; i < nv; i++) g->aux_of_attn[i] = -1;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->kind == OP_ATTENTION || op->kind == OP_ATTENTION_QKV) g->aux_of_attn[op->aux[0]] = i;
    }
    for (int pass = 0; pass < 2; pass++) /* gradients after their primals */
        for (int i = 0; i < nv; i++) {
            IrValue *v = ir->values.v[i];
            if ((v->kind == VK_GRAD) != pass) continue;
            int s = ST_F32;
            if (v->dtype == DT_I32 || v->kind == VK_INPUT) s = ST_I32;
            else if (v->kind == VK_GRAD) s = ir_value(ir, v->primal)->kind == VK_PARAM ? ST_F32 : g->store[v->primal];
            else if (v->kind == VK_OP && g->bf16 && i != ir->output) s = ST_ACT;
            g->store[i] = (char)s;
        }
}

/* bytes of a value in its slot, as a C++ expression over B and T */
static char *value_bytes(CGen *g, int id)
{
    IrValue *v = ir_value(g->ir, id);
    int a = g->aux_of_attn[id];
    if (a >= 0) {
        IrOp *op = g->ir->ops.v[a];
        return sx_fmt("srk_attention_aux_bytes(%s, %s, %s, %s, sizeof(%s))", cg_cdim(g->ir, op->sz[0]), cg_cdim(g->ir, op->sz[1]),
                      cg_cdim(g->ir, op->sz[2]), cg_cdim(g->ir, op->sz[3]), elem_type(g, op->out));
    }
    return sx_fmt("(size_t)%s * sizeof(%s)", cg_cdim(g->ir, shape_numel(&v->shape)), elem_type(g, id));
}

/* ---- fusion: matmul -> add(bias) [-> gelu] ------------------------------------------------ */
/* in the workspace (memplan's rule): op outputs, aux buffers, activation gradients */
static int in_ws_ir(const Ir *ir, const IrValue *v) { return mp_home(ir, v) >= 0; }

static int forward_readers(Ir *ir, int v)
{
    int n = 0;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        for (int k = 0; k < op->nin; k++) n += op->in[k] == v;
    }
    for (int j = 0; j < ir->bwd.n; j++) { /* recomputation reads forward values too */
        IrBwd *b = ir->bwd.v[j];
        if (b->kind != BWD_FORWARD) continue;
        IrOp *op = BWD_OP(ir, b);
        for (int k = 0; k < op->nin; k++) n += op->in[k] == v;
    }
    return n;
}

static int same_slot1(Ir *ir, int a, int b)
{
    IrValue *x = ir_value(ir, a), *y = ir_value(ir, b);
    return x->slot >= 0 && y->slot >= 0 && x->slot == y->slot && in_ws_ir(ir, x) && in_ws_ir(ir, y) &&
           mp_home(ir, x) == mp_home(ir, y);
}

/* a and b may be in one slot: their own, or at dropout rate 0 the gradient one of them is then */
static int same_slot(Ir *ir, int a, int b)
{
    int va = ir->rate0_view ? ir->rate0_view[a] : -1, vb = ir->rate0_view ? ir->rate0_view[b] : -1;
    return same_slot1(ir, a, b) || (va >= 0 && same_slot1(ir, va, b)) || (vb >= 0 && same_slot1(ir, a, vb)) ||
           (va >= 0 && vb >= 0 && same_slot1(ir, va, vb)) || (va >= 0 && va == b) || (vb >= 0 && vb == a);
}

/* an op the fused call can swallow: the next one in the same stage's forward */
static int fusable(const IrOp *first, const IrOp *op) { return op->pstage == first->pstage && !op->recomp; }

/* dropout -> add (a residual add of a dropped-out branch, the add its only reader): one pass,
 * out = a + dropout(x), the dropout's output never written (no backward reads it). At p = 0
 * that is the add alone */
static int fuse_dropout_add(CGen *g, int i, char **call, char **what)
{
    Ir *ir = g->ir;
    IrOp *dr = ir->ops.v[i];
    if (dr->kind != OP_DROPOUT || i + 1 >= ir->ops.n) return 0;
    IrOp *add = ir->ops.v[i + 1];
    int d = dr->out, k = add->in[0] == d ? 0 : 1;
    if (add->kind != OP_ADD || !fusable(dr, add) || add->in[k] != d || add->in[1 - k] == d || d == ir->output ||
        d == g->logits || boundary(ir, d) || boundary(ir, add->out) || forward_readers(ir, d) != 1)
        return 0;
    Dim n = shape_numel(&ir_value(ir, d)->shape);
    if (!dim_eq(shape_numel(&ir_value(ir, add->in[1 - k])->shape), n) || !dim_eq(shape_numel(&ir_value(ir, add->out)->shape), n))
        return 0;
    if ((ad_template_uses(ir_ops[OP_ADD].bwd) & (1u << k)) || (ad_template_uses(ir_ops[OP_DROPOUT].bwd) & (1u << 4)))
        return 0;
    *call = sx_fmt("srk_dropout_add_fwd(%s, %s, %s", buf(g, add->out), buf(g, add->in[1 - k]),
                   expand(g, "$0, $n, e->dropout, e->seed, e->step, $id, (uint64_t)e->row0 * $s0)", dr, NULL, 0));
    *what = "dropout+add";
    return 2;
}

/* nonzero: ops i.. (2 or 3 of them) are one fused call, written to *call */
static int fuse_at(CGen *g, int i, char **call, char **what)
{
    Ir *ir = g->ir;
    IrOp *mm = ir->ops.v[i];
    if (mm->kind == OP_DROPOUT) return fuse_dropout_add(g, i, call, what);
    if (mm->kind != OP_MATMUL || i + 1 >= ir->ops.n) return 0;
    IrOp *add = ir->ops.v[i + 1];
    int vm = mm->out;
    if (add->kind != OP_ADD || !fusable(mm, add) || add->in[0] != vm || vm == ir->output || vm == g->logits ||
        boundary(ir, vm))
        return 0;
    IrValue *bias = ir_value(ir, add->in[1]);
    Dim N = mm->sz[2];
    if (bias->kind != VK_PARAM || !dim_eq(shape_numel(&bias->shape), N) || !dim_eq(add->sz[0], N)) return 0;
    if (forward_readers(ir, vm) != 1 || (ad_template_uses(ir_ops[OP_MATMUL].bwd) & (1u << 4))) return 0;
    int a = mm->in[0], w = mm->in[1], va = add->out;
    /* the outputs are written at the matmul: they must not be its inputs' slots */
    if (same_slot(ir, va, a) || same_slot(ir, va, w) || boundary(ir, va)) return 0;
    char *M = cg_cdim(g->ir, mm->sz[0]), *K = cg_cdim(g->ir, mm->sz[1]), *Ns = cg_cdim(g->ir, N);
    if (i + 2 < ir->ops.n) {
        IrOp *ge = ir->ops.v[i + 2];
        if (ge->kind == OP_GELU && fusable(mm, ge) && ge->in[0] == va && va != ir->output && va != g->logits &&
            forward_readers(ir, va) == 1 && !same_slot(ir, ge->out, a) && !same_slot(ir, ge->out, w)) {
            *call = sx_fmt("srk_matmul_bias_gelu_fwd(%s, %s, %s, %s, %s, %s, %s, %s)", buf(g, ge->out), buf(g, va),
                           buf(g, a), buf(g, w), buf(g, add->in[1]), M, K, Ns);
            *what = "matmul+add+gelu";
            return 3;
        }
    }
    *call = sx_fmt("srk_matmul_bias_fwd(%s, %s, %s, %s, %s, %s, %s)", buf(g, va), buf(g, a), buf(g, w),
                   buf(g, add->in[1]), M, K, Ns);
    *what = "matmul+add";
    return 2;
}

/* ---- functions per block instance (cg_host's grouping) ---------------------------------- */
static void open_fn(CGen *g, const char *name)
{
    fprintf(g->f, "static void %s(sr_exec *e)\n{\n", name);
    cg_emit_syms(g->f, g->ir, g->P->layout.tp, "e->B", "e->T");
}

/* "file:line what", a C string literal for SRK_AT */
static char *site(const IrOp *op, const char *what)
{
    char *s = sx_fmt("%s:%d %s", cg_src_file(op->loc.file), op->loc.line, what);
    char *r = "\"";
    for (const char *p = s; *p; p++) r = sx_fmt(*p == '"' || *p == '\\' ? "%s\\%c" : "%s%c", r, *p);
    return sx_fmt("%s\"", r);
}

/* the op as the .model names it, in sites (errors, the profile): $attention_qkv is the
 * causal_attention the user wrote, $embedding_vp an embedding */
static const char *user_name(const IrOp *op) { return ir_ops[op->wrote].name; }

/* ---- the pieces of the forward and backward walks (cg_emit_forward/backward) ---- */
static void c_open_fn(void *gp, const char *name) { open_fn(gp, name); }

static int c_op(void *gp, int i)
{
    CGen *g = gp;
    Ir *ir = g->ir;
    IrOp *op = ir->ops.v[i];
    IrValue *o = ir_value(ir, op->out);
    char *call, *what;
    int n = fuse_at(g, i, &call, &what);
    if (n) {
        IrOp *last = ir->ops.v[i + n - 1];
        IrValue *lo = ir_value(ir, last->out);
        fprintf(g->f, "    /* %s:%d  %s  %%%d %s%s */\n", cg_src_file(op->loc.file), op->loc.line, what, lo->id,
                elem_type(g, lo->id), shape_str(&lo->shape, ir));
        fprintf(g->f, "    SRK_AT(%s, %s);\n", site(op, what), call);
        return n;
    }
    fprintf(g->f, "    /* %s:%d  %s  %%%d %s%s */\n", cg_src_file(op->loc.file), op->loc.line, ir_ops[op->kind].name,
            o->id, elem_type(g, o->id), shape_str(&o->shape, ir));
    const CgFusedLoss *fl = cg_fused_loss(ir, op);
    if (fl) {
        fprintf(g->f, "    if (e->train) /* backward follows: the gradient goes over the logits (lossfuse.c) */\n");
        fprintf(g->f, "        SRK_AT(%s, %s);\n    else\n    ",
                site(op, sx_fmt("%s+d %s", user_name(op), user_name(op))), expand(g, fl->cuda_fwd_bwd, op, NULL, 0));
    }
    fprintf(g->f, "    SRK_AT(%s, %s);\n", site(op, user_name(op)), expand(g, ir_ops[op->kind].cuda_fwd, op, NULL, 0));
    return 1;
}

static int c_covers(void *gp, int i)
{
    char *call, *what;
    int n = fuse_at(gp, i, &call, &what);
    return n ? n : 1;
}

static void c_recompute(void *gp, IrOp *op)
{
    CGen *g = gp;
    fprintf(g->f, "    /* %s:%d  recompute %s */\n", cg_src_file(op->loc.file), op->loc.line, ir_ops[op->kind].name);
    fprintf(g->f, "    SRK_AT(%s, %s);\n", site(op, sx_fmt("recompute %s", user_name(op))),
            expand(g, ir_ops[op->kind].cuda_fwd, op, NULL, 0));
}

static void c_allreduce(void *gp, IrOp *op, IrBwd *b)
{
    CGen *g = gp;
    IrValue *dv = ir_value(g->ir, b->dout);
    if (g->ar_taken == b) {
        g->ar_taken = NULL;
        fprintf(g->f, "    /* d%%%d: summed over the tensor group by the matmul's call, during its weight gradient */\n",
                dv->primal);
        return;
    }
    fprintf(g->f, "    SRK_AT(%s, srk_tp_allreduce(e, %s, %s, %s)); /* d%%%d summed over the tensor group */\n",
            site(op, "d all-reduce"), buf(g, b->dout), buf(g, b->dout), cg_cdim(g->ir, shape_numel(&dv->shape)),
            dv->primal);
}

static void c_begin_step(void *gp, IrOp *op, IrBwd *b)
{
    CGen *g = gp;
    const char *tmpl = cg_bwd_template(b, op, 1);
    if (!*tmpl) sx_ice("op %s has no CUDA backward template", ir_ops[op->kind].name);
    /* memplan sized lifetimes by the host template: read nothing more */
    if (ad_template_uses(tmpl) & ~ad_template_uses(cg_bwd_template(b, op, 0)))
        sx_ice("the CUDA backward template of %s reads operands the host one does not", ir_ops[op->kind].name);
    fprintf(g->f, "    /* %s:%d  d %s */\n", cg_src_file(op->loc.file), op->loc.line, ir_ops[op->kind].name);
}

static void c_zero(void *gp, IrOp *op, int d)
{
    CGen *g = gp;
    IrValue *dv = ir_value(g->ir, d);
    fprintf(g->f, "    SRK_AT(%s, srk_zero(%s, %s)); /* d%%%d %s */\n", site(op, "zero"), buf(g, d),
            cg_cdim(g->ir, shape_numel(&dv->shape)), dv->primal, shape_str(&dv->shape, g->ir));
}

/* A column-parallel matmul's input gradient, summed over the tensor group
 * by the walk's next step (cg_wgrad_overlap): an all-reduce, which the
 * matmul's call (srk_matmul_bias_bwd_ar) starts after the input gradient's
 * GEMM and waits for after the weight gradient's, which runs meanwhile
 * (Megatron-LM's asynchronous tensor-parallel all-reduce; c_allreduce then
 * leaves the step out); or with sequence parallelism the all-gather's
 * reduce-scatter backward, which the call (srk_matmul_bias_bwd_rs) starts
 * and leaves in flight during the weight gradient's GEMM, and the next step,
 * generated as before, waits for and adds. That step (remembered as taken),
 * or NULL */
static IrBwd *overlap(CGen *g, IrBwd *bm)
{
    Ir *ir = g->ir;
    if (g->mode != BW_FULL) return NULL;
    for (int j = 0; j + 1 < ir->bwd.n; j++) {
        if (ir->bwd.v[j] != bm) continue;
        if (!cg_wgrad_overlap(ir, j + 1)) return NULL;
        IrBwd *nb = ir->bwd.v[j + 1];
        if (nb->rs) g->rs_taken = nb;
        else g->ar_taken = nb;
        return nb;
    }
    return NULL;
}

/* the matmul call's extra arguments for the overlapped sum nb: the
 * reduce-scatter's (outer, local, inner), none for the all-reduce */
static const char *overlap_args(CGen *g, const IrBwd *nb)
{
    return nb->rs ? sx_fmt(", %s", expand(g, "$s0, $s1, $s2", BWD_OP(g->ir, nb), nb, 0)) : "";
}

static void c_step(void *gp, IrOp *op, IrBwd *b, unsigned fresh)
{
    CGen *g = gp;
    if (g->rs_taken == b) {
        g->rs_taken = NULL;
        fprintf(g->f, "    /* d%%%d: reduce-scattered since the matmul's call, during its weight gradient; waited for here */\n",
                ir_value(g->ir, b->dout)->primal);
    }
    IrBwd *nb = overlap(g, b);
    if (nb) {
        fprintf(g->f, "    SRK_AT(%s, %s);\n", site(op, nb->rs ? "d matmul+reduce-scatter" : "d matmul+all-reduce"),
                expand(g, sx_fmt("srk_matmul_bias_bwd_%s(e, $d0, $d1, (float *)0, $do, $0, $1, $s0, $s1, $s2, $z%s)",
                                 nb->rs ? "rs" : "ar", overlap_args(g, nb)),
                       op, b, fresh));
        return;
    }
    fprintf(g->f, "    SRK_AT(%s, %s);\n", site(op, sx_fmt("d %s", user_name(op))),
            expand(g, cg_bwd_template(b, op, 1), op, b, fresh));
}

/* d matmul then d gelu where the gelu made the matmul's left operand, in a
 * bf16 program: one srk_matmul_gelu_bwd (cuBLASLt's DGELU epilogue writes
 * d(pre) from the GEMM, d(h) is never materialised) when both gradients
 * are overwritten and d(pre) shares no slot with what that GEMM reads
 * (dout, pre). h's slot is allowed: the call reads h (for the weight
 * gradient) before it writes d(pre). The runtime falls back to the two
 * rules where the epilogue cannot run (srk_matmul.cuh) */
static int matmul_gelu_ok(CGen *g, IrOp *op, IrBwd *b, unsigned fresh, IrOp *op2, IrBwd *b2, unsigned fresh2)
{
    Ir *ir = g->ir;
    if (!g->bf16 || op->kind != OP_MATMUL || op2->kind != OP_GELU || b->rs || b2->rs) return 0;
    int dh = b->din[0], dpre = b2->din[0];
    if (op2->out != op->in[0] || dh < 0 || dpre < 0 || b2->dout != dh || !(fresh & 1) || !(fresh2 & 1)) return 0;
    return !same_slot(ir, dpre, b->dout) && !same_slot(ir, dpre, op2->in[0]) && dpre != b->dout;
}

/* a bias add's backward right before its matmul's (matmul -> add(bias) in the forward), in a
 * bf16 program: the bias gradient is the column sums of the d(out) that the weight gradient's
 * GEMM reads, so that GEMM's bias-gradient epilogue sums them (dout read once, not twice).
 * The add only adds to the bias's gradient (its other input's is d(out) itself, gradalias.c) */
static int add_matmul_ok(CGen *g, IrOp *add, IrBwd *ba, IrOp *mm, IrBwd *bm)
{
    Ir *ir = g->ir;
    if (!g->bf16 || add->kind != OP_ADD || mm->kind != OP_MATMUL || ba->rs || bm->rs) return 0;
    if (add->in[0] != mm->out || ba->din[0] >= 0 || ba->din[1] < 0 || bm->din[1] < 0 || bm->dout != ba->dout) return 0;
    IrValue *bias = ir_value(ir, add->in[1]);
    return bias->kind == VK_PARAM && dim_eq(shape_numel(&bias->shape), mm->sz[2]) && dim_eq(add->sz[0], mm->sz[2]);
}

static int c_fuse(void *gp, IrOp **ops, IrBwd **bs, const unsigned *fresh, int n)
{
    CGen *g = gp;
    if (add_matmul_ok(g, ops[0], bs[0], ops[1], bs[1])) {
        char *dbias = expand(g, "$d1", ops[0], bs[0], fresh[0]);
        IrOp *mm = ops[1];
        if (n == 3 && matmul_gelu_ok(g, mm, bs[1], fresh[1], ops[2], bs[2], fresh[2])) {
            char *call = sx_fmt("%s%s, %s)",
                                expand(g, "srk_matmul_gelu_bwd($d0, $d1, $do, $0, $1, $s0, $s1, $s2, $z, ", mm, bs[1], fresh[1]),
                                expand(g, "$d0, $0, $z", ops[2], bs[2], fresh[2]), dbias);
            fprintf(g->f, "    /* %s:%d  d matmul, its bias's gradient and %s:%d's d gelu in the GEMMs' epilogues */\n",
                    cg_src_file(mm->loc.file), mm->loc.line, cg_src_file(ops[2]->loc.file), ops[2]->loc.line);
            fprintf(g->f, "    SRK_AT(%s, %s);\n", site(ops[0], "d add+matmul+gelu"), call);
            return 3;
        }
        fprintf(g->f, "    /* %s:%d  d matmul, its bias's gradient in the GEMM's epilogue */\n", cg_src_file(mm->loc.file),
                mm->loc.line);
        IrBwd *nb = overlap(g, bs[1]);
        const char *how = !nb ? "" : nb->rs ? "+reduce-scatter" : "+all-reduce";
        fprintf(g->f, "    SRK_AT(%s, %s);\n", site(ops[0], sx_fmt("d add+matmul%s", how)),
                expand(g, sx_fmt("srk_matmul_bias_bwd%s(%s$d0, $d1, %s, $do, $0, $1, $s0, $s1, $s2, $z%s)",
                                 !nb ? "" : nb->rs ? "_rs" : "_ar", nb ? "e, " : "", dbias, nb ? overlap_args(g, nb) : ""),
                       mm, bs[1], fresh[1]));
        return 2;
    }
    if (!matmul_gelu_ok(g, ops[0], bs[0], fresh[0], ops[1], bs[1], fresh[1])) return 0;
    char *call = sx_fmt("%s%s", expand(g, "srk_matmul_gelu_bwd($d0, $d1, $do, $0, $1, $s0, $s1, $s2, $z, ", ops[0], bs[0], fresh[0]),
                        expand(g, "$d0, $0, $z)", ops[1], bs[1], fresh[1]));
    fprintf(g->f, "    /* %s:%d  d gelu, in the matmul's epilogue */\n", cg_src_file(ops[1]->loc.file), ops[1]->loc.line);
    fprintf(g->f, "    SRK_AT(%s, %s);\n", site(ops[0], "d matmul+gelu"), call);
    return 2;
}

static CgEmit cuda_emit(CGen *g)
{
    CgEmit x = {g, g->f, c_open_fn, c_op, c_recompute, c_allreduce, c_begin_step, c_zero, c_step, 1, c_fuse, c_covers};
    return x;
}

/* ---- the program descriptor (assignments in main: robust to field order) ------------------ */
/* one pipeline stage (the whole model without a pipeline): its workspace
 * plan in bytes of the storage types, forward, backward (and zb-h1's halves) */
static void emit_stage(CGen *g, int s, int logits)
{
    Ir *ir = g->ir;
    FILE *f = g->f;
    const IrStage *st = &ir->stages[s];
    int last = s == ir->nstages - 1;
    g->stage = s;
    g->param_off = g->L.off[s % g->L.nranks]; /* its pipeline rank's arena */
    fprintf(f, "/* ---- stage %d", s);
    if (ir->nstages > 1)
        fprintf(f, ": layers %d..%d%s%s", st->first_block, st->first_block + st->nblocks - 1,
                s == 0 ? ", embedding" : "", last ? ", head and loss" : "");
    fprintf(f, " ---- */\n\n");
    cg_emit_slots_head(f, st, s);
    fprintf(f, "#undef F\n#undef A\n#undef I\n#undef ARENA_FLOATS\n");
    fprintf(f, "#define ARENA_FLOATS %lldLL /* the parameter arena of this stage's pipeline rank */\n",
            (long long)g->L.n[s % g->L.nranks]);
    cg_emit_slot_macro(f, st, s, "F", "float");
    cg_emit_slot_macro(f, st, s, "A", "act_t");
    cg_emit_slot_macro(f, st, s, "I", "int32_t");
    fprintf(f, "static size_t plan%d(int B_, int T_)\n{\n    size_t o = 0, b;\n", s);
    cg_emit_syms(g->f, g->ir, g->P->layout.tp, "B_", "T_");
    for (int k = 0; k < st->nslots; k++) {
        Vec seen = {0};
        for (int i = 0; i < ir->values.n; i++) {
            IrValue *v = ir->values.v[i];
            if (v->slot != k || mp_home(ir, v) != s) continue;
            char *e = value_bytes(g, i);
            int dup = 0;
            for (int q = 0; q < seen.n; q++) dup |= !strcmp(seen.v[q], e);
            if (!dup) vec_push(&seen, e);
        }
        cg_emit_plan_cut(f, st, k);
        fprintf(f, "    off%d[%d] = o; b = %s;", s, k, seen.n ? (char *)seen.v[0] : "0");
        for (int q = 1; q < seen.n; q++) fprintf(f, " b = srk_max_size(b, %s);", (char *)seen.v[q]);
        fprintf(f, " o += (b + 255) & ~(size_t)255;\n");
    }
    cg_emit_plan_tail(f, st, s);

    Vec fcalls = {0};
    CgEmit x = cuda_emit(g);
    cg_emit_forward(&x, g->ir, g->stage, &g->fnames, &fcalls);
    fprintf(f, "static void stage%d_forward(sr_exec *e)\n{\n    replan%d(e->B, e->T);\n", s, s);
    fprintf(f, "    srk_site(__FILE__, __LINE__, \"forward\");\n");
    fprintf(f, "    srk_bind_params(e->params, ARENA_FLOATS, e->step);\n");
    for (int i = 0; i < fcalls.n; i++) fprintf(f, "    %s(e);\n", (char *)fcalls.v[i]);
    if (last) {
        fprintf(f, "    srk_site(__FILE__, __LINE__, \"loss\");\n");
        fprintf(f, "    e->loss = srk_get_scalar(%s);\n", buf(g, ir->output));
        if (g->store[logits] == ST_ACT) /* bf16, as the LM head's GEMM writes them */
            fprintf(f, "    e->logits_bf16 = (const uint16_t *)%s; /* device memory */\n", buf(g, logits));
        else
            fprintf(f, "    e->logits = %s; /* device memory */\n", buf(g, logits));
    } else {
        fprintf(f, "    e->act_out = (float *)%s; /* %s */\n", buf(g, st->act_out),
                g->store[st->act_out] == ST_ACT ? "bf16: the stage's act_bf16" : "float");
    }
    fprintf(f, "}\n\n");
    static const char *suffix[3] = {"backward", "backward_input", "backward_weight"};
    for (int mode = 0; mode < (ir->nstages > 1 ? 3 : 1); mode++) {
        Vec bcalls = {0};
        g->mode = mode;
        cg_emit_backward(&x, g->ir, g->stage, mode, g->zeroed, &g->fnames, &bcalls);
        fprintf(f, "static void stage%d_%s(sr_exec *e)\n{\n    replan%d(e->B, e->T);\n", s, suffix[mode], s);
        fprintf(f, "    srk_site(__FILE__, __LINE__, \"backward\");\n");
        fprintf(f, "    srk_bind_params(e->params, ARENA_FLOATS, e->step);\n");
        if (last && mode != BW_WEIGHT) fprintf(f, "    srk_set_scalar(%s, e->dloss); /* d loss */\n", buf(g, ir->seed));
        if (last && mode != BW_WEIGHT && ir->fused_loss >= 0) { /* a forward not told it trains */
            IrOp *ce = ir->ops.v[ir->fused_loss];
            fprintf(f, "    if (!e->train) { /* the loss's gradient, which a training forward writes (lossfuse.c) */\n");
            cg_emit_syms(f, ir, g->P->layout.tp, "e->B", "e->T");
            fprintf(f, "    SRK_AT(%s, %s);\n    }\n", site(ce, sx_fmt("d %s", user_name(ce))),
                    expand(g, sx_fmt(cg_fused_loss(ir, ce)->cuda_over, buf(g, ir->seed)), ce, NULL, 0));
        }
        for (int i = 0; i < bcalls.n; i++) fprintf(f, "    %s(e);\n", (char *)bcalls.v[i]);
        fprintf(f, "}\n\n");
    }
    g->mode = BW_FULL;
}

int cg_cuda(Program *P, FILE *f, const char *source_path, int precision_bf16)
{
    CGen g;
    memset(&g, 0, sizeof g);
    g.P = P;
    g.ir = &P->ir;
    g.f = f;
    g.bf16 = precision_bf16 != 0;
    Ir *ir = &P->ir;
    cg_param_layout(P, 64, &g.L); /* 256-byte aligned tensors (cuBLASLt, vector loads) */
    g.param_off = g.L.global;
    int64_t off = g.L.nglobal;
    g.zeroed = sx_alloc((size_t)ir->values.n + 1);
    int vocab = 0, classes = 0, max_seq = 0, logits = -1;
    if (cg_training_head(P, &vocab, &classes, &max_seq, &logits)) return 1;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (!*ir_ops[op->kind].cuda_fwd) sx_ice("op %s has no CUDA template in ops.def", ir_ops[op->kind].name);
    }
    g.logits = logits;
    plan_storage(&g);

    fprintf(f, "/* Generated by shardc %s from %s for --backend cuda, %s. Do not edit: edit the .model file.\n",
            SHARDC_VERSION, source_path, g.bf16 ? "bf16 compute with fp32 master weights" : "fp32");
    fprintf(f, " * Model %s: %d parameter tensors, %lld parameters; %d ops forward, %d backward;\n",
            ir->model_name, ir->params.n, (long long)ir_param_count(ir), ir->ops.n, ir->bwd.n);
    fprintf(f, " * %d pipeline stage%s, workspaces planned at compile time (sizes in %s, %s).\n", ir->nstages,
            ir->nstages == 1 ? "" : "s", ir->symname[0], ir->symname[1]);
    fprintf(f, " * Builds with nvcc, or with a C++20 compiler against runtime/cuda/emu (CPU emulation). */\n");
    fprintf(f, "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\n");
    fprintf(f, "#include \"sr_cuda.h\"\n#include \"sr_program.h\"\n#include \"srk.cuh\"\n\n");
    fprintf(f, "typedef %s act_t; /* activations and their gradients */\n", g.bf16 ? "__nv_bfloat16" : "float");
    fprintf(f, "#define N_PARAM_FLOATS %lldLL\n", (long long)off);
    fprintf(f, "#define P(o) (e->params + (o))\n#define G(o) (e->grads + (o))\n\n");
    fprintf(f, "[[maybe_unused]] static inline size_t srk_max_size(size_t a, size_t b) { return a > b ? a : b; }\n\n");
    for (int s = 0; s < ir->nstages; s++) emit_stage(&g, s, logits);

    int *nused = cg_emit_param_tables(f, P, g.L.global);
    if (g.L.nranks > 1) { /* each pipeline rank's own arena */
        fprintf(f, "\nstatic const int64_t rank_param_floats[%d] = {", g.L.nranks);
        for (int r = 0; r < g.L.nranks; r++) fprintf(f, "%s%lld", r ? ", " : "", (long long)g.L.n[r]);
        fprintf(f, "};\nstatic const int64_t rank_param_offsets[%d] = {", g.L.nranks * ir->params.n);
        for (int k = 0; k < g.L.nranks * ir->params.n; k++)
            fprintf(f, "%s%lld", !k ? "\n    " : k % 16 ? ", " : ",\n    ",
                    (long long)g.L.off[k / ir->params.n][k % ir->params.n]);
        fprintf(f, "};\n");
    }
    int npartial = cg_emit_tp_partial_grads(ir, f);
    fprintf(f, "\nstatic sr_stage stages[%d];\nstatic sr_program program;\n\n", ir->nstages);
    fprintf(f, "int main(int argc, char **argv)\n{\n");
    fprintf(f, "    if (srk_configure(%d, %d)) return 2; /* %s, tp; a bad SHARDC_CUDA_* setting is printed */\n",
            g.bf16, P->layout.tp, g.bf16 ? "bf16 compute" : "fp32");
    for (int st = 0; st < ir->nstages; st++) {
        const IrStage *sg = &ir->stages[st];
        int multi = ir->nstages > 1;
        fprintf(f, "    stages[%d].work_bytes = work_bytes%d;\n", st, st);
        if (sg->nkept < sg->nslots) fprintf(f, "    stages[%d].scratch_bytes = scratch_bytes%d;\n", st, st);
        fprintf(f, "    stages[%d].forward = stage%d_forward;\n", st, st);
        fprintf(f, "    stages[%d].backward = stage%d_backward;\n", st, st);
        if (multi) {
            fprintf(f, "    stages[%d].backward_input = stage%d_backward_input;\n", st, st);
            fprintf(f, "    stages[%d].backward_weight = stage%d_backward_weight;\n", st, st);
        }
        int64_t rin = sg->act_in >= 0 ? cg_row_floats(ir, sg->act_in, P->layout.tp) : 0;
        int64_t rout = sg->act_out >= 0 ? cg_row_floats(ir, sg->act_out, P->layout.tp) : 0;
        fprintf(f, "    stages[%d].act_in_row = %lld;\n", st, (long long)rin);
        fprintf(f, "    stages[%d].act_out_row = %lld;\n", st, (long long)rout);
        int bnd = sg->act_in >= 0 ? sg->act_in : sg->act_out;
        if (bnd >= 0 && g.store[bnd] == ST_ACT) fprintf(f, "    stages[%d].act_bf16 = 1;\n", st);
        fprintf(f, "    stages[%d].first_block = %d;\n    stages[%d].nblocks = %d;\n", st, sg->first_block, st, sg->nblocks);
        fprintf(f, "    stages[%d].n_params = %d;\n    stages[%d].params = stage%d_params;\n", st, nused[st], st, st);
    }
    fprintf(f, "    program.name = ");
    cg_emit_cstr(f, ir->model_name);
    fprintf(f, ";\n    program.source = ");
    cg_emit_cstr(f, source_path);
    fprintf(f, ";\n    program.n_params = %d;\n    program.params = params;\n", ir->params.n);
    fprintf(f, "    program.n_param_floats = N_PARAM_FLOATS;\n");
    fprintf(f, "    program.vocab = %d;\n    program.max_seq = %d;\n    program.tp = %d;\n", vocab, max_seq, P->layout.tp);
    if (classes) fprintf(f, "    program.classes = %d; /* the rest of vocab pads */\n", classes);
    fprintf(f, "    program.work_bytes = work_bytes0;\n    program.forward = stage0_forward;\n");
    fprintf(f, "    program.backward = stage0_backward;\n");
    fprintf(f, "    program.recompute = %d;\n", P->layout.recompute);
    fprintf(f, "    program.split_backward = %d;\n", P->ir.split_backward);
    fprintf(f, "    program.sequence_parallel = %d;\n", P->layout.sequence_parallel && P->layout.tp > 1);
    if (g.bf16) fprintf(f, "    program.param_copy_bytes = 2; /* the bf16 copy of the parameters */\n");
    fprintf(f, "    program.n_tp_partial_grads = %d;\n    program.tp_partial_grads = tp_partial_grads;\n", npartial);
    fprintf(f, "    program.pp = %d;\n    program.virtual_stages = %d;\n    program.n_stages = %d;\n",
            ir->nstages > 1 ? P->layout.pp : 1, ir->nstages > 1 ? P->layout.virtual_stages : 1, ir->nstages);
    fprintf(f, "    program.stages = stages;\n");
    if (g.L.nranks > 1)
        fprintf(f, "    program.rank_param_floats = rank_param_floats;\n"
                   "    program.rank_param_offsets = rank_param_offsets;\n");
    cg_emit_defaults(f, P, max_seq, "    program.defaults.", ";");
    fprintf(f, "    program.config_json = ");
    cg_emit_cstr(f, cg_config_json(P));
    fprintf(f, ";\n    program.backend = &sr_backend_cuda;\n");
    fprintf(f, "#ifdef SR_NO_MAIN /* tests: hand the program over instead of running it */\n");
    fprintf(f, "    (void)argc;\n    *(const sr_program **)argv = &program;\n    return 0;\n#else\n");
    fprintf(f, "    if (sr_cuda_preflight(argc, argv)) return 1; /* no GPU: one line, before MPI and NCCL */\n");
    fprintf(f, "    return sr_main(&program, argc, argv);\n#endif\n}\n");
    return 0;
}

/* ---- the build: nvcc, or the host C++ compiler against the emulator ---------------------- */
#ifndef SHARDC_CUDA_RUNTIME_INCLUDE
#define SHARDC_CUDA_RUNTIME_INCLUDE ""
#endif
#ifndef SHARDC_CUDA_KERNEL_INCLUDE
#define SHARDC_CUDA_KERNEL_INCLUDE ""
#endif
#ifndef SHARDC_CUDA_SHARDRT_LIB
#define SHARDC_CUDA_SHARDRT_LIB ""
#endif
#ifndef SHARDC_CUDA_LIB
#define SHARDC_CUDA_LIB ""
#endif
#ifndef SHARDC_CUDA_EMU_LIB
#define SHARDC_CUDA_EMU_LIB ""
#endif
#ifndef SHARDC_NVCC
#define SHARDC_NVCC "nvcc"
#endif
#ifndef SHARDC_CXX
#define SHARDC_CXX "c++"
#endif
#ifndef SHARDC_CUDA_LIBDIR
#define SHARDC_CUDA_LIBDIR ""
#endif
#ifndef SHARDC_CUDA_LINK_EXTRA
#define SHARDC_CUDA_LINK_EXTRA ""
#endif

/* a setting: the environment variable, else the configured default */
static const char *setting(const char *env, const char *dflt)
{
    const char *v = getenv(env);
    return v && *v ? v : dflt;
}


/* splits a space-separated list onto argv */
static void push_words(Vec *v, const char *s)
{
    while (s && *s) {
        while (*s == ' ') s++;
        const char *e = s;
        while (*e && *e != ' ') e++;
        if (e > s) vec_push(v, sx_strndup(s, (size_t)(e - s)));
        s = e;
    }
}

static int need_file(const char *what, const char *path, const char *env)
{
    if (path && *path && access(path, R_OK) == 0) return 0;
    fprintf(stderr, "shardc: error: %s %s is missing (build it, or set %s)\n", what, path && *path ? path : "(not configured)",
            env);
    return 1;
}

int drv_build_cuda(Program *P, const char *src, const char *out_bin, const char *archs, int emulate)
{
    (void)P;
    const char *inc = setting("SHARDC_RUNTIME_INCLUDE", SHARDC_CUDA_RUNTIME_INCLUDE);
    const char *kinc = setting("SHARDC_CUDA_INCLUDE", SHARDC_CUDA_KERNEL_INCLUDE);
    const char *rt = setting("SHARDC_RUNTIME_LIB", SHARDC_CUDA_SHARDRT_LIB);
    const char *klib = emulate ? setting("SHARDC_CUDA_EMU_LIB", SHARDC_CUDA_EMU_LIB) : setting("SHARDC_CUDA_LIB", SHARDC_CUDA_LIB);
    const char *libdir = setting("SHARDC_CUDA_LIBDIR", SHARDC_CUDA_LIBDIR);
    if (need_file("the runtime library", rt, "SHARDC_RUNTIME_LIB") ||
        need_file(emulate ? "the emulated CUDA runtime library" : "the CUDA runtime library", klib,
                  emulate ? "SHARDC_CUDA_EMU_LIB" : "SHARDC_CUDA_LIB"))
        return 1;
    Vec a = {0};
    if (emulate) {
        vec_push(&a, (void *)setting("CXX", SHARDC_CXX));
        push_words(&a, "-std=c++20 -O2 -fopenmp -Wall -Wextra -Werror -x c++");
        /* the library's prebuilt kernel instances are the configured kernels' (srk.cuh):
         * kernels from elsewhere (SHARDC_CUDA_INCLUDE) compile their own */
        if (strcmp(kinc, SHARDC_CUDA_KERNEL_INCLUDE) != 0) vec_push(&a, "-DSRK_NO_PREBUILT");
    } else {
        vec_push(&a, (void *)setting("SHARDC_NVCC", SHARDC_NVCC));
        /* one CUDA runtime in the binary: libshardrt's NCCL backend links the shared one */
        push_words(&a, "-std=c++20 -O3 -lineinfo -cudart shared -Xcompiler -fopenmp,-Wall,-Wextra");
        /* nvcc knows CUDA sources by their suffix (its -x applies to every input) */
        size_t sl = strlen(src);
        if (sl < 3 || strcmp(src + sl - 3, ".cu")) {
            fprintf(stderr, "shardc: error: nvcc needs the CUDA source to end in .cu (got %s)\n", src);
            return 1;
        }
        const char *as = archs && *archs ? archs : "80,90";
        const char *last = NULL;
        for (const char *p = as; *p;) {
            const char *e = strchr(p, ',');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            char *arch = sx_strndup(p, n);
            int ok = n >= 2 && n <= 4;
            for (size_t i = 0; i < n; i++) ok &= (arch[i] >= '0' && arch[i] <= '9') || (i == n - 1 && arch[i] == 'a');
            if (!ok) {
                fprintf(stderr, "shardc: error: bad --cuda-arch '%s' (expected compute capabilities like 80,90)\n", arch);
                return 1;
            }
            vec_push(&a, "-gencode");
            vec_push(&a, sx_fmt("arch=compute_%s,code=sm_%s", arch, arch));
            last = arch;
            p += n;
            if (*p == ',') p++;
        }
        if (last) { /* and PTX of the newest, for newer GPUs */
            vec_push(&a, "-gencode");
            vec_push(&a, sx_fmt("arch=compute_%s,code=compute_%s", last, last));
        }
        const char *ccbin = getenv("SHARDC_NVCC_CCBIN");
        if (ccbin && *ccbin) {
            vec_push(&a, "-ccbin");
            vec_push(&a, (void *)ccbin);
        }
    }
    vec_push(&a, sx_fmt("-I%s", inc));
    vec_push(&a, sx_fmt("-I%s", kinc));
    vec_push(&a, (void *)src);
    if (emulate) push_words(&a, "-x none");
    vec_push(&a, (void *)klib);
    vec_push(&a, (void *)rt);
    if (*libdir) vec_push(&a, sx_fmt("-L%s", libdir));
    if (!emulate) push_words(&a, "-lcublasLt -lcublas -lcudart -lgomp"); /* NCCL, where configured: in the extra */
    push_words(&a, setting("SHARDC_CUDA_LINK_EXTRA", SHARDC_CUDA_LINK_EXTRA));
    push_words(&a, "-lopenblas -lm");
    vec_push(&a, "-o");
    vec_push(&a, (void *)out_bin);
    vec_push(&a, NULL);
    int st = drv_run_cmd((char **)a.v);
    if (st != 0) {
        fprintf(stderr, "shardc: error: %s failed on %s (exit %d)\n", emulate ? "the C++ compiler (emulated CUDA)" : "nvcc",
                src, st);
        return 1;
    }
    return 0;
}
