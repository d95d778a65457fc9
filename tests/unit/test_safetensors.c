/* test_safetensors.c: safetensors reading/writing (runtime/safetensors.c) and
 * the JSON reader/writers it relies on (runtime/json.c).
 *
 * Prints one line per check and ends with "N passed, M failed"; exits
 * non-zero when a check fails.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sr_ckpt.h"
#include "sr_json.h"

static void test_checksum(const char *path);

static int n_pass, n_fail;
static char dir[256];

static void check_(int ok, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok) printf("  (test_safetensors.c:%d; last error: %s)", line, sr_errmsg());
    printf("\n");
    if (ok) n_pass++;
    else n_fail++;
}
#define CHECK(cond, ...) check_((cond) != 0, __LINE__, __VA_ARGS__)

static const char *tmp(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int contains(const char *s, const char *sub)
{
    return strstr(s, sub) != NULL;
}

/* A file with a hand-written header (length field computed) and data bytes. */
static void write_raw(const char *path, const char *header, const void *data, size_t n)
{
    size_t hl = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    FILE *f = fopen(path, "wb");
    fwrite(len, 1, 8, f);
    fwrite(header, 1, hl, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static sr_status open_raw(const char *name, const char *header, const void *data, size_t n)
{
    write_raw(tmp(name), header, data, n);
    sr_st_file f;
    sr_status s = sr_st_open(&f, tmp(name));
    if (s == SR_OK) sr_st_close(&f);
    return s;
}

static void test_round_trip(void)
{
    float a[6] = {1.5f, -2.25f, 3.0e-38f, 1e30f, -0.0f, 7.0f};
    float b[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    float c[1] = {42.0f};
    int64_t da[2] = {2, 3}, db[1] = {4}, dz[2] = {0, 5};
    const char *weird = "we\"ird\\name\n\xc3\xa9";
    sr_st_entry e[] = {
        {"h.0.attn.c_attn.weight", 2, da, a},
        {weird, 1, db, b},
        {"scalar", 0, NULL, c},
        {"empty", 2, dz, NULL},
    };
    const char *meta[] = {"model", "Bigram", "note", "quote\" and \\ backslash"};
    sr_status s = sr_st_write(tmp("rt.safetensors"), e, 4, meta, 2);
    CHECK(s == SR_OK, "write 4 tensors (2-D, 1-D, scalar, empty) with metadata");

    /* layout on disk: header length multiple of 8, starts with '{', space padded */
    FILE *fp = fopen(tmp("rt.safetensors"), "rb");
    unsigned char len8[8];
    size_t got = fp ? fread(len8, 1, 8, fp) : 0;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    char *hdr = malloc(hl + 1);
    got += fp ? fread(hdr, 1, hl, fp) : 0;
    hdr[got >= 8 ? got - 8 : 0] = '\0';
    if (fp) fclose(fp);
    CHECK(got == 8 + hl && hl % 8 == 0 && hdr[0] == '{' && (hl == 0 || strchr("} ", hdr[hl - 1])),
          "header: length %llu is a multiple of 8, JSON object padded with spaces", (unsigned long long)hl);
    CHECK(contains(hdr, "\"__metadata__\":{\"format\":\"pt\""), "header: __metadata__ has format pt");
    free(hdr);

    sr_st_file f;
    s = sr_st_open(&f, tmp("rt.safetensors"));
    CHECK(s == SR_OK, "reopen the written file");
    if (s != SR_OK) return;
    CHECK(f.n == 4, "4 tensors read back (got %d)", f.n);
    const sr_st_tensor *t = sr_st_find(&f, "h.0.attn.c_attn.weight");
    float out[6];
    CHECK(t && strcmp(t->dtype, "F32") == 0 && t->ndim == 2 && t->dims[0] == 2 && t->dims[1] == 3 &&
              t->numel == 6,
          "shape and dtype preserved");
    CHECK(t && sr_st_read_f32(&f, t, out) == SR_OK && memcmp(out, a, sizeof a) == 0,
          "F32 values bit-exact (including -0.0 and a denormal-adjacent value)");
    t = sr_st_find(&f, weird);
    CHECK(t && sr_st_read_f32(&f, t, out) == SR_OK && memcmp(out, b, sizeof b) == 0,
          "a name with quote, backslash, newline and UTF-8 survives");
    t = sr_st_find(&f, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && sr_st_read_f32(&f, t, out) == SR_OK && out[0] == 42.0f,
          "0-d tensor: 1 element");
    t = sr_st_find(&f, "empty");
    CHECK(t && t->numel == 0 && t->begin == t->end, "zero-size tensor");
    CHECK(sr_st_find(&f, "missing") == NULL, "find of a missing name is NULL");
    const char *m = sr_st_meta(&f, "format"), *m2 = sr_st_meta(&f, "note");
    CHECK(m && strcmp(m, "pt") == 0 && m2 && strcmp(m2, "quote\" and \\ backslash") == 0 &&
              sr_st_meta(&f, "model") && f.n_meta == 4,
          "metadata read back, escapes decoded");
    const char *sum = sr_st_meta(&f, "data_checksum");
    CHECK(sum && strncmp(sum, "sr64:", 5) == 0 && strlen(sum) == 21,
          "the writer adds the data's checksum to the metadata (%s)", sum ? sum : "none");

    int64_t good[2] = {2, 3}, bad[2] = {3, 2};
    s = sr_st_load(&f, "h.0.attn.c_attn.weight", NULL, 2, good, out);
    CHECK(s == SR_OK && out[1] == -2.25f, "sr_st_load with the right shape");
    s = sr_st_load(&f, "h.0.attn.c_attn.weight", NULL, 2, bad, out);
    CHECK(s == SR_ERR_STATE && contains(sr_errmsg(), "h.0.attn.c_attn.weight") && contains(sr_errmsg(), "[2, 3]") &&
              contains(sr_errmsg(), "[3, 2]"),
          "shape mismatch names the tensor and both shapes: %s", sr_errmsg());
    /* a padded vocabulary: the file's 2 rows of 3 into 4 rows, the last two zero */
    int64_t padded4[2] = {4, 3}, padded5[2] = {5, 3};
    float big[12];
    for (int i = 0; i < 12; i++) big[i] = 7.0f;
    int pad = 0;
    s = sr_st_load_rows(&f, "h.0.attn.c_attn.weight", NULL, 2, padded4, 2, big, &pad);
    int zeros = 1;
    for (int i = 6; i < 12; i++) zeros &= big[i] == 0.0f;
    CHECK(s == SR_OK && pad == 1 && memcmp(big, a, sizeof a) == 0 && zeros,
          "sr_st_load_rows: 2 rows of [2, 3] into [4, 3], the padding rows zero");
    s = sr_st_load_rows(&f, "h.0.attn.c_attn.weight", NULL, 2, good, 2, out, &pad);
    CHECK(s == SR_OK && pad == 0 && out[1] == -2.25f, "sr_st_load_rows: the exact shape is no padding");
    s = sr_st_load_rows(&f, "h.0.attn.c_attn.weight", NULL, 2, padded5, 3, big, &pad);
    CHECK(s == SR_ERR_STATE && contains(sr_errmsg(), "[2, 3]") && contains(sr_errmsg(), "[5, 3]"),
          "sr_st_load_rows: rows other than the classes are still a shape mismatch: %s", sr_errmsg());
    s = sr_st_load(&f, "nope", NULL, 1, db, out);
    CHECK(s == SR_ERR_STATE && contains(sr_errmsg(), "'nope'") && contains(sr_errmsg(), "rt.safetensors"),
          "missing tensor names it and the file: %s", sr_errmsg());
    sr_st_close(&f);

    test_checksum(tmp("rt.safetensors"));

    sr_st_entry dup[] = {{"x", 1, db, b}, {"x", 1, db, b}};
    CHECK(sr_st_write(tmp("dup.safetensors"), dup, 2, NULL, 0) == SR_ERR_ARG, "writing a duplicate name fails");
    CHECK(sr_st_write(tmp("no/such/dir/x.safetensors"), e, 1, NULL, 0) == SR_ERR_IO &&
              contains(sr_errmsg(), "no/such/dir"),
          "writing into a missing directory is an i/o error naming it");
}

/* a copy of path with byte at (from the end when < 0) xor'ed with x, and "sr64:" renamed to tag */
static const char *altered(const char *path, long at, unsigned char x, const char *tag)
{
    FILE *fp = fopen(path, "rb");
    static unsigned char buf[1 << 16];
    size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
    if (fp) fclose(fp);
    size_t i = at < 0 ? n - (size_t)(-at) : (size_t)at;
    if (i < n) buf[i] ^= x;
    for (size_t k = 0; tag && k + 5 <= n; k++)
        if (memcmp(buf + k, "sr64:", 5) == 0) {
            memcpy(buf + k, tag, 5);
            break;
        }
    const char *out = tmp("altered.safetensors");
    fp = fopen(out, "wb");
    if (fp) {
        fwrite(buf, 1, n, fp);
        fclose(fp);
    }
    return out;
}

/* the data section's checksum: a change anywhere in the data is an error naming the file and both
 * sums; a file without our tag (Hugging Face's, another version's) opens unchecked */
static void test_checksum(const char *path)
{
    sr_st_file f;
    long data_at = 0;
    if (sr_st_open(&f, path) == SR_OK) {
        data_at = (long)(f.data - (const unsigned char *)f.map);
        sr_st_close(&f);
    }
    CHECK(data_at > 8, "the written file opens with its checksum checked");
    sr_status s = sr_st_open(&f, altered(path, data_at, 0x01, NULL));
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "altered.safetensors") &&
              contains(sr_errmsg(), "do not match the checksum") && contains(sr_errmsg(), "sr64:"),
          "one bit flipped in the first data byte: %s", s == SR_OK ? "opened" : sr_errmsg());
    if (s == SR_OK) sr_st_close(&f);
    s = sr_st_open(&f, altered(path, -1, 0x80, NULL));
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "do not match the checksum"),
          "one bit flipped in the last data byte: %s", s == SR_OK ? "opened" : sr_errmsg());
    if (s == SR_OK) sr_st_close(&f);
    s = sr_st_open(&f, altered(path, data_at + 5, 0x10, "zz64:"));
    CHECK(s == SR_OK, "a checksum of another kind is left alone: %s", s == SR_OK ? "opened" : sr_errmsg());
    if (s == SR_OK) sr_st_close(&f);
    s = sr_st_open(&f, altered(path, 1L << 20, 0, NULL));
    CHECK(s == SR_OK, "the unaltered copy opens: %s", s == SR_OK ? "opened" : sr_errmsg());
    if (s == SR_OK) sr_st_close(&f);
}

static void test_prefix(void)
{
    float v[2] = {1, 2};
    int64_t d[1] = {2};
    sr_st_entry e[] = {{"h.0.ln_1.weight", 1, d, v}, {"transformer.wte.weight", 1, d, v}, {"lm_head.weight", 1, d, v}};
    sr_st_write(tmp("hf.safetensors"), e, 3, NULL, 0);
    sr_st_file f;
    if (sr_st_open(&f, tmp("hf.safetensors")) != SR_OK) {
        CHECK(0, "open hf.safetensors");
        return;
    }
    CHECK(sr_st_find_alias(&f, "transformer.h.0.ln_1.weight", "transformer.") != NULL,
          "prefix-less file name found for a 'transformer.' program name");
    CHECK(sr_st_find_alias(&f, "wte.weight", "transformer.") != NULL,
          "prefixed file name found for a prefix-less program name");
    CHECK(sr_st_find_alias(&f, "transformer.wte.weight", "transformer.") != NULL, "exact name still found");
    CHECK(sr_st_find_alias(&f, "h.1.ln_1.weight", "transformer.") == NULL, "absent name: NULL");
    CHECK(sr_st_find_alias(&f, "wte.weight", "model.,transformer.") != NULL &&
              sr_st_find_alias(&f, "transformer.h.0.ln_1.weight", "model.,transformer.") != NULL,
          "a list of prefixes: each is tried, in order");
    CHECK(sr_st_find_alias(&f, "lm_head.weight", "model.") != NULL &&
              sr_st_find_alias(&f, "model.lm_head.weight", "transformer.,model.") != NULL &&
              sr_st_find_alias(&f, "ln_1.weight", "transformer.,model.,h.0.") != NULL,
          "a list of prefixes: the exact name first, then removed or added (the last one too)");
    CHECK(sr_st_find_alias(&f, "h.0.ln_1.weight", ",,") != NULL && sr_st_find_alias(&f, "x", ",model.,") == NULL,
          "empty entries of the list are skipped");
    float out[2];
    sr_status s = sr_st_load(&f, "transformer.h.0.ln_1.weight", "transformer.", 1, d, out);
    CHECK(s == SR_OK && out[1] == 2.0f, "sr_st_load through the alias");
    s = sr_st_load(&f, "transformer.h.9.ln_1.weight", "transformer.", 1, d, out);
    CHECK(s == SR_ERR_STATE && contains(sr_errmsg(), "transformer.h.9.ln_1.weight"),
          "alias miss names the tensor: %s", sr_errmsg());
    sr_st_close(&f);
}

static void test_conversions(void)
{
    /* F16: 1, -2, 0.5, 65504 (max), 2^-24 (smallest subnormal), +inf */
    const unsigned char f16[] = {0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38, 0xFF, 0x7B, 0x01, 0x00, 0x00, 0x7C};
    /* BF16: 1, -3, 3.140625 */
    const unsigned char bf16[] = {0x80, 0x3F, 0x40, 0xC0, 0x49, 0x40};
    /* F64: 0.1 */
    double d01 = 0.1;
    unsigned char f64[8];
    memcpy(f64, &d01, 8); /* the test host is little-endian */
    unsigned char data[12 + 6 + 8 + 8];
    memcpy(data, f16, 12);
    memcpy(data + 12, bf16, 6);
    memcpy(data + 18, f64, 8);
    memset(data + 26, 0, 8);
    const char *hdr = "{\"a\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]},"
                      "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[18,26]},"
                      "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[26,34]}}";
    write_raw(tmp("conv.safetensors"), hdr, data, sizeof data);
    sr_st_file f;
    sr_status s = sr_st_open(&f, tmp("conv.safetensors"));
    CHECK(s == SR_OK, "F16/BF16/F64/I64 file opens (no __metadata__, unpadded header)");
    if (s != SR_OK) return;
    float out[6];
    s = sr_st_read_f32(&f, sr_st_find(&f, "a"), out);
    CHECK(s == SR_OK && out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f && out[3] == 65504.0f &&
              out[4] == ldexpf(1.0f, -24) && isinf(out[5]) && out[5] > 0,
          "F16 -> float: normal, max, subnormal, inf");
    s = sr_st_read_f32(&f, sr_st_find(&f, "b"), out);
    CHECK(s == SR_OK && out[0] == 1.0f && out[1] == -3.0f && out[2] == 3.140625f, "BF16 -> float");
    s = sr_st_read_f32(&f, sr_st_find(&f, "c"), out);
    CHECK(s == SR_OK && out[0] == 0.1f, "F64 -> float");
    s = sr_st_read_f32(&f, sr_st_find(&f, "i"), out);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "I64") && contains(sr_errmsg(), "'i'"),
          "I64 cannot be loaded as float: %s", sr_errmsg());
    int64_t d6[1] = {6};
    s = sr_st_load(&f, "a", NULL, 1, d6, out);
    CHECK(s == SR_OK && out[2] == 0.5f, "sr_st_load converts F16");
    sr_st_close(&f);
}

static void test_corrupt(void)
{
    unsigned char z[64] = {0};
    sr_status s;
    const char *ok_hdr = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    CHECK(open_raw("fine.safetensors", ok_hdr, z, 8) == SR_OK, "a valid hand-written file opens");

    s = open_raw("trunc.safetensors", ok_hdr, z, 4);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "trunc.safetensors"),
          "truncated data: format error naming the file: %s", sr_errmsg());
    s = open_raw("extra.safetensors", ok_hdr, z, 12);
    CHECK(s == SR_ERR_FORMAT, "data beyond the last tensor: format error: %s", sr_errmsg());

    /* header length larger than the file */
    FILE *fp = fopen(tmp("hlen.safetensors"), "wb");
    unsigned char len[8] = {0xFF, 0xFF, 0, 0, 0, 0, 0, 0};
    fwrite(len, 1, 8, fp);
    fputs("{}", fp);
    fclose(fp);
    sr_st_file f;
    s = sr_st_open(&f, tmp("hlen.safetensors"));
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "hlen.safetensors") && contains(sr_errmsg(), "65535"),
          "header length beyond the file: %s", sr_errmsg());
    fp = fopen(tmp("huge.safetensors"), "wb");
    unsigned char len2[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    fwrite(len2, 1, 8, fp);
    fclose(fp);
    s = sr_st_open(&f, tmp("huge.safetensors"));
    CHECK(s == SR_ERR_FORMAT, "header length 2^63: format error (no overflow)");

    fp = fopen(tmp("tiny.safetensors"), "wb");
    fputs("abc", fp);
    fclose(fp);
    s = sr_st_open(&f, tmp("tiny.safetensors"));
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "tiny.safetensors"), "file shorter than 8 bytes: %s",
          sr_errmsg());
    s = sr_st_open(&f, tmp("absent.safetensors"));
    CHECK(s == SR_ERR_IO && contains(sr_errmsg(), "absent.safetensors"), "missing file: i/o error naming it");

    struct {
        const char *name, *hdr;
        size_t n;
    } cases[] = {
        {"bad JSON", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8},
        {"header not an object", "[1,2,3]", 0},
        {"trailing garbage", "{} x", 0},
        {"offsets past the data", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8},
        {"begin after end", "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8},
        {"offsets inconsistent with dtype*shape", "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8},
        {"F16 size mismatch", "{\"x\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
        {"overlapping tensors",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12},
        {"hole between tensors",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12},
        {"unknown dtype", "{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
        {"negative dim", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8},
        {"fractional dim", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8},
        {"missing shape", "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8},
        {"three offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8},
        {"string offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[\"0\",\"8\"]}}", 8},
        {"entry not an object", "{\"x\":3}", 0},
        {"non-string metadata", "{\"__metadata__\":{\"format\":1}}", 0},
        {"duplicate names",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8},
        {"huge shape (overflow)",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", 8},
        {"too many dims", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "case%zu.safetensors", i);
        s = open_raw(name, cases[i].hdr, z, cases[i].n);
        CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), name), "%s: format error naming the file (%s)",
              cases[i].name, sr_errmsg());
    }
    /* 100000 nested arrays: bounded recursion, not a stack overflow */
    size_t deep = 100000;
    char *h = malloc(2 * deep + 64);
    strcpy(h, "{\"__metadata__\":");
    size_t n = strlen(h);
    memset(h + n, '[', deep);
    memset(h + n + deep, ']', deep);
    strcpy(h + n + 2 * deep, "}");
    s = open_raw("deep.safetensors", h, z, 0);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "too deep"), "deeply nested header: format error: %s",
          sr_errmsg());
    free(h);
}

static void test_json(void)
{
    sr_json *j = NULL;
    const char *txt = " {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\/\","
                      " \"big\": 18446744073709551615, \"neg\": -9007199254740993, \"o\": {}} ";
    sr_status s = sr_json_parse(txt, strlen(txt), "t.json", &j);
    CHECK(s == SR_OK && j->type == SR_JSON_OBJECT && j->n == 5, "JSON: object with 5 members");
    if (s != SR_OK) return;
    const sr_json *a = sr_json_get(j, "a");
    CHECK(a && a->type == SR_JSON_ARRAY && a->n == 5 && a->items[1].number == -2500.0 &&
              a->items[2].type == SR_JSON_BOOL && a->items[2].boolean && a->items[4].type == SR_JSON_NULL,
          "JSON: array of number, bool, null");
    const char *str = sr_json_string(sr_json_get(j, "s"));
    CHECK(str && strcmp(str, "x\xc3\xa9\xf0\x9f\x98\x80\n/") == 0, "JSON: \\u escapes and surrogate pairs to UTF-8");
    uint64_t u;
    int64_t i64;
    CHECK(sr_json_uint64(sr_json_get(j, "big"), &u) && u == UINT64_MAX, "JSON: 2^64-1 exact as uint64");
    CHECK(sr_json_int64(sr_json_get(j, "neg"), &i64) && i64 == -9007199254740993LL, "JSON: int64 beyond 2^53 exact");
    CHECK(!sr_json_int64(&a->items[1], &i64), "JSON: -2.5e3 is not an integer literal");
    sr_json_free(j);

    const char *bad[] = {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"abc", "\"\\x\"", "tru", "\"a\tb\"", "{\"a\":1,}", "-"};
    int all = 1;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        j = NULL;
        s = sr_json_parse(bad[k], strlen(bad[k]), "bad.json", &j);
        all &= s == SR_ERR_FORMAT && j == NULL && contains(sr_errmsg(), "bad.json");
        sr_json_free(j);
    }
    CHECK(all, "JSON: 12 malformed inputs rejected with the source named");

    sr_buf b;
    sr_buf_init(&b);
    sr_buf_json_string(&b, "a\"b\\c\x01\xff\xc3\xa9");
    CHECK(sr_buf_status(&b) == SR_OK && strcmp(b.data, "\"a\\\"b\\\\c\\u0001\\ufffd\xc3\xa9\"") == 0,
          "JSON writer: escapes quotes, backslashes, control bytes; invalid UTF-8 -> \\ufffd");
    sr_buf_free(&b);
    sr_buf_init(&b);
    sr_buf_json_float(&b, 0.1f);
    sr_buf_puts(&b, " ");
    sr_buf_json_double(&b, NAN);
    CHECK(strcmp(b.data, "0.100000001 null") == 0, "JSON writer: floats round-trip, NaN as null (%s)", b.data);
    sr_buf_free(&b);
}

static void cleanup(void)
{
    DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd && (e = readdir(dd)) != NULL)
        if (e->d_name[0] != '.') unlink(tmp(e->d_name));
    if (dd) closedir(dd);
    rmdir(dir);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* A Hugging Face sharded checkpoint: two shards (one F32 by us, one BF16 by
 * hand) and their index read as one file; an index that lies is refused */
static void test_index(void)
{
    static const float a[6] = {1, -2.5f, 3, 4, 5, 6}, b[2] = {0.5f, -8};
    int64_t da[2] = {2, 3}, db[1] = {2};
    sr_st_entry e[2] = {{"model.layers.0.w", 2, da, a}, {"model.norm.weight", 1, db, b}};
    int ok = sr_st_write(tmp("model-00001-of-00002.safetensors"), e, 2, NULL, 0) == SR_OK;
    static const unsigned char bf[4] = {0x80, 0x3f, 0x00, 0xc0}, bf6[6] = {0x80, 0x3f, 0x00, 0xc0, 0, 0}; /* bf16 1, -2 */
    write_raw(tmp("model-00002-of-00002.safetensors"),
              "{\"lm_head.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", bf, 4);
    write_text(tmp("model.safetensors.index.json"),
               "{\"metadata\": {\"total_size\": 36}, \"weight_map\": {\"lm_head.weight\": "
               "\"model-00002-of-00002.safetensors\", \"model.layers.0.w\": \"model-00001-of-00002.safetensors\", "
               "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}");
    sr_st_file f;
    sr_status s = sr_st_open_index(&f, tmp("model.safetensors.index.json"));
    CHECK(ok && s == SR_OK && f.n == 3 && f.n_shards == 2, "an index of 2 shards opens as one file of 3 tensors");
    if (s != SR_OK) return;
    float out[6] = {0};
    const sr_st_tensor *t = sr_st_find(&f, "model.layers.0.w");
    CHECK(t && sr_st_read_f32(&f, t, out) == SR_OK && memcmp(out, a, sizeof a) == 0, "a tensor of shard 1");
    t = sr_st_find_alias(&f, "layers.0.w", "model.");
    CHECK(t && t->dims[0] == 2 && t->dims[1] == 3, "found by an alias, as --init looks names up");
    t = sr_st_find(&f, "lm_head.weight");
    CHECK(t && sr_st_read_f32(&f, t, out) == SR_OK && out[0] == 1.0f && out[1] == -2.0f,
          "a BF16 tensor of shard 2, converted");
    s = sr_st_load(&f, "model.norm.weight", NULL, 1, db, out);
    CHECK(s == SR_OK && out[1] == -8.0f && sr_st_find(&f, "nothing") == NULL, "sr_st_load through the index");
    sr_st_close(&f);

    struct {
        const char *index, *says;
    } bad[] = {
        {"{\"metadata\": {}}", "has no \"weight_map\""},
        {"{\"weight_map\": {\"x\": \"model-00003-of-00002.safetensors\"}}", "model-00003-of-00002.safetensors"},
        {"{\"weight_map\": {\"gone\": \"model-00001-of-00002.safetensors\"}}", "maps tensor 'gone' to"},
        {"{\"weight_map\": {\"lm_head.weight\": \"../model-00002-of-00002.safetensors\"}}", "not the name of a file"},
        {"{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\", \"model.norm.weight\": "
         "\"model-00001-of-00002.safetensors\", \"x\": \"dup.safetensors\"}}", "two of its shards hold"},
        {"{\"weight_map\": ", "invalid JSON"},
    };
    write_raw(tmp("dup.safetensors"), "{\"lm_head.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
              "\"x\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[4,6]}}", bf6, 6);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(tmp("bad.index.json"), bad[i].index);
        s = sr_st_open_index(&f, tmp("bad.index.json"));
        CHECK(s != SR_OK && contains(sr_errmsg(), bad[i].says), "a bad index refused: %s", sr_errmsg());
    }
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test_st.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_round_trip();
    test_prefix();
    test_conversions();
    test_corrupt();
    test_json();
    test_index();
    cleanup();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
