#!/usr/bin/env python3
"""Makes the tokenizer test fixture with Hugging Face `tokenizers` (the
reference; not needed to run the tests): a byte-level BPE of 1000 tokens
trained the way GPT-2's was (its pre-tokenizer pattern, all 256 bytes, the
special <|endoftext|>), saved both ways Hugging Face ships GPT-2
(vocab.json + merges.txt, tokenizer.json), and the ids it gives for
cases.json's texts and for text.txt (as the llm.c token file text.bin).
tiktoken, given the same merges, must agree, as a second reference.

    pip install tokenizers tiktoken
    python3 tests/unit/tokenizer/make_fixture.py

The corpus is docs/*.md as they are when it runs, so after the docs change
it trains another vocabulary: the committed files are the reference, and the
tests read those.
"""
import glob
import json
import os
import struct

import tiktoken
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(os.path.dirname(here)))

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

UNICODE = [
    "Ünïcödé naïve café déjà vu, Straße, ÆØÅ æøå.",
    "Русский текст: привет, мир! Ελληνικά: γειά σου κόσμε.",
    "中文字符测试，日本語のテキスト、한국어 텍스트.",
    "numbers 123 4567 ½ ¾ ٣٤٥ ⅫⅣ ①② 10,000.5",
    "emoji 🙂🚀 mixed 👍🏽 and ✓ ✗ → ← ∑ ∞",
]

CASES = [
    "Hello world",
    "Hello, world! How are you?",
    "  two leading spaces",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nend",
    "a  \n  b \t\t c\r\n",
    "it's don't we'll I'M they're you've I'd she's",
    "'s 's' 'S ''s",
    "CamelCase123abc x2y3 3.14159 1e-5",
    "punctuation!!! ... ?! (parens) [brackets] {braces} #hash @at $5",
    "<|endoftext|>between<|endoftext|> and after",
    "a<|endoftext|>",
    "\u00a0non-breaking\u00a0space and\u3000ideographic space",
    "line\u2028separator and\u0085next line",
    "file\x1cseparator\x1d and \x1e \x1f",
    "",
    " ",
    "\n",
    "x",
    "the model's loss fell from 5.576 to 2.405 (nats) over 600 steps",
] + UNICODE


def byte_decoder():
    """GPT-2's character -> byte map (printable bytes stand for themselves)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def corpus():
    for path in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            yield from f.read().split("\n\n")
    for _ in range(20):
        yield from UNICODE


def main():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    tok.model.save(here)                       # vocab.json, merges.txt
    tok.save(os.path.join(here, "tokenizer.json"))

    # tiktoken from the same merges: a byte string's rank is its merge order
    u2b = byte_decoder()
    ranks = {bytes([b]): b for b in range(256)}
    with open(os.path.join(here, "merges.txt"), encoding="utf-8") as f:
        merges = [line.rstrip("\n").split(" ") for line in f if not line.startswith("#version")]
    for a, b in merges:
        ranks[bytes(u2b[c] for c in a + b)] = len(ranks)
    eot = tok.token_to_id("<|endoftext|>")
    tk = tiktoken.Encoding("fixture", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                           special_tokens={"<|endoftext|>": 1 << 20})
    vocab = tok.get_vocab()
    id_of = {bytes(u2b[c] for c in s): i for s, i in vocab.items() if s != "<|endoftext|>"}
    rank_to_id = {r: id_of[b] for b, r in ranks.items()}
    rank_to_id[1 << 20] = eot

    def check(text):
        ids = tok.encode(text).ids
        other = [rank_to_id[r] for r in tk.encode(text, allowed_special="all")]
        assert ids == other, (text, ids, other)
        assert tok.decode(ids, skip_special_tokens=False) == text, text
        return ids

    cases = [{"text": t, "ids": check(t)} for t in CASES]
    with open(os.path.join(here, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=True, indent=0)
        f.write("\n")

    text = "\n\n".join(CASES[:12] + UNICODE) + "\n"
    text = text * 8
    with open(os.path.join(here, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    ids = check(text)
    with open(os.path.join(here, "text.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(ids), *ids))
    print("vocab %d, %d merges, eot %d, %d cases, text.txt %d bytes -> %d tokens"
          % (len(vocab), len(merges), eot, len(cases), len(text.encode()), len(ids)))


if __name__ == "__main__":
    main()
