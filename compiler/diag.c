/* diag.c: memory arena, vectors and diagnostics.
 *
 * User errors print GCC/Clang style: `file:line:col: error: message`, the
 * source line, and a caret under the column. Internal errors (sx_ice) name
 * the compiler's own file and line and abort: they are our bugs, not the
 * user's.
 */
#include "shardc.h"

#include <sys/stat.h>

/* ---- arena: every compiler allocation lives until exit ------------------- */

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} Chunk;

static Chunk *arena;

void *sx_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!arena || arena->used + n > arena->cap) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        Chunk *c = malloc(sizeof(Chunk) + cap);
        if (!c) {
            fprintf(stderr, "shardc: out of memory\n");
            exit(1);
        }
        c->next = arena;
        c->used = 0;
        c->cap = cap;
        arena = c;
    }
    void *p = arena->data + arena->used;
    arena->used += n;
    memset(p, 0, n);
    return p;
}

void sx_arena_free(void)
{
    while (arena) {
        Chunk *next = arena->next;
        free(arena);
        arena = next;
    }
}

char *sx_strndup(const char *s, size_t n)
{
    char *p = sx_alloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *sx_strdup(const char *s) { return sx_strndup(s, strlen(s)); }

char *sx_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = sx_alloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void vec_push(Vec *v, void *p)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        void **nv = sx_alloc(sizeof(void *) * (size_t)cap);
        if (v->n) memcpy(nv, v->v, sizeof(void *) * (size_t)v->n);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = p;
}

/* ---- files -------------------------------------------------------------- */

char *sx_read_file(const char *path, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = sx_alloc(cap + 1);
    for (;;) {
        if (n == cap) {
            char *nb = sx_alloc(cap * 2 + 1);
            memcpy(nb, buf, n);
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static Vec files; /* SrcFile* */

void sx_register_file(const char *path, const char *text, size_t len)
{
    SrcFile *f = sx_alloc(sizeof *f);
    f->path = path;
    f->text = text;
    f->len = len;
    vec_push(&files, f);
}

char *sx_unquote(const char *lit)
{
    size_t n = strlen(lit);
    const char *s = lit + 1;
    const char *end = lit + n - ((n >= 2 && lit[n - 1] == '"') ? 1 : 0);
    char *out = sx_alloc(n + 1), *o = out;
    while (s < end) {
        if (*s == '\\' && s + 1 < end) {
            s++;
            switch (*s) {
            case 'n': *o++ = '\n'; break;
            case 't': *o++ = '\t'; break;
            default: *o++ = *s; break;
            }
            s++;
        } else {
            *o++ = *s++;
        }
    }
    *o = 0;
    return out;
}

/* ---- diagnostics -------------------------------------------------------- */

static int nerrors;
static int max_errors = 50;
static int suppressed;

int sx_error_count(void) { return nerrors; }

void sx_reset(void)
{
    nerrors = 0;
    suppressed = 0;
    max_errors = 50;
    memset(&files, 0, sizeof files);
    sx_arena_free();
}
void sx_set_max_errors(int n) { max_errors = n; }

static const SrcFile *find_file(const char *path)
{
    for (int i = files.n - 1; i >= 0; i--) {
        SrcFile *f = files.v[i];
        if (f->path == path || (path && strcmp(f->path, path) == 0)) return f;
    }
    return NULL;
}

/* print the source line and a caret (with ~ under the rest of the token) */
static void show_line(const sx_loc *loc)
{
    const SrcFile *f = find_file(loc->file);
    if (!f || loc->line < 1) return;
    const char *p = f->text, *end = f->text + f->len;
    for (int l = 1; l < loc->line && p < end; p++)
        if (*p == '\n') l++;
    if (p >= end && loc->line > 1) return;
    const char *e = p;
    while (e < end && *e != '\n') e++;
    fputc(' ', stderr);
    for (const char *q = p; q < e; q++) {
        unsigned char c = (unsigned char)*q;
        fputc(c == '\t' ? ' ' : (c < 32 || c == 127 ? '?' : c), stderr);
    }
    fputc('\n', stderr);
    int col = loc->col < 1 ? 1 : loc->col;
    int width = (int)(e - p);
    fputc(' ', stderr);
    for (int i = 1; i < col; i++) fputc(' ', stderr);
    fputc('^', stderr);
    for (int i = col + 1; i <= loc->last_col && i <= width; i++) fputc('~', stderr);
    fputc('\n', stderr);
}

static void report(const sx_loc *loc, const char *kind, const char *fmt, va_list ap)
{
    if (loc && loc->file)
        fprintf(stderr, "%s:%d:%d: %s: ", loc->file, loc->line, loc->col, kind);
    else
        fprintf(stderr, "shardc: %s: ", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (loc && loc->file) show_line(loc);
}

void sx_error(const sx_loc *loc, const char *fmt, ...)
{
    nerrors++;
    if (nerrors > max_errors) {
        if (!suppressed++) fprintf(stderr, "shardc: too many errors, stopping here\n");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", fmt, ap);
    va_end(ap);
}

void sx_warn(const sx_loc *loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(loc, "warning", fmt, ap);
    va_end(ap);
}

void sx_note(const sx_loc *loc, const char *fmt, ...)
{
    if (nerrors > max_errors) return;
    va_list ap;
    va_start(ap, fmt);
    report(loc, "note", fmt, ap);
    va_end(ap);
}

_Noreturn void sx_ice_at(const char *file, int line, const char *fmt, ...)
{
    fprintf(stderr, "shardc: internal compiler error at %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nplease report this bug with the input that caused it\n");
    abort();
}

Node *ast_new(NodeKind k, const sx_loc *loc)
{
    Node *n = sx_alloc(sizeof *n);
    n->kind = k;
    if (loc) n->loc = *loc;
    return n;
}
