/* sema.c: loading, imports, name resolution, constants.
 *
 * Needs: a path to a .model file, overrides from --set/--config.
 * Guarantees (when it reports no error): every file parsed; imports resolved
 * without cycles; every block name defined once; exactly one model; the
 * config, parallel and train sections evaluated to constants (with the
 * overrides applied); every name used in a block body refers to something
 * visible there; every call has a callee of the right kind and arity.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "shardc.h"

#include <math.h>
#include <unistd.h>

/* ---- loading and imports ---------------------------------------------- */

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return sx_strdup(".");
    return sx_strndup(path, (size_t)(slash - path) + (slash == path));
}

static Module *find_module(Program *P, const char *path)
{
    for (int i = 0; i < P->modules.n; i++) {
        Module *m = P->modules.v[i];
        if (strcmp(m->path, path) == 0 || (m->canon && strcmp(m->canon, path) == 0)) return m;
    }
    return NULL;
}

static Module *load_module(Program *P, const char *path, const char *name, const sx_loc *from);

/* `use "nn"`: nn.model next to the importing file, then in the stdlib dirs */
static void load_uses(Program *P, Module *m)
{
    for (int i = 0; i < m->items.n; i++) {
        Node *it = m->items.v[i];
        if (it->kind != N_USE) continue;
        const char *want = it->name;
        if (!*want || strchr(want, '/') == want) {
            sx_error(&it->loc, "bad module name \"%s\" in use", want);
            continue;
        }
        size_t wl = strlen(want);
        const char *file = (wl > 6 && strcmp(want + wl - 6, ".model") == 0)
                               ? want : sx_fmt("%s.model", want);
        Vec cands = {0};
        vec_push(&cands, sx_fmt("%s/%s", dir_of(m->path), file));
        for (int d = 0; d < P->search_dirs.n; d++)
            vec_push(&cands, sx_fmt("%s/%s", (char *)P->search_dirs.v[d], file));
        const char *found = NULL, *ident = NULL;
        for (int c = 0; c < cands.n && !found; c++)
            if (access(cands.v[c], R_OK) == 0) {
                /* shown as found; known by its canonical path, so a module is
                 * loaded once however it is named and cycles are caught */
                found = cands.v[c];
                char *canon = realpath(found, NULL);
                ident = canon ? sx_strdup(canon) : found;
                free(canon);
            }
        if (!found) {
            sx_error(&it->loc, "cannot find module \"%s\" (looked for %s next to %s and in the "
                     "stdlib directory %s)", want, file, m->path,
                     P->search_dirs.n ? (char *)P->search_dirs.v[0] : "(none)");
            continue;
        }
        Module *dep = find_module(P, ident);
        if (dep && dep->state == 1) {
            sx_error(&it->loc, "import cycle: \"%s\" is already being imported (%s uses it, "
                     "directly or through other modules)", want, m->path);
            continue;
        }
        if (!dep) dep = load_module(P, found, want, &it->loc);
        if (dep) vec_push(&m->uses, dep);
    }
}

static Module *parse_module(Program *P, const char *path, const char *name, char *text, size_t len);

static Module *load_module(Program *P, const char *path, const char *name, const sx_loc *from)
{
    size_t len;
    char *text = sx_read_file(path, &len);
    if (!text) {
        if (from)
            sx_error(from, "cannot read %s: %s", path, strerror(errno));
        else
            sx_error(NULL, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    return parse_module(P, path, name, text, len);
}

static Module *parse_module(Program *P, const char *path, const char *name, char *text, size_t len)
{
    if (memchr(text, 0, len)) {
        sx_loc l = {path, 1, 1, 1};
        sx_error(&l, "%s is not a text file (it contains NUL bytes)", path);
        return NULL;
    }
    Module *m = sx_alloc(sizeof *m);
    m->path = sx_strdup(path);
    char *canon = realpath(path, NULL);
    m->canon = canon ? sx_strdup(canon) : NULL;
    free(canon);
    m->name = name;
    m->state = 1;
    vec_push(&P->modules, m);
    sx_register_file(m->path, text, len);
    ast_parse(m, text, len);
    for (int i = 0; i < m->items.n; i++) {
        Node *it = m->items.v[i];
        it->mod = m;
    }
    load_uses(P, m);
    m->state = 2;
    return m;
}

/* ---- constants ---------------------------------------------------------- */

const Const *sema_find_const(const Vec *consts, const char *name)
{
    for (int i = consts->n - 1; i >= 0; i--) {
        const Const *c = consts->v[i];
        if (strcmp(c->name, name) == 0) return c;
    }
    return NULL;
}

static const Const *lookup_any(Program *P, const char *name)
{
    const Const *c = sema_find_const(&P->config, name);
    if (!c) c = sema_find_const(&P->parallel, name);
    if (!c) c = sema_find_const(&P->train, name);
    return c;
}

/* scalar value used while evaluating sections */
typedef struct Scal {
    int kind; /* TY_INT, TY_FLOAT, TY_STR, 0 = error */
    long long i;
    double f;
    const char *s;
    int is_bool; /* the literal true or false (kind TY_INT) */
} Scal;

static Scal scal_err(void) { Scal s = {0, 0, 0, NULL, 0}; return s; }

static Scal eval_scalar(Program *P, Node *n);

static Scal scal_call(Program *P, Node *n)
{
    const char *f = n->name;
    int nargs = n->args.n;
    Scal a[2];
    int want = (!strcmp(f, "min") || !strcmp(f, "max")) ? 2 :
               (!strcmp(f, "sqrt") || !strcmp(f, "int") || !strcmp(f, "float")) ? 1 : -1;
    if (want < 0) {
        sx_error(&n->loc, "'%s' is not a function usable in a constant (use sqrt, min, max, int, float)", f);
        return scal_err();
    }
    if (nargs != want) {
        sx_error(&n->loc, "'%s' takes %d argument%s, got %d", f, want, want == 1 ? "" : "s", nargs);
        return scal_err();
    }
    for (int i = 0; i < nargs; i++) {
        a[i] = eval_scalar(P, n->args.v[i]);
        if (!a[i].kind) return scal_err();
        if (a[i].kind == TY_STR) {
            sx_error(&((Node *)n->args.v[i])->loc, "'%s' needs a number, not a string", f);
            return scal_err();
        }
        if (a[i].kind == TY_INT) a[i].f = (double)a[i].i;
    }
    Scal r = {TY_FLOAT, 0, 0, NULL, 0};
    if (!strcmp(f, "sqrt")) {
        if (a[0].f < 0) {
            sx_error(&n->loc, "sqrt of a negative number (%g)", a[0].f);
            return scal_err();
        }
        r.f = sqrt(a[0].f);
    } else if (!strcmp(f, "int")) {
        r.kind = TY_INT;
        if (!(fabs(a[0].f) < (double)SX_INT_MAX)) {
            sx_error(&n->loc, "int() of %g is out of range", a[0].f);
            return scal_err();
        }
        r.i = (long long)a[0].f;
    } else if (!strcmp(f, "float")) {
        r.f = a[0].f;
    } else {
        int mn = !strcmp(f, "min");
        if (a[0].kind == TY_INT && a[1].kind == TY_INT) {
            r.kind = TY_INT;
            r.i = mn ? (a[0].i < a[1].i ? a[0].i : a[1].i) : (a[0].i > a[1].i ? a[0].i : a[1].i);
        } else {
            r.f = mn ? fmin(a[0].f, a[1].f) : fmax(a[0].f, a[1].f);
        }
    }
    return r;
}

/* integer and float arithmetic shared with shape.c's evaluator.
 * int op int stays int; `/` of ints is int when exact, float otherwise. */
int sema_arith(int op, int fa, long long ia, double da, int fb, long long ib, double db,
               long long *ri, double *rd, const sx_loc *loc)
{
    if (!fa && !fb) {
        long long r = 0;
        switch (op) {
        case '+': if (__builtin_add_overflow(ia, ib, &r) || r > SX_INT_MAX || r < -SX_INT_MAX) goto ovf; break;
        case '-': if (__builtin_sub_overflow(ia, ib, &r) || r > SX_INT_MAX || r < -SX_INT_MAX) goto ovf; break;
        case '*': if (__builtin_mul_overflow(ia, ib, &r) || r > SX_INT_MAX || r < -SX_INT_MAX) goto ovf; break;
        case '%':
        case '/':
            if (ib == 0) {
                sx_error(loc, "division by zero (%lld %c 0)", ia, op);
                return -1;
            }
            if (op == '%') { r = ia % ib; break; }
            if (ia % ib == 0) { r = ia / ib; break; }
            *rd = (double)ia / (double)ib;
            return 1;
        default: sx_ice("bad operator %c", op);
        }
        *ri = r;
        return 0;
    ovf:
        sx_error(loc, "integer overflow in %lld %c %lld", ia, op, ib);
        return -1;
    }
    double a = fa ? da : (double)ia, b = fb ? db : (double)ib;
    switch (op) {
    case '+': *rd = a + b; break;
    case '-': *rd = a - b; break;
    case '*': *rd = a * b; break;
    case '/':
        if (b == 0) {
            sx_error(loc, "division by zero");
            return -1;
        }
        *rd = a / b;
        break;
    case '%':
        sx_error(loc, "'%%' needs integers");
        return -1;
    default: sx_ice("bad operator %c", op);
    }
    if (!isfinite(*rd)) {
        sx_error(loc, "arithmetic result is not finite");
        return -1;
    }
    return 1;
}

static int scalar_depth;

static Scal eval_scalar_node(Program *P, Node *n);

/* constants nest at most this deep: deeper ones would exhaust the stack */
static Scal eval_scalar(Program *P, Node *n)
{
    if (scalar_depth >= 400) {
        sx_error(&n->loc, "expression nested more than 400 levels deep");
        return scal_err();
    }
    scalar_depth++;
    Scal r = eval_scalar_node(P, n);
    scalar_depth--;
    return r;
}

static Scal eval_scalar_node(Program *P, Node *n)
{
    Scal r = {0, 0, 0, NULL, 0};
    switch (n->kind) {
    case N_NUM:
        if (n->op == 'i') { r.kind = TY_INT; r.i = n->ival; }
        else { r.kind = TY_FLOAT; r.f = n->fval; }
        return r;
    case N_STR:
        r.kind = TY_STR;
        r.s = n->name;
        return r;
    case N_NAME: {
        const Const *c = lookup_any(P, n->name);
        if (!c && (!strcmp(n->name, "true") || !strcmp(n->name, "false"))) {
            /* for config.json's flags (tie_word_embeddings = true); 1 or 0 in arithmetic */
            r.kind = TY_INT;
            r.i = n->name[0] == 't';
            r.is_bool = 1;
            return r;
        }
        if (!c) {
            sx_error(&n->loc, "unknown name '%s' (a constant must be defined above its use)", n->name);
            return scal_err();
        }
        if (c->is_str) { r.kind = TY_STR; r.s = c->s; }
        else if (c->is_float) { r.kind = TY_FLOAT; r.f = c->f; }
        else { r.kind = TY_INT; r.i = c->i; r.is_bool = c->is_bool; }
        return r;
    }
    case N_NEG: {
        Scal a = eval_scalar(P, n->lhs);
        if (a.kind == TY_INT) a.i = -a.i;
        else if (a.kind == TY_FLOAT) a.f = -a.f;
        else if (a.kind == TY_STR) {
            sx_error(&n->loc, "cannot negate a string");
            return scal_err();
        }
        return a;
    }
    case N_BINOP: {
        Scal a = eval_scalar(P, n->lhs), b = eval_scalar(P, n->rhs);
        if (!a.kind || !b.kind) return scal_err();
        if (a.kind == TY_STR || b.kind == TY_STR) {
            sx_error(&n->loc, "operator '%c' needs numbers, not strings", n->op);
            return scal_err();
        }
        int k = sema_arith(n->op, a.kind == TY_FLOAT, a.i, a.f, b.kind == TY_FLOAT, b.i, b.f,
                           &r.i, &r.f, &n->loc);
        if (k < 0) return scal_err();
        r.kind = k ? TY_FLOAT : TY_INT;
        return r;
    }
    case N_CALL:
        return scal_call(P, n);
    default:
        sx_error(&n->loc, "a constant must be a number, a string or arithmetic on constants");
        return scal_err();
    }
}

/* parse a --set/--config value: true or false, integer, float, or string */
static int parse_override(const char *v, Const *c)
{
    char *end;
    if (!strcmp(v, "true") || !strcmp(v, "false")) {
        c->is_bool = 1;
        c->i = v[0] == 't';
        return 0;
    }
    errno = 0;
    long long i = strtoll(v, &end, 10);
    if (*v && !*end && !errno) {
        c->is_float = 0;
        c->i = i;
        return 0;
    }
    errno = 0;
    double f = strtod(v, &end);
    if (*v && !*end && !errno && isfinite(f)) {
        c->is_float = 1;
        c->f = f;
        return 0;
    }
    c->is_str = 1;
    c->s = v;
    return 0;
}

/* an override of `name` in section `sec`: written "sec.name", or plain
 * "name" when no earlier section (config, parallel, train) has that name */
static Override *find_override(Program *P, const char *sec, const char *name, const Vec *earlier[2])
{
    for (int i = P->overrides.n - 1; i >= 0; i--) {
        Override *o = P->overrides.v[i];
        size_t sl = strlen(sec);
        if (!o->value) continue;
        if (!strncmp(o->name, sec, sl) && o->name[sl] == '.' && !strcmp(o->name + sl + 1, name)) return o;
    }
    for (int k = 0; k < 2; k++)
        if (earlier[k] && sema_find_const(earlier[k], name)) return NULL;
    for (int i = P->overrides.n - 1; i >= 0; i--) {
        Override *o = P->overrides.v[i];
        if (o->value && strcmp(o->name, name) == 0) return o;
    }
    return NULL;
}

static const char *parallel_keys[] = {"data", "tensor", "pipeline", "microbatches", "schedule",
                                      "world", "virtual_stages", "recompute", "sequence_parallel", NULL};
static const char *train_keys[] = {"optimizer", "lr", "min_lr", "warmup", "lr_schedule",
                                   "weight_decay", "beta1", "beta2", "eps", "grad_clip",
                                   "dropout", "batch", "seq", "steps", "seed", "data",
                                   "val_data", "eval_every", "save_every", "decay_steps", NULL};
/* train settings that are strings; the others are numbers */
static const char *train_strings[] = {"optimizer", "lr_schedule", "data", "val_data", NULL};
/* train settings that are counts */
static const char *train_ints[] = {"warmup", "batch", "seq", "steps", "seed", "eval_every", "save_every",
                                   "decay_steps", NULL};

static int in_list(const char **list, const char *s)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], s)) return 1;
    return 0;
}

/* config.json members that change a model's arithmetic: ignoring one would
 * train or fine-tune a different model than the checkpoint's */
static const struct {
    const char *name;
    int flag;         /* 1: only `true` matters; 0: an object, any member of it */
    const char *hint; /* what to do instead */
} math_members[] = {
    {"rope_scaling", 0, "use a model that defines them, such as examples/llama3.model"},
    {"use_sliding_window", 1, "shardc's attention is causal over the whole sequence, with no sliding window"},
};

/* a config constant named `name` or a member of object `name`, or NULL */
static const Const *config_under(Program *P, const char *name)
{
    size_t nl = strlen(name);
    for (int i = 0; i < P->config.n; i++) {
        const Const *c = P->config.v[i];
        if (!strncmp(c->name, name, nl) && (c->name[nl] == '.' || !c->name[nl])) return c;
    }
    return NULL;
}

/* what --config files set that no constant took: a null where the model
 * defines the object (its values would silently stand), or a math member
 * the model cannot express */
static void check_config_members(Program *P)
{
    for (int i = 0; i < P->overrides.n; i++) {
        const Override *o = P->overrides.v[i];
        const Const *c = o->origin[0] == '-' || o->value ? NULL : config_under(P, o->name);
        size_t nl = strlen(o->name);
        for (int k = 0; c && k < P->overrides.n; k++) { /* --set under the name: the user decided */
            const Override *s = P->overrides.v[k];
            if (s->used && s->origin[0] == '-' && !strncmp(s->name, o->name, nl) && s->name[nl] == '.') c = NULL;
        }
        if (c)
            sx_error(&c->loc, "%s sets '%s' to null, but this model defines '%s', whose value would be used "
                     "instead (build with a model that has no '%s' constants, or --set them)", o->origin, o->name,
                     c->name, o->name);
    }
    for (size_t k = 0; k < sizeof math_members / sizeof math_members[0]; k++) {
        const char *m = math_members[k].name;
        size_t ml = strlen(m);
        if (config_under(P, m)) continue;
        for (int i = 0; i < P->overrides.n; i++) {
            const Override *o = P->overrides.v[i];
            if (o->origin[0] == '-' || !o->value || strncmp(o->name, m, ml) ||
                (math_members[k].flag ? o->name[ml] || strcmp(o->value, "true") : o->name[ml] != '.'))
                continue;
            sx_error(NULL, "%s sets '%s'%s but %s has no '%s' constant%s: it would be ignored and the model would "
                     "differ from the checkpoint's (%s)", o->origin, m, math_members[k].flag ? " to true" : "",
                     P->main->path, m, math_members[k].flag ? "" : "s", math_members[k].hint);
            break;
        }
    }
}

static void eval_section(Program *P, Node *sec, Vec *out)
{
    const char **keys = !strcmp(sec->name, "parallel") ? parallel_keys
                        : !strcmp(sec->name, "train") ? train_keys : NULL;
    for (int i = 0; i < sec->body.n; i++) {
        Node *a = sec->body.v[i];
        if (keys && !in_list(keys, a->name)) {
            char buf[512] = "";
            for (int k = 0; keys[k]; k++) {
                strncat(buf, keys[k], sizeof buf - strlen(buf) - 3);
                if (keys[k + 1]) strncat(buf, ", ", sizeof buf - strlen(buf) - 1);
            }
            sx_error(&a->loc, "unknown %s setting '%s' (known: %s)", sec->name, a->name, buf);
            continue;
        }
        const Const *prev = sema_find_const(out, a->name);
        if (prev) {
            sx_error(&a->loc, "'%s' is defined twice", a->name);
            sx_note(&prev->loc, "first defined here");
            continue;
        }
        const Const *clash = NULL; /* "a" and "a.b": config.json cannot hold both */
        for (int k = 0; k < out->n && !clash; k++) {
            const char *o = ((const Const *)out->v[k])->name;
            size_t ol = strlen(o), al = strlen(a->name);
            if ((ol < al && !strncmp(o, a->name, ol) && a->name[ol] == '.') ||
                (al < ol && !strncmp(o, a->name, al) && o[al] == '.'))
                clash = out->v[k];
        }
        if (clash) {
            sx_error(&a->loc, "'%s' and '%s' cannot both be constants: a dotted name is a member of the "
                     "object its prefix names in config.json", a->name, clash->name);
            sx_note(&clash->loc, "'%s' defined here", clash->name);
            continue;
        }
        Const *c = sx_alloc(sizeof *c);
        c->name = a->name;
        c->loc = a->loc;
        const Vec *earlier[2] = {NULL, NULL};
        if (out == &P->parallel) earlier[0] = &P->config;
        if (out == &P->train) {
            earlier[0] = &P->config;
            earlier[1] = &P->parallel;
        }
        Override *o = find_override(P, sec->name, a->name, earlier);
        if (o) {
            o->used = 1;
            c->overridden = 1;
            parse_override(o->value, c);
            Scal s = eval_scalar(P, a->init); /* still check the written expression */
            if (s.kind != TY_STR && s.kind && s.is_bool != c->is_bool) {
                sx_error(NULL, "%s: '%s' is %s in %s, got '%s'", o->origin, a->name,
                         s.is_bool ? "true or false" : s.kind == TY_INT ? "an integer" : "a number",
                         a->loc.file, o->value);
            } else if (s.kind == TY_FLOAT && !c->is_float && !c->is_str) {
                c->is_float = 1;
                c->f = (double)c->i;
            } else if (s.kind == TY_INT && (c->is_float || c->is_str)) {
                sx_error(NULL, "%s: '%s' is an integer in %s, got '%s'", o->origin, a->name,
                         a->loc.file, o->value);
            } else if (s.kind == TY_STR && !c->is_str) {
                c->is_str = 1;
                c->is_bool = 0;
                c->s = o->value; /* a string setting given digits (or true) stays a string */
            } else if (s.kind == TY_FLOAT && c->is_str) {
                sx_error(NULL, "%s: '%s' is a number in %s, got '%s'", o->origin, a->name,
                         a->loc.file, o->value);
            }
        } else {
            Scal s = eval_scalar(P, a->init);
            if (!s.kind) continue;
            c->is_float = s.kind == TY_FLOAT;
            c->is_str = s.kind == TY_STR;
            c->is_bool = s.is_bool;
            c->i = s.i;
            c->f = s.kind == TY_FLOAT ? s.f : (double)s.i;
            c->s = s.s;
        }
        if (out == &P->train) {
            int want_str = in_list(train_strings, a->name);
            if (want_str != c->is_str)
                sx_error(&a->loc, "train setting '%s' must be %s", a->name, want_str ? "a string" : "a number");
            else if (!strcmp(a->name, "optimizer") && strcmp(c->s, "adamw"))
                sx_error(&a->loc, "unknown optimizer \"%s\" (shardc trains with \"adamw\")", c->s);
            else if (!want_str && c->is_float && in_list(train_ints, a->name))
                sx_error(&a->loc, "train setting '%s' must be an integer, got %g", a->name, c->f);
            else if (!want_str && !c->is_float && c->i < 0 && in_list(train_ints, a->name))
                sx_error(&a->loc, "train setting '%s' must not be negative, got %lld", a->name, c->i);
            else if (!strcmp(a->name, "lr_schedule") && strcmp(c->s, "constant") && strcmp(c->s, "cosine") &&
                     strcmp(c->s, "linear") && strcmp(c->s, "wsd"))
                sx_error(&a->loc, "unknown lr_schedule \"%s\" (use \"constant\", \"cosine\", \"linear\" or "
                         "\"wsd\")", c->s);
        }
        vec_push(out, c);
    }
}

/* ---- name resolution inside blocks --------------------------------------- */

static Node *find_block(Program *P, const char *name)
{
    for (int m = 0; m < P->modules.n; m++) {
        Module *mod = P->modules.v[m];
        for (int i = 0; i < mod->items.n; i++) {
            Node *it = mod->items.v[i];
            if (it->kind == N_BLOCK && strcmp(it->name, name) == 0) return it;
        }
    }
    return NULL;
}

typedef struct Scope {
    Vec names; /* char* */
} Scope;

static int scope_has(Scope *s, const char *name)
{
    for (int i = 0; i < s->names.n; i++)
        if (!strcmp(s->names.v[i], name)) return 1;
    return 0;
}

static const char *builtin_fns[] = {"sqrt", "min", "max", "int", "float", NULL};
static const char *init_fns[] = {"normal", "zeros", "ones", NULL};

static void collect_type_dims(Scope *s, Node *type)
{
    if (!type || type->ival != TY_TENSOR) return;
    for (int i = 0; i < type->args.n; i++) {
        Node *d = type->args.v[i];
        if (d->kind == N_NAME && !strchr(d->name, '.') && !scope_has(s, d->name))
            vec_push(&s->names, d->name);
    }
}

static void check_expr(Program *P, Scope *s, Node *n);

static void check_args(Program *P, Scope *s, Node *n)
{
    for (int i = 0; i < n->args.n; i++) {
        Node *a = n->args.v[i];
        check_expr(P, s, a->kind == N_KWARG ? a->init : a);
    }
}

/* arity of a block call: positional + keyword arguments against formals */
static void check_block_args(Node *call, Node *blk)
{
    int npos = 0, seen_kw = 0;
    for (int i = 0; i < call->args.n; i++) {
        Node *a = call->args.v[i];
        if (a->kind == N_KWARG) {
            seen_kw = 1;
            int found = -1;
            for (int f = 0; f < blk->args.n; f++)
                if (!strcmp(((Node *)blk->args.v[f])->name, a->name)) found = f;
            if (found < 0)
                sx_error(&a->loc, "block '%s' has no argument named '%s'", blk->name, a->name);
            else if (found < npos)
                sx_error(&a->loc, "argument '%s' of '%s' is given twice", a->name, blk->name);
            else
                for (int j = 0; j < i; j++) {
                    Node *b = call->args.v[j];
                    if (b->kind == N_KWARG && !strcmp(b->name, a->name)) {
                        sx_error(&a->loc, "argument '%s' of '%s' is given twice", a->name, blk->name);
                        break;
                    }
                }
        } else {
            if (seen_kw) sx_error(&a->loc, "positional argument after a keyword argument");
            npos++;
        }
    }
    int required = 0;
    for (int f = 0; f < blk->args.n; f++)
        if (!((Node *)blk->args.v[f])->init) required = f + 1;
    if (npos > blk->args.n) {
        sx_error(&call->loc, "too many arguments to '%s': it takes %d, got %d", blk->name,
                 blk->args.n, npos);
        sx_note(&blk->loc, "'%s' is defined here", blk->name);
    } else if (npos < required) {
        /* missing ones may still come as keywords */
        for (int f = npos; f < required; f++) {
            Node *fa = blk->args.v[f];
            int given = 0;
            for (int i = 0; i < call->args.n; i++) {
                Node *a = call->args.v[i];
                if (a->kind == N_KWARG && !strcmp(a->name, fa->name)) given = 1;
            }
            if (!given && !fa->init) {
                sx_error(&call->loc, "missing argument '%s' in call of '%s' (%d required, %d given)",
                         fa->name, blk->name, required, npos);
                sx_note(&blk->loc, "'%s' is defined here", blk->name);
                break;
            }
        }
    }
}

static void check_expr_node(Program *P, Scope *s, Node *n);
static int check_depth;

static void check_expr(Program *P, Scope *s, Node *n)
{
    if (!n) return;
    if (check_depth >= 400) {
        sx_error(&n->loc, "expression nested more than 400 levels deep; split it with assignments");
        return;
    }
    check_depth++;
    check_expr_node(P, s, n);
    check_depth--;
}

static void check_expr_node(Program *P, Scope *s, Node *n)
{
    switch (n->kind) {
    case N_NUM:
    case N_STR:
    case N_DOTS:
        return;
    case N_NAME: {
        if (scope_has(s, n->name) || sema_find_const(&P->config, n->name)) return;
        const char *dot = strchr(n->name, '.');
        if (dot) {
            /* a parameter of an instance, checked when the model is elaborated;
             * its first component must be an instance label or param here */
            char *first = sx_strndup(n->name, (size_t)(dot - n->name));
            if (scope_has(s, first)) return;
            sx_error(&n->loc, "unknown name '%s' ('%s' is not an instance or parameter defined above)",
                     n->name, first);
            return;
        }
        sx_error(&n->loc, "unknown name '%s'", n->name);
        return;
    }
    case N_NEG:
        check_expr(P, s, n->lhs);
        return;
    case N_BINOP:
        check_expr(P, s, n->lhs);
        check_expr(P, s, n->rhs);
        return;
    case N_CALL: {
        int op = ir_op_lookup(n->name);
        if (op >= 0) {
            const OpInfo *oi = &ir_ops[op];
            int want = oi->nin + oi->nk;
            if (oi->nk >= 0 && n->args.n != want) {
                sx_error(&n->loc, "'%s' takes %d argument%s, got %d", n->name, want,
                         want == 1 ? "" : "s", n->args.n);
            } else if (oi->nk < 0 && n->args.n < oi->nin) { /* the shape rule checks the constants */
                sx_error(&n->loc, "'%s' takes at least %d argument%s, got %d", n->name, oi->nin,
                         oi->nin == 1 ? "" : "s", n->args.n);
            }
            for (int i = 0; i < n->args.n; i++)
                if (((Node *)n->args.v[i])->kind == N_KWARG)
                    sx_error(&((Node *)n->args.v[i])->loc, "builtin '%s' takes no keyword arguments",
                             n->name);
            check_args(P, s, n);
            return;
        }
        if (in_list(builtin_fns, n->name)) {
            check_args(P, s, n);
            return;
        }
        if (in_list(init_fns, n->name)) {
            sx_error(&n->loc, "initializer '%s' can only initialize a param", n->name);
            return;
        }
        Node *blk = find_block(P, n->name);
        if (blk) {
            if (blk->is_model) {
                sx_error(&n->loc, "the model '%s' cannot be called", n->name);
                return;
            }
            sx_error(&n->loc, "block '%s' needs an instance name: write `name: %s(...)`", n->name,
                     n->name);
            check_args(P, s, n);
            return;
        }
        sx_error(&n->loc, "unknown function '%s'", n->name);
        check_args(P, s, n);
        return;
    }
    case N_INST: {
        Node *blk = find_block(P, n->name);
        if (!blk) {
            if (ir_op_lookup(n->name) >= 0)
                sx_error(&n->loc, "'%s' is a builtin op, not a block: call it without an instance "
                         "name", n->name);
            else
                sx_error(&n->loc, "unknown block '%s'", n->name);
        } else if (blk->is_model) {
            sx_error(&n->loc, "the model '%s' cannot be instantiated", n->name);
        } else {
            check_block_args(n, blk);
        }
        if (n->count) check_expr(P, s, n->count);
        check_args(P, s, n);
        for (int i = 0; i < n->annots.n; i++) check_args(P, s, n->annots.v[i]);
        /* the label's first component becomes a name: `transformer.wte.weight` */
        const char *dot = strchr(n->label, '.');
        char *first = dot ? sx_strndup(n->label, (size_t)(dot - n->label)) : n->label;
        if (!scope_has(s, first)) vec_push(&s->names, first);
        return;
    }
    case N_KWARG:
        check_expr(P, s, n->init);
        return;
    default:
        sx_error(&n->loc, "unexpected expression");
    }
}

static void check_block(Program *P, Node *b)
{
    Scope s = {0};
    if (b->args.n > 64) sx_error(&b->loc, "'%s' has %d arguments; a block takes at most 64", b->name, b->args.n);
    for (int i = 0; i < b->args.n; i++) {
        Node *a = b->args.v[i];
        for (int j = 0; j < i; j++)
            if (!strcmp(((Node *)b->args.v[j])->name, a->name)) {
                sx_error(&a->loc, "argument '%s' is declared twice", a->name);
                break;
            }
        if (a->init) check_expr(P, &s, a->init);
        collect_type_dims(&s, a->type);
        vec_push(&s.names, a->name);
    }
    int returned = 0;
    Vec params = {0};
    for (int i = 0; i < b->body.n; i++) {
        Node *st = b->body.v[i];
        if (returned) {
            sx_error(&st->loc, "statement after return");
            break;
        }
        switch (st->kind) {
        case N_PARAM: {
            for (int j = 0; j < params.n; j++)
                if (!strcmp(((Node *)params.v[j])->name, st->name)) {
                    sx_error(&st->loc, "parameter '%s' is declared twice", st->name);
                    sx_note(&((Node *)params.v[j])->loc, "first declared here");
                }
            vec_push(&params, st);
            if (st->type) {
                for (int d = 0; d < st->type->args.n; d++) check_expr(P, &s, st->type->args.v[d]);
            }
            Node *in = st->init;
            if (in->kind == N_NAME ? !in_list(init_fns, in->name)
                                   : (in->kind != N_CALL || !in_list(init_fns, in->name)))
                sx_error(&in->loc, "unknown initializer '%s' (use zeros, ones or normal(std))",
                         in->name);
            else if (in->kind == N_CALL) {
                if (!strcmp(in->name, "normal") && in->args.n != 1)
                    sx_error(&in->loc, "normal takes 1 argument (the standard deviation), got %d",
                             in->args.n);
                else if (strcmp(in->name, "normal") && in->args.n != 0)
                    sx_error(&in->loc, "%s takes no arguments", in->name);
                check_args(P, &s, in);
            } else if (!strcmp(in->name, "normal")) {
                sx_error(&in->loc, "normal needs a standard deviation: normal(0.02)");
            }
            for (int k = 0; k < st->annots.n; k++) {
                Node *an = st->annots.v[k];
                for (int j = 0; j < an->args.n; j++) {
                    Node *x = an->args.v[j];
                    /* mesh axis names are keywords of @split */
                    if (x->kind == N_NAME && (!strcmp(x->name, "tensor") || !strcmp(x->name, "data") ||
                                              !strcmp(x->name, "pipeline")))
                        continue;
                    check_expr(P, &s, x);
                }
            }
            if (scope_has(&s, st->name) && !lookup_any(P, st->name)) {
                sx_error(&st->loc, "'%s' is already defined in this block", st->name);
            }
            vec_push(&s.names, st->name);
            break;
        }
        case N_ASSIGN:
            check_expr(P, &s, st->init);
            if (!scope_has(&s, st->name)) vec_push(&s.names, st->name);
            break;
        case N_RETURN:
            check_expr(P, &s, st->init);
            returned = 1;
            break;
        default:
            sx_ice("unexpected statement kind %d", st->kind);
        }
    }
    if (!returned) sx_error(&b->loc, "%s '%s' has no return statement",
                            b->is_model ? "model" : "block", b->name);
}

/* ---- entry points ------------------------------------------------------- */

int sema_load_text(Program *P, const char *path, const char *text, size_t len)
{
    char *copy = sx_strndup(text, len);
    Module *m = parse_module(P, path, NULL, copy, len);
    P->main = m;
    return m ? 0 : 1;
}

int sema_load(Program *P, const char *path)
{
    Module *m = load_module(P, path, NULL, NULL);
    P->main = m;
    return m ? 0 : 1;
}

int sema_check(Program *P)
{
    /* definitions: blocks unique across all modules, sections in the main file */
    Vec blocks = {0};
    for (int mi = 0; mi < P->modules.n; mi++) {
        Module *mod = P->modules.v[mi];
        for (int i = 0; i < mod->items.n; i++) {
            Node *it = mod->items.v[i];
            if (it->kind == N_BLOCK) {
                for (int j = 0; j < blocks.n; j++) {
                    Node *o = blocks.v[j];
                    if (!strcmp(o->name, it->name)) {
                        sx_error(&it->loc, "'%s' is defined twice", it->name);
                        sx_note(&o->loc, "first defined here");
                    }
                }
                if (ir_op_lookup(it->name) >= 0)
                    sx_error(&it->loc, "'%s' is the name of a builtin op", it->name);
                vec_push(&blocks, it);
                if (it->is_model && mod == P->main) {
                    if (P->model) {
                        sx_error(&it->loc, "a file can define only one model ('%s' is defined above)",
                                 P->model->name);
                    } else {
                        P->model = it;
                    }
                } else if (it->is_model) {
                    sx_error(&it->loc, "model '%s' in an imported module; models belong to the main file",
                             it->name);
                }
            } else if (it->kind == N_SECTION && mod != P->main) {
                sx_error(&it->loc, "a %s section belongs to the main file, not to module %s",
                         it->name, mod->path);
            }
        }
    }
    /* sections, in order: config, then parallel and train which may use config */
    int seen[3] = {0, 0, 0};
    const char *order[3] = {"config", "parallel", "train"};
    Vec *dest[3] = {&P->config, &P->parallel, &P->train};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < P->main->items.n; i++) {
            Node *it = P->main->items.v[i];
            if (it->kind != N_SECTION || strcmp(it->name, order[k])) continue;
            if (seen[k]++) {
                sx_error(&it->loc, "second %s section (merge it into the first)", it->name);
                continue;
            }
            eval_section(P, it, dest[k]);
        }
    }
    for (int i = 0; i < P->overrides.n; i++) {
        Override *o = P->overrides.v[i];
        if (!o->used && !strcmp(o->origin, "--set"))
            sx_error(NULL, "--set %s=%s: the model has no constant named '%s'", o->name, o->value,
                     o->name);
    }
    check_config_members(P);
    if (!P->model) {
        sx_loc l = {P->main->path, 1, 1, 1};
        sx_error(&l, "no model in this file (define one with `model Name(...) { ... }`)");
    }
    for (int i = 0; i < blocks.n; i++) check_block(P, blocks.v[i]);
    return sx_error_count() ? 1 : 0;
}
