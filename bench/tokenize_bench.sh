#!/usr/bin/env bash
# Tokenizing speed: shardc tokenize (runtime/tokenizer.c, one thread) on
# English text (the fortunes of scripts/setup.sh, 6 times over, 15.5 MB) with
# the 1000-token byte-level BPE of tests/unit/tokenizer, against Hugging Face
# tokenizers and tiktoken on the same text and merges when Python has them
# (pip install tokenizers tiktoken). Prints MB/s; checks all give one count.
# Then the same at GPT-2's size (see the end). (Hugging Face tokenizers'
# encode_batch splits the text at lines, so its count
# differs slightly.) Usage: bench/tokenize_bench.sh BUILD_DIR
set -eu
build=$(realpath "${1:-build}"); src=$(realpath "$(dirname "$0")/..")
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cat $(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$') > "$w/f.txt"
for i in 1 2 3 4 5 6; do cat "$w/f.txt"; done > "$w/big.txt"
mb=$(python3 -c "import os; print(os.path.getsize('$w/big.txt') / 1e6)")
best=1e9
for r in 1 2 3; do
  t0=$(date +%s.%N)
  "$build/shardc" tokenize --tokenizer "$src/tests/unit/tokenizer" -o "$w/out.bin" "$w/big.txt" 2> "$w/log"
  t1=$(date +%s.%N)
  best=$(python3 -c "print(min($best, $t1 - $t0))")
done
cat "$w/log"
python3 -c "print('shardc tokenize: %.1f MB in %.2f s (best of 3), %.1f MB/s' % ($mb, $best, $mb / $best))"
python3 - "$w/big.txt" "$src/tests/unit/tokenizer" "$w/out.bin" <<'PY' || echo "(tokenizers or tiktoken not installed: no comparison)"
import json, struct, sys, time
import tiktoken, tokenizers
text = open(sys.argv[1], encoding="utf-8").read()
mb = len(text.encode()) / 1e6
n_ours = struct.unpack("<3i", open(sys.argv[3], "rb").read(12))[2]
def best(f):
    r = []
    for _ in range(2):
        t0 = time.perf_counter(); n = f(); r.append(time.perf_counter() - t0)
    return n, min(r)
# tiktoken with the fixture's merges (ranks in merge order, as make_fixture.py builds them)
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256)); cs, k = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + k); k += 1
u2b = {chr(c): b for b, c in zip(bs, cs)}
ranks = {bytes([b]): b for b in range(256)}
for line in open(sys.argv[2] + "/merges.txt", encoding="utf-8"):
    if not line.startswith("#version"):
        a, b = line.rstrip("\n").split(" "); ranks[bytes(u2b[c] for c in a + b)] = len(ranks)
pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
tk = tiktoken.Encoding("fixture", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
n, t = best(lambda: len(tk.encode_ordinary(text)))
print("tiktoken %s (encode_ordinary, one thread): %.2f s, %.1f MB/s, %d tokens (shardc: %d)" % (tiktoken.__version__, t, mb / t, n, n_ours))
hf = tokenizers.Tokenizer.from_file(sys.argv[2] + "/tokenizer.json")
n, t = best(lambda: len(hf.encode(text).ids))
raw = open(sys.argv[3], "rb").read()[1024:]
same = list(struct.unpack("<%dH" % n_ours, raw)) == hf.encode(text).ids
print("HF tokenizers %s (encode, the file as one string): %.2f s, %.1f MB/s, %d tokens, %s" % (
    tokenizers.__version__, t, mb / t, n, "the same ids as shardc" if same else "IDS DIFFER from shardc"))
lines = text.splitlines(keepends=True)
n, t = best(lambda: sum(len(e.ids) for e in hf.encode_batch(lines)))
print("HF tokenizers (encode_batch of its %d lines, all cores): %.2f s, %.1f MB/s, %d tokens" % (len(lines), t, mb / t, n))
PY

# At GPT-2's size: a 50257-token byte-level BPE (50000 merges) trained by
# Hugging Face tokenizers on the fortunes, docs/ and 2000 copyright files of
# /usr/share/doc (GPT-2's own files cannot be downloaded here); load time,
# speed, and whether all ids equal Hugging Face's on the same 15.5 MB.
python3 - "$w" "$src" <<'PY' || echo "(tokenizers not installed: no GPT-2-sized comparison)"
import glob, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
w = sys.argv[1]
files = [f for f in glob.glob("/usr/share/games/fortunes/*") if not f.endswith((".dat", ".u8"))]
files += glob.glob(sys.argv[2] + "/docs/*.md")
files += sorted(glob.glob("/usr/share/doc/*/copyright"))[:2000]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(files, trainers.BpeTrainer(vocab_size=50257, min_frequency=2, show_progress=False,
          special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
os.makedirs(w + "/big", exist_ok=True)
tok.save(w + "/big/tokenizer.json")
print("trained a %d-token BPE on %d files" % (tok.get_vocab_size(), len(files)))
PY
if [ -f "$w/big/tokenizer.json" ]; then
  echo hello > "$w/tiny.txt"
  t0=$(date +%s.%N); "$build/shardc" tokenize --tokenizer "$w/big" -o "$w/tiny.bin" "$w/tiny.txt" 2>/dev/null; t1=$(date +%s.%N)
  python3 -c "print('50257 tokens: load + a 6-byte file: %.3f s' % ($t1 - $t0))"
  best=1e9
  for r in 1 2 3; do
    t0=$(date +%s.%N); "$build/shardc" tokenize --tokenizer "$w/big" -o "$w/big.bin" "$w/big.txt" 2> "$w/log"; t1=$(date +%s.%N)
    best=$(python3 -c "print(min($best, $t1 - $t0))")
  done
  cat "$w/log"
  python3 -c "print('50257 tokens: %.1f MB in %.2f s (best of 3), %.1f MB/s' % ($mb, $best, $mb / $best))"
  python3 - "$w" <<'PY'
import struct, sys
from tokenizers import Tokenizer
w = sys.argv[1]
b = open(w + "/big.bin", "rb").read(); n = struct.unpack("<3i", b[:12])[2]
ids = Tokenizer.from_file(w + "/big/tokenizer.json").encode(open(w + "/big.txt", encoding="utf-8").read()).ids
print("50257 tokens: Hugging Face's ids %s shardc's (%d tokens)" % (
    "equal" if ids == list(struct.unpack("<%dH" % n, b[1024:])) else "DIFFER from", n))
PY
fi
