/* json.c: a small recursive-descent JSON reader (RFC 8259) and safe writers.
 *
 * Input comes from files we do not trust (safetensors headers from the web),
 * so the reader checks every byte, bounds its recursion, and reports the byte
 * offset of the first problem instead of guessing.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sr_json.h"

#define MAX_DEPTH 256

typedef struct parser {
    const char *s;
    size_t len, pos;
    const char *what;
    int depth;
} parser;

static sr_status perr(parser *p, const char *reason)
{
    return sr_seterr(SR_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s",
                     p->what ? p->what : "input", p->pos, reason);
}

static sr_status nomem(void)
{
    return sr_seterr(SR_ERR_NOMEM, "out of memory while parsing JSON");
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static void free_node(sr_json *j)
{
    for (int i = 0; i < j->n; i++) free_node(&j->items[i]);
    free(j->items);
    free(j->str);
    free(j->key);
}

/* -------------------------------------------------------------------------- */
/* Strings                                                                     */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *p, unsigned *out)
{
    if (p->len - p->pos < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + i]);
        if (h < 0) return 0;
        v = v * 16 + (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string starting at the opening quote. The decoded text is never
 * longer than the escaped source, so one allocation of the source span fits. */
static sr_status parse_string(parser *p, char **out, size_t *outlen)
{
    p->pos++; /* opening quote */
    size_t end = p->pos;
    while (end < p->len && p->s[end] != '"') {
        if (p->s[end] == '\\') end++;
        end++;
    }
    if (end >= p->len) return perr(p, "unterminated string");
    char *o = malloc(end - p->pos + 1);
    if (!o) return nomem();
    size_t n = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) {
            free(o);
            return perr(p, "control character in string");
        }
        if (c != '\\') {
            o[n++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        char e = p->s[p->pos++];
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!read_hex4(p, &cp)) {
                free(o);
                return perr(p, "bad \\u escape");
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* a high surrogate must be followed by a low one */
                unsigned lo;
                if (p->len - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
                    size_t save = p->pos;
                    p->pos += 2;
                    if (read_hex4(p, &lo) && lo >= 0xDC00 && lo <= 0xDFFF)
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else {
                        p->pos = save;
                        cp = 0xFFFD;
                    }
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD; /* lone low surrogate */
            }
            /* 6 escaped source bytes always cover <= 4 output bytes */
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            p->pos--;
            free(o);
            return perr(p, "bad escape in string");
        }
    }
    p->pos++; /* closing quote */
    o[n] = '\0';
    *out = o;
    if (outlen) *outlen = n;
    return SR_OK;
}

/* -------------------------------------------------------------------------- */
/* Values                                                                      */

static int isdig(char c) { return c >= '0' && c <= '9'; }

static sr_status parse_number(parser *p, sr_json *j)
{
    size_t start = p->pos;
    const char *s = p->s;
    size_t i = p->pos, n = p->len;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !isdig(s[i])) {
        p->pos = i;
        return perr(p, "bad number");
    }
    if (s[i] == '0') i++;
    else while (i < n && isdig(s[i])) i++;
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !isdig(s[i])) {
            p->pos = i;
            return perr(p, "bad number: digits expected after '.'");
        }
        while (i < n && isdig(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !isdig(s[i])) {
            p->pos = i;
            return perr(p, "bad number: digits expected in exponent");
        }
        while (i < n && isdig(s[i])) i++;
    }
    size_t len = i - start;
    char *lit = malloc(len + 1);
    if (!lit) return nomem();
    memcpy(lit, s + start, len);
    lit[len] = '\0';
    j->type = SR_JSON_NUMBER;
    j->str = lit;
    j->len = len;
    j->number = strtod(lit, NULL); /* overflow gives +-HUGE_VAL: still a number */
    p->pos = i;
    return SR_OK;
}

static int match_word(parser *p, const char *w)
{
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0) return 0;
    p->pos += n;
    return 1;
}

static sr_status parse_value(parser *p, sr_json *j);

/* Appends a zeroed child to j->items, growing geometrically. */
static sr_json *add_item(sr_json *j, int *cap)
{
    if (j->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        sr_json *ni = realloc(j->items, (size_t)nc * sizeof *ni);
        if (!ni) return NULL;
        j->items = ni;
        *cap = nc;
    }
    sr_json *c = &j->items[j->n++];
    memset(c, 0, sizeof *c);
    return c;
}

static sr_status parse_container(parser *p, sr_json *j, int is_obj)
{
    if (++p->depth > MAX_DEPTH) return perr(p, "nesting too deep");
    j->type = is_obj ? SR_JSON_OBJECT : SR_JSON_ARRAY;
    char close = is_obj ? '}' : ']';
    int cap = 0;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return SR_OK;
    }
    for (;;) {
        sr_json *c = add_item(j, &cap);
        if (!c) return nomem();
        skip_ws(p);
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return perr(p, "member name expected");
            SR_CHECK(parse_string(p, &c->key, NULL));
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return perr(p, "':' expected");
            p->pos++;
            skip_ws(p);
        }
        SR_CHECK(parse_value(p, c));
        skip_ws(p);
        if (p->pos >= p->len) return perr(p, is_obj ? "unterminated object" : "unterminated array");
        char ch = p->s[p->pos];
        if (ch == ',') {
            p->pos++;
            continue;
        }
        if (ch == close) {
            p->pos++;
            break;
        }
        return perr(p, is_obj ? "',' or '}' expected" : "',' or ']' expected");
    }
    p->depth--;
    return SR_OK;
}

static sr_status parse_value(parser *p, sr_json *j)
{
    skip_ws(p);
    if (p->pos >= p->len) return perr(p, "value expected, found end of input");
    char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, j, 1);
    case '[': return parse_container(p, j, 0);
    case '"':
        j->type = SR_JSON_STRING;
        return parse_string(p, &j->str, &j->len);
    case 't':
        if (!match_word(p, "true")) break;
        j->type = SR_JSON_BOOL;
        j->boolean = 1;
        return SR_OK;
    case 'f':
        if (!match_word(p, "false")) break;
        j->type = SR_JSON_BOOL;
        return SR_OK;
    case 'n':
        if (!match_word(p, "null")) break;
        j->type = SR_JSON_NULL;
        return SR_OK;
    default:
        if (c == '-' || isdig(c)) return parse_number(p, j);
    }
    return perr(p, "unexpected character");
}

sr_status sr_json_parse(const char *text, size_t len, const char *what, sr_json **out)
{
    *out = NULL;
    sr_json *root = calloc(1, sizeof *root);
    if (!root) return nomem();
    parser p = {text, len, 0, what, 0};
    sr_status st = parse_value(&p, root);
    if (st == SR_OK) {
        skip_ws(&p);
        if (p.pos != p.len) st = perr(&p, "trailing characters after the value");
    }
    if (st != SR_OK) {
        sr_json_free(root);
        return st;
    }
    *out = root;
    return SR_OK;
}

sr_status sr_buf_read_file(sr_buf *b, const char *path)
{
    sr_buf_init(b);
    FILE *f = fopen(path, "rb");
    if (!f) return sr_seterr(SR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sr_buf_append(b, chunk, n);
    int rerr = ferror(f);
    fclose(f);
    sr_status st = rerr ? sr_seterr(SR_ERR_IO, "cannot read %s", path) : sr_buf_status(b);
    if (st != SR_OK) sr_buf_free(b);
    return st;
}

sr_status sr_json_parse_file(const char *path, sr_json **out)
{
    *out = NULL;
    sr_buf b;
    SR_CHECK(sr_buf_read_file(&b, path));
    sr_status st = sr_json_parse(b.data ? b.data : "", b.len, path, out);
    sr_buf_free(&b);
    return st;
}

void sr_json_free(sr_json *j)
{
    if (!j) return;
    free_node(j);
    free(j);
}

const sr_json *sr_json_get(const sr_json *j, const char *key)
{
    if (!j || j->type != SR_JSON_OBJECT) return NULL;
    for (int i = 0; i < j->n; i++)
        if (strcmp(j->items[i].key, key) == 0) return &j->items[i];
    return NULL;
}

const char *sr_json_type_name(sr_json_type t)
{
    switch (t) {
    case SR_JSON_NULL: return "null";
    case SR_JSON_BOOL: return "boolean";
    case SR_JSON_NUMBER: return "number";
    case SR_JSON_STRING: return "string";
    case SR_JSON_ARRAY: return "array";
    case SR_JSON_OBJECT: return "object";
    }
    return "?";
}

/* Integral literal: no fraction or exponent. Parsed from the literal, not the
 * double, so 64-bit values survive exactly. */
static int integral_literal(const sr_json *j)
{
    if (!j || j->type != SR_JSON_NUMBER) return 0;
    return strpbrk(j->str, ".eE") == NULL;
}

int sr_json_int64(const sr_json *j, int64_t *out)
{
    if (!integral_literal(j)) return 0;
    errno = 0;
    long long v = strtoll(j->str, NULL, 10);
    if (errno == ERANGE) return 0;
    *out = (int64_t)v;
    return 1;
}

int sr_json_uint64(const sr_json *j, uint64_t *out)
{
    if (!integral_literal(j) || j->str[0] == '-') return 0;
    errno = 0;
    unsigned long long v = strtoull(j->str, NULL, 10);
    if (errno == ERANGE) return 0;
    *out = (uint64_t)v;
    return 1;
}

const char *sr_json_string(const sr_json *j)
{
    return j && j->type == SR_JSON_STRING ? j->str : NULL;
}

/* -------------------------------------------------------------------------- */
/* Writers                                                                     */

void sr_buf_init(sr_buf *b)
{
    memset(b, 0, sizeof *b);
}

void sr_buf_free(sr_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int reserve(sr_buf *b, size_t extra)
{
    if (b->failed) return 0;
    if (b->len + extra + 1 <= b->cap) return 1;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra + 1) nc *= 2;
    char *nd = realloc(b->data, nc);
    if (!nd) {
        b->failed = 1;
        return 0;
    }
    b->data = nd;
    b->cap = nc;
    return 1;
}

void sr_buf_append(sr_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sr_buf_puts(sr_buf *b, const char *s)
{
    sr_buf_append(b, s, strlen(s));
}

void sr_buf_printf(sr_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        sr_buf_append(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; c &= 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; c &= 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; c &= 0x07; }
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return n;
}

void sr_buf_json_string(sr_buf *b, const char *s)
{
    if (!s) {
        sr_buf_puts(b, "null");
        return;
    }
    sr_buf_append(b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        unsigned c = *u;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sr_buf_append(b, e, 2);
            u++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': sr_buf_puts(b, "\\n"); break;
            case '\r': sr_buf_puts(b, "\\r"); break;
            case '\t': sr_buf_puts(b, "\\t"); break;
            case '\b': sr_buf_puts(b, "\\b"); break;
            case '\f': sr_buf_puts(b, "\\f"); break;
            default: sr_buf_printf(b, "\\u%04x", c);
            }
            u++;
        } else {
            int n = utf8_len(u);
            if (n == 0) {
                sr_buf_puts(b, "\\ufffd");
                u++;
            } else {
                sr_buf_append(b, (const char *)u, (size_t)n);
                u += n;
            }
        }
    }
    sr_buf_append(b, "\"", 1);
}

void sr_buf_json_double(sr_buf *b, double x)
{
    if (!isfinite(x)) sr_buf_puts(b, "null");
    else sr_buf_printf(b, "%.17g", x);
}

void sr_buf_json_float(sr_buf *b, float x)
{
    if (!isfinite(x)) sr_buf_puts(b, "null");
    else sr_buf_printf(b, "%.9g", (double)x);
}

sr_status sr_buf_status(const sr_buf *b)
{
    if (b->failed) return sr_seterr(SR_ERR_NOMEM, "out of memory while building text");
    return SR_OK;
}

void sr_json_write_string(FILE *f, const char *s)
{
    sr_buf b;
    sr_buf_init(&b);
    sr_buf_json_string(&b, s);
    if (!b.failed && b.data) fwrite(b.data, 1, b.len, f);
    sr_buf_free(&b);
}
