/* mc.c: multiple-choice evaluation sets (sr_mc.h), llm.c's eval files and
 * HellaSwag's JSON Lines, read into one token array and offsets into it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_json.h"
#include "sr_mc.h"

/* grows *p (of *cap elements of size sz) to hold n */
static int reserve(void **p, int64_t *cap, int64_t n, size_t sz)
{
    if (n <= *cap) return 1;
    int64_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* the set being built: the capacity of each of mc's arrays */
typedef struct mc_build {
    sr_mc *mc;
    int64_t cap_first, cap_label, cap_ctx, cap_ctx_len, cap_comp, cap_comp_len, cap_tok;
} mc_build;

static sr_status oom(void)
{
    return sr_seterr(SR_ERR_NOMEM, "out of memory reading a multiple-choice set");
}

static sr_status add_tokens(mc_build *b, const int32_t *t, int64_t n)
{
    sr_mc *mc = b->mc;
    if (!reserve((void **)&mc->tok, &b->cap_tok, mc->n_tok + n, sizeof *mc->tok)) return oom();
    memcpy(mc->tok + mc->n_tok, t, (size_t)n * sizeof *t);
    mc->n_tok += n;
    return SR_OK;
}

/* opens example mc->n: its label and context (the tokens already added from ctx_at) */
static sr_status add_example(mc_build *b, int label, int64_t ctx_at)
{
    sr_mc *mc = b->mc;
    int64_t n = mc->n + 1;
    if (!reserve((void **)&mc->first, &b->cap_first, n + 1, sizeof *mc->first) ||
        !reserve((void **)&mc->label, &b->cap_label, n, sizeof *mc->label) ||
        !reserve((void **)&mc->ctx, &b->cap_ctx, n, sizeof *mc->ctx) ||
        !reserve((void **)&mc->ctx_len, &b->cap_ctx_len, n, sizeof *mc->ctx_len))
        return oom();
    if (mc->n == 0) mc->first[0] = 0; /* else first[n] already ends the example before */
    mc->label[mc->n] = label;
    mc->ctx[mc->n] = ctx_at;
    mc->ctx_len[mc->n] = (int32_t)(mc->n_tok - ctx_at);
    mc->first[mc->n + 1] = mc->first[mc->n];
    mc->n++;
    return SR_OK;
}

/* adds a completion of the last example: the tokens from at on */
static sr_status add_completion(mc_build *b, int64_t at)
{
    sr_mc *mc = b->mc;
    int64_t k = mc->first[mc->n];
    if (!reserve((void **)&mc->comp, &b->cap_comp, k + 1, sizeof *mc->comp) ||
        !reserve((void **)&mc->comp_len, &b->cap_comp_len, k + 1, sizeof *mc->comp_len))
        return oom();
    mc->comp[k] = at;
    mc->comp_len[k] = (int32_t)(mc->n_tok - at);
    mc->first[mc->n]++;
    int c = (int)(mc->first[mc->n] - mc->first[mc->n - 1]);
    if (c > mc->max_choices) mc->max_choices = c;
    return SR_OK;
}

/* what every example needs, whatever its format: a context, two
 * completions or more, none empty, the label one of them, tokens in the
 * vocabulary */
static sr_status check_example(const sr_mc *mc, const char *path, const char *where, int vocab)
{
    int i = mc->n - 1;
    int nc = (int)(mc->first[i + 1] - mc->first[i]);
#define BAD(...) return sr_seterr(SR_ERR_FORMAT, __VA_ARGS__)
    if (mc->ctx_len[i] < 1) BAD("%s %s: the context is empty (a completion needs a token before it)", path, where);
    if (nc < 2) BAD("%s %s: %d completion%s; a choice needs 2 or more", path, where, nc, nc == 1 ? "" : "s");
    if (mc->label[i] < 0 || mc->label[i] >= nc)
        BAD("%s %s: label %d, but the completions are 0..%d", path, where, mc->label[i], nc - 1);
    for (int64_t k = mc->first[i]; k < mc->first[i + 1]; k++)
        if (mc->comp_len[k] < 1) BAD("%s %s: completion %d is empty", path, where, (int)(k - mc->first[i]));
    for (int64_t t = mc->ctx[i]; t < mc->n_tok; t++)
        if (mc->tok[t] < 0 || mc->tok[t] >= vocab)
            BAD("%s %s: token %d is outside the model's vocabulary of %d", path, where, (int)mc->tok[t], vocab);
#undef BAD
    return SR_OK;
}

/* llm.c's eval file: the header, then n examples of uint16 words */
static sr_status read_bin(mc_build *b, const char *path, const unsigned char *p, size_t len, int vocab)
{
    int32_t h[4];
    memcpy(h, p, sizeof h);
    if (h[1] != SR_MC_VERSION)
        return sr_seterr(SR_ERR_FORMAT, "%s: eval file version %d; this program reads version %d", path,
                         (int)h[1], SR_MC_VERSION);
    if (h[2] < 1) return sr_seterr(SR_ERR_FORMAT, "%s: the header says %d examples", path, (int)h[2]);
    size_t nw = (len - 1024) / 2, at = 0;
    if ((len - 1024) % 2) return sr_seterr(SR_ERR_FORMAT, "%s: an odd number of bytes after the header", path);
    const unsigned char *w = p + 1024;
#define WORD(i) ((int)(w[2 * (i)] | (w[2 * (i) + 1] << 8)))
    int32_t *t = malloc(65536 * sizeof *t); /* an example's tokens: under 32768 of them */
    if (!t) return oom();
    sr_status s = SR_OK;
    char where[48];
    for (int i = 0; i < h[2] && s == SR_OK; i++) {
        snprintf(where, sizeof where, "example %d", i);
        /* the 5 words before the context's, then the context's length */
        if (nw - at < 6 || WORD(at) != 65535) {
            s = sr_seterr(SR_ERR_FORMAT, "%s %s: %s at word %zu (the header says %d examples); the file is "
                          "cut short or corrupt", path, where, nw - at < 6 ? "the file ends" : "no example starts",
                          at, (int)h[2]);
            break;
        }
        size_t words = (size_t)WORD(at + 1) / 2, end = at + words;
        int label = WORD(at + 3), nc = WORD(at + 4);
        if (words < 6 || end > nw) {
            s = sr_seterr(SR_ERR_FORMAT, "%s %s: %zu bytes long at word %zu, past the file's end or too short to "
                          "be an example; the file is cut short or corrupt", path, where, words * 2, at);
            break;
        }
        size_t q = at + 5;
        int64_t ctx_at = b->mc->n_tok;
        for (int part = 0; part <= nc && s == SR_OK; part++) { /* the context, then each completion */
            int n = q < end ? WORD(q) : -1;
            if (n < 0 || q + 1 + (size_t)n > end) {
                s = sr_seterr(SR_ERR_FORMAT, "%s %s: its %s past the example's %zu bytes; the file is corrupt",
                              path, where, part ? "completions run" : "context runs", words * 2);
                break;
            }
            for (int k = 0; k < n; k++) t[k] = WORD(q + 1 + k);
            int64_t from = b->mc->n_tok;
            s = add_tokens(b, t, n);
            if (s == SR_OK) s = part ? add_completion(b, from) : add_example(b, label, ctx_at);
            q += 1 + (size_t)n;
        }
        if (s == SR_OK && q != end)
            s = sr_seterr(SR_ERR_FORMAT, "%s %s: %zu bytes long, but its parts add up to %zu; the file is corrupt",
                          path, where, words * 2, (q - at) * 2);
        if (s == SR_OK) s = check_example(b->mc, path, where, vocab);
        at = end;
    }
    if (s == SR_OK && at != nw)
        s = sr_seterr(SR_ERR_FORMAT, "%s: %zu bytes after the %d examples the header counts; the file is corrupt",
                      path, (nw - at) * 2, (int)h[2]);
#undef WORD
    free(t);
    return s;
}

/* text's tokens: through the tokenizer, or its bytes */
static sr_status add_text(mc_build *b, const char *path, const char *text, size_t len, const sr_tokenizer *tok)
{
    if (!tok) {
        for (size_t i = 0; i < len; i++) {
            int32_t c = (unsigned char)text[i];
            SR_CHECK(add_tokens(b, &c, 1));
        }
        return SR_OK;
    }
    int32_t *ids;
    size_t n;
    sr_status s = sr_tok_encode(tok, text, len, &ids, &n);
    if (s != SR_OK) return sr_seterr(s, "cannot tokenize %s with %s: %s", path, sr_tok_path(tok), sr_errmsg());
    s = add_tokens(b, ids, (int64_t)n);
    free(ids);
    return s;
}

/* one HellaSwag object; why says what is wrong with it (then SR_OK) */
static sr_status read_object(mc_build *b, const char *path, const sr_json *j, const sr_tokenizer *tok, char *why,
                             size_t cap)
{
    const sr_json *ctx = sr_json_get(j, "ctx"), *end = sr_json_get(j, "endings"), *lab = sr_json_get(j, "label");
    int64_t label;
    if (j->type != SR_JSON_OBJECT || !ctx || ctx->type != SR_JSON_STRING || !end || end->type != SR_JSON_ARRAY) {
        snprintf(why, cap, "needs \"ctx\" (a string), \"endings\" (strings) and \"label\", as HellaSwag's");
        return SR_OK;
    }
    int digits = lab && lab->type == SR_JSON_STRING && lab->len > 0 && lab->len < 10 &&
                 strspn(lab->str, "0123456789") == lab->len; /* "label": "3" in some copies */
    if (digits) label = atol(lab->str);
    if (!lab || !(digits || sr_json_int64(lab, &label))) {
        snprintf(why, cap, "has a \"label\" that is not an integer");
        return SR_OK;
    }
    int64_t ctx_at = b->mc->n_tok;
    SR_CHECK(add_text(b, path, ctx->str, ctx->len, tok));
    SR_CHECK(add_example(b, label > INT32_MAX ? -1 : (int)label, ctx_at));
    for (int k = 0; k < end->n; k++) {
        const sr_json *e = &end->items[k];
        if (e->type != SR_JSON_STRING) {
            snprintf(why, cap, "has endings[%d] that is not a string", k);
            return SR_OK;
        }
        /* " " + ending, as llm.c's hellaswag.py renders it: the blank belongs to the first word's token */
        char *s = malloc(e->len + 2);
        if (!s) return oom();
        s[0] = ' ';
        memcpy(s + 1, e->str, e->len + 1);
        int64_t at = b->mc->n_tok;
        sr_status st = add_text(b, path, s, e->len + 1, tok);
        free(s);
        SR_CHECK(st);
        SR_CHECK(add_completion(b, at));
    }
    return SR_OK;
}

static sr_status read_jsonl(mc_build *b, const char *path, const char *p, size_t len, const sr_tokenizer *tok,
                            int vocab)
{
    long line = 0;
    for (size_t i = 0; i < len;) {
        line++;
        const char *nl = memchr(p + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (p + i)) : len - i, next = i + n + 1;
        if (strspn(p + i, " \t\r") >= n) { /* a blank line */
            i = next;
            continue;
        }
        sr_json *j;
        sr_status s = sr_json_parse(p + i, n, "", &j);
        if (s == SR_ERR_FORMAT)
            return sr_seterr(SR_ERR_FORMAT, "%s line %ld: not a JSON object (%s)", path, line, sr_errmsg() + 2);
        SR_CHECK(s);
        char why[160] = "", where[32];
        s = read_object(b, path, j, tok, why, sizeof why);
        sr_json_free(j);
        SR_CHECK(s);
        snprintf(where, sizeof where, "line %ld", line);
        if (*why) return sr_seterr(SR_ERR_FORMAT, "%s %s: the example %s", path, where, why);
        SR_CHECK(check_example(b->mc, path, where, vocab));
        i = next;
    }
    return SR_OK;
}

sr_status sr_mc_open(const char *path, const sr_tokenizer *tok, int vocab, sr_mc *mc)
{
    memset(mc, 0, sizeof *mc);
    sr_buf f;
    SR_CHECK(sr_buf_read_file(&f, path));
    mc_build b = {.mc = mc};
    const char *d = f.data ? f.data : ""; /* NULL for an empty file */
    int32_t magic = 0;
    if (f.len >= 4) memcpy(&magic, d, 4);
    size_t lead = f.len >= 3 && !memcmp(d, "\xef\xbb\xbf", 3) ? 3 : 0; /* a byte order mark */
    lead += strspn(d + lead, " \t\r\n");
    sr_status s;
    if (magic == SR_MC_MAGIC && f.len >= 1024)
        s = read_bin(&b, path, (const unsigned char *)d, f.len, vocab);
    else if (lead < f.len && d[lead] == '{' && (mc->from_text = 1))
        s = read_jsonl(&b, path, d + lead, f.len - lead, tok, vocab);
    else
        s = sr_seterr(SR_ERR_FORMAT, "%s is neither an llm.c eval file (magic %d, as dev/data/hellaswag.py writes) "
                      "nor JSON Lines of HellaSwag examples", path, SR_MC_MAGIC);
    if (s == SR_OK && mc->n == 0) s = sr_seterr(SR_ERR_FORMAT, "%s holds no examples", path);
    sr_buf_free(&f);
    if (s != SR_OK) sr_mc_close(mc);
    return s;
}

void sr_mc_close(sr_mc *mc)
{
    free(mc->first);
    free(mc->label);
    free(mc->ctx);
    free(mc->ctx_len);
    free(mc->comp);
    free(mc->comp_len);
    free(mc->tok);
    memset(mc, 0, sizeof *mc);
}
