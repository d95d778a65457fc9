/* tokenizer.c: byte-level BPEs split as GPT-2, Llama 3 or Qwen2 split text
 * (see sr_tokenizer.h).
 *
 * Loading turns every vocabulary entry into the bytes it stands for and every
 * merge "a b" into (id a, id b) -> (rank, id ab), so encoding works on ids
 * only. A word is merged with a heap of candidate pairs, O(n log n) in its
 * length, so a long run of letters in a data file does not go quadratic.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sr_json.h"
#include "sr_tokenizer.h"
#include "unicode_tables.h"

#define LLMC_TOK_MAGIC 20240328
#define MAX_TOKENS (1 << 24)

typedef struct merge_slot {
    uint64_t key; /* left << 32 | right */
    int32_t rank; /* -1: empty slot */
    int32_t id;   /* the merged token */
} merge_slot;

struct sr_tokenizer {
    char *path;
    char *merges_path; /* the merges file beside vocab.json / encoder.json, else NULL */
    const char *kind;
    int n;             /* ids 0 .. n-1 */
    char **piece;      /* bytes of each id (NULL: no token has this id) */
    uint32_t *plen;
    int eot, can_encode, prefix_space;
    int digits;        /* 0: GPT-2's pattern; 3 (Llama 3) or 1 (Qwen2): their pattern, digits per number */
    int ignore_merges; /* a word that is a token is that token (Llama 3's tokenizer.json) */
    int32_t *word_slot; /* with ignore_merges: pieces -> ids, open addressing, word_cap a power of two */
    size_t word_cap;
    int32_t byte_id[256];
    merge_slot *merges; /* open addressing, mcap a power of two */
    size_t mcap;
    int32_t *special;  /* ids matched literally in text */
    int n_special;
};

/* ---- Unicode classes and UTF-8 ------------------------------------------- */

enum { C_L, C_N, C_S, C_O };

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

#define NRANGES(a) (sizeof(a) / sizeof(a[0]))

static int uclass(uint32_t cp)
{
    if (cp < 128) {
        if ((cp | 32) >= 'a' && (cp | 32) <= 'z') return C_L;
        if (cp >= '0' && cp <= '9') return C_N;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return C_S;
        return C_O;
    }
    if (cp > 0x10FFFF) return C_O; /* an invalid byte */
    if (in_ranges(sr_uni_letter, NRANGES(sr_uni_letter), cp)) return C_L;
    if (in_ranges(sr_uni_number, NRANGES(sr_uni_number), cp)) return C_N;
    if (in_ranges(sr_uni_space, NRANGES(sr_uni_space), cp)) return C_S;
    return C_O;
}

/* The code point at s[i] (i < len) and its length; a byte that does not start
 * a valid sequence is one code point of its own, UINT32_MAX. */
static size_t utf8_next(const unsigned char *s, size_t len, size_t i, uint32_t *cp)
{
    unsigned c = s[i];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = UINT32_MAX;
        return 1;
    }
    if (i + n > len) {
        *cp = UINT32_MAX;
        return 1;
    }
    for (size_t k = 1; k < n; k++) {
        if ((s[i + k] & 0xC0) != 0x80) {
            *cp = UINT32_MAX;
            return 1;
        }
        v = v << 6 | (s[i + k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = UINT32_MAX;
        return 1;
    }
    *cp = v;
    return n;
}

static int class_at(const unsigned char *s, size_t len, size_t i, size_t *l)
{
    uint32_t cp;
    *l = utf8_next(s, len, i, &cp);
    return uclass(cp);
}

/* End of the word that starts at s[i], by GPT-2's pattern
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t word_end(const unsigned char *s, size_t len, size_t i)
{
    if (s[i] == '\'' && i + 1 < len) {
        unsigned char a = s[i + 1], b = i + 2 < len ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return i + 3;
    }
    size_t l, j = i;
    int k = class_at(s, len, i, &l);
    if (s[i] == ' ' && i + 1 < len) { /* ' ?' before a letter, digit or other run */
        size_t l1;
        int k1 = class_at(s, len, i + 1, &l1);
        if (k1 != C_S) j = i + 1, k = k1;
    }
    if (k != C_S) {
        size_t e = j;
        while (e < len && class_at(s, len, e, &l) == k) e += l;
        return e;
    }
    /* whitespace: all of it at the end of the text or when it is one
     * character, else all but the last, which goes with what follows */
    size_t e = i, last = i;
    int count = 0;
    while (e < len && class_at(s, len, e, &l) == C_S) last = e, e += l, count++;
    return (e == len || count == 1) ? e : last;
}

static int is_crlf(const unsigned char *s, size_t len, size_t i) { return i < len && (s[i] == '\r' || s[i] == '\n'); }

/* End of the word that starts at s[i], by Llama 3's pattern (Qwen2's with
 * digits = 1: \p{N} instead of \p{N}{1,3}), its alternatives tried in order:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t word_end_l3(const unsigned char *s, size_t len, size_t i, int digits)
{
    if (s[i] == '\'' && i + 1 < len) {
        unsigned char a = (unsigned char)(s[i + 1] | 32), b = i + 2 < len ? (unsigned char)(s[i + 2] | 32) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t l, l1, e;
    int k = class_at(s, len, i, &l);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t j = (k == C_L) ? i : (k != C_N && !is_crlf(s, len, i) && i + l < len &&
                                 class_at(s, len, i + l, &l1) == C_L) ? i + l : len;
    if (j < len) {
        for (e = j; e < len && class_at(s, len, e, &l1) == C_L;) e += l1;
        return e;
    }
    if (k == C_N) { /* \p{N}{1,digits} */
        int n = 0;
        for (e = i; e < len && n < digits && class_at(s, len, e, &l1) == C_N; n++) e += l1;
        return e;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    j = (s[i] == ' ' && i + 1 < len && class_at(s, len, i + 1, &l1) == C_O) ? i + 1 : i;
    if (class_at(s, len, j, &l1) == C_O) {
        for (e = j; e < len && class_at(s, len, e, &l1) == C_O;) e += l1;
        while (is_crlf(s, len, e)) e++;
        return e;
    }
    /* white space: \s*[\r\n]+ ends after the run's last \r or \n; else as GPT-2's */
    size_t last = i, nl_end = 0;
    int count = 0;
    for (e = i; e < len && class_at(s, len, e, &l1) == C_S; e += l1) {
        last = e, count++;
        if (is_crlf(s, len, e)) nl_end = e + 1;
    }
    if (nl_end) return nl_end;
    return (e == len || count == 1) ? e : last;
}

/* ---- GPT-2's byte <-> character map ---------------------------------------- */

/* Printable Latin-1 bytes stand for themselves; the others, in byte order,
 * for U+0100 onwards (so a space is 'Ġ', U+0120). */
static void byte_chars(uint32_t b2u[256], int16_t u2b[324])
{
    int n = 0;
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

/* The bytes a vocabulary string stands for, into out (at most len bytes);
 * -1 if it has a character outside the map (then it is taken literally). */
static long unmap_bytes(const char *str, size_t len, char *out)
{
    static int16_t u2b[324];
    static uint32_t b2u[256];
    static int ready;
    if (!ready) byte_chars(b2u, u2b), ready = 1;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        i += utf8_next((const unsigned char *)str, len, i, &cp);
        if (cp >= 324 || u2b[cp] < 0) return -1;
        out[o++] = (char)u2b[cp];
    }
    return (long)o;
}

/* ---- tables ------------------------------------------------------------------- */

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}


static const merge_slot *merge_find(const sr_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = sr_mix64(key) & (t->mcap - 1);; i = (i + 1) & (t->mcap - 1)) {
        if (t->merges[i].rank < 0) return NULL;
        if (t->merges[i].key == key) return &t->merges[i];
    }
}

/* piece bytes -> id, only while loading (merges are resolved through it) */
typedef struct piece_map {
    int32_t *slot; /* ids, -1 empty */
    size_t cap;
} piece_map;

static int32_t pm_find(const sr_tokenizer *t, const piece_map *m, const char *s, size_t n)
{
    for (size_t i = fnv(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (t->plen[id] == n && memcmp(t->piece[id], s, n) == 0) return id;
    }
}

static void pm_add(const sr_tokenizer *t, piece_map *m, int32_t id)
{
    size_t i = fnv(t->piece[id], t->plen[id]) & (m->cap - 1);
    while (m->slot[i] >= 0) {
        if (t->plen[m->slot[i]] == t->plen[id] &&
            memcmp(t->piece[m->slot[i]], t->piece[id], t->plen[id]) == 0)
            return; /* two ids for the same bytes: the first one encodes */
        i = (i + 1) & (m->cap - 1);
    }
    m->slot[i] = id;
}

static size_t pow2_above(size_t n)
{
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

void sr_tok_free(sr_tokenizer *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->piece[i]);
    free(t->piece);
    free(t->plen);
    free(t->merges);
    free(t->word_slot);
    free(t->special);
    free(t->path);
    free(t->merges_path);
    free(t);
}

static sr_status nomem(void)
{
    return sr_seterr(SR_ERR_NOMEM, "out of memory loading a tokenizer");
}

static sr_status new_tok(const char *path, const char *kind, int n, sr_tokenizer **out)
{
    sr_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nomem();
    t->path = strdup(path);
    t->kind = kind;
    t->n = n;
    t->eot = -1;
    t->piece = calloc((size_t)n > 0 ? (size_t)n : 1, sizeof *t->piece);
    t->plen = calloc((size_t)n > 0 ? (size_t)n : 1, sizeof *t->plen);
    if (!t->path || !t->piece || !t->plen) {
        sr_tok_free(t);
        return nomem();
    }
    *out = t;
    return SR_OK;
}

static sr_status set_piece(sr_tokenizer *t, int32_t id, const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return nomem();
    memcpy(p, s, n);
    p[n] = 0;
    free(t->piece[id]);
    t->piece[id] = p;
    t->plen[id] = (uint32_t)n;
    return SR_OK;
}

static sr_status add_special(sr_tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_special; i++)
        if (t->special[i] == id) return SR_OK;
    int32_t *s = realloc(t->special, (size_t)(t->n_special + 1) * sizeof *s);
    if (!s) return nomem();
    t->special = s;
    t->special[t->n_special++] = id;
    return SR_OK;
}

/* ---- loading --------------------------------------------------------------- */

static sr_status read_file(const char *path, char **data, size_t *len)
{
    sr_buf b;
    SR_CHECK(sr_buf_read_file(&b, path));
    *data = b.data;
    *len = b.len;
    return SR_OK;
}

/* The table from a vocabulary object {"token": id, ...}: sizes it and sets
 * every piece; `extra` (tokenizer.json's added_tokens, or NULL) may use
 * higher ids. */
static sr_status vocab_table(const char *path, const char *kind, const sr_json *vocab,
                             const sr_json *extra, sr_tokenizer **out)
{
    if (!vocab || vocab->type != SR_JSON_OBJECT)
        return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: the vocabulary is not a JSON object of "
                         "token: id", path);
    int64_t n = 0, id;
    for (int i = 0; i < vocab->n; i++) {
        if (!sr_json_int64(&vocab->items[i], &id) || id < 0 || id >= MAX_TOKENS)
            return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: token \"%s\" has id %s, not an "
                             "integer from 0 to %d", path, vocab->items[i].key,
                             vocab->items[i].str ? vocab->items[i].str : "?", MAX_TOKENS - 1);
        if (id + 1 > n) n = id + 1;
    }
    for (int i = 0; extra && i < extra->n; i++)
        if (sr_json_int64(sr_json_get(&extra->items[i], "id"), &id) && id >= 0 && id < MAX_TOKENS &&
            id + 1 > n)
            n = id + 1;
    sr_tokenizer *t;
    SR_CHECK(new_tok(path, kind, (int)n, &t));
    sr_status s = SR_OK;
    for (int i = 0; i < vocab->n && s == SR_OK; i++) {
        const sr_json *v = &vocab->items[i];
        sr_json_int64(v, &id);
        if (t->piece[id]) {
            s = sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: id %ld is given to \"%s\" and \"%s\"",
                          path, (long)id, t->piece[id], v->key);
            break;
        }
        size_t klen = strlen(v->key);
        char *bytes = malloc(klen + 1);
        if (!bytes) {
            s = nomem();
            break;
        }
        long bl = unmap_bytes(v->key, klen, bytes);
        s = bl >= 0 ? set_piece(t, (int32_t)id, bytes, (size_t)bl) : set_piece(t, (int32_t)id, v->key, klen);
        free(bytes);
        if (s == SR_OK && strcmp(v->key, "<|endoftext|>") == 0) {
            t->eot = (int)id;
            s = add_special(t, (int32_t)id);
        }
    }
    for (int i = 0; extra && i < extra->n && s == SR_OK; i++) {
        const sr_json *a = &extra->items[i];
        const char *content = sr_json_string(sr_json_get(a, "content"));
        if (!sr_json_int64(sr_json_get(a, "id"), &id) || id < 0 || id >= MAX_TOKENS || !content ||
            !*content) {
            s = sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: added token %d has no id or content",
                          path, i);
            break;
        }
        s = set_piece(t, (int32_t)id, content, strlen(content));
        if (s == SR_OK) s = add_special(t, (int32_t)id);
        if (s == SR_OK && (strcmp(content, "<|endoftext|>") == 0 || strcmp(content, "<|end_of_text|>") == 0))
            t->eot = (int)id;
    }
    if (s != SR_OK) {
        sr_tok_free(t);
        return s;
    }
    *out = t;
    return SR_OK;
}

/* One merge "a b" (the n-th, 1-based, from `where`) into the merge table. */
static sr_status add_merge(sr_tokenizer *t, const piece_map *pm, const char *a, size_t al,
                           const char *b, size_t bl, int rank, const char *where)
{
    char buf[512];
    if (al + bl > sizeof buf)
        return sr_seterr(SR_ERR_FORMAT, "%s, merge %d: a token of %zu bytes is too long", where,
                         rank + 1, al + bl);
    long ab = unmap_bytes(a, al, buf), bb = ab < 0 ? -1 : unmap_bytes(b, bl, buf + ab);
    int32_t ia = ab < 0 ? -1 : pm_find(t, pm, buf, (size_t)ab);
    int32_t ib = bb < 0 ? -1 : pm_find(t, pm, buf + ab, (size_t)bb);
    int32_t ic = ia < 0 || ib < 0 ? -1 : pm_find(t, pm, buf, (size_t)(ab + bb));
    if (ia < 0 || ib < 0 || ic < 0) {
        const char *which = ia < 0 ? "first" : ib < 0 ? "second" : "merged";
        return sr_seterr(SR_ERR_FORMAT, "%s, merge %d (\"%.*s %.*s\"): its %s token is not in the "
                         "vocabulary; are the merges and the vocabulary from the same tokenizer?",
                         where, rank + 1, (int)al, a, (int)bl, b, which);
    }
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    size_t i = sr_mix64(key) & (t->mcap - 1);
    while (t->merges[i].rank >= 0) {
        if (t->merges[i].key == key) return SR_OK; /* a repeated merge keeps its first rank */
        i = (i + 1) & (t->mcap - 1);
    }
    t->merges[i] = (merge_slot){key, rank, ic};
    return SR_OK;
}

/* Byte ids, the piece map, and the merges (strings "a b" or pairs ["a", "b"]
 * from a JSON array, or the lines of merges.txt). */
static sr_status finish_bpe(sr_tokenizer *t, const sr_json *jmerges, const char *text,
                            size_t text_len, const char *where)
{
    piece_map pm = {NULL, pow2_above((size_t)t->n)};
    pm.slot = malloc(pm.cap * sizeof *pm.slot);
    if (!pm.slot) return nomem();
    for (size_t i = 0; i < pm.cap; i++) pm.slot[i] = -1;
    for (int32_t id = 0; id < t->n; id++)
        if (t->piece[id]) pm_add(t, &pm, id);
    sr_status s = SR_OK;
    for (int b = 0; b < 256 && s == SR_OK; b++) {
        char c = (char)b;
        t->byte_id[b] = pm_find(t, &pm, &c, 1);
        if (t->byte_id[b] < 0)
            s = sr_seterr(SR_ERR_FORMAT, "tokenizer %s has no token for the byte 0x%02x; it is not a "
                          "byte-level BPE like GPT-2's", t->path, b);
    }
    size_t count = jmerges ? (size_t)jmerges->n : 0;
    for (size_t i = 0; text && i < text_len; i++) count += text[i] == '\n';
    t->mcap = pow2_above(count + 1);
    t->merges = malloc(t->mcap * sizeof *t->merges);
    if (s == SR_OK && !t->merges) s = nomem();
    for (size_t i = 0; s == SR_OK && i < t->mcap; i++) t->merges[i].rank = -1;
    int rank = 0;
    for (int i = 0; s == SR_OK && jmerges && i < jmerges->n; i++) {
        const sr_json *m = &jmerges->items[i];
        const char *a = m->type == SR_JSON_STRING ? m->str : NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (a && (b = memchr(a, ' ', m->len)) != NULL) {
            al = (size_t)(b - a);
            b++;
            bl = m->len - al - 1;
        } else if (m->type == SR_JSON_ARRAY && m->n == 2 && m->items[0].type == SR_JSON_STRING &&
                   m->items[1].type == SR_JSON_STRING) {
            a = m->items[0].str, al = m->items[0].len, b = m->items[1].str, bl = m->items[1].len;
        } else {
            s = sr_seterr(SR_ERR_FORMAT, "%s, merge %d: not \"a b\" or [\"a\", \"b\"]", where, i + 1);
            break;
        }
        s = add_merge(t, &pm, a, al, b, bl, rank++, where);
    }
    for (size_t pos = 0, line = 1; s == SR_OK && text && pos < text_len; line++) {
        const char *l = text + pos, *nl = memchr(l, '\n', text_len - pos);
        size_t n = nl ? (size_t)(nl - l) : text_len - pos;
        pos += n + 1;
        if (n && l[n - 1] == '\r') n--;
        if (n == 0 || (line == 1 && n >= 8 && memcmp(l, "#version", 8) == 0)) continue;
        const char *sp = memchr(l, ' ', n);
        if (!sp || sp == l || sp == l + n - 1 || memchr(sp + 1, ' ', (size_t)(l + n - sp - 1))) {
            s = sr_seterr(SR_ERR_FORMAT, "%s:%zu: \"%.*s\" is not a merge \"a b\"", where, line,
                          (int)(n > 60 ? 60 : n), l);
            break;
        }
        s = add_merge(t, &pm, l, (size_t)(sp - l), sp + 1, (size_t)(l + n - sp - 1), rank++, where);
    }
    if (s == SR_OK && t->ignore_merges) { /* kept for encoding: whole words */
        t->word_slot = pm.slot, t->word_cap = pm.cap;
        pm.slot = NULL;
    }
    free(pm.slot);
    if (s == SR_OK) t->can_encode = 1;
    return s;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* vocab.json (or encoder.json) and the merges file beside it. */
static sr_status load_vocab_merges(const char *vpath, const char *mpath, sr_tokenizer **out)
{
    sr_json *v;
    SR_CHECK(sr_json_parse_file(vpath, &v));
    sr_tokenizer *t = NULL;
    sr_status s = vocab_table(vpath, "vocab.json + merges.txt", v, NULL, &t);
    sr_json_free(v);
    char *text = NULL;
    size_t len = 0;
    if (s == SR_OK) s = read_file(mpath, &text, &len);
    if (s == SR_OK) s = finish_bpe(t, NULL, text, len, mpath);
    if (s == SR_OK && !(t->merges_path = strdup(mpath))) s = nomem();
    free(text);
    if (s != SR_OK) {
        sr_tok_free(t);
        return s;
    }
    *out = t;
    return SR_OK;
}

/* Llama 3's and Qwen2's pre-tokenizer patterns (a Split before a ByteLevel
 * without its own regex), and the digits per number each allows */
static const struct {
    const char *pattern;
    int digits;
} split_patterns[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 1},
};

/* pre_tokenizer: GPT-2's ByteLevel (its own regex), or a Sequence of a Split
 * by Llama 3's or Qwen2's pattern and a ByteLevel without regex. Sets
 * t->digits and *byte_level (the ByteLevel part); a message on anything else. */
static sr_status pre_tokenizer(const char *path, const sr_json *pre, int *digits, const sr_json **byte_level)
{
    const char *ptype = sr_json_string(sr_json_get(pre, "type"));
    *digits = 0;
    *byte_level = pre;
    if (ptype && strcmp(ptype, "ByteLevel") == 0) {
        const sr_json *use_regex = sr_json_get(pre, "use_regex");
        if (use_regex && use_regex->type == SR_JSON_BOOL && !use_regex->boolean)
            return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: a ByteLevel pre-tokenizer with use_regex "
                             "false and no Split before it; not supported", path);
        return SR_OK;
    }
    const sr_json *seq = sr_json_get(pre, "pretokenizers");
    if (ptype && strcmp(ptype, "Sequence") == 0 && seq && seq->type == SR_JSON_ARRAY && seq->n == 2) {
        const sr_json *split = &seq->items[0], *bl = &seq->items[1];
        const char *re = sr_json_string(sr_json_get(sr_json_get(split, "pattern"), "Regex"));
        const char *behavior = sr_json_string(sr_json_get(split, "behavior"));
        const sr_json *invert = sr_json_get(split, "invert"), *use_regex = sr_json_get(bl, "use_regex");
        const char *st = sr_json_string(sr_json_get(split, "type")), *bt = sr_json_string(sr_json_get(bl, "type"));
        if (st && strcmp(st, "Split") == 0 && bt && strcmp(bt, "ByteLevel") == 0 && re && behavior &&
            strcmp(behavior, "Isolated") == 0 && !(invert && invert->type == SR_JSON_BOOL && invert->boolean) &&
            use_regex && use_regex->type == SR_JSON_BOOL && !use_regex->boolean) {
            for (size_t i = 0; i < sizeof split_patterns / sizeof split_patterns[0]; i++)
                if (strcmp(re, split_patterns[i].pattern) == 0) {
                    *digits = split_patterns[i].digits;
                    *byte_level = bl;
                    return SR_OK;
                }
            return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: pre-tokenizer pattern %.200s; only GPT-2's, "
                             "Llama 3's and Qwen2's patterns are supported", path, re);
        }
    }
    return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: pre-tokenizer %s; only byte-level BPEs split as GPT-2, "
                     "Llama 3 or Qwen2 split text are supported", path, ptype ? ptype : "missing");
}

static sr_status load_tokenizer_json(const char *path, const sr_json *root, sr_tokenizer **out)
{
    const sr_json *model = sr_json_get(root, "model"), *pre = sr_json_get(root, "pre_tokenizer");
    const sr_json *norm = sr_json_get(root, "normalizer"), *bl;
    const char *mtype = sr_json_string(sr_json_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0)
        return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: model type %s; only byte-level BPEs (GPT-2, "
                         "Llama 3, Qwen2) are supported", path, mtype ? mtype : "missing");
    int digits;
    SR_CHECK(pre_tokenizer(path, pre, &digits, &bl));
    if (norm && norm->type != SR_JSON_NULL)
        return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: a normalizer (%s) is not supported; only "
                         "byte-level BPEs without one (GPT-2, Llama 3, Qwen2) are", path,
                         sr_json_string(sr_json_get(norm, "type")) ? sr_json_string(sr_json_get(norm, "type")) : "?");
    const sr_json *ignore = sr_json_get(model, "ignore_merges");
    const sr_json *jm = sr_json_get(model, "merges");
    if (!jm || jm->type != SR_JSON_ARRAY)
        return sr_seterr(SR_ERR_FORMAT, "tokenizer file %s: model.merges is not an array", path);
    const sr_json *added = sr_json_get(root, "added_tokens");
    sr_tokenizer *t;
    SR_CHECK(vocab_table(path, "tokenizer.json", sr_json_get(model, "vocab"),
                         added && added->type == SR_JSON_ARRAY ? added : NULL, &t));
    const sr_json *aps = sr_json_get(bl, "add_prefix_space");
    t->prefix_space = aps && aps->type == SR_JSON_BOOL && aps->boolean;
    t->digits = digits;
    t->ignore_merges = ignore && ignore->type == SR_JSON_BOOL && ignore->boolean;
    sr_status s = finish_bpe(t, jm, NULL, 0, path);
    if (s != SR_OK) {
        sr_tok_free(t);
        return s;
    }
    *out = t;
    return SR_OK;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* llm.c's gpt2_tokenizer.bin: 256 int32 header words (magic 20240328,
 * version 1 or 2, vocab size, v2: the <|endoftext|> id), then each token as
 * one length byte and its bytes. */
static sr_status load_llmc(const char *path, sr_tokenizer **out)
{
    char *d;
    size_t len;
    SR_CHECK(read_file(path, &d, &len));
    const unsigned char *u = (const unsigned char *)d;
    sr_status s = SR_OK;
    uint32_t version = len >= 1024 ? rd32(u + 4) : 0, n = len >= 1024 ? rd32(u + 8) : 0;
    if (len < 1024 || rd32(u) != LLMC_TOK_MAGIC || (version != 1 && version != 2) || n == 0 ||
        n >= MAX_TOKENS)
        s = sr_seterr(SR_ERR_FORMAT, "tokenizer file %s is not llm.c's gpt2_tokenizer.bin (magic %d, "
                      "version 1 or 2)", path, LLMC_TOK_MAGIC);
    sr_tokenizer *t = NULL;
    if (s == SR_OK) s = new_tok(path, "llm.c gpt2_tokenizer.bin", (int)n, &t);
    size_t pos = 1024;
    for (uint32_t i = 0; s == SR_OK && i < n; i++) {
        size_t l = pos < len ? u[pos] : 0;
        if (pos >= len || l == 0 || pos + 1 + l > len)
            s = sr_seterr(SR_ERR_FORMAT, "tokenizer file %s is truncated at token %u of %u", path, i, n);
        else
            s = set_piece(t, (int32_t)i, d + pos + 1, l);
        pos += 1 + l;
    }
    if (s == SR_OK) t->eot = version == 2 ? (int)rd32(u + 12) : (n > 50256 ? 50256 : -1);
    if (s == SR_OK && t->eot >= (int)n) t->eot = -1;
    free(d);
    if (s != SR_OK) {
        sr_tok_free(t);
        return s;
    }
    *out = t;
    return SR_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* dir/name into buf (NULL if it does not fit). */
static const char *join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap ? buf : NULL;
}

/* The directory of a file path, into buf. */
static void dir_of(char *buf, size_t cap, const char *path)
{
    snprintf(buf, cap, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash)
        snprintf(buf, cap, ".");
    else if (slash == buf)
        buf[1] = 0;
    else
        *slash = 0;
}

static sr_status load_file(const char *path, sr_tokenizer **out)
{
    char dir[4096], other[4200];
    if (ends_with(path, ".bin")) return load_llmc(path, out);
    sr_json *j;
    SR_CHECK(sr_json_parse_file(path, &j));
    sr_status s;
    const sr_json *model = sr_json_get(j, "model"); /* vocab.json may have a token "model" */
    if (model && model->type == SR_JSON_OBJECT) {
        s = load_tokenizer_json(path, j, out);
    } else {
        dir_of(dir, sizeof dir, path);
        const char *mname = ends_with(path, "encoder.json") ? "vocab.bpe" : "merges.txt";
        const char *m = join(other, sizeof other, dir, mname);
        if (!m || !is_file(m))
            s = sr_seterr(SR_ERR_IO, "tokenizer vocabulary %s needs its merges: no %s beside it",
                          path, mname);
        else
            s = load_vocab_merges(path, m, out);
    }
    sr_json_free(j);
    return s;
}

/* The tokenizer file of a directory, in the order sr_tok_load looks. */
static const char *dir_file(char *buf, size_t cap, const char *dir)
{
    static const char *const names[][2] = {{"tokenizer.json", NULL},
                                           {"vocab.json", "merges.txt"},
                                           {"encoder.json", "vocab.bpe"},
                                           {"gpt2_tokenizer.bin", NULL}};
    char other[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *f = join(buf, cap, dir, names[i][0]);
        if (!f || !is_file(f)) continue;
        if (names[i][1] && !(join(other, sizeof other, dir, names[i][1]) && is_file(other))) continue;
        return f;
    }
    return NULL;
}

const char *sr_tok_find(const char *path, char *buf, size_t cap)
{
    char dir[4096];
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    if (S_ISDIR(st.st_mode))
        snprintf(dir, sizeof dir, "%s", path);
    else
        dir_of(dir, sizeof dir, path);
    return dir_file(buf, cap, dir);
}

sr_status sr_tok_load(const char *path, sr_tokenizer **out)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return sr_seterr(SR_ERR_IO, "cannot open tokenizer %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return load_file(path, out);
    char f[4200];
    if (!dir_file(f, sizeof f, path))
        return sr_seterr(SR_ERR_IO, "directory %s has no tokenizer: expected tokenizer.json, "
                         "vocab.json + merges.txt, encoder.json + vocab.bpe or llm.c's "
                         "gpt2_tokenizer.bin", path);
    return load_file(f, out);
}

/* ---- queries -------------------------------------------------------------------- */

int sr_tok_size(const sr_tokenizer *t) { return t->n; }
int sr_tok_eot(const sr_tokenizer *t) { return t->eot; }
int sr_tok_can_encode(const sr_tokenizer *t) { return t->can_encode; }
const char *sr_tok_kind(const sr_tokenizer *t) { return t->kind; }
const char *sr_tok_path(const sr_tokenizer *t) { return t->path; }
int sr_tok_files(const sr_tokenizer *t, const char *src[2], const char *name[2])
{
    src[0] = t->path, src[1] = t->merges_path;
    name[0] = t->merges_path ? "vocab.json" : t->can_encode ? "tokenizer.json" : "gpt2_tokenizer.bin";
    name[1] = t->merges_path ? "merges.txt" : NULL;
    return t->merges_path ? 2 : 1;
}

const char *sr_tok_piece(const sr_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n || !t->piece[id]) {
        *len = 0;
        return "";
    }
    *len = t->plen[id];
    return t->piece[id];
}

/* ---- encoding ---------------------------------------------------------------------- */

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 1024;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return 0;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 1;
}

typedef struct cand {
    int32_t rank, pos, left, right;
} cand;

/* a before b: lower rank, then leftmost */
static int cand_less(const cand *a, const cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* scratch for one word: ids and links of its parts, the candidate heap */
typedef struct scratch {
    int32_t *id, *prev, *next;
    cand *heap;
    size_t cap;
} scratch;

static int scratch_fit(scratch *w, size_t n)
{
    if (n <= w->cap) return 1;
    size_t cap = n < 64 ? 64 : 2 * n;
    int32_t *a = realloc(w->id, cap * sizeof *a);
    if (a) w->id = a;
    int32_t *b = realloc(w->prev, cap * sizeof *b);
    if (b) w->prev = b;
    int32_t *c = realloc(w->next, cap * sizeof *c);
    if (c) w->next = c;
    cand *h = realloc(w->heap, 3 * cap * sizeof *h);
    if (h) w->heap = h;
    if (!a || !b || !c || !h) return 0;
    w->cap = cap;
    return 1;
}

static void push_pair(const sr_tokenizer *t, scratch *w, size_t *hn, int32_t i)
{
    int32_t j = w->next[i];
    if (i < 0 || j < 0) return;
    const merge_slot *m = merge_find(t, w->id[i], w->id[j]);
    if (m) heap_push(w->heap, hn, (cand){m->rank, i, w->id[i], w->id[j]});
}

static int bpe_word(const sr_tokenizer *t, const unsigned char *s, size_t n, scratch *w, ivec *out)
{
    if (n == 1) return ivec_push(out, t->byte_id[s[0]]);
    if (t->ignore_merges) {
        piece_map words = {t->word_slot, t->word_cap};
        int32_t id = pm_find(t, &words, (const char *)s, n);
        if (id >= 0) return ivec_push(out, id);
    }
    if (n > INT32_MAX / 4 || !scratch_fit(w, n)) return 0;
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, w, &hn, (int32_t)i);
    while (hn > 0) {
        cand c = heap_pop(w->heap, &hn);
        int32_t i = c.pos, j = w->next[i];
        /* stale: the left part was merged away or changed, or its right one did */
        if (w->id[i] != c.left || j < 0 || w->id[j] != c.right) continue;
        w->id[i] = merge_find(t, c.left, c.right)->id;
        w->id[j] = -1;
        w->next[i] = w->next[j];
        if (w->next[j] >= 0) w->prev[w->next[j]] = i;
        if (w->prev[i] >= 0) push_pair(t, w, &hn, w->prev[i]);
        push_pair(t, w, &hn, i);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (!ivec_push(out, w->id[i])) return 0;
    return 1;
}

/* A part of the text between special tokens: its words, each merged. */
static int encode_part(const sr_tokenizer *t, const unsigned char *s, size_t n, scratch *w, ivec *out)
{
    if (n == 0) return 1;
    unsigned char *tmp = NULL;
    if (t->prefix_space && s[0] != ' ') { /* tokenizer.json's add_prefix_space */
        tmp = malloc(n + 1);
        if (!tmp) return 0;
        tmp[0] = ' ';
        memcpy(tmp + 1, s, n);
        s = tmp;
        n++;
    }
    int ok = 1;
    for (size_t i = 0; i < n && ok;) {
        size_t e = t->digits ? word_end_l3(s, n, i, t->digits) : word_end(s, n, i);
        ok = bpe_word(t, s + i, e - i, w, out);
        i = e;
    }
    free(tmp);
    return ok;
}

/* The leftmost special token at or after s[from], longest on ties: its
 * position and id, or 0. */
static int next_special(const sr_tokenizer *t, const char *s, size_t n, size_t from, size_t *at,
                        int32_t *id)
{
    if (t->n_special == 0) return 0;
    for (size_t i = from; i < n; i++) {
        size_t best = 0;
        for (int k = 0; k < t->n_special; k++) {
            int32_t sid = t->special[k];
            size_t l = t->plen[sid];
            if (l > best && l <= n - i && t->piece[sid][0] == s[i] && memcmp(t->piece[sid], s + i, l) == 0)
                best = l, *id = sid;
        }
        if (best) {
            *at = i;
            return 1;
        }
    }
    return 0;
}

sr_status sr_tok_encode(const sr_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!t->can_encode)
        return sr_seterr(SR_ERR_ARG, "tokenizer %s (%s) can only decode: it has no merges; use "
                         "vocab.json + merges.txt or tokenizer.json to encode text",
                         t->path, t->kind);
    ivec out = {NULL, 0, 0};
    scratch w = {NULL, NULL, NULL, NULL, 0};
    int ok = 1;
    for (size_t pos = 0; pos < len && ok;) {
        size_t at = len;
        int32_t sid = -1;
        int found = next_special(t, text, len, pos, &at, &sid);
        ok = encode_part(t, (const unsigned char *)text + pos, at - pos, &w, &out);
        if (found && ok) ok = ivec_push(&out, sid);
        pos = found ? at + t->plen[sid] : len;
    }
    free(w.id);
    free(w.prev);
    free(w.next);
    free(w.heap);
    if (!ok) {
        free(out.v);
        return sr_seterr(SR_ERR_NOMEM, "out of memory tokenizing %zu bytes of text", len);
    }
    *ids = out.v ? out.v : malloc(sizeof(int32_t)); /* a valid pointer for empty text */
    if (!*ids) return sr_seterr(SR_ERR_NOMEM, "out of memory tokenizing text");
    *n = out.n;
    return SR_OK;
}
