/* tokenize.c: `shardc tokenize --tokenizer PATH FILE... -o OUT.bin`: text
 * files into one llm.c token file, the format the training programs read
 * fastest (mapped, no tokenizing at start-up on every rank).
 *
 * The tokenizer is the runtime's (runtime/tokenizer.c), so a file tokenized
 * here holds exactly the tokens a program's --data FILE.txt --tokenizer PATH
 * would train on. The output is written to a temporary file beside it and
 * renamed when complete: a failure leaves no partial token file.
 *
 * One entry point, tokenize_main. Exit 0 with the file written, 1 for a
 * file or tokenizer that cannot be read, 2 on a usage error.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardc.h"
#include "sr_data.h"
#include "sr_tokenizer.h"

int tokenize_main(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shardc tokenize --tokenizer PATH [--eot] FILE... -o OUT.bin\n"
            "\n"
            "Tokenizes text files with a byte-level BPE (GPT-2's, or Llama 3's or Qwen2's\n"
            "tokenizer.json) and writes one llm.c token file, the --data format of the\n"
            "training programs: a 256-int header, then uint16 tokens (llm.c's GPT-2\n"
            "files), or uint32 tokens when the vocabulary has more than 65536 (llm.c's\n"
            "Llama 3 files, magic 20240801). The files are tokenized one by one and\n"
            "concatenated. A JSON Lines file of {\"text\": ...} records gives each text's\n"
            "tokens then <|endoftext|>, the stream --data FILE.jsonl trains on;\n"
            "prompt-completion records are refused (a token file has no loss mask).\n"
            "\n"
            "options:\n"
            "  --tokenizer PATH  tokenizer.json, vocab.json (+ merges.txt beside it),\n"
            "                    encoder.json (+ vocab.bpe), or a directory with one\n"
            "  --eot             put <|endoftext|> (Llama 3: <|end_of_text|>) before each\n"
            "                    file, as llm.c's data scripts do before each document\n"
            "  -o OUT.bin        the token file (written whole, then renamed into place)\n"
            "  -h, --help        show this help\n"
            "\n"
            "Exit status: 0 written, 1 a file or the tokenizer cannot be read, 2 usage.\n");
}

static int uerr(const char *fmt, const char *arg)
{
    return drv_usage_error("tokenize", fmt, arg);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}

/* Appends the tokens of one text file to f, width bytes each (2 or 4,
 * little-endian); *count grows by their number. */
static sr_status one_file(const sr_tokenizer *t, const char *path, int eot, int width, FILE *f, uint64_t *count)
{
    void *map;
    size_t size;
    SR_CHECK(sr_map_file(path, "", &map, &size));
    int32_t *ids;
    size_t n;
    sr_status s;
    if (map && sr_data_is_records(map, size)) { /* JSON Lines: the stream --data FILE.jsonl trains on */
        sr_records rec;
        s = sr_data_read_records(path, map, size, t, &rec);
        if (s == SR_OK && rec.n_loss < rec.n) {
            free(rec.ids);
            s = sr_seterr(SR_ERR_FORMAT, "%s holds prompt-completion records, whose loss mask a token file "
                          "cannot keep; give it to the training program as --data %s", path, path);
        }
        free(rec.loss); /* NULL after a failure */
        ids = rec.ids;
        n = (size_t)rec.n;
        eot = 0; /* each record already ends with <|endoftext|> */
    } else {
        s = sr_tok_encode(t, map ? (const char *)map : "", size, &ids, &n);
    }
    if (map) munmap(map, size);
    if (s != SR_OK) return s;
    unsigned char buf[4 * 4096];
    size_t k = 0;
    for (size_t i = 0; i < n + (eot ? 1 : 0) && s == SR_OK; i++) {
        uint32_t id = eot ? (uint32_t)(i ? ids[i - 1] : sr_tok_eot(t)) : (uint32_t)ids[i];
        for (int b = 0; b < width; b++) buf[k++] = (unsigned char)(id >> (8 * b));
        if (k == sizeof buf) {
            if (fwrite(buf, 1, k, f) != k) s = sr_seterr(SR_ERR_IO, "write error: %s", strerror(errno));
            k = 0;
        }
    }
    if (k && s == SR_OK && fwrite(buf, 1, k, f) != k)
        s = sr_seterr(SR_ERR_IO, "write error: %s", strerror(errno));
    free(ids);
    *count += n + (eot ? 1 : 0);
    return s;
}

int tokenize_main(int argc, char **argv)
{
    const char *tokp = NULL, *out = NULL;
    int eot = 0, nfiles = 0;
    const char **files = calloc((size_t)argc, sizeof *files);
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(files);
            return 0;
        }
        if (!strcmp(a, "--eot")) {
            eot = 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) {
                free(files);
                return uerr("option '%s' needs a value", a);
            }
            *(a[1] == 'o' ? &out : &tokp) = argv[++i];
        } else if (!strncmp(a, "--tokenizer=", 12)) {
            tokp = a + 12;
        } else if (a[0] == '-' && a[1]) {
            free(files);
            return uerr("unknown option '%s'", a);
        } else {
            files[nfiles++] = a;
        }
    }
    const char *missing = !tokp ? "missing --tokenizer PATH (tokenizer.json, vocab.json + merges.txt, "
                                  "or their directory)"
                          : !out || !*out ? "missing -o OUT.bin"
                          : nfiles == 0   ? "no text files to tokenize"
                                          : NULL;
    if (missing) {
        free(files);
        return uerr("%s", missing);
    }

    sr_tokenizer *t = NULL;
    sr_status s = sr_tok_load(tokp, &t);
    if (s == SR_OK && !sr_tok_can_encode(t))
        s = sr_seterr(SR_ERR_ARG, "tokenizer %s (%s) can only decode; give tokenizer.json or "
                      "vocab.json + merges.txt", sr_tok_path(t), sr_tok_kind(t));
    if (s == SR_OK && eot && sr_tok_eot(t) < 0)
        s = sr_seterr(SR_ERR_ARG, "--eot: tokenizer %s has no <|endoftext|>", sr_tok_path(t));
    int width = s == SR_OK && sr_tok_size(t) > 65536 ? 4 : 2; /* uint16 ids while they fit */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
    FILE *f = NULL;
    if (s == SR_OK && !(f = fopen(tmp, "wb")))
        s = sr_seterr(SR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    unsigned char header[4 * SR_DATA_HEADER_INTS] = {0};
    if (s == SR_OK && fwrite(header, 1, sizeof header, f) != sizeof header) /* the count comes last */
        s = sr_seterr(SR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    uint64_t count = 0, bytes = 0;
    for (int i = 0; i < nfiles && s == SR_OK; i++) {
        struct stat st;
        if (stat(files[i], &st) == 0) bytes += (uint64_t)st.st_size;
        s = one_file(t, files[i], eot, width, f, &count);
    }
    if (s == SR_OK && count > INT32_MAX)
        s = sr_seterr(SR_ERR_ARG, "%llu tokens do not fit one llm.c token file (at most %d); "
                      "tokenize the files into several", (unsigned long long)count, INT32_MAX);
    if (s == SR_OK) {
        put32(header, width == 4 ? SR_DATA_MAGIC_U32 : SR_DATA_MAGIC);
        put32(header + 4, width == 4 ? SR_DATA_VERSION_U32 : SR_DATA_VERSION);
        put32(header + 8, (uint32_t)count);
        if (fseek(f, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, f) != sizeof header ||
            fflush(f) != 0 || fsync(fileno(f)) != 0)
            s = sr_seterr(SR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (f && fclose(f) != 0 && s == SR_OK) s = sr_seterr(SR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (s == SR_OK && rename(tmp, out) != 0)
        s = sr_seterr(SR_ERR_IO, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    if (s != SR_OK) {
        if (f) unlink(tmp);
        fprintf(stderr, "shardc: error: %s\n", sr_errmsg());
    } else {
        fprintf(stderr, "%s: %llu tokens (uint%d) from %d file%s (%.1f MB of text), tokenizer %s\n", out,
                (unsigned long long)count, 8 * width, nfiles, nfiles == 1 ? "" : "s", (double)bytes / 1e6,
                sr_tok_path(t));
    }
    sr_tok_free(t);
    free(files);
    return s == SR_OK ? 0 : 1;
}
