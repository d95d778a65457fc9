/* test_data.c: token files, JSON Lines records and batch order (runtime/data.c,
 * runtime/records.c).
 *
 * Prints one line per check and ends with "N passed, M failed"; exits
 * non-zero when a check fails.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sr_data.h"
#include "sr_mc.h"

static int n_pass, n_fail;
static char dir[256];

static void check_(int ok, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok) printf("  (test_data.c:%d; last error: %s)", line, sr_errmsg());
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

static void put32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(u >> (8 * i));
}

/* An llm.c token file: header words (magic, version, count) then tokens of
 * `width` bytes (2 or 4). n_written tokens are actually written (to fake
 * truncation). */
static void write_tokens(const char *path, int32_t magic, int32_t version, int32_t count, int width,
                         const uint32_t *tok, int n_written)
{
    unsigned char hdr[1024] = {0};
    put32(hdr, magic);
    put32(hdr + 4, version);
    put32(hdr + 8, count);
    FILE *f = fopen(path, "wb");
    fwrite(hdr, 1, sizeof hdr, f);
    for (int i = 0; i < n_written; i++) {
        unsigned char b[4];
        put32(b, (int32_t)tok[i]);
        fwrite(b, 1, (size_t)width, f);
    }
    fclose(f);
}

/* GPT-2's: uint16 tokens */
static void write_bin(const char *path, int32_t magic, int32_t version, int32_t count,
                      const uint16_t *tok, int n_written)
{
    uint32_t *wide = malloc(sizeof *wide * (size_t)(n_written + 1));
    for (int i = 0; i < n_written; i++) wide[i] = tok[i];
    write_tokens(path, magic, version, count, 2, wide, n_written);
    free(wide);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static int contains(const char *s, const char *sub)
{
    return strstr(s, sub) != NULL;
}

static void test_bin(void)
{
    uint16_t tok[10] = {0, 1, 2, 300, 0xABCD, 65535, 7, 8, 9, 10};
    write_bin(tmp("ok.bin"), SR_DATA_MAGIC, 1, 10, tok, 10);
    sr_data d;
    sr_status s = sr_data_open(&d, tmp("ok.bin"), 65536, NULL);
    CHECK(s == SR_OK, ".bin file opens");
    if (s != SR_OK) return;
    CHECK(d.is_bin == 1 && d.n_tokens == 10, ".bin: 10 uint16 tokens (got %ld)", (long)d.n_tokens);
    int same = 1;
    for (int i = 0; i < 10; i++) same &= sr_data_token(&d, i) == tok[i];
    CHECK(same, ".bin: tokens decoded little-endian, including 0xABCD and 65535");
    sr_data_close(&d);

    s = sr_data_open(&d, tmp("ok.bin"), 301, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "ok.bin") &&
              contains(sr_errmsg(), "token 43981 at position 4") && contains(sr_errmsg(), "301"),
          "out-of-vocab token: error names file, position, value and vocab: %s", sr_errmsg());
    sr_data_close(&d); /* safe after a failed open */

    write_bin(tmp("v2.bin"), SR_DATA_MAGIC, 2, 10, tok, 10);
    s = sr_data_open(&d, tmp("v2.bin"), 65536, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "v2.bin") && contains(sr_errmsg(), "version 2"),
          "wrong version is a format error naming file and version: %s", sr_errmsg());

    write_bin(tmp("short.bin"), SR_DATA_MAGIC, 1, 10, tok, 9);
    s = sr_data_open(&d, tmp("short.bin"), 65536, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "short.bin") && contains(sr_errmsg(), "10 tokens") &&
              contains(sr_errmsg(), "1042"),
          "count larger than the file is a format error with the numbers: %s", sr_errmsg());

    write_bin(tmp("long.bin"), SR_DATA_MAGIC, 1, 8, tok, 10);
    s = sr_data_open(&d, tmp("long.bin"), 65536, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "long.bin") && contains(sr_errmsg(), "8 tokens"),
          "count smaller than the file is a format error: %s", sr_errmsg());

    write_bin(tmp("neg.bin"), SR_DATA_MAGIC, 1, -5, tok, 0);
    s = sr_data_open(&d, tmp("neg.bin"), 65536, NULL);
    CHECK(s == SR_ERR_FORMAT, "negative count is a format error");

    unsigned char hdr[100] = {0};
    put32(hdr, SR_DATA_MAGIC);
    put32(hdr + 4, 1);
    write_bytes(tmp("trunc.bin"), hdr, sizeof hdr);
    s = sr_data_open(&d, tmp("trunc.bin"), 65536, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "trunc.bin") && contains(sr_errmsg(), "100 bytes"),
          "magic but shorter than the header: format error: %s", sr_errmsg());

    /* not the magic: the same bytes are just raw bytes */
    write_bin(tmp("magic.bin"), SR_DATA_MAGIC + 1, 1, 10, tok, 10);
    s = sr_data_open(&d, tmp("magic.bin"), 256, NULL);
    CHECK(s == SR_OK && d.is_bin == 0 && d.n_tokens == 1024 + 20,
          "wrong magic: read as raw bytes (%ld tokens)", (long)d.n_tokens);
    if (s == SR_OK) sr_data_close(&d);
}

/* llm.c's Llama 3 token files: magic 20240801, version 7, uint32 tokens */
static void write_bin32(const char *path, int32_t version, int32_t count, const uint32_t *tok, int n_written)
{
    write_tokens(path, SR_DATA_MAGIC_U32, version, count, 4, tok, n_written);
}

static void test_bin32(void)
{
    uint32_t tok[6] = {0, 65535, 65536, 128000, 0x01020304, 5};
    write_bin32(tmp("ok32.bin"), 7, 6, tok, 6);
    sr_data d;
    sr_status s = sr_data_open(&d, tmp("ok32.bin"), 0x01020305, NULL);
    CHECK(s == SR_OK, "uint32 .bin file (magic 20240801, version 7) opens: %s", s == SR_OK ? "" : sr_errmsg());
    if (s == SR_OK) {
        int same = 1;
        for (int i = 0; i < 6; i++) same &= sr_data_token(&d, i) == (int32_t)tok[i];
        CHECK(d.is_bin == 1 && d.n_tokens == 6 && same,
              "uint32 .bin: 6 tokens decoded little-endian, 65536, 128000 and 0x01020304 included");
        sr_data_close(&d);
    }
    s = sr_data_open(&d, tmp("ok32.bin"), 128256, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "token 16909060 at position 4") &&
              contains(sr_errmsg(), "128256"),
          "uint32 .bin: an id beyond the vocabulary (128256, Llama 3's) is refused: %s", sr_errmsg());
    uint32_t big[2] = {1, 0x80000001u};
    write_bin32(tmp("big32.bin"), 7, 2, big, 2);
    s = sr_data_open(&d, tmp("big32.bin"), 128256, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "token 2147483649 at position 1"),
          "uint32 .bin: an id of 2^31 or more is refused, not read as negative: %s", sr_errmsg());
    write_bin32(tmp("v1_32.bin"), 1, 6, tok, 6);
    s = sr_data_open(&d, tmp("v1_32.bin"), 1 << 30, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "version 1") && contains(sr_errmsg(), "version 7") &&
              contains(sr_errmsg(), "uint32"),
          "magic 20240801 with version 1: a format error naming both versions: %s", sr_errmsg());
    write_bin32(tmp("short32.bin"), 7, 6, tok, 5);
    s = sr_data_open(&d, tmp("short32.bin"), 1 << 30, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "6 tokens") && contains(sr_errmsg(), "1048 bytes"),
          "uint32 .bin: count larger than the file (6 x 4 bytes) is a format error: %s", sr_errmsg());
}

static void test_raw(void)
{
    const char text[] = "hello\xff\x80world";
    write_bytes(tmp("raw.txt"), text, sizeof text - 1);
    sr_data d;
    sr_status s = sr_data_open(&d, tmp("raw.txt"), 256, NULL);
    CHECK(s == SR_OK && d.is_bin == 0 && d.n_tokens == 12, "raw bytes: one token per byte");
    if (s == SR_OK) {
        CHECK(sr_data_token(&d, 0) == 'h' && sr_data_token(&d, 5) == 255 && sr_data_token(&d, 6) == 128,
              "raw bytes: values 0..255, high bytes unsigned");
        sr_data_close(&d);
    }
    s = sr_data_open(&d, tmp("raw.txt"), 200, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "token 255 at position 5") && contains(sr_errmsg(), "200"),
          "raw bytes above a smaller vocab: error: %s", sr_errmsg());

    write_bytes(tmp("short.txt"), "ab", 2);
    s = sr_data_open(&d, tmp("short.txt"), 256, NULL);
    CHECK(s == SR_OK && d.n_tokens == 2, "a file shorter than the magic is raw bytes");
    if (s == SR_OK) sr_data_close(&d);

    write_bytes(tmp("empty.txt"), "", 0);
    s = sr_data_open(&d, tmp("empty.txt"), 256, NULL);
    CHECK(s == SR_OK && d.n_tokens == 0, "an empty file opens with 0 tokens");
    if (s == SR_OK) {
        s = sr_data_check(&d, 1, 1);
        CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "has 0 tokens"), "... and has no batch: %s",
              sr_errmsg());
        sr_data_close(&d);
    }

    s = sr_data_open(&d, tmp("does-not-exist.bin"), 256, NULL);
    CHECK(s == SR_ERR_IO && contains(sr_errmsg(), "does-not-exist.bin"), "missing file: i/o error naming it: %s",
          sr_errmsg());
    s = sr_data_open(&d, dir, 256, NULL);
    CHECK(s == SR_ERR_IO, "a directory is not a data file");
}

/* A .bin whose token i is i: every token says where it came from. */
static void make_counting(const char *name, int n)
{
    uint16_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++) tok[i] = (uint16_t)i;
    write_bin(tmp(name), SR_DATA_MAGIC, 1, n, tok, n);
    free(tok);
}

static void test_batches(void)
{
    make_counting("count.bin", 1000);
    sr_data d;
    if (sr_data_open(&d, tmp("count.bin"), 65536, NULL) != SR_OK) {
        CHECK(0, "counting file opens");
        return;
    }
    const int G = 3, T = 7;
    int64_t E = sr_data_batches_per_epoch(&d, G, T);
    CHECK(E == 999 / 21, "batches per pass = floor((n-1)/(G*T)) = %ld", (long)E);
    int32_t in[3 * 7], tg[3 * 7];
    long steps[] = {0, 1, 2, 46, 47, 48, 100, 47 * 1000 + 5};
    for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++) {
        long k = steps[si];
        sr_status s = sr_data_batch(&d, k, G, T, 0, G, in, tg);
        int ok = s == SR_OK;
        long start = (k % E) * G * T;
        for (int j = 0; j < G && ok; j++)
            for (int t = 0; t < T; t++) {
                ok &= in[j * T + t] == start + j * T + t;
                ok &= tg[j * T + t] == start + j * T + t + 1;
            }
        CHECK(ok, "step %ld: sequence j is tokens[s + j*T ..), targets shifted by one (s = %ld)", k, start);
    }
    /* the last batch of a pass reads the very last token as a target */
    sr_data_batch(&d, E - 1, G, T, G - 1, 1, in, tg);
    CHECK(tg[T - 1] == E * G * T && E * G * T <= 999, "last batch's last target is token %ld", (long)(E * G * T));

    /* slices of the global batch equal the whole, for any split */
    int ok = 1;
    for (long k = 0; k < 60; k++) {
        int32_t full_in[21], full_tg[21];
        sr_data_batch(&d, k, G, T, 0, G, full_in, full_tg);
        for (int j = 0; j < G; j++) {
            int32_t a[7], b[7];
            ok &= sr_data_batch(&d, k, G, T, j, 1, a, b) == SR_OK;
            ok &= memcmp(a, full_in + j * T, sizeof a) == 0 && memcmp(b, full_tg + j * T, sizeof b) == 0;
        }
        int32_t a2[14], b2[14];
        ok &= sr_data_batch(&d, k, G, T, 1, 2, a2, b2) == SR_OK;
        ok &= memcmp(a2, full_in + T, sizeof a2) == 0 && memcmp(b2, full_tg + T, sizeof b2) == 0;
    }
    CHECK(ok, "slices [j, j+1) and [1, 3) equal the global batch over 60 steps (wrapping)");

    /* the global order does not depend on the layout: G=4 as 2 ranks x 2 microbatches */
    int32_t whole[4 * 5], wt[4 * 5], part[5], pt[5];
    ok = 1;
    for (long k = 0; k < 120; k++) {
        sr_data_batch(&d, k, 4, 5, 0, 4, whole, wt);
        for (int rank = 0; rank < 2; rank++)
            for (int mb = 0; mb < 2; mb++) {
                int first = rank * 2 + mb;
                sr_data_batch(&d, k, 4, 5, first, 1, part, pt);
                ok &= memcmp(part, whole + first * 5, sizeof part) == 0;
            }
    }
    CHECK(ok, "2 ranks x 2 microbatches read the same tokens as one batch of 4");

    sr_status s = sr_data_batch(&d, 0, G, T, 2, 2, in, tg);
    CHECK(s == SR_ERR_ARG, "a slice past the global batch is an argument error: %s", sr_errmsg());
    s = sr_data_batch(&d, -1, G, T, 0, 1, in, tg);
    CHECK(s == SR_ERR_ARG, "a negative step is an argument error");
    s = sr_data_check(&d, 1000, 1);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "count.bin has 1000 tokens, fewer than one batch of 1000 x 1 + 1"),
          "too few tokens for one batch: %s", sr_errmsg());
    s = sr_data_batch(&d, 0, 999, 1, 0, 1, in, tg);
    CHECK(s == SR_OK && sr_data_batches_per_epoch(&d, 999, 1) == 1, "exactly G*T + 1 tokens: one batch");
    sr_data_close(&d);
}

/* A pattern reads its files as one stream: shards of the counting file
 * give the counting file's batches, windows across shard borders included. */
static void test_shards(void)
{
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)i;
    write_bin(tmp("shard_a.bin"), SR_DATA_MAGIC, 1, 300, tok, 300);
    write_bin(tmp("shard_b.bin"), SR_DATA_MAGIC, 1, 300, tok + 300, 300);
    write_bin(tmp("shard_c.bin"), SR_DATA_MAGIC, 1, 0, tok, 0);
    write_bin(tmp("shard_d.bin"), SR_DATA_MAGIC, 1, 400, tok + 600, 400);
    make_counting("one.bin", 1000);
    sr_data d, one;
    sr_status s = sr_data_open(&d, tmp("shard_*.bin"), 65536, NULL);
    CHECK(s == SR_OK && d.n_tokens == 1000 && d.n_files == 3 && d.is_bin,
          "shard_*.bin: 4 files (one empty, left out), 1000 tokens in order (%ld in %d)",
          (long)d.n_tokens, d.n_files);
    if (s != SR_OK || sr_data_open(&one, tmp("one.bin"), 65536, NULL) != SR_OK) return;
    int ok = 1, crossing = 0;
    for (int T = 5; T <= 13; T += 4)
        for (long k = 0; k < 200; k++) {
            int32_t a[3 * 13], b[3 * 13], at[3 * 13], bt[3 * 13];
            ok &= sr_data_batch(&d, k, 3, T, 0, 3, a, at) == SR_OK;
            ok &= sr_data_batch(&one, k, 3, T, 0, 3, b, bt) == SR_OK;
            ok &= memcmp(a, b, sizeof(int32_t) * 3 * (size_t)T) == 0 &&
                  memcmp(at, bt, sizeof(int32_t) * 3 * (size_t)T) == 0;
            for (int j = 0; j < 3; j++) crossing += (a[j * T] < 300 && at[j * T + T - 1] >= 300) ||
                                                    (a[j * T] < 600 && at[j * T + T - 1] >= 600);
        }
    CHECK(ok && crossing > 0, "the shards' batches = the one file's, T = 5, 9, 13 over 200 steps "
          "(%d windows across a border)", crossing);
    CHECK(sr_data_token(&d, 299) == 299 && sr_data_token(&d, 300) == 300 && sr_data_token(&d, 600) == 600 &&
              sr_data_token(&d, 999) == 999,
          "tokens at the borders");
    sr_data_close(&d);
    sr_data_close(&one);

    s = sr_data_open(&d, tmp("nothing_*.bin"), 65536, NULL);
    CHECK(s == SR_ERR_IO && contains(sr_errmsg(), "no data file matches") && contains(sr_errmsg(), "nothing_*.bin"),
          "a pattern that matches nothing: %s", sr_errmsg());
    s = sr_data_open(&d, tmp("shard_*.bin"), 500, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "shard_b.bin: token 500 at position 200"),
          "a token past the vocabulary names its shard and its place there: %s", sr_errmsg());
    write_bytes(tmp("shard_e.bin"), "\x88\xd8\x34\x01", 4); /* the magic, nothing after */
    s = sr_data_open(&d, tmp("shard_*.bin"), 65536, NULL);
    CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "shard_e.bin"), "a broken shard is named: %s", sr_errmsg());
    s = sr_data_open(&d, tmp("shard_[ab].bin"), 65536, NULL);
    CHECK(s == SR_OK && d.n_files == 2 && d.n_tokens == 600, "shard_[ab].bin: 2 files");
    if (s == SR_OK) {
        s = sr_data_check(&d, 600, 1);
        CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), "the 2 files of") &&
                  contains(sr_errmsg(), "have 600 tokens, fewer than one batch of 600 x 1 + 1"),
              "too few tokens in all the files: %s", sr_errmsg());
        sr_data_close(&d);
    }
}

/* --shuffle: each pass visits every sequence slot once, in an order of its
 * own; a function of (seed, step), so any split of the batch reads the same */
static void test_shuffle(void)
{
    make_counting("count2.bin", 4000);
    sr_data d, plain;
    if (sr_data_open(&d, tmp("count2.bin"), 65536, NULL) != SR_OK ||
        sr_data_open(&plain, tmp("count2.bin"), 65536, NULL) != SR_OK) {
        CHECK(0, "counting file opens");
        return;
    }
    sr_data_shuffle(&d, 1337);
    const int G = 6, T = 11;
    int64_t E = sr_data_batches_per_epoch(&d, G, T), S = E * G; /* 60 steps, 360 slots */
    int ok = 1, moved = 0, differs = 0, same_again = 1;
    char *seen = calloc((size_t)S, 1);
    int32_t in[6 * 11], tg[6 * 11], in2[6 * 11], tg2[6 * 11], first[6 * 11];
    for (int pass = 0; pass < 3; pass++) {
        memset(seen, 0, (size_t)S);
        for (int64_t k = pass * E; k < (pass + 1) * E; k++) {
            ok &= sr_data_batch(&d, k, G, T, 0, G, in, tg) == SR_OK;
            for (int j = 0; j < G; j++) {
                int64_t q = in[j * T] / T;
                ok &= in[j * T] % T == 0 && q >= 0 && q < S && !seen[q];
                for (int t = 0; t < T; t++) ok &= in[j * T + t] == q * T + t && tg[j * T + t] == q * T + t + 1;
                if (q >= 0 && q < S) seen[q] = 1;
                moved += q != (k % E) * G + j;
            }
            if (k == pass * E) {
                if (pass == 0) memcpy(first, in, sizeof in);
                else differs += memcmp(first, in, sizeof in) != 0;
            }
        }
        for (int64_t q = 0; q < S; q++) ok &= seen[q];
    }
    free(seen);
    CHECK(ok && moved > 3 * S * 9 / 10, "shuffled: each of 3 passes reads all %ld sequences once, whole "
          "windows with their targets (%d of %ld moved)", (long)S, moved, (long)(3 * S));
    CHECK(differs == 2, "each pass has its own order");
    for (int64_t k = 0; k < 2 * E; k += 7) {
        sr_data_batch(&d, k, G, T, 0, G, in, tg);
        sr_data_batch(&d, k, G, T, 0, G, in2, tg2);
        same_again &= memcmp(in, in2, sizeof in) == 0;
        for (int j = 0; j < G; j++) { /* one sequence at a time, as a data rank's microbatch */
            int32_t a[11], b[11];
            sr_data_batch(&d, k, G, T, j, 1, a, b);
            same_again &= memcmp(a, in + j * T, sizeof a) == 0 && memcmp(b, tg + j * T, sizeof b) == 0;
        }
    }
    CHECK(same_again, "shuffled: a function of the step; any slice of the batch reads the whole batch's sequences");
    sr_data other;
    int seed_differs = 0;
    if (sr_data_open(&other, tmp("count2.bin"), 65536, NULL) == SR_OK) {
        sr_data_shuffle(&other, 1338);
        sr_data_batch(&d, 0, G, T, 0, G, in, tg);
        sr_data_batch(&other, 0, G, T, 0, G, in2, tg2);
        seed_differs = memcmp(in, in2, sizeof in) != 0;
        sr_data_close(&other);
    }
    CHECK(seed_differs, "another seed, another order");
    sr_data_batch(&plain, 5, G, T, 0, G, in, tg);
    CHECK(in[0] == 5 * G * T && in[T] == 5 * G * T + T, "without sr_data_shuffle, the order of the file");
    /* one batch per pass, one sequence per batch: the permutation of [0, 1) and [0, 2) */
    static int32_t a[2 * 1999], b[2 * 1999];
    ok = sr_data_batch(&d, 3, 2, 1999, 0, 2, a, b) == SR_OK; /* E = 1, 2 slots */
    CHECK(ok && (a[0] == 0 || a[0] == 1999), "a pass of 2 slots reads a valid slot (%d)", a[0]);
    sr_data_close(&d);
    sr_data_close(&plain);
}

/* the loss targets of step k's batch, counted from the batch itself */
static int64_t targets_in(const sr_data *d, int64_t k, int G, int T)
{
    int32_t *in = malloc(sizeof *in * (size_t)G * T), *tg = malloc(sizeof *tg * (size_t)G * T);
    int64_t c = sr_data_batch(d, k, G, T, 0, G, in, tg) == SR_OK ? 0 : -1;
    for (int i = 0; c >= 0 && i < G * T; i++) c += tg[i] >= 0;
    free(in);
    free(tg);
    return c;
}

static void test_records(void)
{
    const char *jl = "{\"prompt\": \"ab\", \"completion\": \"cd\"}\n"
                     "\n"
                     "{\"text\": \"xy\", \"id\": 7}\r\n"
                     "{\"input_ids\": [1, 2, 3], \"completion_mask\": [0, 1, 1]}\n"
                     "{\"input_ids\": [9]}";
    write_bytes(tmp("rec.jsonl"), jl, strlen(jl));
    sr_data d;
    sr_status s = sr_data_open(&d, tmp("rec.jsonl"), 256, NULL);
    CHECK(s == SR_OK && d.records == 4 && d.n_tokens == 10 && d.n_loss == 7 && d.masked,
          "records: 4 read (a blank line skipped), 10 tokens, 7 loss targets (%ld, %ld, %ld)", (long)d.records,
          (long)d.n_tokens, (long)d.n_loss);
    if (s != SR_OK) return;
    int32_t want_in[] = {'a', 'b', 'c', 'd', 'x', 'y', 1, 2, 3}, want_tg[] = {-1, 'c', 'd', 'x', 'y', -1, 2, 3, 9};
    int32_t in[9], tg[9];
    s = sr_data_batch(&d, 0, 3, 3, 0, 3, in, tg);
    CHECK(s == SR_OK && !memcmp(in, want_in, sizeof in) && !memcmp(tg, want_tg, sizeof tg),
          "records: a prompt's bytes are inputs whose targets are -1, the completion's and the text's count, "
          "then input_ids under their completion_mask");
    CHECK(sr_data_loss_targets(&d, 0, 3, 3) == 7, "records: the batch's loss targets are 7 (%ld)",
          (long)sr_data_loss_targets(&d, 0, 3, 3));
    sr_data_close(&d);

    /* a longer masked stream, shuffled: the count is the batch's, whatever the order */
    FILE *f = fopen(tmp("many.jsonl"), "w");
    for (int i = 0; i < 300; i++)
        fprintf(f, "{\"prompt\": \"%.*s\", \"completion\": \"%.*s\"}\n", 1 + i % 7, "pppppppp", 1 + i % 5, "cccccc");
    fclose(f);
    int agree = 1;
    if (sr_data_open(&d, tmp("many.jsonl"), 256, NULL) == SR_OK) {
        for (int sh = 0; sh < 2; sh++) {
            if (sh) sr_data_shuffle(&d, 99);
            for (int64_t k = 0; k < 40; k++) agree &= sr_data_loss_targets(&d, k, 5, 13) == targets_in(&d, k, 5, 13);
        }
        sr_data_close(&d);
    } else {
        agree = 0;
    }
    CHECK(agree, "records: sr_data_loss_targets is the count of targets >= 0 in the batch, in order and shuffled");

    const char *plain = "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n";
    write_bytes(tmp("text.jsonl"), plain, strlen(plain));
    s = sr_data_open(&d, tmp("text.jsonl"), 256, NULL);
    CHECK(s == SR_OK && d.records == 2 && d.n_tokens == 10 && !d.masked && d.n_loss == 10 &&
          sr_data_token(&d, 5) == 'w', "text records only: 10 tokens, no mask");
    if (s == SR_OK) {
        CHECK(sr_data_loss_targets(&d, 0, 3, 3) == 9, "... and every target of a batch counts");
        sr_data_close(&d);
    }
    const char *json = "{\"a\": 1}\n{\"b\": 2}\n";
    write_bytes(tmp("other.json"), json, strlen(json));
    s = sr_data_open(&d, tmp("other.json"), 256, NULL);
    CHECK(s == SR_OK && d.records == 0 && d.n_tokens == (int64_t)strlen(json),
          "JSON without a record's member is text, read as bytes");
    if (s == SR_OK) sr_data_close(&d);

    /* the mask across a file boundary: a window that spans two files */
    write_bytes(tmp("span_a.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"c\"}\n", 36);
    const char *b = "{\"input_ids\": [100, 101], \"completion_mask\": [0, 1]}\n";
    write_bytes(tmp("span_b.jsonl"), b, strlen(b));
    s = sr_data_open(&d, tmp("span_*.jsonl"), 256, NULL);
    int32_t in4[4], tg4[4], want4[] = {-1, 'c', -1, 101};
    CHECK(s == SR_OK && sr_data_batch(&d, 0, 1, 4, 0, 1, in4, tg4) == SR_OK && !memcmp(tg4, want4, sizeof tg4) &&
              sr_data_loss_targets(&d, 0, 1, 4) == 2,
          "records in two files: the mask holds across the boundary");
    if (s == SR_OK) sr_data_close(&d);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"text\": \"a\"}\n{\"text\": \"b\"\n", "line 2: not a JSON object"},
        {"{\"text\": \"a\"}\nplain words\n", "line 2: not a JSON object"},
        {"{\"prompt\": \"a\"}\n", "line 1: the record needs \"text\", or \"prompt\" and \"completion\""},
        {"{\"text\": \"a\", \"completion\": \"b\"}\n", "line 1: the record needs"},
        {"{\"text\": 5}\n", "line 1: the record has a \"text\" that is not a string"},
        {"{\"text\": \"a\"}\n[1, 2]\n", "line 2: the record is not a JSON object"},
        {"{\"input_ids\": [1, 2], \"completion_mask\": [1]}\n", "has 1 completion_mask entries for 2 input_ids"},
        {"{\"input_ids\": [1, 2], \"completion_mask\": [1, 2]}\n", "completion_mask[1] = 2, not 0 or 1"},
        {"{\"input_ids\": [1, -2]}\n", "input_ids[1] = -2, not a token id"},
        {"{\"input_ids\": \"12\"}\n", "not an array"},
        {"{\"input_ids\": [300]}\n", "token 300 at position 0 is outside the model's vocabulary of 256"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_bytes(tmp("bad.jsonl"), bad[i].text, strlen(bad[i].text));
        s = sr_data_open(&d, tmp("bad.jsonl"), 256, NULL);
        CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), bad[i].want) && contains(sr_errmsg(), "bad.jsonl"),
              "bad record %zu: %s", i, sr_errmsg());
        if (s == SR_OK) sr_data_close(&d);
    }
}

/* --eod-mask-loss: a target whose input is the end-of-text token is -1, other targets as
 * before (a window across two shards included); the per-step count agrees, in order and
 * shuffled, and with a records mask under it */
static void test_eod(void)
{
    uint16_t tok[700];
    for (int i = 0; i < 700; i++) tok[i] = (uint16_t)(i % 9 == 4 || i % 23 == 0 ? 7 : 10 + (i * 37) % 50);
    write_bin(tmp("eod_a.bin"), SR_DATA_MAGIC, 1, 300, tok, 300);
    write_bin(tmp("eod_b.bin"), SR_DATA_MAGIC, 1, 400, tok + 300, 400);
    sr_data d, plain;
    if (sr_data_open(&d, tmp("eod_*.bin"), 64, NULL) != SR_OK) {
        CHECK(0, "eod: open the shards");
        return;
    }
    sr_data_mask_eod(&d, 7);
    int ok = 1, masked = 0, agree = 1;
    for (int sh = 0; sh < 2; sh++) {
        if (sh) sr_data_shuffle(&d, 5);
        for (long k = 0; k < 60; k++) {
            int32_t in[4 * 11], tg[4 * 11];
            ok &= sr_data_batch(&d, k, 4, 11, 0, 4, in, tg) == SR_OK;
            for (int i = 0; i < 4 * 11; i++) {
                int32_t next = i % 11 < 10 ? in[i + 1] : -2; /* the last target: checked below */
                ok &= in[i] == 7 ? tg[i] == -1 : (next == -2 || tg[i] == next);
                masked += in[i] == 7;
            }
            agree &= sr_data_loss_targets(&d, k, 4, 11) == targets_in(&d, k, 4, 11);
        }
    }
    CHECK(ok && masked > 0, "eod: each target after token 7 is -1 (%d of them), the others the next token", masked);
    CHECK(agree, "eod: sr_data_loss_targets counts the targets left, in order and shuffled");
    sr_data_close(&d);
    /* step 24 of 1 x 12: tokens 288 .. 300, across the border at 300 */
    if (sr_data_open(&d, tmp("eod_*.bin"), 64, NULL) == SR_OK) {
        sr_data_mask_eod(&d, 7);
        int32_t in[12], tg[12];
        int same = sr_data_batch(&d, 24, 1, 12, 0, 1, in, tg) == SR_OK, left = 0;
        for (int t = 0; t < 12; t++) {
            int32_t want = tok[288 + t] == 7 ? -1 : tok[288 + t + 1];
            same &= in[t] == tok[288 + t] && tg[t] == want;
            left += want >= 0;
        }
        CHECK(same && left < 12 && sr_data_loss_targets(&d, 24, 1, 12) == left,
              "eod: a window across two shards, %d of its 12 targets left", left);
        sr_data_close(&d);
    }
    /* records (the prompt's targets -1) with 'p' as the end of text: both masks */
    if (sr_data_open(&plain, tmp("many.jsonl"), 256, NULL) == SR_OK) {
        sr_data_mask_eod(&plain, 'p');
        int both = 1;
        for (long k = 0; k < 40; k++) {
            int32_t in[5 * 13], tg[5 * 13];
            both &= sr_data_batch(&plain, k, 5, 13, 0, 5, in, tg) == SR_OK;
            for (int i = 0; i < 5 * 13; i++) both &= in[i] != 'p' || tg[i] == -1;
            both &= sr_data_loss_targets(&plain, k, 5, 13) == targets_in(&plain, k, 5, 13);
        }
        CHECK(both, "eod over records: no target after 'p', and the count agrees");
        sr_data_close(&plain);
    } else {
        CHECK(0, "eod: open many.jsonl");
    }
}

/* A .bin whose token i is from + i. */
static void make_counting_from(const char *name, int n, int from)
{
    uint16_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++) tok[i] = (uint16_t)(from + i);
    write_bin(tmp(name), SR_DATA_MAGIC, 1, n, tok, n);
    free(tok);
}

/* A blend "3 A 1 B": every sequence a whole window of one part, A's share of
 * every prefix within one sequence of 3/4, each part read pass after pass (in
 * order, or shuffled: each window once a pass), any slice of a batch the
 * whole batch's, in any order of steps; bad blends refused */
static void test_blend(void)
{
    make_counting_from("blend_a.bin", 1000, 0);      /* W = 99 windows of T = 10 */
    make_counting_from("blend_b.bin", 500, 20000);   /* W = 49 */
    char spec[1200];
    snprintf(spec, sizeof spec, "3 %s  1\t%s", tmp("blend_a.bin"), tmp("blend_b.bin"));
    sr_data d;
    if (sr_data_open(&d, spec, 65536, NULL) != SR_OK) {
        CHECK(0, "blend opens");
        return;
    }
    const int G = 8, T = 10, K = 60; /* 480 sequences: A's second pass and beyond, B's too */
    CHECK(d.n_parts == 2 && d.n_tokens == 1500 && d.share[0] == 750000 && d.share[1] == 250000,
          "blend: 2 parts, 1500 tokens, shares 750000 and 250000 of a million");
    CHECK(sr_data_check(&d, G, T) == SR_OK && sr_data_batches_per_epoch(&d, G, T) == 16,
          "blend: checked by its parts; 16 batches before a part's second pass (A: 99 x 4/3 / 8)");
    static int32_t all[60][8 * 10];
    int32_t in[8 * 10], tg[8 * 10], a[10], b[10];
    int64_t na = 0, nb = 0, s = 0;
    int whole = 1, share_ok = 1, order = 1, slices = 1;
    for (int k = 0; k < K; k++) {
        whole &= sr_data_batch(&d, k, G, T, 0, G, in, tg) == SR_OK;
        memcpy(all[k], in, sizeof in);
        for (int j = 0; j < G; j++, s++) {
            int32_t *x = in + j * T, *y = tg + j * T, from = x[0] >= 20000 ? 20000 : 0;
            int64_t w = from ? 49 : 99, c = from ? nb++ : na++;
            whole &= (x[0] - from) % T == 0;
            for (int t = 0; t < T; t++) whole &= x[t] == x[0] + t && y[t] == x[0] + t + 1;
            order &= x[0] - from == (c % w) * T; /* unshuffled: window c mod W */
            share_ok &= 4 * na > 3 * (s + 1) - 4 && 4 * na < 3 * (s + 1) + 4; /* |na - 3/4 (s+1)| < 1 */
        }
    }
    CHECK(whole && share_ok && order && na == 360 && nb == 120,
          "blend: whole windows of one part; A's count within one of 3/4 of every prefix (360 of 480); each "
          "part's windows in order, pass after pass");
    int steps[] = {5, 2, 5, 0, 59, 58};
    for (int i = 0; i < 6; i++) { /* the cursor goes back and forth */
        int k = steps[i];
        sr_data_batch(&d, k, G, T, 0, G, in, tg);
        slices &= memcmp(in, all[k], sizeof in) == 0;
        for (int j = G - 1; j >= 0; j--) {
            slices &= sr_data_batch(&d, k, G, T, j, 1, a, b) == SR_OK;
            slices &= memcmp(a, in + j * T, sizeof a) == 0 && memcmp(b, tg + j * T, sizeof b) == 0;
        }
    }
    CHECK(slices, "blend: a step's batch the same read again after others, before or after it; any slice of it the whole batch's");
    sr_data_mask_eod(&d, 5); /* token 5: the targets after it are left out */
    int agree = 1;
    for (int k = 0; k < 20; k++) agree &= sr_data_loss_targets(&d, k, G, T) == targets_in(&d, k, G, T);
    CHECK(agree && d.parts[0].mask_eod && sr_data_loss_targets(&d, 0, G, T) == G * T - 1,
          "blend: --eod-mask-loss reaches the parts; sr_data_loss_targets counts the batch's targets");
    sr_data_close(&d);

    /* shuffled: B's 49 windows each once in each of its passes, in another order */
    int once = 1, moved = 0;
    if (sr_data_open(&d, spec, 65536, NULL) == SR_OK) {
        sr_data_shuffle(&d, 7);
        char seen[49] = {0};
        nb = 0;
        for (int k = 0; k < K; k++) {
            sr_data_batch(&d, k, G, T, 0, G, in, tg);
            for (int j = 0; j < G; j++) {
                if (in[j * T] < 20000) continue;
                int q = (in[j * T] - 20000) / T;
                if (nb % 49 == 0) memset(seen, 0, sizeof seen);
                once &= !seen[q];
                seen[q] = 1;
                moved += q != nb % 49;
                nb++;
            }
        }
        sr_data_close(&d);
    }
    CHECK(once && moved > 90 && nb == 120, "blend shuffled: each window of a part once a pass, %d of %ld moved",
          moved, (long)nb);

    struct {
        const char *spec;
        sr_status want;
        const char *says;
    } bad[] = {{"0.7 %s 0.3", SR_ERR_USAGE, "pairs of a weight"},
               {"1 %s 0 %s", SR_ERR_USAGE, "is not a positive number"},
               {"1 %s nan %s", SR_ERR_USAGE, "is not a positive number"},
               {"1 %s 1e-9 %s", SR_ERR_USAGE, "under a millionth"},
               {"1 %s 1 %s_missing", SR_ERR_IO, "_missing"}};
    for (int i = 0; i < 5; i++) {
        snprintf(spec, sizeof spec, bad[i].spec, tmp("blend_a.bin"), tmp("blend_b.bin"));
        sr_status st = sr_data_open(&d, spec, 65536, NULL);
        CHECK(st == bad[i].want && contains(sr_errmsg(), bad[i].says), "blend \"%s\" refused: %s", bad[i].spec,
              sr_errmsg());
    }
    make_counting_from("blend_c.bin", 20, 0);
    snprintf(spec, sizeof spec, "1 %s 1 %s", tmp("blend_a.bin"), tmp("blend_c.bin"));
    int ok = sr_data_open(&d, spec, 65536, NULL) == SR_OK;
    CHECK(ok && sr_data_check(&d, G, T) == SR_OK && sr_data_check(&d, G, 20) == SR_ERR_FORMAT &&
          contains(sr_errmsg(), "blend_c.bin") && contains(sr_errmsg(), "fewer than one sequence of 20 + 1"),
          "blend: a part shorter than a sequence is named: %s", sr_errmsg());
    if (ok) sr_data_close(&d);
    make_counting("1 x.bin", 300); /* a file whose name reads as a blend is the file */
    ok = sr_data_open(&d, tmp("1 x.bin"), 65536, NULL) == SR_OK;
    CHECK(ok && d.n_parts == 0 && d.n_tokens == 300, "a file named \"1 x.bin\" is read as that file");
    if (ok) sr_data_close(&d);
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

/* an llm.c eval file of words (after the 256-int header), as write_evalfile lays it out */
static void write_eval(const char *path, int32_t n, const uint16_t *w, size_t nw)
{
    unsigned char h[1024] = {0};
    put32(h, SR_MC_MAGIC);
    put32(h + 4, SR_MC_VERSION);
    put32(h + 8, n);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(h, 1, sizeof h, f);
    for (size_t i = 0; i < nw; i++) fputc(w[i] & 0xff, f), fputc(w[i] >> 8, f);
    fclose(f);
}

static void test_mc(void)
{
    /* two examples: context [7 8], completions [1] [2 3] [4], label 2; context [9],
     * completions [5 6] [0], label 0 */
    const uint16_t good[] = {65535, 2 * 15, 0, 2, 3, 2, 7, 8, 1, 1, 2, 2, 3, 1, 4,
                             65535, 2 * 12, 1, 0, 2, 1, 9, 2, 5, 6, 1, 0};
    write_eval(tmp("mc.bin"), 2, good, sizeof good / sizeof good[0]);
    sr_mc mc;
    sr_status s = sr_mc_open(tmp("mc.bin"), NULL, 64, &mc);
    int ok = s == SR_OK && mc.n == 2 && mc.max_choices == 3 && mc.first[0] == 0 && mc.first[1] == 3 &&
             mc.first[2] == 5 && mc.label[0] == 2 && mc.label[1] == 0 && !mc.from_text;
    if (ok) {
        int32_t want_ctx[] = {7, 8}, want_c1[] = {2, 3}, want_c3[] = {5, 6};
        ok = mc.ctx_len[0] == 2 && !memcmp(mc.tok + mc.ctx[0], want_ctx, sizeof want_ctx) && mc.comp_len[1] == 2 &&
             !memcmp(mc.tok + mc.comp[1], want_c1, sizeof want_c1) && mc.ctx_len[1] == 1 && mc.tok[mc.ctx[1]] == 9 &&
             mc.comp_len[3] == 2 && !memcmp(mc.tok + mc.comp[3], want_c3, sizeof want_c3) && mc.comp_len[4] == 1 &&
             mc.tok[mc.comp[4]] == 0;
    }
    CHECK(ok, "eval file: 2 examples, their contexts, completions and labels");
    if (s == SR_OK) sr_mc_close(&mc);

    /* HellaSwag's JSON Lines as bytes: each ending after a blank; a label in a string */
    const char *js = "{\"ctx\": \"ab\", \"endings\": [\"c\", \"de\"], \"label\": 1}\n\n"
                     "{\"ctx\": \"x\", \"endings\": [\"y\", \"z\", \"w\"], \"label\": \"2\", \"split\": \"val\"}\n";
    write_bytes(tmp("mc.jsonl"), js, strlen(js));
    s = sr_mc_open(tmp("mc.jsonl"), NULL, 256, &mc);
    ok = s == SR_OK && mc.n == 2 && mc.from_text && mc.first[2] == 5 && mc.label[0] == 1 && mc.label[1] == 2 &&
         mc.ctx_len[0] == 2 && mc.tok[mc.ctx[0]] == 'a' && mc.comp_len[1] == 3 && mc.tok[mc.comp[1]] == ' ' &&
         mc.tok[mc.comp[1] + 2] == 'e' && mc.comp_len[4] == 2 && mc.tok[mc.comp[4] + 1] == 'w';
    CHECK(ok, "HellaSwag JSON Lines: contexts, \" \" + each ending, labels (one a string), a blank line skipped");
    if (s == SR_OK) sr_mc_close(&mc);

    /* a corrupt eval file: one word changed, cut short, or more after the examples */
    static const struct {
        int at, value, n, words; /* good with word at = value (at < 0: unchanged), n examples, words kept */
        const char *want;
    } bin[] = {
        {15, 0, 2, 27, "example 1: no example starts at word 15"},
        {1, 2 * 40, 2, 27, "example 0: 80 bytes long at word 0, past the file's end"},
        {5, 12, 2, 27, "example 0: its context runs past the example's 30 bytes"},
        {-1, 0, 2, 20, "example 1: the file ends at word 15"},
        {-1, 0, 1, 27, "24 bytes after the 1 examples the header counts"},
        {-1, 0, 3, 27, "example 2: the file ends at word 27"},
        {3, 3, 2, 27, "example 0: label 3, but the completions are 0..2"},
        {4, 1, 2, 27, "example 0: 30 bytes long, but its parts add up to 20"},
        {6, 64, 2, 27, "example 0: token 64 is outside the model's vocabulary of 64"},
        {1, 2 * 14, 2, 27, "example 0: its completions run past the example's 28 bytes"},
    };
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        uint16_t w[32];
        memcpy(w, good, sizeof good);
        if (bin[i].at >= 0) w[bin[i].at] = (uint16_t)bin[i].value;
        write_eval(tmp("bad_mc.bin"), bin[i].n, w, (size_t)bin[i].words);
        s = sr_mc_open(tmp("bad_mc.bin"), NULL, 64, &mc);
        CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), bin[i].want) && contains(sr_errmsg(), "bad_mc.bin"),
              "corrupt eval file %zu: %s", i, s == SR_OK ? "(read)" : sr_errmsg());
        if (s == SR_OK) sr_mc_close(&mc);
    }
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n{\"ctx\": \"a\"\n", "line 2: not a JSON object"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"]}\n", "line 1: the example has a \"label\" that is not an integer"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": \"x\"}\n", "has a \"label\" that is not an integer"},
        {"{\"ctx\": \"a\", \"endings\": \"b\", \"label\": 0}\n", "needs \"ctx\" (a string), \"endings\" (strings)"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", 5], \"label\": 0}\n", "has endings[1] that is not a string"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n", "line 1: 1 completion; a choice needs 2 or more"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n", "line 1: label 2, but the completions are 0..1"},
        {"{\"ctx\": \"\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n", "line 1: the context is empty"},
        {"plain text\n", "is neither an llm.c eval file (magic 20240522"},
        {"", "is neither an llm.c eval file"},
        {"\n \n", "is neither an llm.c eval file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_bytes(tmp("bad_mc.jsonl"), bad[i].text, strlen(bad[i].text));
        s = sr_mc_open(tmp("bad_mc.jsonl"), NULL, 256, &mc);
        CHECK(s == SR_ERR_FORMAT && contains(sr_errmsg(), bad[i].want) && contains(sr_errmsg(), "bad_mc.jsonl"),
              "bad HellaSwag line %zu: %s", i, s == SR_OK ? "(read)" : sr_errmsg());
        if (s == SR_OK) sr_mc_close(&mc);
    }
    s = sr_mc_open(tmp("no_such_mc.bin"), NULL, 256, &mc);
    CHECK(s == SR_ERR_IO && contains(sr_errmsg(), "no_such_mc.bin"), "a missing set: %s", sr_errmsg());
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test_data.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_bin();
    test_bin32();
    test_raw();
    test_batches();
    test_shards();
    test_shuffle();
    test_records();
    test_eod();
    test_blend();
    test_mc();
    cleanup();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
