/* test_tokenizer.c: GPT-2's byte-level BPE (runtime/tokenizer.c) against
 * Hugging Face tokenizers; and Llama 3's and Qwen2's splitting (llama3/ and
 * qwen2/, make_fixture_llama3.py).
 *
 * tests/unit/tokenizer/ holds a 1000-token byte-level BPE trained by
 * Hugging Face tokenizers (make_fixture.py), in both of the forms GPT-2 ships
 * in, with the ids that tokenizers (and tiktoken) give for cases.json's texts
 * and for text.txt (text.bin). Usage: test_tokenizer FIXTURE_DIR.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sr_data.h"
#include "sr_json.h"
#include "sr_tokenizer.h"

static const char *fix;
static char tmpdir[256];

static const char *path(const char *dir, const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    int n = snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof buf[k]) {
        fprintf(stderr, "test_tokenizer: path %s/%s too long\n", dir, name);
        exit(2);
    }
    return buf[k];
}

static int copy(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = 0;
    return ok;
}

static int write_text(const char *to, const char *text)
{
    FILE *f = fopen(to, "wb");
    if (!f) return 0;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* the decoded bytes of ids, into a malloc'ed string */
static char *decode(const sr_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
    size_t cap = 16, l = 0;
    char *s = malloc(cap);
    for (size_t i = 0; s && i < n; i++) {
        size_t pl;
        const char *p = sr_tok_piece(t, ids[i], &pl);
        while (s && l + pl + 1 > cap) s = realloc(s, cap *= 2);
        if (s) memcpy(s + l, p, pl), l += pl;
    }
    if (s) s[l] = 0;
    *len = l;
    return s;
}

/* every case of a cases.json (in dir): the reference's ids, and back to the text */
static void cases_in(const sr_tokenizer *t, const char *name, const char *dir)
{
    sr_json *j;
    if (sr_json_parse_file(path(dir, "cases.json"), &j) != SR_OK) {
        check(0, "%s: read cases.json: %s", name, sr_errmsg());
        return;
    }
    int good = 0, round = 0;
    for (int i = 0; i < j->n; i++) {
        const sr_json *c = &j->items[i], *want = sr_json_get(c, "ids");
        const sr_json *text = sr_json_get(c, "text");
        int32_t *ids;
        size_t n;
        if (sr_tok_encode(t, text->str, text->len, &ids, &n) != SR_OK) {
            check(0, "%s: encode case %d: %s", name, i, sr_errmsg());
            continue;
        }
        int same = (int)n == want->n;
        for (size_t k = 0; same && k < n; k++) {
            int64_t w;
            same = sr_json_int64(&want->items[k], &w) && w == ids[k];
        }
        if (!same) {
            printf("  %s case %d (%s): got", name, i, text->str);
            for (size_t k = 0; k < n; k++) printf(" %d", ids[k]);
            printf("; want");
            for (int k = 0; k < want->n; k++) printf(" %s", want->items[k].str);
            printf("\n");
        }
        size_t dl;
        char *back = decode(t, ids, n, &dl);
        round += back && dl == text->len && memcmp(back, text->str, dl) == 0;
        free(back);
        good += same;
        free(ids);
    }
    check(good == j->n, "%s: %d of %d texts encode to Hugging Face tokenizers' ids (contractions, "
          "whitespace runs, digits, Unicode letters and numbers, emoji, special tokens, U+00A0, U+3000, "
          "U+001C)", name, good, j->n);
    check(round == j->n, "%s: %d of %d decode back to their text", name, round, j->n);
    sr_json_free(j);
}

static void cases(const sr_tokenizer *t, const char *name) { cases_in(t, name, fix); }

static sr_tokenizer *load(const char *p, const char *what)
{
    sr_tokenizer *t = NULL;
    sr_status s = sr_tok_load(p, &t);
    check(s == SR_OK, "load %s (%s)%s%s", what, p, s == SR_OK ? "" : ": ", s == SR_OK ? "" : sr_errmsg());
    return s == SR_OK ? t : NULL;
}

static void forms(void)
{
    sr_tokenizer *v = load(path(fix, "vocab.json"), "vocab.json + merges.txt");
    if (v) {
        check(sr_tok_size(v) == 1000 && sr_tok_eot(v) == 0 && sr_tok_can_encode(v) &&
              strcmp(sr_tok_kind(v), "vocab.json + merges.txt") == 0,
              "vocab.json: 1000 tokens, <|endoftext|> is 0, can encode (%d, %d)", sr_tok_size(v),
              sr_tok_eot(v));
        cases(v, "vocab.json + merges.txt");
    }
    sr_tokenizer *j = load(fix, "the directory: tokenizer.json first");
    if (j) {
        check(strcmp(sr_tok_kind(j), "tokenizer.json") == 0 && sr_tok_size(j) == 1000,
              "a directory with both forms is read through tokenizer.json (%s)", sr_tok_kind(j));
        cases(j, "tokenizer.json");
    }
    /* OpenAI's names for the same two files */
    char d[512];
    snprintf(d, sizeof d, "%s", path(tmpdir, "openai"));
    mkdir(d, 0700);
    int ok = copy(path(fix, "vocab.json"), path(d, "encoder.json")) &&
             copy(path(fix, "merges.txt"), path(d, "vocab.bpe"));
    sr_tokenizer *o = ok ? load(d, "encoder.json + vocab.bpe") : NULL;
    if (o) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        const char *s = "OpenAI's names: encoder.json and vocab.bpe, 2019.";
        int same = sr_tok_encode(o, s, strlen(s), &a, &na) == SR_OK &&
                   sr_tok_encode(v, s, strlen(s), &b, &nb) == SR_OK && na == nb &&
                   memcmp(a, b, na * sizeof *a) == 0;
        check(same, "encoder.json + vocab.bpe encode as vocab.json + merges.txt (%zu tokens)", na);
        const char *src[2], *name[2];
        int nf = sr_tok_files(o, src, name);
        check(nf == 2 && strcmp(src[0], path(d, "encoder.json")) == 0 &&
                  strcmp(src[1], path(d, "vocab.bpe")) == 0 && strcmp(name[0], "vocab.json") == 0 &&
                  strcmp(name[1], "merges.txt") == 0,
              "a checkpoint copies encoder.json and vocab.bpe as vocab.json and merges.txt");
        free(a);
        free(b);
    }
    /* llm.c's gpt2_tokenizer.bin, written from the same pieces: decoding only */
    if (v) {
        FILE *f = fopen(path(tmpdir, "gpt2_tokenizer.bin"), "wb");
        int32_t h[256] = {20240328, 2, 1000, 0};
        ok = f && fwrite(h, sizeof h, 1, f) == 1;
        for (int i = 0; ok && i < 1000; i++) {
            size_t l;
            const char *p = sr_tok_piece(v, i, &l);
            unsigned char b = (unsigned char)l;
            ok = fwrite(&b, 1, 1, f) == 1 && fwrite(p, 1, l, f) == l;
        }
        if (f && fclose(f) != 0) ok = 0;
        sr_tokenizer *l = ok ? load(path(tmpdir, "gpt2_tokenizer.bin"), "llm.c gpt2_tokenizer.bin")
                             : NULL;
        if (l) {
            int same = sr_tok_size(l) == 1000 && sr_tok_eot(l) == 0;
            for (int i = 0; same && i < 1000; i++) {
                size_t a, b;
                const char *pa = sr_tok_piece(l, i, &a), *pb = sr_tok_piece(v, i, &b);
                same = a == b && memcmp(pa, pb, a) == 0;
            }
            check(same, "llm.c's file: the same 1000 pieces, <|endoftext|> 0 (its v2 header)");
            const char *src[2], *name[2];
            check(sr_tok_files(l, src, name) == 1 && strcmp(name[0], "gpt2_tokenizer.bin") == 0,
                  "a checkpoint copies llm.c's file as gpt2_tokenizer.bin");
            int32_t *ids;
            size_t n;
            sr_status s = sr_tok_encode(l, "x", 1, &ids, &n);
            check(s == SR_ERR_ARG && strstr(sr_errmsg(), "can only decode"), "llm.c's file cannot encode: %s",
                  sr_errmsg());
            sr_tok_free(l);
        }
    }
    sr_tok_free(v);
    sr_tok_free(j);
    sr_tok_free(o);
}

/* what no reference covers: bytes that are not UTF-8, and one long word */
static void properties(const sr_tokenizer *t)
{
    static const char bad[] = "\xff\xfe ab\xc3 \xe2\x82 caf\xc3\xa9\xed\xa0\x80 \xf4\x90\x80\x80z\xc3";
    int32_t *ids;
    size_t n, dl;
    int ok = sr_tok_encode(t, bad, sizeof bad - 1, &ids, &n) == SR_OK;
    char *back = ok ? decode(t, ids, n, &dl) : NULL;
    check(back && dl == sizeof bad - 1 && memcmp(back, bad, dl) == 0,
          "invalid UTF-8 (stray, truncated, surrogate, above U+10FFFF) encodes and decodes back "
          "byte for byte (%zu tokens)", n);
    free(back);
    if (ok) free(ids);
    /* a 300000-letter word merges through the heap, not pair scans */
    size_t L = 300000;
    char *w = malloc(L + 1);
    for (size_t i = 0; i < L; i++) w[i] = "theandfor"[i % 9];
    w[L] = 0;
    ok = sr_tok_encode(t, w, L, &ids, &n) == SR_OK;
    back = ok ? decode(t, ids, n, &dl) : NULL;
    check(back && dl == L && memcmp(back, w, L) == 0 && n < L / 2,
          "one word of %zu letters: %zu tokens, decodes back", L, n);
    free(back);
    free(w);
    if (ok) free(ids);
    size_t len;
    check(strcmp(sr_tok_piece(t, 1000, &len), "") == 0 && len == 0 &&
          strcmp(sr_tok_piece(t, -1, &len), "") == 0,
          "an id outside the table decodes to nothing");
}

/* text.txt tokenized by the data reader = text.bin, the reference's tokens */
static void data(const sr_tokenizer *t)
{
    sr_data a, b;
    sr_status s = sr_data_open(&a, path(fix, "text.txt"), 1000, t);
    check(s == SR_OK, "data: text.txt opens through the tokenizer%s%s", s ? ": " : "", s ? sr_errmsg() : "");
    if (s != SR_OK) return;
    s = sr_data_open(&b, path(fix, "text.bin"), 1000, t);
    int same = s == SR_OK && a.n_tokens == b.n_tokens && !a.is_bin && b.is_bin;
    for (int64_t i = 0; same && i < a.n_tokens; i++) same = sr_data_token(&a, i) == sr_data_token(&b, i);
    check(same, "data: text.txt gives text.bin's %ld tokens (a .bin is not tokenized again)",
          (long)b.n_tokens);
    sr_data_close(&a);
    if (s == SR_OK) sr_data_close(&b);
    s = sr_data_open(&a, path(fix, "text.txt"), 500, t);
    check(s == SR_ERR_FORMAT && strstr(sr_errmsg(), "outside the model's vocabulary of 500"),
          "data: tokens past a smaller vocabulary are refused: %s", sr_errmsg());
    s = sr_data_open(&a, path(fix, "text.txt"), 256, NULL);
    check(s == SR_OK && a.n_tokens == 5488, "data: without a tokenizer, text is bytes (%ld)",
          (long)a.n_tokens);
    if (s == SR_OK) sr_data_close(&a);
}

/* Llama 3's and Qwen2's tokenizer.json (make_fixture_llama3.py): the Split
 * pattern before a regex-less ByteLevel, ignore_merges, <|end_of_text|> */
static void split_patterns(void)
{
    static const char *names[2] = {"llama3", "qwen2"};
    for (int k = 0; k < 2; k++) {
        const char *dir = path(fix, names[k]);
        char d[1024];
        snprintf(d, sizeof d, "%s", dir);
        sr_tokenizer *t = load(d, names[k]);
        if (!t) continue;
        check(sr_tok_size(t) == 1001 && sr_tok_eot(t) == 1 && sr_tok_can_encode(t),
              "%s: 1001 tokens, <|end_of_text|> (1) ends a document (%d)", names[k], sr_tok_eot(t));
        cases_in(t, names[k], d);
        /* the patterns differ in the digits a number keeps together (3 or 1):
         * "1234567" is encoded as its groups, each on its own */
        static const char *groups[2][8] = {{"123", "456", "7"}, {"1", "2", "3", "4", "5", "6", "7"}};
        int32_t *ids = NULL, *part = NULL;
        size_t n = 0, pn, at = 0;
        int ok = sr_tok_encode(t, "1234567", 7, &ids, &n) == SR_OK;
        for (int g = 0; ok && groups[k][g]; g++) {
            ok = sr_tok_encode(t, groups[k][g], strlen(groups[k][g]), &part, &pn) == SR_OK && at + pn <= n &&
                 memcmp(ids + at, part, pn * sizeof *ids) == 0;
            at += pn;
            free(part);
        }
        check(ok && at == n, "%s: \"1234567\" is split into groups of %d digits", names[k], k == 0 ? 3 : 1);
        free(ids);
        sr_data a, b;
        ok = sr_data_open(&a, path(fix, "text.txt"), 1001, t) == SR_OK;
        int okb = ok && sr_data_open(&b, path(d, "text.bin"), 1001, t) == SR_OK;
        int same = okb && a.n_tokens == b.n_tokens;
        for (int64_t i = 0; same && i < a.n_tokens; i++) same = sr_data_token(&a, i) == sr_data_token(&b, i);
        check(same, "%s: text.txt through the tokenizer gives Hugging Face's %ld tokens of it", names[k],
              okb ? (long)b.n_tokens : -1L);
        if (ok) sr_data_close(&a);
        if (okb) sr_data_close(&b);
        sr_tok_free(t);
    }
}

static void expect_error(const char *p, const char *needle, const char *what)
{
    sr_tokenizer *t = NULL;
    sr_status s = sr_tok_load(p, &t);
    check(s != SR_OK && !t && strstr(sr_errmsg(), needle), "%s: %s", what, s ? sr_errmsg() : "loaded");
    sr_tok_free(t);
}

static void errors(void)
{
    char d[512], e[512];
    snprintf(d, sizeof d, "%s", path(tmpdir, "bad"));
    mkdir(d, 0700);
    expect_error(d, "has no tokenizer: expected tokenizer.json", "an empty directory");
    expect_error(path(d, "nothing.json"), "cannot open", "a missing file");
    copy(path(fix, "vocab.json"), path(d, "vocab.json"));
    expect_error(path(d, "vocab.json"), "no merges.txt beside it", "vocab.json alone");
    write_text(path(d, "merges.txt"), "#version: 0.2\nh e\nhe llo\n");
    expect_error(path(d, "vocab.json"), "merges.txt, merge 2 (\"he llo\"): its second token is not in",
                 "a merge of a token the vocabulary lacks");
    write_text(path(d, "merges.txt"), "#version: 0.2\nh e\nhello\n");
    expect_error(path(d, "vocab.json"), "merges.txt:3: \"hello\" is not a merge", "a merge line without a space");
    write_text(path(d, "t.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
               "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}");
    expect_error(path(d, "t.json"), "pre-tokenizer Metaspace; only byte-level BPEs split as GPT-2, Llama 3 or Qwen2",
                 "a SentencePiece-style tokenizer.json");
    write_text(path(d, "s.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
               "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
               "\"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
               "{\"type\": \"ByteLevel\", \"use_regex\": false}]}}");
    expect_error(path(d, "s.json"), "pre-tokenizer pattern \\w+; only GPT-2's, Llama 3's and Qwen2's",
                 "a Split by another pattern");
    write_text(path(d, "n.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
               "\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    expect_error(path(d, "n.json"), "a normalizer (NFC) is not supported", "a normalizer");
    write_text(path(d, "u.json"), "{\"model\": {\"type\": \"Unigram\"}}");
    expect_error(path(d, "u.json"), "model type Unigram", "a Unigram tokenizer.json");
    write_text(path(d, "v.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
               "\"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    expect_error(path(d, "v.json"), "no token for the byte 0x00", "a vocabulary without the 256 bytes");
    write_text(path(d, "w.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, "
               "\"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    expect_error(path(d, "w.json"), "id 0 is given to", "two tokens with one id");
    write_text(path(d, "x.bin"), "not llm.c");
    expect_error(path(d, "x.bin"), "is not llm.c's gpt2_tokenizer.bin", "a .bin that is not llm.c's");
    snprintf(e, sizeof e, "%s", path(tmpdir, "empty"));
    mkdir(e, 0700);
    char f1[4200], f2[4200], f3[4200];
    const char *a = sr_tok_find(fix, f1, sizeof f1), *b = sr_tok_find(path(fix, "text.txt"), f2, sizeof f2);
    check(a && b && strcmp(a, path(fix, "tokenizer.json")) == 0 && strcmp(a, b) == 0 &&
              !sr_tok_find(e, f3, sizeof f3) && !sr_tok_find(path(e, "none.safetensors"), f3, sizeof f3),
          "sr_tok_find: tokenizer.json of the fixture directory and of a file in it (%s); none in an "
          "empty directory", a ? a : "none");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    fix = argv[1];
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_tokenizer.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    forms();
    split_patterns();
    sr_tokenizer *tok = NULL;
    if (sr_tok_load(path(fix, "vocab.json"), &tok) == SR_OK) {
        properties(tok);
        data(tok);
    }
    sr_tok_free(tok);
    errors();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
