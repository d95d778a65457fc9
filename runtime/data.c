/* data.c: llm.c token shards, text and raw byte files, one or a pattern of
 * many read as one stream; llm.c batch order.
 *
 * Files are mmap'ed read-only: a GPT-2 shard is 200 MB and every rank only
 * touches the windows it trains on. Tokens are decoded byte by byte, so the
 * code does not depend on host endianness or alignment.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sr_data.h"

#define HEADER_BYTES (SR_DATA_HEADER_INTS * 4)

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static int32_t file_token(const sr_data_file *f, int64_t i)
{
    if (f->ids) return f->ids[i];
    if (f->is_bin && f->width == 4) return le32(f->tok + 4 * i); /* ids below 2^31: checked at open */
    if (f->is_bin) {
        const unsigned char *p = f->tok + 2 * i;
        return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
    }
    return f->tok[i];
}

/* The file that holds stream token i (0 <= i < n_tokens). */
static const sr_data_file *file_of(const sr_data *d, int64_t i)
{
    int lo = 0, hi = d->n_files - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->files[mid].first <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &d->files[lo];
}

int32_t sr_data_token(const sr_data *d, int64_t i)
{
    const sr_data_file *f = file_of(d, i);
    return file_token(f, i - f->first);
}

static void close_file(sr_data_file *f)
{
    if (f->map) munmap(f->map, f->map_len);
    free(f->ids);
    free(f->loss);
    free(f->path);
    memset(f, 0, sizeof *f);
}

void sr_data_close(sr_data *d)
{
    for (int i = 0; i < d->n_parts; i++) sr_data_close(&d->parts[i]);
    for (int i = 0; !d->n_parts && i < d->n_files; i++) close_file(&d->files[i]);
    free(d->parts);
    free(d->share);
    free(d->cursor);
    free(d->files);
    free(d->path);
    memset(d, 0, sizeof *d);
}

/* Interprets the mapped bytes: header checks for .bin, raw bytes otherwise. */
static sr_status parse_layout(sr_data_file *d, const char *path, const unsigned char *b, size_t size)
{
    int32_t magic = size >= 4 ? le32(b) : 0;
    if (magic == SR_DATA_MAGIC || magic == SR_DATA_MAGIC_U32) {
        int wide = magic == SR_DATA_MAGIC_U32, want_version = wide ? SR_DATA_VERSION_U32 : SR_DATA_VERSION;
        if (size < HEADER_BYTES)
            return sr_seterr(SR_ERR_FORMAT,
                             "file %s starts with the llm.c token magic %d but has only %zu "
                             "bytes, fewer than the %d-byte header; re-create it",
                             path, (int)magic, size, HEADER_BYTES);
        int32_t version = le32(b + 4), count = le32(b + 8);
        if (version != want_version)
            return sr_seterr(SR_ERR_FORMAT,
                             "file %s is an llm.c token file (magic %d) of version %d; only version %d "
                             "(%s tokens) is supported with that magic",
                             path, (int)magic, (int)version, want_version, wide ? "uint32" : "uint16");
        uint64_t want = (uint64_t)HEADER_BYTES + (wide ? 4 : 2) * (uint64_t)(uint32_t)count;
        if (count < 0 || want != (uint64_t)size)
            return sr_seterr(SR_ERR_FORMAT,
                             "file %s: header says %ld tokens (%llu bytes with the header) but "
                             "the file has %zu bytes; it is truncated or corrupt",
                             path, (long)count, (unsigned long long)want, size);
        d->is_bin = 1;
        d->width = wide ? 4 : 2;
        d->n = count;
        d->tok = b + HEADER_BYTES;
    } else {
        d->is_bin = 0;
        d->n = (int64_t)size;
        d->tok = b;
    }
    return SR_OK;
}

/* Text: tokenized once (JSON Lines records with their loss mask), the mapping released. */
static sr_status tokenize(sr_data_file *d, const char *path, const sr_tokenizer *tok)
{
    size_t n;
    if (sr_data_is_records((const char *)d->tok, (size_t)d->n)) {
        sr_records rec;
        SR_CHECK(sr_data_read_records(path, (const char *)d->tok, (size_t)d->n, tok, &rec));
        d->ids = rec.ids;
        d->records = rec.records;
        n = (size_t)rec.n;
        if (rec.n_loss < rec.n) d->loss = rec.loss; /* all ones: no mask to keep */
        else free(rec.loss);
    } else {
        if (!tok) return SR_OK; /* raw bytes, read from the mapping */
        sr_status s = sr_tok_encode(tok, (const char *)d->tok, (size_t)d->n, &d->ids, &n);
        if (s != SR_OK)
            return sr_seterr(s, "cannot tokenize %s with %s: %s", path, sr_tok_path(tok), sr_errmsg());
    }
    if (d->map) munmap(d->map, d->map_len);
    d->map = NULL;
    d->map_len = 0;
    d->tok = NULL;
    d->n = (int64_t)n;
    return SR_OK;
}

sr_status sr_map_file(const char *path, const char *what, void **map, size_t *size)
{
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return sr_seterr(SR_ERR_IO, "cannot open %s%s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sr_seterr(SR_ERR_IO, "cannot stat %s%s: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sr_seterr(SR_ERR_IO, "%s%s is not a regular file", what, path);
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return sr_seterr(SR_ERR_IO, "cannot map %s%s: %s", what, path, strerror(e));
        }
        *map = m;
        *size = (size_t)st.st_size;
    }
    close(fd); /* the mapping stays valid */
    return SR_OK;
}

static sr_status open_file(sr_data_file *d, const char *path, int vocab, const sr_tokenizer *tok)
{
    memset(d, 0, sizeof *d);
    void *map;
    size_t size;
    SR_CHECK(sr_map_file(path, "data file ", &map, &size));
    d->map = map;
    d->map_len = size;
    d->path = strdup(path);
    if (!d->path) {
        close_file(d);
        return sr_seterr(SR_ERR_NOMEM, "out of memory opening %s", path);
    }
    static const unsigned char empty[1];
    sr_status s = parse_layout(d, path, map ? (const unsigned char *)map : empty, size);
    if (s == SR_OK && !d->is_bin) s = tokenize(d, path, tok);
    if (s != SR_OK) {
        close_file(d);
        return s;
    }
    /* Check every token once here, so training never indexes an embedding
     * out of bounds however far it runs. */
    if ((vocab < 65536 || d->ids || d->width == 4) && !(vocab >= 256 && !d->is_bin && !d->ids)) {
        for (int64_t i = 0; i < d->n; i++) {
            int32_t t = file_token(d, i);
            if (t < 0 || t >= vocab) { /* < 0: a uint32 id of 2^31 or more */
                s = sr_seterr(SR_ERR_FORMAT,
                              "file %s: token %lld at position %ld is outside the model's "
                              "vocabulary of %d; was it tokenized for another model?",
                              path, d->width == 4 ? (long long)(uint32_t)t : (long long)t, (long)i, vocab);
                close_file(d);
                return s;
            }
        }
    }
    return SR_OK;
}

static int is_pattern(const char *path)
{
    return strpbrk(path, "*?[") != NULL;
}

/* A number's word: all of it a finite double */
static int is_number(const char *w, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(w, &end);
    return end != w && *end == '\0' && errno == 0 && isfinite(*v);
}

/* 1 when path reads as a blend: no such file, words separated by blanks, the first a number */
static int is_blend(const char *path)
{
    double v;
    char first[64];
    size_t n = strcspn(path, " \t");
    if (path[n] == '\0' || n == 0 || n >= sizeof first || access(path, F_OK) == 0) return 0;
    memcpy(first, path, n);
    first[n] = '\0';
    return is_number(first, &v);
}

/* "W1 PATH1 W2 PATH2 ...": each path opened as a part, the weights made integer
 * shares of a million (the picks then agree on every rank and build) */
static sr_status open_blend(sr_data *d, const char *spec, int vocab, const sr_tokenizer *tok)
{
    char *words = strdup(spec), *save = NULL;
    int n = 0, cap = 0;
    char **w = NULL;
    sr_status s = words ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory opening %s", spec);
    for (char *t = words ? strtok_r(words, " \t", &save) : NULL; t && s == SR_OK; t = strtok_r(NULL, " \t", &save)) {
        if (n == cap) {
            char **g = realloc(w, sizeof *w * (size_t)(cap = cap ? 2 * cap : 8));
            if (!g) s = sr_seterr(SR_ERR_NOMEM, "out of memory opening %s", spec);
            else w = g;
        }
        if (s == SR_OK) w[n++] = t;
    }
    double *weight = s == SR_OK ? calloc((size_t)n / 2 + 1, sizeof *weight) : NULL, sum = 0;
    if (s == SR_OK && !weight) s = sr_seterr(SR_ERR_NOMEM, "out of memory opening %s", spec);
    if (s == SR_OK && n % 2)
        s = sr_seterr(SR_ERR_USAGE, "data blend \"%s\" has %d words: a blend is pairs of a weight and a "
                      "file or pattern, as \"0.7 web_*.bin 0.3 code.bin\"", spec, n);
    for (int i = 0; s == SR_OK && i < n; i += 2) {
        if (!is_number(w[i], &weight[i / 2]) || !(weight[i / 2] > 0))
            s = sr_seterr(SR_ERR_USAGE, "data blend \"%s\": the weight of %s, \"%s\", is not a positive number",
                          spec, w[i + 1], w[i]);
        else
            sum += weight[i / 2];
    }
    int np = n / 2;
    d->path = strdup(spec);
    d->parts = calloc((size_t)np, sizeof *d->parts);
    d->share = calloc((size_t)np, sizeof *d->share);
    d->cursor = calloc((size_t)(1 + 2 * np), sizeof *d->cursor);
    if (s == SR_OK && (!d->path || !d->parts || !d->share || !d->cursor))
        s = sr_seterr(SR_ERR_NOMEM, "out of memory opening %s", spec);
    d->is_bin = 1;
    for (int i = 0; s == SR_OK && i < np; i++) {
        d->share[i] = llround(weight[i] / sum * 1e6);
        if (d->share[i] < 1) {
            s = sr_seterr(SR_ERR_USAGE, "data blend \"%s\": the weight of %s, %s, is under a millionth of "
                          "the total %g; raise it or leave the file out", spec, w[2 * i + 1], w[2 * i], sum);
            break;
        }
        s = sr_data_open(&d->parts[i], w[2 * i + 1], vocab, tok);
        if (s != SR_OK) break;
        const sr_data *p = &d->parts[i];
        d->n_parts++;
        d->share_sum += d->share[i];
        d->n_tokens += p->n_tokens;
        d->is_bin &= p->is_bin;
        d->n_files += p->n_files;
        d->records += p->records;
        d->n_loss += p->n_loss;
        d->masked |= p->masked;
    }
    free(weight);
    free(w);
    free(words);
    if (s != SR_OK) sr_data_close(d);
    return s;
}

sr_status sr_data_open(sr_data *d, const char *path, int vocab, const sr_tokenizer *tok)
{
    memset(d, 0, sizeof *d);
    if (is_blend(path)) return open_blend(d, path, vocab, tok);
    glob_t g;
    memset(&g, 0, sizeof g);
    size_t n = 1;
    if (is_pattern(path)) {
        int rc = glob(path, 0, NULL, &g);
        if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
            globfree(&g);
            return sr_seterr(SR_ERR_IO, "no data file matches %s", path);
        }
        if (rc != 0) {
            globfree(&g);
            return sr_seterr(rc == GLOB_NOSPACE ? SR_ERR_NOMEM : SR_ERR_IO,
                             "cannot list the data files of %s", path);
        }
        n = g.gl_pathc;
    }
    d->path = strdup(path);
    d->files = calloc(n, sizeof *d->files);
    sr_status s = d->path && d->files ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory opening %s", path);
    d->is_bin = 1;
    for (size_t i = 0; i < n && s == SR_OK; i++) {
        sr_data_file *f = &d->files[d->n_files];
        s = open_file(f, is_pattern(path) ? g.gl_pathv[i] : path, vocab, tok);
        if (s != SR_OK) break;
        d->is_bin &= f->is_bin;
        if (f->n == 0 && n > 1) { /* an empty shard adds nothing to the stream */
            close_file(f);
            continue;
        }
        f->first = d->n_tokens;
        d->n_tokens += f->n;
        d->records += f->records;
        d->masked |= f->loss != NULL;
        if (!f->loss) d->n_loss += f->n;
        for (int64_t t = 0; f->loss && t < f->n; t++) d->n_loss += f->loss[t];
        d->n_files++;
    }
    globfree(&g);
    if (s != SR_OK) sr_data_close(d);
    return s;
}

/* one splitmix64 step */
static uint64_t mix64(uint64_t x)
{
    return sr_mix64(x + 0x9e3779b97f4a7c15ull);
}

void sr_data_shuffle(sr_data *d, uint64_t seed)
{
    d->shuffle = 1;
    d->seed = seed;
    for (int i = 0; i < d->n_parts; i++) sr_data_shuffle(&d->parts[i], mix64(seed ^ mix64((uint64_t)i + 1)));
}

void sr_data_mask_eod(sr_data *d, int32_t eod)
{
    d->mask_eod = 1;
    d->eod = eod;
    d->masked = 1;
    for (int i = 0; i < d->n_parts; i++) sr_data_mask_eod(&d->parts[i], eod);
}

/* A bijection of [0, n) keyed by key, in O(1) memory: a 4-round Feistel
 * network on the smallest even number of bits covering n (a permutation of
 * [0, 2^bits)), applied again while the value falls outside [0, n) (cycle
 * walking; 2^bits < 4n, so a few times at most on average). */
static int64_t permute(int64_t i, int64_t n, uint64_t key)
{
    int bits = 2;
    while (bits < 62 && (1ull << bits) < (uint64_t)n) bits += 2;
    int h = bits / 2;
    uint64_t mask = (1ull << h) - 1, x = (uint64_t)i;
    do {
        uint64_t l = x >> h, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t t = l ^ (mix64(key ^ (round << 58) ^ r) & mask);
            l = r;
            r = t;
        }
        x = l << h | r;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t sr_data_part_windows(const sr_data *part, int T)
{
    return T > 0 && part->n_tokens > 0 ? (part->n_tokens - 1) / T : 0;
}

int64_t sr_data_batches_per_epoch(const sr_data *d, int G, int T)
{
    if (G <= 0 || T <= 0 || d->n_tokens < 1) return 0;
    if (!d->n_parts) return (d->n_tokens - 1) / ((int64_t)G * T);
    int64_t e = INT64_MAX; /* part i's pass lasts about W_i * share_sum / share_i sequences */
    for (int i = 0; i < d->n_parts; i++) {
        int64_t w = (int64_t)((double)sr_data_part_windows(&d->parts[i], T) * (double)d->share_sum /
                              (double)d->share[i]) / G;
        if (w < e) e = w;
    }
    return e > 1 ? e : 1;
}

sr_status sr_data_check(const sr_data *d, int G, int T)
{
    if (G <= 0 || T <= 0) return sr_seterr(SR_ERR_ARG, "batch %d x %d is not positive", G, T);
    for (int i = 0; i < d->n_parts; i++)
        if (sr_data_part_windows(&d->parts[i], T) == 0)
            return sr_seterr(SR_ERR_FORMAT,
                             "%s, of the data blend, has %ld tokens, fewer than one sequence of %d + 1; "
                             "use more data or a smaller --seq",
                             d->parts[i].path, (long)d->parts[i].n_tokens, T);
    if (d->n_parts) return SR_OK;
    if (sr_data_batches_per_epoch(d, G, T) == 0 && d->n_files > 1)
        return sr_seterr(SR_ERR_FORMAT,
                         "the %d files of %s have %ld tokens, fewer than one batch of %d x %d + 1; "
                         "use more data or a smaller --batch/--seq",
                         d->n_files, d->path, (long)d->n_tokens, G, T);
    if (sr_data_batches_per_epoch(d, G, T) == 0)
        return sr_seterr(SR_ERR_FORMAT,
                         "file %s has %ld tokens, fewer than one batch of %d x %d + 1; use a "
                         "larger file or a smaller --batch/--seq",
                         d->path, (long)d->n_tokens, G, T);
    return SR_OK;
}

/* 1 if stream token i counts as a target */
static int is_loss(const sr_data *d, int64_t i)
{
    if (!d->masked) return 1;
    const sr_data_file *f = file_of(d, i);
    return !f->loss || f->loss[i - f->first];
}

/* Slot q of a pass of n slots, in pass p's order. */
static int64_t pass_slot(const sr_data *d, int64_t q, int64_t n, int64_t p)
{
    return d->shuffle ? permute(q, n, mix64(d->seed ^ mix64((uint64_t)p))) : q;
}

/* The first stream token of sequence j of step's global batch (E batches a pass). */
static int64_t seq_base(const sr_data *d, int64_t step, int64_t E, int G, int T, int j)
{
    return pass_slot(d, (step % E) * G + j, E * G, step / E) * T; /* the sequence's slot in this pass */
}

/* The blend's part the sequence after cnt[] (each part's count so far) comes
 * from: the one furthest below its share of s + 1 sequences. */
static int blend_pick(const sr_data *d, int64_t s, const int64_t *cnt)
{
    int best = 0;
    int64_t best_gap = INT64_MIN;
    for (int i = 0; i < d->n_parts; i++) {
        int64_t gap = d->share[i] * (s + 1) - d->share_sum * cnt[i];
        if (gap > best_gap) best = i, best_gap = gap;
    }
    return best;
}

/* Each part's count before sequence s0 (the cursor walked there, from 0 when
 * past it), copied into the scratch counts that blend_take moves on. */
static int64_t *blend_seek(const sr_data *d, int64_t s0)
{
    int64_t *cur = d->cursor, *cnt = cur + 1, n = d->n_parts;
    if (cur[0] > s0) memset(cur, 0, sizeof *cur * (size_t)(1 + n));
    for (; cur[0] < s0; cur[0]++) cnt[blend_pick(d, cur[0], cnt)]++;
    memcpy(cnt + n, cnt, sizeof *cnt * (size_t)n);
    return cnt + n;
}

/* Blend sequence s (cnt: each part's count before it, then counting it): its
 * part, and the first token of its window there. */
static const sr_data *blend_take(const sr_data *d, int64_t s, int64_t *cnt, int T, int64_t *base)
{
    int i = blend_pick(d, s, cnt);
    const sr_data *p = &d->parts[i];
    int64_t c = cnt[i]++, w = sr_data_part_windows(p, T);
    *base = pass_slot(p, c % w, w, c / w) * T;
    return p;
}

/* One sequence from stream token base: inputs (T), targets (T, -1 where no loss). */
static void read_seq(const sr_data *d, int64_t base, int T, int32_t *in, int32_t *tg)
{
    const sr_data_file *f = file_of(d, base);
    if (base + T + 1 <= f->first + f->n) { /* within one file, as nearly every window is */
        int64_t at = base - f->first;
        for (int t = 0; t < T; t++) {
            in[t] = file_token(f, at + t);
            tg[t] = f->loss && !f->loss[at + t + 1] ? -1 : file_token(f, at + t + 1);
        }
    } else {
        for (int t = 0; t < T; t++) {
            in[t] = sr_data_token(d, base + t);
            tg[t] = is_loss(d, base + t + 1) ? sr_data_token(d, base + t + 1) : -1;
        }
    }
    for (int t = 0; d->mask_eod && t < T; t++)
        if (in[t] == d->eod) tg[t] = -1;
}

/* The loss targets of the sequence read_seq reads from base. */
static int64_t count_seq(const sr_data *d, int64_t base, int T)
{
    if (!d->masked) return T;
    int64_t c = 0;
    const sr_data_file *f = file_of(d, base);
    if (base + T + 1 <= f->first + f->n) { /* within one file: no search per token */
        int64_t at = base - f->first;
        const uint8_t *l = f->loss ? f->loss + at + 1 : NULL;
        if (d->mask_eod)
            for (int t = 0; t < T; t++) c += (l ? l[t] : 1) && file_token(f, at + t) != d->eod;
        else if (l)
            for (int t = 0; t < T; t++) c += l[t];
        else
            c += T;
        return c;
    }
    for (int t = 0; t < T; t++)
        c += is_loss(d, base + t + 1) && !(d->mask_eod && sr_data_token(d, base + t) == d->eod);
    return c;
}

sr_status sr_data_batch(const sr_data *d, int64_t step, int G, int T, int first_seq,
                        int n_seq, int32_t *inputs, int32_t *targets)
{
    SR_CHECK(sr_data_check(d, G, T));
    if (step < 0 || first_seq < 0 || n_seq < 0 || first_seq > G - n_seq)
        return sr_seterr(SR_ERR_ARG,
                         "sequences [%d, %d) of step %ld are outside a global batch of %d",
                         first_seq, first_seq + n_seq, (long)step, G);
    int64_t E = sr_data_batches_per_epoch(d, G, T), s0 = step * G, base;
    int64_t *cnt = d->n_parts ? blend_seek(d, s0) : NULL;
    for (int j = 0; cnt && j < first_seq; j++) blend_take(d, s0 + j, cnt, T, &base); /* the ranks before */
    for (int j = first_seq; j < first_seq + n_seq; j++) {
        const sr_data *src = d;
        if (cnt) src = blend_take(d, s0 + j, cnt, T, &base);
        else base = seq_base(d, step, E, G, T, j);
        read_seq(src, base, T, inputs + (size_t)(j - first_seq) * T, targets + (size_t)(j - first_seq) * T);
    }
    return SR_OK;
}

int64_t sr_data_loss_targets(const sr_data *d, int64_t step, int G, int T)
{
    int64_t E = sr_data_batches_per_epoch(d, G, T), c = 0, base;
    if (!d->masked || E == 0) return (int64_t)G * T;
    int64_t *cnt = d->n_parts ? blend_seek(d, step * G) : NULL;
    for (int j = 0; j < G; j++) {
        const sr_data *src = d;
        if (cnt) src = blend_take(d, step * G + j, cnt, T, &base);
        else base = seq_base(d, step, E, G, T, j);
        c += count_seq(src, base, T);
    }
    return c;
}
