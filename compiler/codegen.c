/* codegen.c: what the two code generators (codegen_host.c, codegen_cuda.c)
 * decide alike about the backward program and the pipeline boundaries. One
 * copy here, so that a host program and a CUDA program built from the same
 * IR cannot disagree on which collectives a backward issues, where the
 * data-parallel grad_ready hook fires, or how large a boundary transfer is.
 *
 * Needs: the backward program (autodiff.c, recompute.c) and the stage cut
 * (pipeline.c).
 * Guarantees: functions of the IR only; cg_emit_tp_partial_grads writes one
 * C (and C++) definition that both back ends reference from sr_program;
 * cg_param_layout gives both the same parameter arena per pipeline rank
 * (only the alignment differs).
 */
#include "shardc.h"

#include <stdio.h>
#include <string.h>

int cg_step_sum(const IrBwd *b)
{
    return b->kind == BWD_ALLREDUCE && b->fwd < 0;
}

int cg_wgrad_overlap(const Ir *ir, int j)
{
    if (j < 1 || j >= ir->bwd.n) return 0;
    const IrBwd *nb = ir->bwd.v[j], *bm = ir->bwd.v[j - 1];
    int sum = (nb->kind == BWD_ALLREDUCE && !cg_step_sum(nb)) ||
              (nb->kind == BWD_RULE && nb->rs && BWD_OP(ir, nb)->kind == OP_TP_ALLGATHER);
    return sum && bm->kind == BWD_RULE && !bm->rs && BWD_OP(ir, bm)->kind == OP_MATMUL && bm->din[0] >= 0 &&
           bm->din[1] >= 0 && bm->din[0] == nb->dout && bm->pstage == nb->pstage;
}

/* the all-gather's backward when autodiff folded the sum of its partial
 * dout into it (IrBwd.rs): reduce-scatter dout (outer, tp*local, inner),
 * this rank's block summed over the group, into dx (outer, local, inner).
 * The same operands as the op table's TP_ALLGATHER BWD (memplan's
 * lifetimes hold) */
static const char *const allgather_bwd_rs[2] = {
    "sr_tp_allgather_bwd_rs(e, $d0, $do, $s0, $s1, $s2)",
    "srk_tp_allgather_bwd_rs(e, $d0, $do, $s0, $s1, $s2)",
};

const char *cg_bwd_template(const IrBwd *b, const IrOp *op, int cuda)
{
    if (b->rs) {
        if (op->kind != OP_TP_ALLGATHER) sx_ice("reduce-scatter backward on op %s", ir_ops[op->kind].name);
        return allgather_bwd_rs[cuda != 0];
    }
    return cuda ? ir_ops[op->kind].cuda_bwd : ir_ops[op->kind].bwd;
}

int *cg_last_grad_steps(Ir *ir, int stage)
{
    int *last = sx_alloc(sizeof(int) * (size_t)(ir->params.n + 1));
    int pp = ir->pp > 1 ? ir->pp : 1, rank = stage % pp;
    for (int i = 0; i < ir->params.n; i++) last[i] = -1;
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (cg_step_sum(b)) continue; /* after the step's last backward, not in it */
        if (b->pstage % pp != rank) continue;
        int gs[5] = {b->din[0], b->din[1], b->din[2], b->din[3], b->kind == BWD_ALLREDUCE ? b->dout : -1};
        for (int k = 0; k < 5; k++) {
            if (gs[k] < 0) continue;
            IrValue *pv = ir_value(ir, ir_value(ir, gs[k])->primal);
            if (pv->kind == VK_PARAM) last[pv->param] = j;
        }
    }
    return last;
}

int cg_emit_tp_partial_grads(Ir *ir, FILE *f)
{
    int n = 0;
    fprintf(f, "\n/* sequence parallelism: parameter gradients the runtime sums over the tensor group\n"
               " * once per step, after the microbatches */\n");
    fprintf(f, "static const int tp_partial_grads[] = {");
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (cg_step_sum(b)) fprintf(f, "%s%d", n++ ? ", " : "", ir_value(ir, ir_value(ir, b->dout)->primal)->param);
    }
    fprintf(f, "%s};\n", n ? "" : "-1");
    return n;
}

int64_t cg_row_floats(Ir *ir, int id, int tp)
{
    Dim n = shape_numel(&ir_value(ir, id)->shape);
    /* split along the sequence: B * T/tp tokens of n.c floats = n.c/tp per token */
    if (ir->seq_sym > 0 && n.p[0] == 1 && n.p[ir->seq_sym] == 1 && !n.p[1] && n.c % tp == 0) return n.c / tp;
    if (n.p[0] != 1 || n.p[1] != 1) sx_ice("boundary activation %%%d is not per token", id);
    return n.c;
}

/* floats of parameter i on this tensor rank, rounded up to `align` */
static int64_t param_floats(Ir *ir, int i, int64_t align)
{
    int64_t n = shape_numel(&ir_value(ir, ((IrParam *)ir->params.v[i])->value)->shape).c;
    return (n + align - 1) / align * align;
}

void cg_param_layout(Program *P, int64_t align, ParamLayout *L)
{
    Ir *ir = &P->ir;
    int n = ir->params.n, R = ir->nstages > 1 ? P->layout.pp : 1;
    L->nranks = R;
    L->global = sx_alloc(sizeof(int64_t) * (size_t)(n + 1));
    L->off = sx_alloc(sizeof(int64_t *) * (size_t)R);
    L->n = sx_alloc(sizeof(int64_t) * (size_t)R);
    L->nglobal = 0;
    for (int i = 0; i < n; i++) {
        L->global[i] = L->nglobal;
        L->nglobal += param_floats(ir, i, align);
    }
    if (R == 1) {
        L->off[0] = L->global;
        L->n[0] = L->nglobal;
        return;
    }
    /* held[i * R + r]: a stage of pipeline rank r (stage s runs on s % pp)
     * reads parameter i; one that no op reads stays with rank 0, which
     * saves it */
    char *held = sx_alloc((size_t)n * (size_t)R + 1);
    for (int k = 0; k < ir->ops.n; k++) {
        IrOp *op = ir->ops.v[k];
        for (int j = 0; j < op->nin; j++) {
            IrValue *v = ir_value(ir, op->in[j]);
            if (v->kind == VK_PARAM) held[(size_t)v->param * (size_t)R + (size_t)(op->pstage % R)] = 1;
        }
    }
    for (int i = 0; i < n; i++) {
        int any = 0;
        for (int r = 0; r < R; r++) any |= held[(size_t)i * (size_t)R + (size_t)r];
        if (!any) held[(size_t)i * (size_t)R] = 1;
    }
    for (int r = 0; r < R; r++) {
        L->off[r] = sx_alloc(sizeof(int64_t) * (size_t)(n + 1));
        L->n[r] = 0;
        for (int i = 0; i < n; i++) {
            L->off[r][i] = held[(size_t)i * (size_t)R + (size_t)r] ? L->n[r] : -1;
            if (L->off[r][i] >= 0) L->n[r] += param_floats(ir, i, align);
        }
    }
}

int cg_is_param_grad(Ir *ir, int gv)
{
    IrValue *v = ir_value(ir, gv);
    return v->kind == VK_GRAD && ir_value(ir, v->primal)->kind == VK_PARAM;
}

char *cg_cdim(Ir *ir, Dim d)
{
    char *s = sx_fmt("%lld", (long long)d.c);
    int syms = 0;
    for (int i = 0; i < SX_MAXSYM; i++)
        for (int k = 0; k < d.p[i]; k++) {
            s = sx_fmt("%s*%s", s, ir->symname[i]);
            syms++;
        }
    if (!syms) return s;
    if (d.c == 1) s += 2; /* drop the "1*" */
    return sx_fmt("((long)%s)", s);
}

char *cg_fmt_float(double x)
{
    char b[64];
    snprintf(b, sizeof b, "%.9g", x);
    if (!strpbrk(b, ".eEn")) strcat(b, ".0");
    return sx_fmt("%sf", b);
}

char *cg_expand(const CgExpander *g, const char *t, IrOp *op, const IrBwd *b)
{
    Ir *ir = g->ir;
    IrValue *out = ir_value(ir, op->out);
    char *r = "";
    for (const char *p = t; *p;) {
        if (*p != '$') {
            const char *q = strchr(p, '$');
            size_t n = q ? (size_t)(q - p) : strlen(p);
            r = sx_fmt("%s%.*s", r, (int)n, p);
            p += n;
            continue;
        }
        p++;
        char *x = NULL;
        if (!strncmp(p, "dims", 4) && p[4] >= '0' && p[4] <= '3') {
            IrValue *v = ir_value(ir, op->in[p[4] - '0']);
            int n = v->shape.nd > g->dims_pad ? v->shape.nd : g->dims_pad;
            x = (char *)g->dims_open;
            for (int i = 0; i < n; i++)
                x = sx_fmt("%s%s%s", x, i ? ", " : "", i < v->shape.nd ? cg_cdim(ir, v->shape.d[i]) : "0");
            x = sx_fmt("%s%s", x, g->dims_close);
            p += 5;
        } else if (p[0] >= '0' && p[0] <= '3') {
            x = g->buf(g->gen, op->in[p[0] - '0']);
            p++;
        } else if (p[0] == 'o') {
            x = g->buf(g->gen, op->out);
            p++;
        } else if (p[0] == 'a' && (p[1] == '0' || p[1] == '1')) {
            x = g->buf(g->gen, op->aux[p[1] - '0']);
            p += 2;
        } else if (p[0] == 'd' && p[1] == 'o') {
            if (!b) sx_ice("$do outside a backward template");
            x = g->buf(g->gen, b->dout);
            p += 2;
        } else if (p[0] == 'd' && p[1] >= '0' && p[1] <= '3') {
            if (!b) sx_ice("$d%c outside a backward template", p[1]);
            int k = p[1] - '0', dv = b->din[k];
            /* zb-h1 splits the backward: B computes activation gradients, W parameter ones */
            if (dv >= 0 && ((g->mode == BW_INPUT && cg_is_param_grad(ir, dv)) ||
                            (g->mode == BW_WEIGHT && !cg_is_param_grad(ir, dv))))
                dv = -1;
            x = dv < 0                ? (char *)g->null_grad
                : (b->gate >> k) & 1 ? sx_fmt("(e->tp_rank == 0 ? %s : %s)", g->buf(g->gen, dv), g->null_rank)
                                     : g->buf(g->gen, dv);
            p += 2;
        } else if (p[0] == 's' && p[1] >= '0' && p[1] <= '3') {
            x = cg_cdim(ir, op->sz[p[1] - '0']);
            p += 2;
        } else if (p[0] == 'k' && p[1] >= '0' && p[1] <= '7') {
            x = cg_fmt_float(op->k[p[1] - '0']);
            p += 2;
        } else if (p[0] == 'n') {
            x = cg_cdim(ir, shape_numel(&out->shape));
            p++;
        } else if (p[0] == 'N') {
            Dim n = shape_numel(&out->shape), rows = n;
            if (out->shape.nd) {
                Dim last = out->shape.d[out->shape.nd - 1];
                rows.c = n.c / last.c;
                for (int i = 0; i < SX_MAXSYM; i++) rows.p[i] = (uint8_t)(n.p[i] - last.p[i]);
            }
            x = cg_cdim(ir, rows);
            p++;
        } else if (p[0] == 'z') {
            x = sx_fmt("%u", g->fresh);
            p++;
        } else if (!strncmp(p, "id", 2)) {
            x = sx_fmt("%du", op->uid); /* the same in every layout */
            p += 2;
        } else {
            sx_ice("bad template operand in '%s'", t);
        }
        r = sx_fmt("%s%s", r, x);
    }
    return r;
}

double cg_tnum(Program *P, const char *name, double dflt)
{
    const Const *c = sema_find_const(&P->train, name);
    if (!c || c->is_str) return dflt;
    return c->is_float ? c->f : (double)c->i;
}

void cg_emit_cstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 32 || c >= 127) fprintf(f, "\\%03o", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static char *json_value(const Const *c)
{
    if (c->is_bool) return sx_strdup(c->i ? "true" : "false");
    if (c->is_str) {
        char *v = "\"";
        for (const char *p = c->s; *p; p++) {
            unsigned char ch = (unsigned char)*p;
            if (ch == '"' || ch == '\\') v = sx_fmt("%s\\%c", v, ch);
            else if (ch < 32) v = sx_fmt("%s\\u%04x", v, ch);
            else v = sx_fmt("%s%c", v, ch);
        }
        return sx_fmt("%s\"", v);
    }
    if (c->is_float) {
        char *v = sx_fmt("%.17g", c->f);
        return strpbrk(v, ".eEn") ? v : sx_fmt("%s.0", v);
    }
    return sx_fmt("%lld", c->i);
}

/* the object of the constants named prefix*: "a.b" becomes member b of
 * object a, placed where its first member is declared */
static char *config_object(Program *P, const char *prefix)
{
    size_t pl = strlen(prefix);
    char *s = "{";
    int n = 0;
    for (int i = 0; i < P->config.n; i++) {
        const Const *c = P->config.v[i];
        if (strncmp(c->name, prefix, pl)) continue;
        const char *rest = c->name + pl, *dot = strchr(rest, '.');
        char *key = dot ? sx_strndup(rest, (size_t)(dot - rest)) : sx_strdup(rest), *v;
        if (dot) {
            int seen = 0; /* the object was written with an earlier member */
            for (int k = 0; k < i && !seen; k++) {
                const char *o = ((const Const *)P->config.v[k])->name;
                seen = !strncmp(o, prefix, pl) && !strncmp(o + pl, key, strlen(key)) &&
                       o[pl + strlen(key)] == '.';
            }
            if (seen) continue;
            v = config_object(P, sx_fmt("%s%s.", prefix, key));
        } else {
            v = json_value(c);
        }
        s = sx_fmt("%s%s\"%s\": %s", s, n++ ? ", " : "", key, v);
    }
    return sx_fmt("%s}", s);
}

char *cg_config_json(Program *P) { return config_object(P, ""); }

/* ---- names and comments both back ends write ---------------------------------- */

/* the function group of an op: its scope up to the block index or the
 * second component ("blocks.3", "model.embed"), "model" without a scope */
char *cg_group_of(const IrOp *op)
{
    const char *s = op->scope && *op->scope ? op->scope : "model";
    const char *p = s;
    int comps = 0;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        int numeric = n > 0;
        for (size_t i = 0; i < n; i++) numeric &= p[i] >= '0' && p[i] <= '9';
        comps++;
        if (numeric || comps == 2 || !dot) return sx_strndup(s, (size_t)(p - s) + n);
        p = dot + 1;
    }
    return sx_strdup(s);
}

const char *cg_src_file(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* kind_group as a C identifier, numbered when a group recurs (the model's
 * own ops before and after the blocks); recorded in fnames and calls */
char *cg_fn_name(Vec *fnames, Vec *calls, const char *kind, const char *grp)
{
    char *base = sx_fmt("%s_%s", kind, grp), *name;
    for (char *p = base; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) *p = '_';
    name = base;
    for (int k = 2;; k++) {
        int clash = 0;
        for (int i = 0; i < fnames->n; i++) clash |= !strcmp(fnames->v[i], name);
        if (!clash) break;
        name = sx_fmt("%s_%d", base, k);
    }
    vec_push(fnames, name);
    vec_push(calls, name);
    return name;
}

const char *cg_init_name(int init)
{
    return init == 0 ? "SR_INIT_ZEROS" : init == 1 ? "SR_INIT_ONES" : "SR_INIT_NORMAL";
}

/* the symbolic dims as locals from the C expressions b and t (sequence
 * parallelism: this rank's part of the sequence, t / tp) */
void cg_emit_syms(FILE *f, const Ir *ir, int tp, const char *b, const char *t)
{
    for (int i = 0; i < ir->nsym; i++) {
        if (i == ir->seq_sym && i > 0)
            fprintf(f, "    const int %s = %s / %d;\n", ir->symname[i], t, tp);
        else
            fprintf(f, "    const int %s = %s;\n", ir->symname[i], i == 0 ? b : t);
    }
    for (int i = 0; i < ir->nsym; i++) fprintf(f, "    (void)%s;\n", ir->symname[i]);
}

/* a string constant of the train block as a C literal, dflt or NULL without it */
static void emit_str_value(FILE *f, const Const *c, const char *dflt)
{
    if (c && c->is_str) cg_emit_cstr(f, c->s);
    else if (dflt) cg_emit_cstr(f, dflt);
    else fprintf(f, "NULL");
}

/* the program's sr_train_opts defaults from the train block, one field per
 * line: PREFIX field = value END (a designated initializer or assignments) */
void cg_emit_defaults(FILE *f, Program *P, int max_seq, const char *prefix, const char *end)
{
    struct {
        const char *field;
        double dflt;
        int kind; /* 0 int, 1 float, 2 unsigned long long */
    } nums[] = {{"steps", 100, 0}, {"batch", 8, 0}, {"seq", 0, 0}, {"lr", 3e-4, 1}, {"min_lr", 0.0, 1},
                {"warmup", 0, 0}, {"weight_decay", 0.0, 1}, {"beta1", 0.9, 1}, {"beta2", 0.999, 1},
                {"eps", 1e-8, 1}, {"grad_clip", 0.0, 1}, {"dropout", 0.0, 1}, {"seed", 1337, 2},
                {"eval_every", 0, 0}, {"save_every", 0, 0}, {"decay_steps", 0, 0}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        double d = nums[i].dflt;
        if (!strcmp(nums[i].field, "seq")) d = max_seq > 0 && max_seq < 1024 ? max_seq : 64;
        double v = cg_tnum(P, nums[i].field, d);
        fprintf(f, "%s%s = ", prefix, nums[i].field);
        if (nums[i].kind == 1) fprintf(f, "%s", cg_fmt_float(v));
        else if (nums[i].kind == 2) fprintf(f, "%lluull", (unsigned long long)v);
        else fprintf(f, "%lld", (long long)v);
        fprintf(f, "%s\n", end);
    }
    fprintf(f, "%smicrobatches = %d%s\n", prefix, P->layout.microbatches, end);
    static const char *const strs[][2] = {{"lr_schedule", "constant"}, {"data", NULL}, {"val_data", NULL}};
    for (int i = 0; i < 3; i++) {
        fprintf(f, "%s%s = ", prefix, strs[i][0]);
        emit_str_value(f, sema_find_const(&P->train, strs[i][0]), strs[i][1]);
        fprintf(f, "%s\n", end);
    }
    /* the schedule the program was built for is its default */
    fprintf(f, "%sschedule = ", prefix);
    if (P->ir.nstages > 1) cg_emit_cstr(f, P->layout.schedule);
    else fprintf(f, "NULL");
    fprintf(f, "%s\n", end);
}

/* ---- the forward and backward walks both back ends emit ---------------------------- */

/* the param_needed hook for each parameter that ops i..i+n-1 read and no
 * earlier op of the stage did (announced) */
static void emit_param_needed(const CgEmit *x, Ir *ir, int i, int n, char *announced)
{
    for (int j = i; j < i + n; j++) {
        IrOp *op = ir->ops.v[j];
        for (int k = 0; k < op->nin; k++) {
            IrValue *v = ir_value(ir, op->in[k]);
            if (v->kind != VK_PARAM || announced[v->param]) continue;
            announced[v->param] = 1;
            fprintf(x->f, "    if (e->param_needed) e->param_needed(e, %d); /* %s */\n", v->param,
                    ((IrParam *)ir->params.v[v->param])->name);
        }
    }
}

/* one function per op group, in op order, for the stage's ops (recomputed
 * ones only in the backward); x->op emits op i and returns how many ops it
 * covered (a fused chain: more than one, as x->covers says beforehand).
 * The first op of the stage to read a parameter is preceded by the
 * param_needed hook (ZeRO-1 gathers parameters during the forward). */
void cg_emit_forward(const CgEmit *x, Ir *ir, int stage, Vec *fnames, Vec *calls)
{
    char *cur = NULL;
    char *announced = sx_alloc((size_t)ir->params.n + 1); /* zeroed */
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->pstage != stage || op->recomp) continue;
        char *grp = cg_group_of(op);
        if (!cur || strcmp(cur, grp)) {
            if (cur) fprintf(x->f, "}\n\n");
            x->open_fn(x->g, cg_fn_name(fnames, calls, "fwd", grp));
            cur = grp;
        }
        int n = x->covers ? x->covers(x->g, i) : 1;
        emit_param_needed(x, ir, i, n, announced);
        if (x->op(x->g, i) != n) sx_ice("forward op %d: the back end covered other ops than it said", i);
        i += n - 1;
    }
    if (cur) fprintf(x->f, "}\n\n");
}

int cg_step_runs(Ir *ir, const IrBwd *b, int mode)
{
    if (mode == BW_FULL) return 1;
    int any_param = 0, any_act = 0;
    if (b->kind == BWD_FORWARD) {
        any_act = 1;
    } else if (b->kind == BWD_ALLREDUCE) {
        any_param = cg_is_param_grad(ir, b->dout);
        any_act = !any_param;
    } else {
        for (int k = 0; k < 4; k++)
            if (b->din[k] >= 0) {
                if (cg_is_param_grad(ir, b->din[k])) any_param = 1;
                else any_act = 1;
            }
    }
    return mode == BW_INPUT ? any_act : any_param;
}

/* step b's gradient operands as the walk meets them: each is marked in
 * zeroed; bit k of the result when $dK is this step's first write and its
 * template overwrites it ($z); the ones to clear before the call go to
 * clear[] (*nclear) */
static unsigned step_fresh(const CgEmit *x, Ir *ir, int stage, int mode, IrOp *op, IrBwd *b, char *zeroed, int *clear,
                           int *nclear)
{
    const char *t = cg_bwd_template(b, op, x->cuda);
    int can = mode == BW_FULL && t && strstr(t, "$z");
    unsigned fresh = 0;
    *nclear = 0;
    for (int k = 0; k < op->nin; k++) {
        int d = b->din[k];
        if (d < 0 || zeroed[d]) continue;
        IrValue *dv = ir_value(ir, d);
        IrValue *pv = ir_value(ir, dv->primal);
        zeroed[d] = 1;
        if (pv->kind == VK_PARAM || mode == BW_WEIGHT) continue;
        if (ir->nstages > 1 && pv->id == ir->stages[stage].act_out) continue; /* received */
        int twice = 0;
        for (int i = 0; i < op->nin; i++) twice |= i != k && b->din[i] == d;
        if (can && !twice && !((b->gate >> k) & 1)) {
            fresh |= 1u << k;
            continue;
        }
        clear[(*nclear)++] = d;
    }
    return fresh;
}

/* a dropout's backward that the run skips at rate 0, its input gradient then being d(out)
 * itself (gradalias.c) */
static int rate0_step(const Ir *ir, const IrBwd *b)
{
    return ir->rate0_view && b->kind == BWD_RULE && b->din[0] >= 0 && ir->rate0_view[b->din[0]] == b->dout;
}

/* the losses lossfuse.c fuses, and the calls that do it; one row per op kind */
static const CgFusedLoss fused_losses[] = {
    {OP_CROSS_ENTROPY, "*$o = sr_crossentropy_fwd_bwd($a0, $0, $1, e->dloss, $s0, $s1, $s2)",
     "srk_crossentropy_fwd_bwd($o, $a0, $0, $1, e->dloss, $s0, $s1, $s2)",
     "sr_crossentropy_bwd_over($0, $a0, $1, e->dloss, $s0, $s1, $s2)",
     "srk_crossentropy_bwd($0, $0, $a0, $1, %s, $s0, $s1, $s2, 1)"},
    {OP_CROSS_ENTROPY_VP, "*$o = sr_crossentropy_vp_fwd_bwd(e, $a0, $0, $1, e->dloss, $s0, $s1, $s2)",
     "srk_crossentropy_vp_fwd_bwd(e, $o, $a0, $0, $1, e->dloss, $s0, $s1, $s2)",
     "sr_crossentropy_vp_bwd_over(e, $0, $a0, $1, e->dloss, $s0, $s1, $s2)",
     "srk_crossentropy_vp_bwd(e, $0, $0, $a0, $1, %s, $s0, $s1, $s2, 1)"},
};

const CgFusedLoss *cg_fused_loss(const Ir *ir, const IrOp *op)
{
    if (ir->fused_loss < 0 || op->id != ir->fused_loss) return NULL;
    for (size_t i = 0; i < sizeof fused_losses / sizeof fused_losses[0]; i++)
        if (fused_losses[i].kind == op->kind) return &fused_losses[i];
    return NULL;
}

int cg_loss_fusable(OpKind kind)
{
    for (size_t i = 0; i < sizeof fused_losses / sizeof fused_losses[0]; i++)
        if (fused_losses[i].kind == kind) return 1;
    return 0;
}

char *cg_view_buf(const Ir *ir, int id, const char *own, char *(*buf)(void *g, int id), void *g)
{
    int o = ir->rate0_view ? ir->rate0_view[id] : -1;
    return o < 0 ? (char *)own : sx_fmt("(e->dropout > 0.0f ? %s : %s)", own, buf(g, o));
}

/* the step after j when the back end may fuse the two: a gradient rule of
 * the same stage and function that this walk runs, nothing between them */
static IrBwd *fusable_next(const CgEmit *x, Ir *ir, int j, int stage, int mode, const IrOp *op)
{
    if (!x->fuse || j + 1 >= ir->bwd.n || rate0_step(ir, ir->bwd.v[j])) return NULL;
    IrBwd *b2 = ir->bwd.v[j + 1];
    if (b2->kind != BWD_RULE || b2->fwd < 0 || b2->pstage != stage || !cg_step_runs(ir, b2, mode) ||
        rate0_step(ir, b2))
        return NULL;
    return strcmp(cg_group_of(op), cg_group_of(BWD_OP(ir, b2))) ? NULL : b2;
}

/* the stage's backward steps in order, grouped into functions like the
 * forward: steps the runtime sums once per step are left out, zb-h1's
 * halves (mode BW_INPUT, BW_WEIGHT) keep the steps with activation or
 * parameter gradients; each activation gradient is cleared before the first
 * step that adds to it (not a received one, not in the weight half), unless
 * that step's template takes $z: then the call is told to overwrite it
 * instead (not for a tensor-parallel rank-0-only gradient, which the other
 * ranks never write, nor for one the step writes twice); two or three
 * adjacent steps are one call where the back end fuses them (x->fuse), when
 * the later ones clear nothing; the grad_ready hook follows the step that
 * completes a parameter's gradient */
void cg_emit_backward(const CgEmit *x, Ir *ir, int stage, int mode, char *zeroed, Vec *fnames, Vec *calls)
{
    char *cur = NULL;
    int *last = cg_last_grad_steps(ir, stage); /* each parameter's, on this stage's rank */
    IrOp *prev = NULL;
    char *ahead[2] = {sx_alloc((size_t)ir->values.n + 1), sx_alloc((size_t)ir->values.n + 1)}; /* for fusion */
    memset(zeroed, 0, (size_t)ir->values.n + 1);
    const char *kind = mode == BW_INPUT ? "bwdi" : mode == BW_WEIGHT ? "bwdw" : "bwd";
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        IrOp *op = b->fwd >= 0 ? BWD_OP(ir, b) : prev;
        if (!op) sx_ice("backward step %d has no op", j);
        prev = op;
        if (b->pstage != stage || cg_step_sum(b)) continue; /* the runtime sums those once per step */
        if (!cg_step_runs(ir, b, mode)) continue;
        char *grp = cg_group_of(op);
        if (!cur || strcmp(cur, grp)) {
            if (cur) fprintf(x->f, "}\n\n");
            x->open_fn(x->g, cg_fn_name(fnames, calls, kind, grp));
            cur = grp;
        }
        int done = j; /* the last step this iteration emitted */
        if (b->kind == BWD_FORWARD) {
            x->recompute(x->g, op);
        } else if (b->kind == BWD_ALLREDUCE) {
            x->allreduce(x->g, op, b);
        } else {
            int skip0 = rate0_step(ir, b);
            if (skip0)
                fprintf(x->f, "    if (e->dropout > 0.0f) { /* at rate 0, d%%%d is d%%%d (gradalias.c) */\n",
                        ir_value(ir, b->din[0])->primal, ir_value(ir, b->dout)->primal);
            x->begin_step(x->g, op, b);
            int clear[4], nclear;
            unsigned fr[3];
            fr[0] = step_fresh(x, ir, stage, mode, op, b, zeroed, clear, &nclear);
            for (int k = 0; k < nclear; k++) x->zero(x->g, op, clear[k]);
            /* up to two next steps that clear nothing, for the back end to fuse with this one;
             * ahead[n - 1] is the walk's state after step n */
            IrBwd *bs[3] = {b, NULL, NULL};
            IrOp *ops[3] = {op, NULL, NULL};
            int n = 1;
            for (; n < 3; n++) {
                IrBwd *nb = fusable_next(x, ir, j + n - 1, stage, mode, ops[n - 1]);
                if (!nb) break;
                memcpy(ahead[n - 1], n == 1 ? zeroed : ahead[0], (size_t)ir->values.n + 1);
                int cl[4], ncl;
                fr[n] = step_fresh(x, ir, stage, mode, BWD_OP(ir, nb), nb, ahead[n - 1], cl, &ncl);
                if (ncl) break;
                bs[n] = nb;
                ops[n] = BWD_OP(ir, nb);
            }
            int took = n > 1 ? x->fuse(x->g, ops, bs, fr, n) : 0;
            if (took > 1) {
                memcpy(zeroed, ahead[took - 2], (size_t)ir->values.n + 1);
                prev = ops[took - 1];
                done = j + took - 1;
            } else {
                x->step(x->g, op, b, fr[0]);
            }
            if (skip0) fprintf(x->f, "    }\n");
        }
        /* no device sync before the hook: the comm layer orders its
         * collectives after the kernels queued so far */
        for (; j <= done; j++)
            for (int i = 0; i < ir->params.n && mode != BW_INPUT; i++)
                if (last[i] == j)
                    fprintf(x->f, "    if (e->grad_ready) e->grad_ready(e, %d); /* %s complete */\n", i,
                            ((IrParam *)ir->params.v[i])->name);
        j = done;
    }
    if (cur) fprintf(x->f, "}\n\n");
}

/* what a training program needs of the model: two i32 [B, T] inputs and a
 * cross_entropy(logits, targets) output; *vocab, *logits from the loss head,
 * *classes its classes when the vocabulary is padded (0: not),
 * *max_seq from the position table (0 without one). Non-zero: reported. */
int cg_training_head(Program *P, int *vocab_out, int *classes_out, int *max_seq_out, int *logits_out)
{
    Ir *ir = &P->ir;
    int vocab = 0, classes = 0, max_seq = 0, logits = -1;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if ((op->kind == OP_CROSS_ENTROPY || op->kind == OP_CROSS_ENTROPY_VP) && op->out == ir->output) {
            vocab = (int)op->sz[1].c * (op->kind == OP_CROSS_ENTROPY_VP ? P->layout.tp : 1);
            classes = (int)op->sz[2].c;
            logits = op->in[0];
        }
        if (op->kind == OP_EMBEDDING) {
            IrValue *idx = ir_value(ir, op->in[1]);
            if (idx->def >= 0 && ir_op(ir, idx->def)->kind == OP_ARANGE) {
                int rows = (int)ir_value(ir, op->in[0])->shape.d[0].c;
                if (!max_seq || rows < max_seq) max_seq = rows;
            }
        }
    }
    if (ir->ninputs != 2 || ir_value(ir, ir->inputs[0])->dtype != DT_I32 ||
        ir_value(ir, ir->inputs[1])->dtype != DT_I32 || ir->nsym != 2 + (ir->seq_sym > 0)) {
        sx_error(&ir->model_loc, "to build a training program, the model takes two i32[B, T] inputs "
                 "(tokens and next-token targets)");
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        IrValue *in = ir_value(ir, ir->inputs[k]);
        if (in->shape.nd != 2 || in->shape.d[0].p[0] != 1 || in->shape.d[1].p[1] != 1 ||
            in->shape.d[0].c != 1 || in->shape.d[1].c != 1 || in->shape.d[0].p[1] || in->shape.d[1].p[0]) {
            sx_error(&ir->model_loc, "model input %d must have the shape [%s, %s] (batch, sequence)", k + 1,
                     ir->symname[0], ir->symname[1]);
            return 1;
        }
    }
    if (logits < 0) {
        sx_error(&ir->model_loc, "to build a training program, the model must return cross_entropy(logits, targets)");
        return 1;
    }
    *vocab_out = vocab;
    *classes_out = classes;
    *max_seq_out = max_seq;
    *logits_out = logits;
    return 0;
}

/* the parameter table (sr_param_desc params[]: local and full shapes, arena
 * offsets, init, sharding, source line) and each stage's parameter list
 * (stageS_params[]); returns the list lengths, one per stage */
int *cg_emit_param_tables(FILE *f, Program *P, const int64_t *offsets)
{
    Ir *ir = &P->ir;
    fprintf(f, "static const sr_param_desc params[%d] = {\n", ir->params.n);
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        const Shape *ls = &ir_value(ir, p->value)->shape; /* local: split dim / tp */
        int split = p->sh.kind == SH_SPLIT && P->layout.tp > 1;
        fprintf(f, "    {");
        cg_emit_cstr(f, p->name);
        fprintf(f, ", %d, {", ls->nd);
        for (int k = 0; k < 4; k++) fprintf(f, "%s%lld", k ? ", " : "", k < ls->nd ? (long long)ls->d[k].c : 0LL);
        fprintf(f, "}, %lld, %lld, %s, %s, %d, %d, %s, ", (long long)shape_numel(ls).c, (long long)offsets[i],
                cg_init_name(p->init), cg_fmt_float(p->std), p->decay, split ? p->sh.dim : -1,
                split ? "SR_AXIS_TENSOR" : "SR_AXIS_NONE");
        cg_emit_cstr(f, sx_fmt("%s:%d", p->loc.file, p->loc.line));
        fprintf(f, ", {");
        for (int k = 0; k < 4; k++) fprintf(f, "%s%lld", k ? ", " : "", k < p->shape.nd ? (long long)p->shape.d[k].c : 0LL);
        fprintf(f, "}, %d, %d},\n", p->sh.groups > 0 ? p->sh.groups : 1, p->vocab);
    }
    fprintf(f, "};\n\n");
    /* the stages: entry points, boundaries, the parameters each uses */
    int *nused = sx_alloc(sizeof(int) * (size_t)ir->nstages);
    for (int st = 0; st < ir->nstages; st++) {
        char *used = sx_alloc((size_t)ir->params.n + 1);
        for (int i = 0; i < ir->ops.n; i++) {
            IrOp *op = ir->ops.v[i];
            if (op->pstage != st) continue;
            for (int k = 0; k < op->nin; k++) {
                IrValue *v = ir_value(ir, op->in[k]);
                if (v->kind == VK_PARAM) used[v->param] = 1;
            }
        }
        fprintf(f, "static const int stage%d_params[] = {", st);
        int n = 0;
        for (int i = 0; i < ir->params.n; i++)
            if (used[i]) fprintf(f, "%s%d", n++ ? ", " : "", i);
        fprintf(f, "%s};\n", n ? "" : "-1");
        nused[st] = n;
    }
    return nused;
}

/* ---- the workspace of a stage -------------------------------------------------------------- */

static int has_scratch(const IrStage *st) { return st->nkept < st->nslots; }

void cg_emit_slots_head(FILE *f, const IrStage *st, int s)
{
    fprintf(f, "static size_t off%d[%d];\n", s, st->nslots + 1);
    if (has_scratch(st))
        fprintf(f, "static size_t scratch%d; /* bytes of slots %d..: the scratch, one set per rank */\n", s,
                st->nkept);
}

void cg_emit_slot_macro(FILE *f, const IrStage *st, int s, const char *name, const char *type)
{
    if (has_scratch(st))
        fprintf(f, "#define %s(k) ((%s *)(((k) < %d ? e->work : e->scratch) + off%d[k]))\n", name, type, st->nkept,
                s);
    else
        fprintf(f, "#define %s(k) ((%s *)(e->work + off%d[k]))\n", name, type, s);
}

void cg_emit_plan_cut(FILE *f, const IrStage *st, int k)
{
    if (k == st->nkept && has_scratch(st)) fprintf(f, "    size_t kept = o;\n    o = 0;\n");
}

void cg_emit_plan_tail(FILE *f, const IrStage *st, int s)
{
    if (has_scratch(st))
        fprintf(f, "    off%d[%d] = o;\n    scratch%d = o;\n    return kept;\n}\n\n", s, st->nslots, s);
    else
        fprintf(f, "    off%d[%d] = o;\n    return o;\n}\n\n", s, st->nslots);
    fprintf(f, "static int planned%d_B = -1, planned%d_T = -1;\n", s, s);
    fprintf(f, "static void replan%d(int B, int T)\n{\n    if (B != planned%d_B || T != planned%d_T) {\n"
               "        plan%d(B, T);\n        planned%d_B = B;\n        planned%d_T = T;\n    }\n}\n\n",
            s, s, s, s, s, s);
    fprintf(f, "static size_t work_bytes%d(int B, int T)\n{\n    size_t n = plan%d(B, T);\n"
               "    planned%d_B = B;\n    planned%d_T = T;\n    return n;\n}\n\n", s, s, s, s);
    if (has_scratch(st))
        fprintf(f, "static size_t scratch_bytes%d(int B, int T)\n{\n    replan%d(B, T);\n    return scratch%d;\n}\n\n",
                s, s, s);
}
