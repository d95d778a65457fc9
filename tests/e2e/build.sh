#!/usr/bin/env bash
# shardc build end to end: every example builds (the generated C compiles with
# -Wall -Wextra -Werror) and trains; resume is bit-exact; bad data files are
# clear errors; a finite-difference check of a whole transformer block.
set -u
shardc=$(realpath "$1"); src=$(realpath "$2")
py=/usr/bin/python3
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
source "$src/tests/check.sh"
losses() { grep -o '"loss":[^,]*' "$1"; }

# text to train on: the fortunes the set-up installs, else the stdlib itself
if ls /usr/share/games/fortunes/* >/dev/null 2>&1; then
  cat $(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$') | head -c 400000 > text.txt
else
  for i in $(seq 50); do cat "$src"/stdlib/*.model "$src"/docs/*.md 2>/dev/null; done | head -c 400000 > text.txt
fi

for m in tinygpt mlp gpt2 llama; do
  check "build examples/$m.model (C compiles with -Werror)" \
    "$shardc" build "$src/examples/$m.model" -o "$m" --emit-src "src-$m"
done
# CC set to the plain compiler (as some CUDA images do): the MPI libraries are added
check "CC=cc: the program links (MPI added) and trains a step" bash -c \
  "CC=cc '$shardc' build '$src/examples/tinygpt.model' -o tg_cc && ./tg_cc --data text.txt --steps 1 --batch 2 --seq 16 --quiet"
check "generated C names the .model lines" grep -q "tinygpt.model:" src-tinygpt/tinygpt.c
check "generated C has shapes on buffers" grep -q "f32\[B, T, 128\]" src-tinygpt/tinygpt.c

./mlp --data text.txt --steps 30 --batch 8 --seq 32 --log mlp.jsonl --quiet
first=$(losses mlp.jsonl | head -1 | cut -d: -f2); last=$(losses mlp.jsonl | tail -1 | cut -d: -f2)
check "mlp trains (loss $first -> $last)" $py -c "import sys; sys.exit(0 if $last < $first - 1.0 else 1)"
./llama --data text.txt --steps 30 --batch 8 --seq 32 --lr 3e-3 --warmup 3 --log llama.jsonl --quiet
first=$(losses llama.jsonl | head -1 | cut -d: -f2); last=$(losses llama.jsonl | tail -1 | cut -d: -f2)
check "llama (RoPE, no position table) trains (loss $first -> $last)" \
  $py -c "import sys; sys.exit(0 if $last < $first - 1.0 else 1)"
# examples/llama.model decays (cosine) to train.min_lr = 3e-4: a fine-tuning --lr below it would
# make the schedule raise the rate, so the run stops before step 0 and says which flag to give
./llama --data text.txt --steps 2 --lr 2e-5 --quiet > lowlr.txt 2>&1; rc=$?
check "--lr 2e-5 under the model's min_lr 3e-4 (cosine): exit 2, the line names both and --min-lr (rc $rc)" bash -c \
  "[ $rc -eq 2 ] && grep -q \"error: --min-lr 0.0003 (the model's train.min_lr) is above --lr 2e-05, so the cosine schedule would raise the rate; give a --min-lr of at most --lr\" lowlr.txt"
./llama --data text.txt --steps 2 --lr 2e-5 --min-lr 2e-6 --quiet --log lowlr.jsonl > /dev/null 2>&1
check "--lr 2e-5 --min-lr 2e-6 trains (2 steps)" [ "$(losses lowlr.jsonl | wc -l)" = 2 ]

# resume: 20 steps in one go == the same run resumed from its step-10
# checkpoint, bit for bit (dropout on, cosine schedule over the 20 steps)
opts="--data text.txt --batch 4 --seq 32 --lr 1e-3 --warmup 3 --lr-schedule cosine --dropout 0.1 --quiet --steps 20"
./tinygpt $opts --save ckpt --save-every 10 --log full.jsonl
./tinygpt $opts --load ckpt/step-00000010 --log rest.jsonl
check "resume is bit-exact" [ "$(losses full.jsonl | tail -10)" = "$(losses rest.jsonl)" ]
check "resume continues at step 10" grep -q '"step":10,' rest.jsonl
check "checkpoint has model, optimizer, config" test -f ckpt/step-00000010/model.safetensors -a \
  -f ckpt/step-00000010/optimizer.safetensors -a -f ckpt/step-00000010/config.json
check "the saved model loads with --init" ./tinygpt --data text.txt --init ckpt/step-00000010/model.safetensors \
  --steps 1 --batch 4 --seq 32 --quiet

# bad input: one line naming the file, exit 1; bad flags exit 2
printf 'xxxx' > short.txt
./tinygpt --data short.txt --steps 1 --quiet 2> err.txt; rc=$?
check "too-short data file is an error naming it (exit $rc)" [ $rc -eq 1 ]
check "too-short data file is an error naming it (exit $rc): the message" grep -q short.txt err.txt
$py -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<256i', 20240520, 7, 10, *([0]*253)) + bytes(20))" > badver.bin
./tinygpt --data badver.bin --steps 1 --quiet 2> err.txt; rc=$?
check "wrong .bin version is an error naming it (exit $rc)" [ $rc -eq 1 ]
check "wrong .bin version is an error naming it (exit $rc): the message" grep -q badver.bin err.txt
./tinygpt --data text.txt --steps nope 2>/dev/null; rc=$?
check "bad flag value exits 2 (got $rc)" [ $rc -eq 2 ]
./tinygpt --frobnicate 2>/dev/null; rc=$?
check "unknown flag exits 2 (got $rc)" [ $rc -eq 2 ]
./tinygpt --data text.txt --seq 1000 --steps 1 2>/dev/null; rc=$?
check "--seq above the position table is refused (got $rc)" [ $rc -eq 2 ]
./tinygpt --help > help.txt; check "--help lists the flags" grep -q -- "--grad-clip" help.txt

# dropout at rate 0: its backward is skipped and its input gradient read from its output
# gradient's storage (gradalias.c), which the memory plan keeps until that gradient's last
# reader. Here the gelu backward after it would otherwise get that slot for d(x) and clear it
# before reading d(y) from it. Gradients equal those of the model without the dropout
hd='use "nn"\nconfig {\n  V = 256\n  C = 32\n}\ntrain {\n  batch = 4\n  seq = 16\n}\n'
printf "$hd"'model M(idx: i32[B, T], targets: i32[B, T]) -> f32[] {\n  x = wte: Embedding(idx, V, C)\n  y = dropout(gelu(x))\n  return cross_entropy(matmul_t(gelu(y), wte.weight), targets, V)\n}\n' > r0.model
printf "$hd"'model M(idx: i32[B, T], targets: i32[B, T]) -> f32[] {\n  x = wte: Embedding(idx, V, C)\n  y = gelu(x)\n  return cross_entropy(matmul_t(gelu(y), wte.weight), targets, V)\n}\n' > r0none.model
"$shardc" build r0.model -o r0 --emit-src src-r0 && "$shardc" build r0none.model -o r0none
check "dropout's backward runs only at a rate above 0" grep -q "if (e->dropout > 0.0f) {" src-r0/r0.c
./r0 --data text.txt --steps 1 --quiet --dump-grads r0.st && ./r0none --data text.txt --steps 1 --quiet --dump-grads r0none.st
check "dropout at rate 0: the gradients of the model without it, bit for bit" cmp r0.st r0none.st
./r0 --data text.txt --steps 3 --dropout 0.5 --quiet --dump-grads r0half.st
check "dropout 0.5: other gradients (the step runs)" bash -c "! cmp -s r0.st r0half.st"

# a whole transformer block, by finite differences (no PyTorch involved)
echo '{"vocab_size": 32, "n_positions": 8, "n_embd": 16, "n_layer": 1, "n_head": 2}' > blk.json
"$shardc" build "$src/examples/gpt2.model" --config blk.json -o blk
$py "$src/tests/reference/gpt2_ref.py" init --config blk.json --out blk.init --seed 3 --perturb
$py "$src/tests/reference/gpt2_ref.py" tokens --out blk.tok --n 40 --vocab 32 --seed 4
check "finite differences of a whole transformer block" $py "$src/tests/reference/fdcheck.py" ./blk blk.init blk.tok

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
