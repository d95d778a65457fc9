/* sr_tokenizer.h: byte-level BPE tokenizers (GPT-2's, Llama 3's, Qwen2's),
 * for text in and out.
 *
 * Reads the files Hugging Face and OpenAI ship GPT-2's tokenizer in
 * (vocab.json + merges.txt, encoder.json + vocab.bpe, tokenizer.json of a
 * byte-level BPE) and llm.c's gpt2_tokenizer.bin (decoding only). Encoding
 * follows GPT-2: the text is split at special tokens (<|endoftext|> and
 * tokenizer.json's added tokens, matched literally), each part into words by
 * GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (Unicode classes from runtime/unicode_tables.h), and each word's bytes are
 * merged pair by pair, the lowest-ranked merge first (leftmost on ties), as
 * Hugging Face tokenizers does. Bytes that are not valid UTF-8 count as
 * punctuation, one byte each. A tokenizer.json that splits by Llama 3's
 * pattern (or Qwen2's, single digits) before a regex-less ByteLevel uses
 * that pattern instead, and its ignore_merges (a word that is a token is
 * that token).
 */
#ifndef SR_TOKENIZER_H
#define SR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_tokenizer sr_tokenizer;

/* Loads a tokenizer from a file (tokenizer.json, vocab.json or encoder.json
 * with merges.txt or vocab.bpe beside it, llm.c's .bin) or a directory holding
 * one (looked for in that order). Errors name the file and what is wrong. */
sr_status sr_tok_load(const char *path, sr_tokenizer **out);
void sr_tok_free(sr_tokenizer *t);

/* The tokenizer file sr_tok_load would read in the directory `path` (or in
 * the directory of the file `path`), written to buf; NULL if it has none.
 * Finds the tokenizer beside --init's Hugging Face weights. */
const char *sr_tok_find(const char *path, char *buf, size_t cap);

/* Token ids are 0 .. sr_tok_size(t) - 1. */
int sr_tok_size(const sr_tokenizer *t);
/* The id of <|endoftext|>, or -1. */
int sr_tok_eot(const sr_tokenizer *t);
/* 0 for llm.c's tokenizer file, which has no merges: it can only decode. */
int sr_tok_can_encode(const sr_tokenizer *t);
/* "vocab.json + merges.txt", "tokenizer.json" or "llm.c gpt2_tokenizer.bin",
 * and the path it was read from. */
const char *sr_tok_kind(const sr_tokenizer *t);
const char *sr_tok_path(const sr_tokenizer *t);
/* The files the tokenizer was read from (src) and the names sr_tok_find
 * knows their formats by (name: tokenizer.json; vocab.json and merges.txt,
 * also for OpenAI's encoder.json and vocab.bpe; gpt2_tokenizer.bin); returns
 * how many (1 or 2). A checkpoint copies them. */
int sr_tok_files(const sr_tokenizer *t, const char *src[2], const char *name[2]);

/* The bytes of token `id` (*len of them; "" for an id outside the table). */
const char *sr_tok_piece(const sr_tokenizer *t, int32_t id, size_t *len);

/* Encodes text[0 .. len) into *ids (malloc'ed, *n of them; the caller frees).
 * SR_ERR_ARG if the tokenizer cannot encode, SR_ERR_NOMEM. */
sr_status sr_tok_encode(const sr_tokenizer *t, const char *text, size_t len, int32_t **ids,
                        size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* SR_TOKENIZER_H */
