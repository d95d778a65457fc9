#!/usr/bin/env bash
# Text in and out through a GPT-2 tokenizer (runtime/tokenizer.c): a model
# with tests/unit/tokenizer's 1000-token byte-level BPE trains on text.txt
# exactly as on the tokens Hugging Face tokenizers made of it (text.bin), at
# tp=1 and tp=2; --prompt is encoded and samples are decoded to text; the
# tokenizer beside --init's weights is found; mistakes are one-line errors.
source "$(dirname "$0")/lib.sh"
fix="$src/tests/unit/tokenizer"
mkdir tok && cp "$fix"/vocab.json "$fix"/merges.txt tok/
cfg="--set vocab_size=1000 --set n_layer=2 --set n_embd=64 --set n_head=4"
"$shardc" build "$src/examples/tinygpt.model" $cfg -o bpe1
"$shardc" build "$src/examples/tinygpt.model" $cfg --tp 2 -o bpe2
run="--steps 6 --batch 4 --seq 32 --lr 1e-3 --warmup 2 --quiet"

./bpe1 $run --data "$fix/text.txt" --tokenizer tok --log txt.jsonl --save ckpt
./bpe1 $run --data "$fix/text.bin" --log bin.jsonl
check "text.txt through vocab.json + merges.txt trains as Hugging Face's tokens (text.bin), bit for bit" \
  cmp <(grep -o '"loss":[^,]*' txt.jsonl) <(grep -o '"loss":[^,]*' bin.jsonl)
./bpe1 $run --data "$fix/text.txt" --tokenizer "$fix/tokenizer.json" --log tj.jsonl
check "the same through tokenizer.json" cmp <(grep -o '"loss":[^,]*' tj.jsonl) <(grep -o '"loss":[^,]*' bin.jsonl)
$mpi -np 2 ./bpe2 $run --tp 2 --data "$fix/text.txt" --tokenizer tok --log tp2.jsonl
check "tp=2 on the text: the single-rank losses" same bin.jsonl tp2.jsonl 1e-5

# a glob of shards (llm.c's -i "fineweb_train_*.bin") reads them as one stream
$py - "$fix/text.bin" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<3i", b[:12])[2]
toks = struct.unpack("<%dH" % n, b[1024:])
cuts = [0, 150, 150, 401, n]   # windows cross both borders; the second shard is empty
for i in range(4):
    part = toks[cuts[i]:cuts[i + 1]]
    with open("shard_%d.bin" % i, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(part), *part))
PY
./bpe1 $run --data 'shard_*.bin' --log sh.jsonl
check "--data 'shard_*.bin' (4 shards, one empty) trains as the one file, bit for bit" \
  cmp <(grep -o '"loss":[^,]*' sh.jsonl) <(grep -o '"loss":[^,]*' bin.jsonl)
$mpi -np 2 ./bpe1 $run --dp 2 --data 'shard_*.bin' --val-data 'shard_[01].bin' --log shdp.jsonl 2> shdp_err.txt
check "... and at dp=2 with a validation glob: the single-rank losses" same bin.jsonl shdp.jsonl 1e-5
./bpe1 $run --data 'nothing_*.bin' 2> err.txt; rc=$?
check "a glob that matches nothing: exit 1 ($(head -1 err.txt))" \
  sh -c "[ $rc -eq 1 ] && grep -q 'no data file matches nothing_\*.bin' err.txt"

# --shuffle: another order, the same at dp=2 x 2 microbatches, resumable bit for bit
./bpe1 $run --data "$fix/text.bin" --shuffle 1 --log shuf.jsonl --save shck --save-every 3
grep -o '"loss":[^,]*' shuf.jsonl > l_shuf.txt; grep -o '"loss":[^,]*' bin.jsonl > l_bin.txt
check "--shuffle 1 trains on another order (losses $(head -2 l_shuf.txt | tr '\n' ' ')vs $(head -2 l_bin.txt | tr '\n' ' '))" \
  sh -c "! cmp -s l_shuf.txt l_bin.txt"
$mpi -np 2 ./bpe1 $run --dp 2 --microbatches 2 --data "$fix/text.bin" --shuffle 1 --log shuf2.jsonl
check "--shuffle 1 at dp=2 x 2 microbatches: the single-rank shuffled losses" same shuf.jsonl shuf2.jsonl 1e-5
./bpe1 $run --data "$fix/text.bin" --shuffle 1 --load shck/step-00000003 --log shuf_r.jsonl
check "--shuffle 1 resumed from step 3: bit for bit" \
  cmp <(grep -o '"loss":[^,]*' shuf.jsonl | tail -3) <(grep -o '"loss":[^,]*' shuf_r.jsonl)

# a blend (Megatron-LM's weighted --data-path): the sequences of the documented
# rule (a Python copy of it over the dumped batches), the same at dp=2 x 2
# microbatches with a blended validation set, resumable bit for bit
blend="2 $fix/text.bin 1 shard_2.bin"
./bpe1 ${run/--quiet/} --data "$blend" --val-data "$blend" --eval-every 3 --log bl.jsonl --dump-batches bl_d \
  --save blck --save-every 3 > /dev/null 2> bl_err.txt
check "a blend says what each source gives ($(grep -m1 'from shard_2' bl_err.txt))" \
  grep -q '^data: 33.3% of the sequences from shard_2.bin: 251 tokens, 7 sequences a pass; steps 0..6 read 1.14 passes' bl_err.txt
check "a blend of 2 parts: each sequence the window the rule picks" $py - "$fix/text.bin" shard_2.bin bl_d/batches-rank0.txt <<'PY'
import struct, sys
def load(path):
    b = open(path, "rb").read(); n = struct.unpack("<3i", b[:12])[2]
    return struct.unpack("<%dH" % n, b[1024:1024 + 2 * n])
parts, T, G = [load(sys.argv[1]), load(sys.argv[2])], 32, 4
share = [round(2 / 3 * 1e6), round(1 / 3 * 1e6)]; total = sum(share); count = [0, 0]
def fnv(x, y):
    h = 1469598103934665603
    for a, b in zip(x, y):
        h = ((h ^ a) * 1099511628211) % 2**64; h = ((h ^ b) * 1099511628211) % 2**64
    return h
want = {}
for s in range(6 * G):   # the part furthest below its share of s + 1 (the first on a tie); its window c mod W
    i = max(range(2), key=lambda p: (share[p] * (s + 1) - total * count[p], -p))
    c = count[i]; count[i] += 1; toks = parts[i]; w = (len(toks) - 1) // T; q = (c % w) * T
    want[(s // G, s % G)] = fnv(toks[q:q + T], toks[q + 1:q + T + 1])
got = {(int(k), int(j)): int(h, 16) for k, j, h in (l.split() for l in open(sys.argv[3]))}
print(f"  {len(got)} sequences dumped, {count[1]} from the second part, {sum(got[x] == want[x] for x in want)} as the rule says")
sys.exit(0 if got == want and count[1] == 8 else 1)
PY
$mpi -np 2 ./bpe1 $run --dp 2 --microbatches 2 --data "$blend" --val-data "$blend" --eval-every 3 --log bl2.jsonl
check "the blend at dp=2 x 2 microbatches: the single-rank losses" same bl.jsonl bl2.jsonl 1e-5
check "... and its blended validation losses" same bl.jsonl bl2.jsonl 1e-5 val_loss
./bpe1 $run --data "$blend" --load blck/step-00000003 --log bl_r.jsonl
check "the blend resumed from step 3: bit for bit" \
  cmp <(grep -o '"loss":[^,]*' bl.jsonl | tail -3) <(grep -o '"loss":[^,]*' bl_r.jsonl)
./bpe1 $run --data "0.5 $fix/text.bin 0.5" 2> err.txt; rc=$?
check "a blend without its last file: exit 2 ($(head -1 err.txt))" sh -c "[ $rc -eq 2 ] && grep -q 'pairs of a weight' err.txt"

# sampling: decoded text = the token ids decoded by GPT-2's byte map in Python
smp="--steps 0 --load ckpt --batch 4 --seq 32 --sample 40 --temperature 1 --quiet"
./bpe1 $smp --tokenizer tok > s_text.txt
./bpe1 $smp --tokenizer none > s_ids.txt
check "a sample is printed as text: the ids it draws, decoded by vocab.json" $py - tok/vocab.json s_ids.txt s_text.txt <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte = {chr(c): b for b, c in zip(bs, cs)}
piece = {i: bytes(byte[c] for c in s) for s, i in json.load(open(sys.argv[1])).items()}
ids = [int(x) for x in open(sys.argv[2]).read().split()]
text = open(sys.argv[3], "rb").read()
want = b"".join(piece[i] for i in ids) + b"\n"
print(f"  {len(ids)} ids, {len(text)} bytes: {text[:60]!r}")
sys.exit(0 if len(ids) == 41 and text == want else 1)
PY
./bpe1 $smp --tokenizer tok --prompt "The model's loss" --sample 8 --temperature 0 > s_prompt.txt
check "--prompt is encoded: the sample starts with it ($(head -c 60 s_prompt.txt))" grep -q "^The model's loss" s_prompt.txt
$mpi -np 2 ./bpe2 $smp --tp 2 --tokenizer tok --prompt "The model's loss" --sample 8 --temperature 0 > s_prompt2.txt
check "tp=2 samples the same text" cmp s_prompt.txt s_prompt2.txt

# the checkpoint keeps the tokenizer; --load finds it
check "the checkpoint holds the run's vocab.json and merges.txt" \
  sh -c "cmp ckpt/step-00000006/vocab.json tok/vocab.json && cmp ckpt/step-00000006/merges.txt tok/merges.txt"
./bpe1 ${smp/--quiet/} --prompt "The model's loss" --sample 8 --temperature 0 > s_load.txt 2> load_err.txt
check "--load uses the checkpoint's tokenizer ($(grep tokenizer: load_err.txt))" \
  sh -c "grep -q '^tokenizer: ckpt/step-00000006/vocab.json (vocab.json + merges.txt, 1000 tokens)' load_err.txt && cmp s_prompt.txt s_load.txt"

./bpe1 --init ckpt --steps 0 --batch 4 --seq 32 --sample 8 --prompt "The model's loss" --temperature 0 \
  > s_init.txt 2> init_err.txt
check "--init of a checkpoint root uses its latest step's tokenizer too" \
  sh -c "grep -q '^tokenizer: ckpt/step-00000006/vocab.json' init_err.txt && cmp s_prompt.txt s_init.txt"

# a checkpoint is a Hugging Face model directory: transformers' Auto classes
# load it, and its GPT-2 tokenizer (another implementation, another version)
# gives the fixture's ids (skipped, and said so, without transformers)
if $py -c "import transformers" 2>/dev/null; then
  check "transformers loads the checkpoint (AutoModelForCausalLM, AutoTokenizer); its tokenizer gives our ids" \
    $py - ckpt/step-00000006 "$fix/cases.json" <<'PY'
import json, sys, warnings
warnings.filterwarnings("ignore")
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1]
m = AutoModelForCausalLM.from_pretrained(d)
tok = AutoTokenizer.from_pretrained(d)
cases = json.load(open(sys.argv[2]))
bad = [c["text"] for c in cases if tok(c["text"])["input_ids"] != c["ids"]]
print(f"  transformers {transformers.__version__}: {type(m).__name__}, {type(tok).__name__}; "
      f"{len(cases) - len(bad)} of {len(cases)} texts give the fixture's ids")
sys.exit(1 if bad or type(m).__name__ != "GPT2LMHeadModel" else 0)
PY
else
  echo "skip transformers is not installed: the Hugging Face directory check did not run"
fi

# --export: a Hugging Face model directory, here of a vocabulary padded to
# 1024 rows and trained at tp=2: the padding rows of the @vocab table cut (not
# of the 1024-row position table); transformers' loss on the first validation
# batch is the program's final validation loss
"$shardc" build "$src/examples/tinygpt.model" $cfg --set make_vocab_size_divisible_by=128 \
  --set n_positions=1024 --tp 2 -o bpep2
$mpi -np 2 ./bpep2 $run --tp 2 --data "$fix/text.txt" --tokenizer tok --val-data "$fix/text.bin" \
  --eval-batches 1 --export exp --log exp.jsonl 2> exp_err.txt
val=$(grep -o '"val_loss":[^}]*' exp.jsonl | tail -1 | cut -d: -f2)
check "--export writes the directory" $py - exp <<'PY'
import json, os, struct, sys
d = sys.argv[1]
f = open(os.path.join(d, "model.safetensors"), "rb")
h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
shape, wpe = h["transformer.wte.weight"]["shape"], h["transformer.wpe.weight"]["shape"]
cfg = json.load(open(os.path.join(d, "config.json")))
print(f"  wte {shape}, wpe {wpe}, config vocab_size {cfg['vocab_size']}, files {sorted(os.listdir(d))}")
sys.exit(0 if shape == [1000, 64] and wpe == [1024, 64] and cfg["vocab_size"] == 1000 and
         os.path.exists(os.path.join(d, "vocab.json")) else 1)
PY
if $py -c "import transformers" 2>/dev/null; then
  check "transformers on the export: the program's validation loss ($val)" $py - exp "$fix/text.bin" "$val" <<'PY'
import struct, sys, warnings
warnings.filterwarnings("ignore")
import torch
from transformers import AutoModelForCausalLM
d, ours = sys.argv[1], float(sys.argv[3])
m = AutoModelForCausalLM.from_pretrained(d).eval()
b = open(sys.argv[2], "rb").read()
t = torch.tensor(struct.unpack("<%dH" % struct.unpack("<3i", b[:12])[2], b[1024:]), dtype=torch.long)
with torch.no_grad():
    lg = m(t[:4 * 32].view(4, 32)).logits
loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), t[1:4 * 32 + 1]).item()
print(f"  logits {list(lg.shape)}, transformers' loss {loss:.7f}, ours {ours:.7f}")
sys.exit(0 if lg.shape[-1] == 1000 and abs(loss - ours) <= 1e-5 * ours else 1)
PY
fi

# a Hugging Face-style directory: weights and tokenizer side by side
mkdir hf && cp ckpt/step-00000006/model.safetensors hf/ && cp "$fix/tokenizer.json" hf/
./bpe1 --init hf --steps 0 --batch 4 --seq 32 --sample 8 --prompt "The model's loss" --temperature 0 \
  > s_hf.txt 2> hf_err.txt
check "--init DIR uses the tokenizer beside the weights ($(head -1 hf_err.txt))" \
  grep -q "^tokenizer: hf/tokenizer.json (tokenizer.json, 1000 tokens)" hf_err.txt
check "... and samples what --load with --tokenizer did" cmp s_prompt.txt s_hf.txt

# a sharded Hugging Face checkpoint (model.safetensors.index.json and its shards, as the
# hub serves models over 5 GB): --init of the directory loads what the one file holds
mkdir hfs && cp "$fix/tokenizer.json" hfs/
$py - hf/model.safetensors hfs <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n]); hdr.pop("__metadata__", None); data = b[8 + n:]
names = sorted(hdr); half = len(names) // 2; wmap = {}
for i, part in enumerate([names[:half], names[half:]]):
    fname = "model-%05d-of-00002.safetensors" % (i + 1); h, blob = {}, b""
    for k in part:
        a, e = hdr[k]["data_offsets"]
        h[k] = {"dtype": hdr[k]["dtype"], "shape": hdr[k]["shape"], "data_offsets": [len(blob), len(blob) + e - a]}
        blob += data[a:e]; wmap[k] = fname
    j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
    open(sys.argv[2] + "/" + fname, "wb").write(struct.pack("<Q", len(j)) + j + blob)
json.dump({"metadata": {"total_size": len(data)}, "weight_map": wmap}, open(sys.argv[2] + "/model.safetensors.index.json", "w"))
PY
./bpe1 --init hf --steps 0 --batch 4 --seq 32 --save one > /dev/null 2>&1
./bpe1 --init hfs --steps 0 --batch 4 --seq 32 --save two > /dev/null 2> hfs_err.txt
check "--init of a sharded checkpoint (2 shards and their index): the parameters of the one file, byte for byte" \
  cmp one/step-00000000/model.safetensors two/step-00000000/model.safetensors
check "... and it says so ($(grep initialized hfs_err.txt))" grep -q 'initialized parameters from hfs/model.safetensors.index.json' hfs_err.txt
rm hfs/model-00002-of-00002.safetensors
./bpe1 --init hfs --steps 0 --batch 4 --seq 32 2> err.txt; rc=$?
check "a missing shard: exit 1 ($(head -1 err.txt))" sh -c "[ $rc -eq 1 ] && grep -q 'cannot open hfs/model-00002-of-00002.safetensors' err.txt"

# shardc tokenize: text files into one llm.c token file, once
check "shardc tokenize writes Hugging Face's tokens of text.txt, byte for byte (text.bin)" \
  sh -c "'$shardc' tokenize --tokenizer tok -o tk.bin '$fix/text.txt' 2> tk_err.txt && cmp tk.bin '$fix/text.bin'"
printf 'Hello world' > a.txt; : > empty.txt
"$shardc" tokenize --tokenizer "$fix/tokenizer.json" --eot a.txt empty.txt a.txt -o eot.bin 2> /dev/null
check "--eot: <|endoftext|> before each file (an empty one too)" $py - eot.bin "$fix/cases.json" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
magic, version, n = struct.unpack("<3i", b[:12])
toks = list(struct.unpack("<%dH" % n, b[1024:]))
hello = json.load(open(sys.argv[2]))[0]["ids"]  # "Hello world"
print(f"  {n} tokens: {toks}")
sys.exit(0 if (magic, version) == (20240520, 1) and toks == [0] + hello + [0] + [0] + hello else 1)
PY
# JSON Lines records through the tokenizer: each text is followed by
# <|endoftext|>; shardc tokenize writes text records' stream (the --eot files
# of the same texts put it before each instead), which trains as the .jsonl
$py - "$fix/text.txt" recs.jsonl recs <<'PY'
import json, os, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.strip()][:40]
os.makedirs(sys.argv[3])
with open(sys.argv[2], "w") as f:
    for i, l in enumerate(lines):
        f.write(json.dumps({"text": l}) + "\n")
        open(f"{sys.argv[3]}/{i:03d}.txt", "w").write(l)
PY
"$shardc" tokenize --tokenizer tok -o recs.bin recs.jsonl 2> recs_err.txt
"$shardc" tokenize --tokenizer tok --eot -o recs_eot.bin recs/*.txt 2> /dev/null
check "shardc tokenize of {\"text\"} records: each text's tokens, then <|endoftext|> ($(cat recs_err.txt))" \
  $py - recs.bin recs_eot.bin <<'PY'
import struct, sys
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
ia, ib = (list(struct.unpack("<%dH" % struct.unpack("<3i", x[:12])[2], x[1024:])) for x in (a, b))
print(f"  {len(ia)} tokens; the --eot files' {len(ib)}")
sys.exit(0 if ia == ib[1:] + [0] and len(ia) > 40 else 1)
PY
./bpe1 $run --seq 16 --data recs.jsonl --tokenizer tok --log recj.jsonl 2> recj_err.txt
./bpe1 $run --seq 16 --data recs.bin --log recb.jsonl
check "text records train as their tokenized file, bit for bit" \
  cmp <(grep -o '"loss":[^,]*' recj.jsonl) <(grep -o '"loss":[^,]*' recb.jsonl)
# --eod-mask-loss with the tokenizer's <|endoftext|> (id 0 here): no loss on the token after
# each text's end; the records and their tokenized file train alike, not as without it
./bpe1 $run --seq 16 --data recs.jsonl --tokenizer tok --eod-mask-loss 1 --log eodj.jsonl 2> /dev/null
./bpe1 ${run/--quiet/} --seq 16 --data recs.bin --tokenizer tok --eod-mask-loss 1 --log eodb.jsonl 2> eodb_err.txt
check "--eod-mask-loss, the tokenizer's end of text ($(grep -m1 eod-mask eodb_err.txt)): records and .bin alike, other losses" \
  bash -c "grep -q 'no loss on the token after token 0 (the tokenizer.s end of text)' eodb_err.txt &&
    cmp <(grep -o '\"loss\":[^,]*' eodj.jsonl) <(grep -o '\"loss\":[^,]*' eodb.jsonl) &&
    ! cmp -s <(grep -o '\"loss\":[^,]*' eodj.jsonl) <(grep -o '\"loss\":[^,]*' recj.jsonl)"
# without a tokenizer, GPT-2's vocabulary (50257, padded to 50304 or not) means <|endoftext|> 50256
"$shardc" build "$src/examples/tinygpt.model" --set vocab_size=50257 --set n_layer=1 --set n_embd=32 --set n_head=2 -o g50k
./g50k --steps 1 --batch 2 --seq 16 --data recs.bin --eod-mask-loss 1 --threads 1 2> g50k_err.txt; rc=$?
check "a GPT-2 vocabulary without a tokenizer: --eod-mask-loss masks after 50256 (rc $rc: $(grep -m1 eod-mask g50k_err.txt))" \
  bash -c "[ $rc = 0 ] && grep -q 'no loss on the token after token 50256 (GPT-2.s <|endoftext|>)' g50k_err.txt"
# prompt-completion records: the loss targets are each completion's tokens and its <|endoftext|>
for i in $(seq 200); do echo '{"prompt": "The model'"'"'s", "completion": " loss is"}'; done > pc.jsonl
printf ' loss is' > completion.txt
"$shardc" tokenize --tokenizer tok -o completion.bin completion.txt 2> completion_err.txt
nc=$(grep -o '^completion.bin: [0-9]*' completion_err.txt | cut -d' ' -f2)
./bpe1 --batch 4 --seq 16 --data pc.jsonl --tokenizer tok --steps 2 2> pc_err.txt
check "prompt-completion records: 200 x ($nc completion tokens + 1) loss targets ($(grep '^data:' pc_err.txt))" \
  grep -q "^data: pc.jsonl: 200 records, [0-9]* tokens, $((200 * (nc + 1))) of them loss targets" pc_err.txt
"$shardc" tokenize --tokenizer tok -o pc.bin pc.jsonl 2> pc_tok_err.txt; rc=$?
check "shardc tokenize refuses prompt-completion records (rc $rc): $(cat pc_tok_err.txt)" \
  sh -c "[ $rc = 1 ] && grep -q 'whose loss mask a token file cannot keep' pc_tok_err.txt && [ ! -e pc.bin ]"
# a vocabulary above 65536 (Llama 3's is 128256): uint32 tokens, llm.c's
# Llama 3 format (magic 20240801, version 7); the fixture's tokenizer with
# 70000 more (unreachable) vocabulary entries gives the same ids, and a model
# trains on that file exactly as on the uint16 one
$py - "$fix/tokenizer.json" big/tokenizer.json <<'PY'
import json, os, sys
t = json.load(open(sys.argv[1]))
n = len(t["model"]["vocab"])
t["model"]["vocab"].update({f"<unused_{i}>": n + i for i in range(70000)})
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
json.dump(t, open(sys.argv[2], "w"))
PY
"$shardc" tokenize --tokenizer big -o tk32.bin "$fix/text.txt" 2> tk32_err.txt
check "a 71000-token vocabulary: uint32 tokens, the same ids as text.bin ($(cat tk32_err.txt))" $py - tk32.bin "$fix/text.bin" <<'PY'
import struct, sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
ha, hb = struct.unpack("<3i", a[:12]), struct.unpack("<3i", b[:12])
ids32 = struct.unpack("<%dI" % ha[2], a[1024:])
ids16 = struct.unpack("<%dH" % hb[2], b[1024:])
print(f"  header {ha}, {len(a)} bytes; text.bin {hb}")
sys.exit(0 if ha == (20240801, 7, hb[2]) and len(a) == 1024 + 4 * ha[2] and ids32 == ids16 else 1)
PY
./bpe1 $run --data tk32.bin --log b32.jsonl
check "training on the uint32 file gives the uint16 file's losses, bit for bit" \
  cmp <(grep -o '"loss":[^,]*' bin.jsonl) <(grep -o '"loss":[^,]*' b32.jsonl)
cp tk.bin keep.bin
"$shardc" tokenize --tokenizer tok -o tk.bin a.txt missing.txt 2> err.txt; rc=$?
check "a missing input: exit 1 ($(head -1 err.txt)), the old output untouched, no temporary left" \
  sh -c "[ $rc -eq 1 ] && cmp tk.bin keep.bin && ! ls tk.bin.tmp-* 2>/dev/null"
"$shardc" tokenize -o x.bin a.txt 2> err.txt; rc=$?
check "no --tokenizer: exit 2 ($(head -1 err.txt))" [ $rc -eq 2 ]

# mistakes
./bpe1 $smp --tokenizer none --prompt "Hello" 2> err.txt; rc=$?
check "--prompt without a tokenizer (--tokenizer none) for a 1000-token vocabulary: exit 2 ($(head -1 err.txt))" \
  sh -c "[ $rc -eq 2 ] && grep -q 'needs a tokenizer that encodes' err.txt"
"$shardc" build "$src/examples/tinygpt.model" --set n_layer=1 --set n_embd=32 --set n_head=2 -o byte1
./byte1 --data "$fix/text.txt" --tokenizer tok --steps 1 --batch 4 --seq 32 2> err.txt; rc=$?
check "a tokenizer larger than the model's vocabulary: exit 1 ($(head -1 err.txt))" \
  sh -c "[ $rc -eq 1 ] && grep -q 'has 1000 tokens, more than the model.s vocabulary of 256' err.txt"
./bpe1 --data "$fix/text.txt" --tokenizer "$fix/cases.json" --steps 1 --batch 4 --seq 32 2> err.txt; rc=$?
check "a file that is no tokenizer: exit 1 ($(head -1 err.txt))" \
  sh -c "[ $rc -eq 1 ] && grep -q 'cases.json' err.txt"
./bpe1 --data "$fix/text.txt" --steps 1 --batch 4 --seq 32 2> err.txt; rc=$?
check "text for a 1000-token model without a tokenizer: a note says it is read as bytes" \
  sh -c "[ $rc -eq 0 ] && grep -q 'read as raw bytes (token ids 0-255) for a vocabulary of 1000; to tokenize text, pass --tokenizer' err.txt"
./bpe1 --help > help.txt
check "--help has --tokenizer" grep -q -- "--tokenizer PATH|none" help.txt

# --eval-mc of HellaSwag's JSON Lines through the tokenizer: the scores of the
# llm.c .bin of the same pieces tokenized one by one (the context, then " " +
# each ending, as llm.c's hellaswag.py renders them), bit for bit
$py - <<'PY'
import json
ex = [{"ctx": "The model's loss went down", "endings": ["and the data ran out.", "while it trained", "so we stopped"], "label": 1},
      {"ctx": "Hello", "endings": ["world", "there, model"], "label": 0, "ind": 7}]
with open("hs.jsonl", "w") as f:
    for e in ex:
        f.write(json.dumps(e) + "\n")
for i, e in enumerate(ex):
    open(f"hs{i}_c.txt", "w").write(e["ctx"])
    for k, end in enumerate(e["endings"]):
        open(f"hs{i}_e{k}.txt", "w").write(" " + end)
PY
for f in hs*_*.txt; do "$shardc" tokenize --tokenizer tok -o "${f%.txt}.bin" "$f" 2> /dev/null; done
$py - "$src/tests" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1]); import evalfile
def toks(path):
    b = open(path, "rb").read()
    n = struct.unpack("<3i", b[:12])[2]
    return list(struct.unpack("<%dH" % n, b[1024:]))
ex = [json.loads(l) for l in open("hs.jsonl")]
evalfile.write("hs.bin", [(e["label"], toks(f"hs{i}_c.bin"), [toks(f"hs{i}_e{k}.bin") for k in range(len(e["endings"]))])
                          for i, e in enumerate(ex)])
PY
./bpe1 --load ckpt --steps 0 --seq 32 --batch 4 --eval-mc hs.jsonl --eval-mc-out hs_text.jsonl 2> hs_err.txt
./bpe1 --load ckpt --steps 0 --seq 32 --batch 4 --eval-mc hs.bin --eval-mc-out hs_bin.jsonl 2> /dev/null
check "--eval-mc of HellaSwag lines through the tokenizer: the scores of their pieces' tokens (shardc tokenize), bit for bit" \
  sh -c "[ -s hs_text.jsonl ] && cmp hs_text.jsonl hs_bin.jsonl && grep -q 'step 6: hs.jsonl: acc_norm [0-9.]* ([0-2]/2)' hs_err.txt"
./bpe1 --load ckpt --steps 0 --seq 32 --batch 4 --tokenizer none --eval-mc hs.jsonl > hs_none.txt 2>&1; rc=$?
check "--eval-mc of JSON Lines without a tokenizer, for a vocabulary of 1000: exit 2 saying to pass one" \
  sh -c "[ $rc -eq 2 ] && grep -q 'is text (JSON Lines) for a vocabulary of 1000: pass --tokenizer' hs_none.txt"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
