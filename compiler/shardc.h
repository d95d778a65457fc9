/* shardc.h: the compiler's one internal header.
 *
 * Module prefixes on cross-file names: sx_ (utilities, diagnostics),
 * ast_ (syntax tree), sema_ (name resolution), shape_ (elaboration and
 * shapes), ir_ (IR, verifier, dumps), shard_ (sharding), ad_ (autodiff),
 * mp_ (memory plan), cg_ (code generation), drv_ (driver).
 */
#ifndef SHARDC_H
#define SHARDC_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHARDC_VERSION "0.1.0"
#define SX_INT_MAX ((long long)1 << 53) /* integers stay exact as doubles */

/* ---- memory: one arena per compilation, freed at exit ------------------ */
void *sx_alloc(size_t n);              /* zeroed, never NULL (aborts on OOM) */
char *sx_strdup(const char *s);
char *sx_strndup(const char *s, size_t n);
char *sx_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sx_arena_free(void);

/* growable vector of pointers */
typedef struct Vec {
    void **v;
    int n, cap;
} Vec;
void vec_push(Vec *v, void *p);

/* ---- source locations and diagnostics ---------------------------------- */
typedef struct sx_loc {
    const char *file;
    int line, col, last_col;
} sx_loc;

typedef struct SrcFile {
    const char *path;
    const char *text;
    size_t len;
} SrcFile;

void sx_register_file(const char *path, const char *text, size_t len);
void sx_error(const sx_loc *loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sx_note(const sx_loc *loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sx_warn(const sx_loc *loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sx_error_count(void);
void sx_reset(void); /* forget errors, files and the arena (fuzzing runs many inputs) */
void sx_set_max_errors(int n);
/* internal compiler error: names the compiler's own file and line, aborts */
#define sx_ice(...) sx_ice_at(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void sx_ice_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
char *sx_unquote(const char *lit);
char *sx_read_file(const char *path, size_t *len); /* NULL on failure, errno set */

/* ---- syntax tree -------------------------------------------------------- */
typedef enum NodeKind {
    N_USE,      /* use "name": name */
    N_SECTION,  /* config / parallel / train { body: N_ASSIGN... }: name = section */
    N_BLOCK,    /* block or model: name, args (N_ARG), type (return, may be NULL), body */
    N_ARG,      /* formal argument: name, type, init (default, may be NULL) */
    N_TYPE,     /* ival: TY_INT / TY_FLOAT / TY_TENSOR; name: dtype; args: dims */
    N_DOTS,     /* ".." in a dimension list */
    N_ASSIGN,   /* name = init */
    N_PARAM,    /* param name: type = init annots */
    N_RETURN,   /* return init */
    N_NUM,      /* ival or fval, op = 'i' or 'f' */
    N_STR,      /* name */
    N_NAME,     /* name (dotted path allowed) */
    N_BINOP,    /* op in + - * / %, lhs, rhs */
    N_NEG,      /* -lhs */
    N_CALL,     /* name(args) */
    N_KWARG,    /* name = init, inside call arguments */
    N_INST,     /* label: name(args) annots; count = repeat count or NULL */
    N_ANNOT     /* @name(args) */
} NodeKind;

enum { TY_INT = 1, TY_FLOAT, TY_TENSOR, TY_STR };

typedef struct Node Node;
struct Node {
    NodeKind kind;
    sx_loc loc;
    char *name;
    char *label;        /* N_INST: instance label (dotted) */
    long long ival;
    double fval;
    int op;
    int is_model;       /* N_BLOCK: declared with `model` */
    Node *lhs, *rhs;
    Node *type;
    Node *init;
    Node *count;
    Vec args;           /* Node*: call args, dims, formal args */
    Vec annots;         /* Node*: N_ANNOT */
    Vec body;           /* Node*: statements */
    struct Module *mod; /* defining module */
};

typedef struct Module {
    const char *path;    /* file path as opened */
    const char *canon;   /* its canonical path (realpath), NULL if unknown */
    const char *name;    /* use-name ("nn") or the file's base name */
    Vec items;           /* Node*: top-level items */
    Vec uses;            /* struct Module*: imported modules, in order */
    int state;           /* 0 new, 1 loading, 2 done: for import cycles */
} Module;

Node *ast_new(NodeKind k, const sx_loc *loc);

/* lexer state shared with the flex scanner */
struct lexstate {
    const char *file;
    const char *src;
    size_t len, pos;
    int line, col;
    int depth;      /* ( [ nesting: newlines inside are not statement ends */
    int last_nl;
};
/* parses one file into mod->items; returns the number of syntax errors */
int ast_parse(Module *mod, const char *text, size_t len);

/* ---- elaboration, shapes, IR --------------------------------------------- */
#define SX_MAXDIM 6
#define SX_MAXSYM 4

/* a dimension: c * prod(sym_i ^ p[i]); symbols are the model's symbolic dims */
typedef struct Dim {
    int64_t c;
    uint8_t p[SX_MAXSYM];
} Dim;

typedef struct Shape {
    int nd;
    Dim d[SX_MAXDIM];
} Shape;

typedef enum DType { DT_F32 = 0, DT_BF16, DT_I32 } DType;

/* sharding of a value over the mesh, value by value */
typedef enum ShardKind {
    SH_REPL = 0,   /* replicated: every rank of the axis holds it all */
    SH_SPLIT,      /* dim `dim` split in equal parts over axis `axis` */
    SH_PARTIAL     /* each rank holds a partial sum over axis `axis` */
} ShardKind;
typedef struct Sharding {
    ShardKind kind;
    int dim;
    int axis;   /* 0 data, 1 tensor, 2 pipeline */
    int groups; /* SH_SPLIT: the dim is `groups` equal chunks (q|k|v), each split */
} Sharding;

typedef enum OpKind {
#define X(id, nm, nin, nk, naux, shp, shd, fwd, bwd, ...) OP_##id,
#include "ops.def"
#undef X
    OP__COUNT
} OpKind;

typedef struct OpInfo {
    const char *name;
    int nin, nk, naux;
    const char *fwd, *bwd;             /* host call templates */
    const char *flops_fwd, *flops_bwd; /* FLOPs as arithmetic over template operands */
    const char *cuda_fwd, *cuda_bwd;   /* CUDA call templates */
} OpInfo;
extern const OpInfo ir_ops[OP__COUNT];
int ir_op_lookup(const char *name); /* -1 if not a builtin op */

typedef enum ValKind {
    VK_INPUT = 0, /* model input (tokens, targets) */
    VK_PARAM,     /* trainable parameter */
    VK_OP,        /* output of an op */
    VK_AUX,       /* auxiliary buffer saved by an op */
    VK_GRAD,      /* gradient of `primal` (a parameter's lives in the gradient arena) */
    VK_DEAD       /* left by a pass that removed its op (qkvpack.c): nothing defines or reads it */
} ValKind;

typedef struct IrValue {
    int id;
    ValKind kind;
    DType dtype;
    Shape shape;
    int def;        /* defining op, -1 for inputs and params */
    int param;      /* VK_PARAM: index into Ir.params */
    int input;      /* VK_INPUT: input number */
    Sharding sh;
    const char *name; /* for dumps: SSA name hint */
    int primal;     /* VK_GRAD: the value this is the gradient of */
    int grad;       /* the gradient value of this one, -1 if none is needed */
    int slot;       /* memplan: workspace slot, -1 outside the workspace */
} IrValue;

typedef struct IrOp {
    int id;
    int uid;           /* number from elaboration, kept through lowering: keys dropout's RNG */
    OpKind kind;
    OpKind wrote;      /* the builtin the .model called, kept when a pass lowers kind (vocab-parallel,
                        * $attention_qkv): CUDA sites (errors, the profile) name it */
    int nin;
    int in[4];
    int nk;
    double k[SX_MAXDIM + 2];
    int out;
    int aux[2];
    Dim sz[4];        /* size operands for the templates */
    sx_loc loc;
    const char *scope; /* instance path, e.g. "transformer.h.3.attn" */
    sx_loc user_loc;   /* the outermost instance call in the main file, for notes */
    int stage;         /* repeat index for pipeline cuts, -1 outside repeats */
    int pstage;        /* pipeline stage this op runs in (pipeline.c), 0 without one */
    int recomp;        /* a clone that recomputes a block's forward in the backward */
    int rgroup;        /* block recomputed as one (an instance or repetition marked
                        * @recompute), -1 if none */
} IrOp;

/* one step of the backward program: the gradient rule of forward op `fwd`
 * (its BWD template), reading d(out) and accumulating into d(inputs) */
typedef struct IrBwd {
    int kind;     /* BWD_RULE: op fwd's gradient rule; BWD_ALLREDUCE: sum dout over the tensor group */
    int fwd;
    int dout;
    int din[4];   /* -1 where that input needs no gradient */
    unsigned gate; /* bit k: din[k] is added on tensor rank 0 only (a replicated
                    * contribution to a gradient that is summed over the group) */
    int pstage;    /* pipeline stage (pipeline.c) */
    int rs;        /* BWD_RULE of a TP_ALLGATHER whose dout is a partial sum over the
                    * tensor group: the rule reduce-scatters dout into din[0]
                    * (autodiff.c folds the all-reduce it would insert before
                    * the rule into it; cg_bwd_template) */
    struct IrOp *op; /* recompute.c: the op the step runs (a clone, or fwd's with clones as
                      * operands); NULL: ops[fwd] */
} IrBwd;
enum {
    BWD_RULE = 0,      /* the gradient rule of op fwd */
    BWD_ALLREDUCE = 1, /* sum dout over the tensor group; with fwd = -1 dout is a
                        * parameter's gradient, summed once per step after the last
                        * microbatch (the runtime's tp_partial_grads) */
    BWD_FORWARD = 2    /* recompute: run op (a clone of fwd) forward again */
};
/* the op a backward step works with */
#define BWD_OP(ir, b) ((b)->op ? (b)->op : (IrOp *)(ir)->ops.v[(b)->fwd])

/* one pipeline stage: its workspace plan and its boundary with the next */
typedef struct IrStage {
    int first_block, nblocks; /* repetitions of the @pipeline repeat it runs */
    int act_in;     /* value received from the previous stage, -1 for the first */
    int act_out;    /* value sent to the next stage, -1 for the last */
    int nslots;
    Dim *slot_elems;
    int nkept;      /* slots 0..nkept-1 hold what outlives one pass (forward,
                     * backward, zb-h1's W): with a pipeline, one copy per
                     * microbatch in flight; slots nkept.. are the stage's
                     * scratch, one copy per rank (nkept = nslots without a
                     * pipeline) */
    double cost;    /* FLOPs of forward + backward at B=1, for the balance shown by build */
} IrStage;

typedef struct IrParam {
    const char *name;
    Shape shape;       /* constant */
    int init;          /* 0 zeros, 1 ones, 2 normal (matches sr_init) */
    double std;
    int decay;
    Sharding sh;       /* declared sharding */
    int vocab;         /* @vocab: dim 0 holds the vocabulary (its padding rows are cut on export) */
    sx_loc loc;
    sx_loc shard_loc;
    int value;
} IrParam;

typedef struct Ir {
    Vec values;   /* IrValue* */
    Vec ops;      /* IrOp* */
    Vec params;   /* IrParam* */
    int inputs[4];
    int ninputs;
    int output;   /* the model's result value */
    Vec bwd;      /* IrBwd*: the backward program, in execution order (autodiff) */
    int fused_loss; /* lossfuse.c: the cross_entropy op whose forward, in a training step, also
                     * writes the logits' gradient over the logits (its backward step gone); -1 */
    int *rate0_view; /* gradalias.c: rate0_view[d] = o when d, a dropout's input gradient, is its
                      * output gradient o itself while the run's dropout rate is 0 (the step is
                      * then skipped); -1 otherwise. NULL: none */
    int seed;     /* gradient of the output, set to dloss before backward */
    int nslots;   /* memplan: workspace slots */
    Dim *slot_elems; /* elements (4 bytes each) of every slot */
    int nstages;  /* pipeline stages (pp x virtual stages); 1 without a pipeline */
    int pp;       /* pipeline ranks: stage s runs on rank s % pp; 1 without a pipeline */
    int split_backward; /* built for zb-h1: the backward runs as B then W passes */
    struct IrStage *stages;
    const char *symname[SX_MAXSYM];
    int nsym;
    int seq_sym;  /* sequence parallelism: the symbol of T / tp (its value is e->T / tp); 0: none
                   * (symbols 0 and 1 are the batch and the sequence) */
    int seq_tp;   /* with seq_sym: the tp that divides T (cost models evaluate T_tp = T / seq_tp) */
    const char *model_name;
    sx_loc model_loc;
} Ir;

/* ---- configuration and the whole compilation ----------------------------- */
typedef struct Const {
    const char *name; /* dotted: a member of a nested config.json object */
    int is_float;
    int is_str;
    int is_bool; /* true / false: the integer 1 / 0, written as a JSON boolean */
    long long i;
    double f;
    const char *s;
    sx_loc loc;
    int overridden;
} Const;

typedef struct Layout {
    int dp, tp, pp;
    int cli_dp, cli_tp, cli_pp, cli_mb, cli_vs; /* from flags, 0 = not given */
    const char *cli_sched;
    int microbatches;
    int world;          /* declared world size, 0 if not declared */
    const char *schedule;
    int virtual_stages;
    int recompute;      /* 1: recompute each block's activations in the backward */
    int sequence_parallel; /* 1: activations outside attention and MLP split along the sequence */
    int cli_sp;         /* --sequence-parallel given */
    int cli_recompute;  /* --recompute: -1 not given, 0 none, 1 block */
    sx_loc loc_dp, loc_tp, loc_pp, loc_mb, loc_world, loc_sched;
} Layout;

typedef struct Override {
    const char *name;
    const char *value; /* NULL: JSON null in a --config file */
    const char *origin; /* "--set" or the JSON file */
    int used;
} Override;

typedef struct Program {
    Module *main;
    Vec modules;          /* Module* in load order */
    Vec config;           /* Const* (config section, after overrides) */
    Vec train;            /* Const* (train section) */
    Vec parallel;         /* Const* (parallel section) */
    Layout layout;
    Node *model;          /* the model block */
    Ir ir;
    Vec overrides;        /* Override* */
    Vec search_dirs;      /* char*: stdlib directories */
    Vec collectives;      /* Collective*: found by shard_check */
    int layout_repeats;   /* repetitions of the @pipeline repeat, 0 if none */
    sx_loc layout_repeat_loc;
} Program;

/* sema.c: load and parse the main file and its imports, resolve names,
 * evaluate the config; returns 0 if no error */
int sema_load(Program *P, const char *path);
int sema_load_text(Program *P, const char *path, const char *text, size_t len);
int sema_check(Program *P);
int sema_arith(int op, int fa, long long ia, double da, int fb, long long ib, double db,
               long long *ri, double *rd, const sx_loc *loc);
const Const *sema_find_const(const Vec *consts, const char *name);

/* shape.c: instantiate the model, infer shapes, build the forward IR */
int shape_elaborate(Program *P);
int shape_rerun(Program *P, IrOp *op, Shape *out, Shape aux[2]);
int dim_eq(Dim a, Dim b);
int shape_eq(const Shape *a, const Shape *b);
char *dim_str(Dim d, const Ir *ir);   /* "768", "B*T", "3*T" */
char *shape_str(const Shape *s, const Ir *ir);
Dim dim_const(int64_t c);
Dim shape_numel(const Shape *s);

/* shard.c: the layout (mesh degrees, microbatches, schedule), sharding
 * propagation and the collectives it needs */
typedef struct Collective {
    int op;        /* the op whose input needs it */
    int input;     /* which input */
    int value;     /* the value resolved */
    int kind;      /* 0 all-reduce (partial sum), 1 all-gather (split), 2 reduce-scatter along
                    * the sequence (partial sum -> split), 3 cut a replicated tensor to this
                    * rank's part of the sequence (no communication) */
    int dim;       /* kinds 2, 3: the dimension split */
    int axis;
} Collective;
int shard_layout(Program *P);  /* before elaboration: degrees from the file and flags */
int shard_check(Program *P);   /* after elaboration */
int shard_lower(Program *P);   /* tensor parallelism: collectives as ops, local shapes */
void shard_dump(const Program *P, FILE *f);

/* autodiff.c: reverse-mode differentiation of the forward IR */
int ad_differentiate(Program *P);
void ad_dump(const Ir *ir, FILE *f);
/* which operands a template reads or writes: bit i for $i, 4 for $o, 5/6 for $a0/$a1 */
unsigned ad_template_uses(const char *tmpl);

/* memplan.c: workspace slots by lifetime over forward then backward, per
 * pipeline stage */
int mp_plan(Program *P);
/* gradalias.c: a gradient that is a copy of another (add, sub, reshape) is read from that one */
int ga_alias(Program *P);
int lf_fuse(Program *P);
/* qkvpack.c: causal_attention of three slices of one q|k|v tensor reads it in place */
int qp_pack(Program *P);
/* the stage whose workspace holds v, or -1 when v is not in a workspace
 * (parameters, inputs, their gradients, the pipeline's boundary buffers) */
int mp_home(const Ir *ir, const IrValue *v);
/* the times of stage s's steps that touch each value (first/last: -1 if none,
 * arrays of ir->values.n); the forward runs before ends[0], the backward
 * after it, and zb-h1's weight-gradient pass from ends[1] on (INT_MAX when
 * the backward runs whole), so a value with first < ends[0] < last is saved
 * for the backward (shardc plan reads the plan's lifetimes through this) */
void mp_timeline(Ir *ir, int s, int *first, int *last, int ends[2]);
void mp_dump(const Ir *ir, FILE *f);

/* pipeline.c: stages balanced by the cost model, boundaries, stage of every step */
int pp_partition(Program *P);
void pp_dump(const Program *P, FILE *f);
double ir_op_flops(const Ir *ir, const IrOp *op, int bwd, long B, long T);

/* codegen.c: what both code generators decide alike.
 * cg_step_sum: backward step b is a parameter gradient's sum over the tensor
 * group (sequence parallelism), which the runtime does once per step
 * (sr_program.tp_partial_grads), after the microbatches: a backward skips it.
 * cg_last_grad_steps: last[i], the backward step after which parameter i's
 * gradient is complete on the pipeline rank of `stage` (where the data-parallel
 * grad_ready hook fires): the last of its steps in that rank's stages, as
 * the rank runs a lower stage's last backward after a higher one's; -1 if
 * none there adds to it. A tied parameter is complete on each holder.
 * cg_emit_tp_partial_grads: writes `static const int tp_partial_grads[]`
 * (the parameters of the step sums); returns how many.
 * cg_row_floats: floats per token (of B*T) of boundary activation id: its
 * elements over B*T, over tp more when split along the sequence. */
int cg_step_sum(const IrBwd *b);
/* cg_wgrad_overlap: backward step j sums a column-parallel matmul's input
 * gradient over the tensor group (an all-reduce, or with sequence
 * parallelism the all-gather's reduce-scatter backward) right after that
 * matmul's rule, step j - 1: the CUDA backend runs the sum during the rule's
 * weight-gradient GEMM (codegen_cuda.c), which shardc plan counts as hidden
 * (not in zb-h1's split passes, which the callers leave out) */
int cg_wgrad_overlap(const Ir *ir, int j);
/* cg_bwd_template: the call template of backward rule b (of op, a clone of
 * its forward op), host or CUDA: the op table's, or for b->rs the
 * all-gather's reduce-scatter backward */
const char *cg_bwd_template(const IrBwd *b, const IrOp *op, int cuda);
int *cg_last_grad_steps(Ir *ir, int stage);
int cg_emit_tp_partial_grads(Ir *ir, FILE *f);
int64_t cg_row_floats(Ir *ir, int id, int tp);

/* codegen.c: where parameters live in a generated
 * program's arenas. `global`: the whole model in declaration order, each
 * tensor aligned to `align` floats (sr_param_desc.offset, and the arena of a
 * program without a pipeline). With a pipeline, pipeline rank r holds only
 * the parameters its stages read, packed the same way in an arena of its
 * own: off[r][i] (-1 where it holds none), n[r] floats. Without one,
 * nranks is 1 and off[0] is global. */
typedef struct ParamLayout {
    int nranks;
    int64_t *global, nglobal;
    int64_t **off, *n;
} ParamLayout;
void cg_param_layout(Program *P, int64_t align, ParamLayout *L);

/* codegen.c: the ops.def call templates, expanded for either back end.
 * $0..$3 inputs, $o output, $a0/$a1 aux, $do/$d0..$d3 gradients, $s0..$s3
 * sizes, $k0..$k3 constants, $n elements, $N rows, $dims0..3 shapes, $id the
 * op's layout-independent number. A back end gives its buffer expressions
 * (buf), how a shape array is written and how a missing gradient is. */
enum { BW_FULL = 0, BW_INPUT = 1, BW_WEIGHT = 2 }; /* backward: whole, zb-h1 B, zb-h1 W */
typedef struct CgExpander {
    Ir *ir;
    void *gen;
    char *(*buf)(void *gen, int value);
    const char *dims_open, *dims_close; /* around a $dims list */
    int dims_pad;                       /* the list padded with 0 to this many */
    const char *null_grad;              /* a gradient nobody needs */
    const char *null_rank;              /* the other ranks' side of a rank-0-only gradient */
    int mode;                           /* BW_* */
    unsigned fresh;                     /* $z: bit k when $dK starts at zero, uncleared */
} CgExpander;
char *cg_expand(const CgExpander *x, const char *t, IrOp *op, const IrBwd *b);
int cg_is_param_grad(Ir *ir, int gv);
/* cg_step_runs: backward step b runs in pass `mode`: all in BW_FULL; zb-h1's
 * B (BW_INPUT) runs the steps with an activation gradient (recomputation
 * included), its W (BW_WEIGHT) those with a parameter gradient, with the
 * other kind of gradient left out ($dK expands to null_grad) */
int cg_step_runs(Ir *ir, const IrBwd *b, int mode);
/* a value's buffer expression (own: the back end's, for its own storage): where gradalias.c
 * lets it be another gradient at dropout rate 0, the run-time choice of the two */
char *cg_view_buf(const Ir *ir, int id, const char *own, char *(*buf)(void *g, int id), void *g);
/* the loss op whose forward writes its gradient over the logits in a training step (lossfuse.c):
 * its calls, or NULL for any other op. Templates as ops.def's; the CUDA fallback's %s is the
 * seed's buffer (d loss on the device) */
typedef struct CgFusedLoss {
    OpKind kind;                         /* OP_CROSS_ENTROPY, OP_CROSS_ENTROPY_VP */
    const char *host_fwd_bwd, *cuda_fwd_bwd; /* a training forward: loss, and gradient over the logits */
    const char *host_over, *cuda_over;       /* the gradient over the logits after a plain forward */
} CgFusedLoss;
const CgFusedLoss *cg_fused_loss(const Ir *ir, const IrOp *op);
int cg_loss_fusable(OpKind kind); /* whether lossfuse.c may fuse a loss of this kind (the table has its calls) */
char *cg_cdim(Ir *ir, Dim d);   /* C expression of a dimension, long arithmetic over B and T */
char *cg_fmt_float(double x);   /* a float literal */
double cg_tnum(Program *P, const char *name, double dflt); /* a number of the train block */
void cg_emit_cstr(FILE *f, const char *s);                  /* a C string literal */
char *cg_config_json(Program *P);                           /* the config constants as JSON */
char *cg_group_of(const IrOp *op);          /* the function group of an op ("blocks.3") */
const char *cg_src_file(const char *path);   /* the file name without its directory */
char *cg_fn_name(Vec *fnames, Vec *calls, const char *kind, const char *grp); /* kind_group, unique */
const char *cg_init_name(int init);          /* SR_INIT_ZEROS, _ONES, _NORMAL */
void cg_emit_defaults(FILE *f, Program *P, int max_seq, const char *prefix, const char *end); /* train defaults */
/* cg_emit_forward / cg_emit_backward: the stage's forward and backward
 * functions (codegen.c has the rules); the back end writes each piece */
typedef struct CgEmit {
    void *g; /* the back end's generator */
    FILE *f;
    void (*open_fn)(void *g, const char *name);  /* `static void name(sr_exec *e) {` and locals */
    int (*op)(void *g, int i);                   /* forward op i; returns the ops it covered */
    void (*recompute)(void *g, IrOp *op);        /* an op's forward again, in the backward */
    void (*allreduce)(void *g, IrOp *op, IrBwd *b); /* b->dout summed over the tensor group */
    void (*begin_step)(void *g, IrOp *op, IrBwd *b); /* before a rule's zeros and call */
    void (*zero)(void *g, IrOp *op, int d);      /* clear gradient value d */
    /* the backward rule's call; fresh: bit k when $dK's clearing was left out ($z) */
    void (*step)(void *g, IrOp *op, IrBwd *b, unsigned fresh);
    int cuda; /* which templates of ops.def (the $z ones can overwrite) */
    /* optional: one call for adjacent steps bs[0..n-1] (n is 2 or 3; the later
     * ones clear nothing), fresh[k] as step's; returns how many of the first
     * steps it covered (2 or more), else the walk emits bs[0] alone */
    int (*fuse)(void *g, IrOp **ops, IrBwd **bs, const unsigned *fresh, int n);
    /* optional (NULL: 1): how many ops x->op(g, i) will cover */
    int (*covers)(void *g, int i);
} CgEmit;
int cg_training_head(Program *P, int *vocab, int *classes, int *max_seq, int *logits); /* inputs and loss head, checked */
int *cg_emit_param_tables(FILE *f, Program *P, const int64_t *offsets); /* params[], stageS_params[] */
void cg_emit_forward(const CgEmit *x, Ir *ir, int stage, Vec *fnames, Vec *calls);
void cg_emit_backward(const CgEmit *x, Ir *ir, int stage, int mode, char *zeroed, Vec *fnames, Vec *calls);
void cg_emit_syms(FILE *f, const Ir *ir, int tp, const char *b, const char *t); /* B, T as locals */
/* a stage's workspace (memplan.c): `static size_t offS[]` (and scratchS
 * with a scratch part); cg_emit_slot_macro: `#define NAME(k)`, slot k as
 * TYPE * in e->work, or in e->scratch from slot nkept on; the back end
 * writes `static size_t planS(B, T)` laying out slots 0.. from o = 0
 * (`off[k] = o; o += bytes`), calling cg_emit_plan_cut before each slot;
 * cg_emit_plan_tail closes it and writes replanS, work_bytesS (the kept
 * part) and scratch_bytesS */
void cg_emit_slots_head(FILE *f, const IrStage *st, int s);
void cg_emit_slot_macro(FILE *f, const IrStage *st, int s, const char *name, const char *type);
void cg_emit_plan_cut(FILE *f, const IrStage *st, int k);
void cg_emit_plan_tail(FILE *f, const IrStage *st, int s);

/* codegen_host.c: C source for the host backend */
int cg_host(Program *P, FILE *out, const char *source_path);

/* passes.c: the pass list */
int drv_front(Program *P, const char *dump, FILE *out);
int drv_back(Program *P, const char *dump, FILE *out);

/* tools.c: shared by the commands */
int drv_load_json_config(Program *P, const char *path); /* --config FILE.json; -1 on error (reported) */
void drv_add_stdlib_dirs(Program *P);
int drv_run_cmd(char **argv); /* exit status; SHARDC_VERBOSE shows the command */
/* "shardc: error: FMT(arg)" and "try 'shardc CMD --help'" on stderr; returns 2,
 * the usage-error exit status of every command */
int drv_usage_error(const char *cmd, const char *fmt, const char *arg);

/* recompute.c: activation recomputation per block */
int rc_recompute(Program *P);

/* ir.c */
IrValue *ir_value(Ir *ir, int id);
IrOp *ir_op(Ir *ir, int id);
int ir_new_value(Ir *ir, ValKind k, DType t, const Shape *s);
/* ops becomes the op list: ids renumbered, the defs of their outputs and aux buffers set */
void ir_set_ops(Ir *ir, Vec ops);
/* backward step c writes gradient d (a rule's input gradient, or an in-place sum) */
int ir_bwd_writes(const IrBwd *c, int d);
int ir_verify(const Ir *ir, const char *after);
void ir_dump(const Ir *ir, FILE *f);
void ir_print_params(const Ir *ir, FILE *f);
int64_t ir_param_count(const Ir *ir);

#endif /* SHARDC_H */
