/* records.c: JSON Lines training records, one JSON object a line, read into
 * a token stream with a per-token loss mask.
 *
 *   {"text": "..."}                          loss on every token
 *   {"prompt": "...", "completion": "..."}   loss on the completion only
 *   {"input_ids": [...], "completion_mask": [0, 1, ...]}   already tokenized
 *
 * Text goes through the tokenizer (else its bytes are the tokens) and is
 * followed by the tokenizer's <|endoftext|>, which counts as a completion
 * token: the model learns to stop. Records are packed one after another into
 * the stream, as TRL's packing and Megatron's SFT datasets do; the batches
 * cut it into windows as any other data. A prompt and its completion are
 * tokenized apart, so the mask falls on a token boundary.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_data.h"
#include "sr_json.h"

/* the stream being built: ids and their mask */
typedef struct rec_out {
    int32_t *ids;
    uint8_t *loss;
    size_t n, cap;
} rec_out;

static int grow(rec_out *o, size_t more)
{
    if (o->n + more <= o->cap) return 1;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->n + more) cap *= 2;
    int32_t *ids = realloc(o->ids, cap * sizeof *ids);
    if (ids) o->ids = ids;
    uint8_t *loss = realloc(o->loss, cap);
    if (loss) o->loss = loss;
    if (!ids || !loss) return 0;
    o->cap = cap;
    return 1;
}

static sr_status put(rec_out *o, int32_t id, int loss)
{
    if (!grow(o, 1)) return sr_seterr(SR_ERR_NOMEM, "out of memory reading records");
    o->ids[o->n] = id;
    o->loss[o->n++] = (uint8_t)loss;
    return SR_OK;
}

/* a record's text: its tokens, or its bytes without a tokenizer */
static sr_status put_text(rec_out *o, const char *path, const sr_json *s, const sr_tokenizer *tok, int loss)
{
    if (!tok) {
        if (!grow(o, s->len)) return sr_seterr(SR_ERR_NOMEM, "out of memory reading records");
        for (size_t i = 0; i < s->len; i++) SR_CHECK(put(o, (unsigned char)s->str[i], loss));
        return SR_OK;
    }
    int32_t *ids;
    size_t n;
    sr_status st = sr_tok_encode(tok, s->str, s->len, &ids, &n);
    if (st != SR_OK) return sr_seterr(st, "cannot tokenize %s with %s: %s", path, sr_tok_path(tok), sr_errmsg());
    st = grow(o, n) ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory reading records");
    for (size_t i = 0; i < n && st == SR_OK; i++) st = put(o, ids[i], loss);
    free(ids);
    return st;
}

#define WHY(...) (snprintf(why, WHY_CAP, __VA_ARGS__), SR_OK)
enum { WHY_CAP = 160 };

/* member key of j if it is a string; else NULL, and why says so when it is there */
static const sr_json *text_member(const sr_json *j, const char *key, char *why)
{
    const sr_json *m = sr_json_get(j, key);
    if (m && m->type != SR_JSON_STRING && !*why) snprintf(why, WHY_CAP, "has a \"%s\" that is not a string", key);
    return m && m->type == SR_JSON_STRING ? m : NULL;
}

/* One record into o; why (WHY_CAP bytes) says what is wrong with it, and SR_OK is returned. */
static sr_status put_record(rec_out *o, const char *path, const sr_json *j, const sr_tokenizer *tok, char *why)
{
    *why = 0;
    if (j->type != SR_JSON_OBJECT) return WHY("is not a JSON object");
    const sr_json *ids = sr_json_get(j, "input_ids");
    if (ids) {
        const sr_json *mask = sr_json_get(j, "completion_mask");
        if (ids->type != SR_JSON_ARRAY || (mask && mask->type != SR_JSON_ARRAY))
            return WHY("has an input_ids or completion_mask that is not an array");
        if (mask && mask->n != ids->n)
            return WHY("has %d completion_mask entries for %d input_ids", mask->n, ids->n);
        for (int i = 0; i < ids->n; i++) {
            int64_t id, m = 1;
            if (!sr_json_int64(&ids->items[i], &id) || id < 0 || id > INT32_MAX)
                return WHY("has input_ids[%d] = %s, not a token id (an integer from 0)", i,
                           ids->items[i].str ? ids->items[i].str : sr_json_type_name(ids->items[i].type));
            if (mask && (!sr_json_int64(&mask->items[i], &m) || (m != 0 && m != 1)))
                return WHY("has completion_mask[%d] = %s, not 0 or 1", i,
                           mask->items[i].str ? mask->items[i].str : sr_json_type_name(mask->items[i].type));
            SR_CHECK(put(o, (int32_t)id, (int)m));
        }
        return SR_OK;
    }
    const sr_json *text = text_member(j, "text", why), *prompt = text_member(j, "prompt", why),
                  *completion = text_member(j, "completion", why);
    if (*why) return SR_OK;
    if ((!text && !(prompt && completion)) || (text && (prompt || completion)))
        return WHY("needs \"text\", or \"prompt\" and \"completion\", or \"input_ids\"");
    if (prompt) SR_CHECK(put_text(o, path, prompt, tok, 0));
    SR_CHECK(put_text(o, path, text ? text : completion, tok, 1));
    if (tok && sr_tok_eot(tok) >= 0) SR_CHECK(put(o, sr_tok_eot(tok), 1));
    return SR_OK;
}

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* past a UTF-8 byte order mark */
static size_t after_bom(const char *b, size_t n)
{
    return n >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
}

/* the first line, when it is an object with a record's member */
int sr_data_is_records(const char *b, size_t n)
{
    size_t i = after_bom(b, n);
    while (i < n && blank(b[i])) i++;
    if (i >= n || b[i] != '{') return 0;
    const char *nl = memchr(b + i, '\n', n - i);
    size_t len = nl ? (size_t)(nl - (b + i)) : n - i;
    sr_json *j;
    if (sr_json_parse(b + i, len, "", &j) != SR_OK) return 0;
    static const char *const keys[] = {"text", "prompt", "completion", "input_ids"};
    int is = 0;
    for (int k = 0; k < 4; k++) is |= sr_json_get(j, keys[k]) != NULL;
    sr_json_free(j);
    return is;
}

sr_status sr_data_read_records(const char *path, const char *b, size_t n, const sr_tokenizer *tok,
                               sr_records *out)
{
    memset(out, 0, sizeof *out);
    rec_out o = {0};
    sr_status s = SR_OK;
    long line = 0;
    size_t i = after_bom(b, n);
    while (i < n && s == SR_OK) {
        line++;
        const char *nl = memchr(b + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (b + i)) : n - i, next = i + len + 1;
        size_t k = 0;
        while (k < len && blank(b[i + k])) k++;
        if (k == len) { /* a blank line */
            i = next;
            continue;
        }
        sr_json *j;
        s = sr_json_parse(b + i, len, "", &j);
        if (s == SR_ERR_FORMAT) {
            s = sr_seterr(SR_ERR_FORMAT, "file %s line %ld: not a JSON object (%s); JSON Lines "
                          "records are one object a line", path, line, sr_errmsg() + 2);
            break;
        }
        if (s != SR_OK) break;
        char why[WHY_CAP];
        s = put_record(&o, path, j, tok, why);
        sr_json_free(j);
        if (s == SR_OK && *why)
            s = sr_seterr(SR_ERR_FORMAT, "file %s line %ld: the record %s", path, line, why);
        out->records++;
        i = next;
    }
    if (s != SR_OK) {
        free(o.ids);
        free(o.loss);
        return s;
    }
    out->ids = o.ids;
    out->loss = o.loss;
    out->n = (int64_t)o.n;
    for (size_t t = 0; t < o.n; t++) out->n_loss += o.loss[t];
    return SR_OK;
}
