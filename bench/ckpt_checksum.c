/* ckpt_checksum.c: what the safetensors data checksum costs (runtime/safetensors.c).
 *
 * Writes one F32 file of N floats (a GPT-2 124M model.safetensors is 124,439,808) with
 * sr_st_write, which hashes the data as it writes it (a chunk at a time, the sum put into
 * the header after), then opens it R times with the
 * checksum checked and R times as a copy whose tag is renamed ("zz64:", left unchecked),
 * then both again reading the tensor as a --load does. The page cache holds the files: an
 * unchecked open only maps; a checked one also makes the hash's pass over the data.
 * Usage: ckpt_checksum DIR [N [R]] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardrt.h"
#include "sr_ckpt.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median seconds of r opens of path (load: and a read of its tensor into out, as a --load does);
 * -1 if one fails */
static double time_opens(const char *path, int r, float *out)
{
    double *t = calloc((size_t)r, sizeof *t);
    for (int i = 0; i < r; i++) {
        sr_st_file f;
        double t0 = now_s();
        sr_status s = sr_st_open(&f, path);
        if (s == SR_OK && out) {
            s = sr_st_read_f32(&f, &f.tensors[0], out);
            if (s != SR_OK) sr_st_close(&f);
        }
        if (s != SR_OK) {
            fprintf(stderr, "ckpt_checksum: %s\n", sr_errmsg());
            free(t);
            return -1.0;
        }
        t[i] = now_s() - t0;
        sr_st_close(&f);
    }
    qsort(t, (size_t)r, sizeof *t, cmp_d);
    double m = t[r / 2];
    free(t);
    return m;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ckpt_checksum DIR [N [R]]\n");
        return 2;
    }
    long long n = argc > 2 ? atoll(argv[2]) : 124439808LL;
    int r = argc > 3 ? atoi(argv[3]) : 7;
    if (n <= 0 || r <= 0) return 2;
    char checked[4096], renamed[4096];
    snprintf(checked, sizeof checked, "%s/checked.safetensors", argv[1]);
    snprintf(renamed, sizeof renamed, "%s/unchecked.safetensors", argv[1]);
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) return 1;
    for (long long i = 0; i < n; i++) x[i] = (float)(i % 1000003) * 1e-3f;
    int64_t dims[1] = {n};
    sr_st_entry e[1] = {{"w", 1, dims, x}};
    double t0 = now_s();
    if (sr_st_write(checked, e, 1, NULL, 0) != SR_OK) {
        fprintf(stderr, "ckpt_checksum: %s\n", sr_errmsg());
        return 1;
    }
    double tw = now_s() - t0;
    /* the same bytes with the tag renamed: sr_st_open leaves a tag it does not know alone */
    FILE *in = fopen(checked, "rb"), *out = fopen(renamed, "wb");
    if (!in || !out) return 1;
    static char buf[1 << 20];
    size_t k, total = 0;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) {
        for (size_t i = 8; total == 0 && i + 5 <= k; i++) /* the header, in the first chunk */
            if (memcmp(buf + i, "sr64:", 5) == 0) {
                memcpy(buf + i, "zz64:", 5);
                break;
            }
        fwrite(buf, 1, k, out);
        total += k;
    }
    fclose(in);
    if (fclose(out) != 0) return 1;
    double to = time_opens(checked, r, NULL), tu = time_opens(renamed, r, NULL);
    double lo = time_opens(checked, r, x), lu = time_opens(renamed, r, x);
    if (to < 0 || tu < 0 || lo < 0 || lu < 0) return 1;
    double gb = (double)n * 4 / 1e9;
    printf("%.3f GB of F32: sr_st_write %.3f s (hash, write, fsync); medians of %d: sr_st_open checked %.4f s, "
           "unchecked %.4f s (the checksum's pass %.1f GB/s, page faults of the mapping included); open and "
           "read all: checked %.4f s, unchecked %.4f s (+%.0f%%)\n",
           gb, tw, r, to, tu, to > tu ? gb / (to - tu) : 0.0, lo, lu, lu > 0 ? 100.0 * (lo - lu) / lu : 0.0);
    free(x);
    return 0;
}
