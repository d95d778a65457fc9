/* sr_mc.h: multiple-choice evaluation sets (HellaSwag, MMLU), read whole.
 *
 * Two formats:
 *  - llm.c's eval files (dev/data/hellaswag.py, mmlu.py): 256 little-endian
 *    int32 header words, header[0] = SR_MC_MAGIC, header[1] = SR_MC_VERSION,
 *    header[2] = the number of examples, header[3] = the longest example's
 *    bytes; then each example as uint16 words: 65535, its bytes, its index,
 *    the right completion's index, the number of completions, the context's
 *    length and tokens, then each completion's length and tokens;
 *  - JSON Lines in HellaSwag's own form, one object a line with "ctx" (a
 *    string), "endings" (strings) and "label" (an integer, or one in a
 *    string): the context tokenized, each ending tokenized after a blank, as
 *    llm.c renders them; without a tokenizer the bytes are the tokens.
 *
 * An example is scored by each completion's loss after its context: the
 * completion with the least summed loss is the model's answer ("acc"), and
 * the one with the least loss per token ("acc_norm", llm.c's figure).
 */
#ifndef SR_MC_H
#define SR_MC_H

#include <stdint.h>

#include "shardrt.h"
#include "sr_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SR_MC_MAGIC 20240522
#define SR_MC_VERSION 1

typedef struct sr_mc {
    int n;                /* examples */
    int max_choices;      /* the most completions of an example */
    int64_t *first;       /* (n + 1): example i's completions are [first[i], first[i+1]) */
    int32_t *label;       /* (n) the right completion, from 0 */
    int64_t *ctx;         /* (n) where example i's context starts in tok */
    int32_t *ctx_len;     /* (n) */
    int64_t *comp;        /* (first[n]) where each completion starts in tok */
    int32_t *comp_len;    /* (first[n]) */
    int32_t *tok;         /* every context's and completion's tokens */
    int64_t n_tok;
    int from_text;        /* 1: JSON Lines, its text tokenized (or its bytes) */
} sr_mc;

/* Reads a set (the format from its first bytes). tok: the JSON Lines'
 * tokenizer, or NULL for bytes. vocab: token ids must be below it. Errors
 * name the file and the example: SR_ERR_IO, SR_ERR_FORMAT, SR_ERR_NOMEM. */
sr_status sr_mc_open(const char *path, const sr_tokenizer *tok, int vocab, sr_mc *mc);
void sr_mc_close(sr_mc *mc);

#ifdef __cplusplus
}
#endif
#endif
