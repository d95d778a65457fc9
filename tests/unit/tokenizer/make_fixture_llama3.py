#!/usr/bin/env python3
"""Makes the Llama 3 / Qwen2 tokenizer fixtures with Hugging Face `tokenizers`
(the reference; not needed to run the tests): a 1000-token byte-level BPE
trained on make_fixture.py's corpus and saved as Llama 3 ships its
tokenizer.json (a Split by Llama 3's pattern before a ByteLevel without its
own regex, ignore_merges, <|begin_of_text|> and <|end_of_text|>) in llama3/,
the same with Qwen2's pattern (single digits) in qwen2/, and the ids each
gives for make_fixture.py's texts and a few more that tell the patterns
apart (cases.json), and for ../text.txt (text.bin). tiktoken, given the
same merges and pattern, must agree.

    pip install tokenizers tiktoken
    python3 tests/unit/tokenizer/make_fixture_llama3.py

The corpus is docs/*.md as they are when it runs, so after the docs change
it trains another vocabulary: the committed files are the reference, and the
tests read those.
"""
import itertools
import json
import os
import struct

import tiktoken
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

import make_fixture as base

here = os.path.dirname(os.path.abspath(__file__))

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

MORE = [
    "\t\tword and\ttab, x\tY",
    "abc123456789 12 1234567 3.14159",
    "x\r\n\r\n  y\n \n z \n",
    "'S 'LL 'Re it'S I'M 'd 'x",
    " !!!\n\n ...\r\n-- ?!\n",
    "line one\n\n\nline two  \n  three   ",
    "«quoted» —dash— ¿qué? (¡sí!)",
    "<|begin_of_text|>Hi there<|end_of_text|>",
    "the quick brown fox jumps over the lazy dog",
    "def f():\n    return 1\n\n    x = (the model) `shardc` [link](x) \"quoted\"",
    "a\n  b\n\n    c\n  \n\td",
    "(the [the {the \"the 'the -the /the #the",
]

# not in the training text: only the added token makes "Ġzyxwvut" one token
UNSEEN = ["unseen: zyxwvut, zyxwvuts and zyxwvut's"]


def main():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # MORE in the training text too, so that tokens span what the pattern
    # keeps together (a tab or a bracket before letters, a newline before
    # indentation) and a wrong split gives other ids
    tok.train_from_iterator(itertools.chain(base.corpus(), MORE * 40), trainer)
    texts = base.CASES + MORE + UNSEEN
    for name, pattern in (("llama3", LLAMA3), ("qwen2", QWEN2)):
        j = json.loads(tok.to_str())
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
        # a word no merge reaches (merges would give its pieces): with
        # ignore_merges, Llama 3's, the word is this one token
        assert "\u0120zyxwvut" not in j["model"]["vocab"]
        j["model"]["vocab"]["\u0120zyxwvut"] = len(j["model"]["vocab"])
        t = Tokenizer.from_str(json.dumps(j))
        os.makedirs(os.path.join(here, name), exist_ok=True)
        t.save(os.path.join(here, name, "tokenizer.json"))

        # tiktoken: a byte string's rank is its id (the merges are in id order)
        vocab = t.get_vocab()
        u2b = base.byte_decoder()
        specials = {s: vocab[s] for s in ("<|begin_of_text|>", "<|end_of_text|>")}
        ranks = {bytes(u2b[c] for c in s): i for s, i in vocab.items() if s not in specials}
        tk = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)

        def check(text):
            ids = t.encode(text).ids
            other = tk.encode(text, allowed_special="all")
            assert ids == other, (name, text, ids, other)
            assert t.decode(ids, skip_special_tokens=False) == text, text
            return ids

        # text.txt of the GPT-2 fixture, as an llm.c token file of this tokenizer's ids
        with open(os.path.join(here, "text.txt"), encoding="utf-8", newline="") as f:
            ids = check(f.read())
        with open(os.path.join(here, name, "text.bin"), "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
            f.write(struct.pack("<%dH" % len(ids), *ids))
        cases = [{"text": x, "ids": check(x)} for x in texts]
        with open(os.path.join(here, name, "cases.json"), "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=True, indent=0)
            f.write("\n")
        print("%s: vocab %d, <|end_of_text|> %d, %d cases" % (name, len(vocab), specials["<|end_of_text|>"],
                                                               len(cases)))


if __name__ == "__main__":
    main()
