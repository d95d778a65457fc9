/* records.c: the cost of JSON Lines prompt-completion records as training data
 * (runtime/records.c, runtime/data.c): reading them at start-up, and the
 * per-step count of a global batch's loss targets that the masked loss
 * divides by, next to reading the batch's tokens itself (which every step
 * pays anyway). Text as bytes (no tokenizer: the tokenizer's own speed is
 * bench/tokenize_bench.sh's).
 * Usage: records DIR [RECORDS [G [T]]] (defaults 200000, 512, 1024: llm.c's
 * GPT-2 step of 524288 tokens). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sr_data.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [RECORDS [G [T]]]\n", argv[0]);
        return 2;
    }
    long nrec = argc > 2 ? atol(argv[2]) : 200000;
    int G = argc > 3 ? atoi(argv[3]) : 512, T = argc > 4 ? atoi(argv[4]) : 1024;
    char path[4096];
    snprintf(path, sizeof path, "%s/records.jsonl", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    srand(1);
    for (long i = 0; i < nrec; i++) { /* prompts and completions of 5 to 100 bytes */
        int p = 5 + rand() % 96, c = 5 + rand() % 96;
        fputs("{\"prompt\": \"", f);
        for (int k = 0; k < p; k++) fputc('a' + k % 26, f);
        fputs("\", \"completion\": \"", f);
        for (int k = 0; k < c; k++) fputc('A' + k % 26, f);
        fputs("\"}\n", f);
    }
    fclose(f);
    sr_data d;
    double t0 = now();
    if (sr_data_open(&d, path, 256, NULL) != SR_OK) {
        fprintf(stderr, "%s\n", sr_errmsg());
        return 1;
    }
    double t1 = now();
    printf("open: %ld records, %lld tokens (%.1f%% loss targets) in %.3f s: %.1f M tokens/s\n", nrec,
           (long long)d.n_tokens, 100.0 * (double)d.n_loss / (double)d.n_tokens, t1 - t0,
           (double)d.n_tokens / (t1 - t0) / 1e6);
    int32_t *in = malloc(sizeof *in * (size_t)G * T), *tg = malloc(sizeof *tg * (size_t)G * T);
    int64_t E = sr_data_batches_per_epoch(&d, G, T), steps = E < 20 ? E : 20;
    /* the records' mask, then with --eod-mask-loss on top ('A', a completion's first byte) */
    for (int pass = 0; pass < 4; pass++) {
        if (pass == 1 || pass == 3) sr_data_shuffle(&d, 7);
        if (pass == 2) {
            sr_data_close(&d);
            if (sr_data_open(&d, path, 256, NULL) != SR_OK) return 1;
            sr_data_mask_eod(&d, 'A');
        }
        long long c = 0;
        t0 = now();
        for (int64_t k = 0; k < steps; k++) c += sr_data_loss_targets(&d, k, G, T);
        t1 = now();
        for (int64_t k = 0; k < steps; k++) sr_data_batch(&d, k, G, T, 0, G, in, tg);
        double t2 = now();
        printf("%s%s, %d x %d: count of the loss targets %.3f ms a step (mean %.0f), reading the batch %.3f ms\n",
               pass & 1 ? "shuffled" : "in order", pass >= 2 ? ", --eod-mask-loss" : "", G, T,
               (t1 - t0) / (double)steps * 1e3, (double)c / (double)steps, (t2 - t1) / (double)steps * 1e3);
    }
    free(in);
    free(tg);
    sr_data_close(&d);
    remove(path);
    return 0;
}
