/* sr_data.h: token data for training and evaluation.
 *
 * Two file formats, and a glob pattern reads many files as one stream:
 *  - llm.c token shards (.bin): 256 little-endian int32 header words,
 *    header[0] = SR_DATA_MAGIC, header[1] = SR_DATA_VERSION, header[2] = the
 *    token count, then that many little-endian uint16 tokens (GPT-2's); or
 *    SR_DATA_MAGIC_U32 and SR_DATA_VERSION_U32 with uint32 tokens (llm.c's
 *    Llama 3 files, for vocabularies above 65536);
 *  - JSON Lines records (records.c): {"text"}, {"prompt", "completion"} or
 *    {"input_ids"[, "completion_mask"]} objects, one a line, packed into the
 *    stream with a loss mask: a target whose token is a prompt's gets -1;
 *  - anything else: text, tokenized at open by a tokenizer when one is given
 *    (sr_tokenizer.h), else raw bytes, one token per byte (vocabulary 256).
 *
 * A blend, "W1 PATH1 W2 PATH2 ..." (Megatron-LM's weighted --data-path), mixes
 * sources, each a file or pattern as above: every sequence comes from the
 * source furthest below its share W/sum(W) so far, and each source is read in
 * windows of its own, one pass after another.
 *
 * Batches follow llm.c's sequential order and are a pure function of the
 * optimizer step, so a run resumed from a checkpoint, or split over any number
 * of data-parallel ranks and microbatches, reads exactly the same tokens.
 */
#ifndef SR_DATA_H
#define SR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "shardrt.h"
#include "sr_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SR_DATA_MAGIC 20240520
#define SR_DATA_VERSION 1
#define SR_DATA_MAGIC_U32 20240801
#define SR_DATA_VERSION_U32 7
#define SR_DATA_HEADER_INTS 256

/* One file of the stream. */
typedef struct sr_data_file {
    char *path;
    int64_t first, n;        /* its tokens are [first, first + n) of the stream */
    int is_bin;              /* 1: llm.c .bin, 0: text (ids) or raw bytes */
    int width;               /* bytes per token of a .bin: 2 or 4 */
    const unsigned char *tok;/* first token: uint16/uint32 LE (is_bin) or bytes */
    int32_t *ids;            /* text tokenized at open (then tok is unused) */
    uint8_t *loss;           /* records: 0 where the token is no target (a prompt's), else NULL */
    int64_t records;         /* JSON Lines records read, 0 for other formats */
    void *map;               /* the whole file, mmap'ed (NULL when empty or tokenized) */
    size_t map_len;
} sr_data_file;

typedef struct sr_data {
    char *path;              /* as given to sr_data_open: a file or a pattern */
    int64_t n_tokens;        /* of all files */
    int is_bin;              /* 1: every file is an llm.c .bin */
    int n_files;
    sr_data_file *files;     /* in stream order, empty files left out */
    int shuffle;             /* sr_data_shuffle: sequences in a permuted order */
    uint64_t seed;
    int64_t records;         /* JSON Lines records in all files */
    int64_t n_loss;          /* tokens that count as targets: n_tokens unless masked */
    int masked;              /* some targets are not: a file's loss mask has a 0, or mask_eod */
    int mask_eod;            /* sr_data_mask_eod: no target after token eod */
    int32_t eod;
    /* a blend: n_parts sources (0: one file or pattern), parts[i] taking share[i]
     * of every share_sum sequences (the weights as integers: exact arithmetic
     * on every rank); the totals above are the parts' */
    int n_parts;
    struct sr_data *parts;
    int64_t *share, share_sum;
    int64_t *cursor;         /* [0]: sequence s, [1..n_parts]: each part's sequences
                              * before s, then n_parts of scratch; moved by the
                              * (const) readers, so one thread reads a blend */
} sr_data;

/* JSON Lines records read into tokens and their mask (records.c). */
typedef struct sr_records {
    int32_t *ids;            /* n tokens (malloc'ed) */
    uint8_t *loss;           /* n: 1 where the token counts as a target */
    int64_t n, n_loss, records;
} sr_records;

/* 1 if the file's first line is a JSON object with a record's member ("text",
 * "prompt", "completion" or "input_ids"): the file is read as records. */
int sr_data_is_records(const char *bytes, size_t n);
/* Reads every line of bytes[0 .. n) as a record (blank lines skipped);
 * text through tok, else as bytes, followed by tok's <|endoftext|>.
 * SR_ERR_FORMAT "file PATH line N: ..." for a bad line; SR_ERR_NOMEM. */
sr_status sr_data_read_records(const char *path, const char *bytes, size_t n, const sr_tokenizer *tok,
                               sr_records *out);

/* Maps a regular file read-only: *map (NULL when it is empty; munmap(*map,
 * *size) when done) and *size. SR_ERR_IO "cannot open WHATpath: reason" (and
 * stat, not a regular file, map); what is a prefix such as "data file ". */
sr_status sr_map_file(const char *path, const char *what, void **map, size_t *size);

/* Opens and validates token files: format, size, and every token < vocab.
 * `path` is a file, a blend "W1 PATH1 W2 PATH2 ..." (a path that does not
 * exist but reads as positive weights and paths), or a pattern with * ? [ (glob(3), matches in sorted
 * order, like llm.c's -i "fineweb_train_*.bin") whose files are read as one
 * stream, one after the other. A file that is not an llm.c .bin is
 * tokenized with `tok` when it is not NULL (the whole file, once, held in
 * memory), else read as bytes.
 * Errors (SR_ERR_IO, SR_ERR_FORMAT) name the file and the numbers at fault.
 * On failure *d is left closed (safe to sr_data_close). */
sr_status sr_data_open(sr_data *d, const char *path, int vocab, const sr_tokenizer *tok);
void sr_data_close(sr_data *d);

/* From now on each pass over the data visits its G*E sequences (see
 * sr_data_batch) in a pseudo-random order, another one each pass, a pure
 * function of (seed, pass, position): resumable and layout-independent. */
void sr_data_shuffle(sr_data *d, uint64_t seed);

/* From now on a target whose input is token eod (end of a document) is -1,
 * no loss: packed documents do not learn to predict a document's first
 * token from the end of the one before (Megatron's --eod-mask-loss). */
void sr_data_mask_eod(sr_data *d, int32_t eod);

/* The part's sequences a pass: W = floor((n_tokens - 1) / T). */
int64_t sr_data_part_windows(const sr_data *part, int T);

/* Token i (0 <= i < n_tokens) of a file or pattern. */
int32_t sr_data_token(const sr_data *d, int64_t i);

/* Batches per pass over the data for global batch G x T:
 * E = floor((n_tokens - 1) / (G*T)). 0 when the file is too short. A blend:
 * the batches before a part starts its second pass (at least 1). */
int64_t sr_data_batches_per_epoch(const sr_data *d, int G, int T);
/* SR_OK if the file holds at least one batch of G x T (+1 target), else
 * SR_ERR_FORMAT: "file X has N tokens, fewer than one batch of G x T + 1".
 * A blend's parts need one sequence each (T + 1 tokens). */
sr_status sr_data_check(const sr_data *d, int G, int T);

/* Sequences [first_seq, first_seq + n_seq) of the global batch of optimizer
 * step `step`: sequence j is slot q = (step mod E) * G + j of the pass
 * (shuffled: q = P_p(q), P_p a permutation of [0, E*G) for pass p = step / E),
 * inputs  = tokens[q*T     .. q*T + T)
 * targets = tokens[q*T + 1 .. q*T + T + 1).
 * A blend: sequence s = step * G + j is number c of part i, the part whose
 * count so far is furthest below its share (share[i] * (s + 1) - share_sum *
 * count[i] largest, the first on a tie), read from window c mod W_i of the
 * part's pass c / W_i (W_i = floor((n_i - 1) / T), shuffled within the pass
 * as above).
 * inputs and targets are (n_seq, T); a target that is no loss token (masked
 * by records, or after an end-of-document token: sr_data_mask_eod) is -1,
 * which the loss leaves out. */
sr_status sr_data_batch(const sr_data *d, int64_t step, int G, int T, int first_seq,
                        int n_seq, int32_t *inputs, int32_t *targets);
/* The targets of step's whole global batch (G sequences) that count in the
 * loss: G*T unless the data is masked (records, sr_data_mask_eod). The loss
 * is their mean. */
int64_t sr_data_loss_targets(const sr_data *d, int64_t step, int G, int T);

#ifdef __cplusplus
}
#endif
#endif /* SR_DATA_H */
