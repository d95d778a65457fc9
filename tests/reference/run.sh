#!/usr/bin/env bash
# Reference test: examples/gpt2.model at a small configuration against an
# independent PyTorch GPT-2 (tests/reference/gpt2_ref.py) from the same
# initial safetensors and the same token file. Step-0 loss and every gradient
# within 1e-5 (relative), the loss of each of 10 AdamW steps with clipping
# within 1e-4. Also a finite-difference check of the whole model's gradient.
set -eu -o pipefail  # a failed compare.py must fail its `| tail` pipeline
shardc=$(realpath "$1"); src=$(realpath "$2")
py=${SHARDC_TEST_PY:-/usr/bin/python3}
ref=$src/tests/reference
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
fail=0
run_cfg() { # name config-json batch seq vocab
  local name=$1 cfg=$2 G=$3 T=$4 V=$5
  echo "$cfg" > "$name.json"
  "$shardc" build "$src/examples/gpt2.model" --config "$name.json" -o "$name.bin"
  $py "$ref/gpt2_ref.py" init --config "$name.json" --out "$name.init.safetensors" --seed 7 --perturb
  $py "$ref/gpt2_ref.py" tokens --out "$name.tok" --n $((G*T*2+1)) --vocab "$V" --seed 3
  local opt="--batch $G --seq $T --steps 10 --lr 1e-2 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0"
  $py "$ref/gpt2_ref.py" run --config "$name.json" --init "$name.init.safetensors" --data "$name.tok" $opt \
      --out-losses "$name.ref.json" --out-grads "$name.ref.safetensors" --quiet
  "./$name.bin" --init "$name.init.safetensors" --data "$name.tok" $opt --lr-schedule constant --warmup 0 \
      --dump-grads "$name.ours.safetensors" --log "$name.ours.jsonl" --quiet --threads 1
  echo "== $name: $cfg"
  $py "$ref/compare.py" --ref-losses "$name.ref.json" --log "$name.ours.jsonl" \
      --ref-grads "$name.ref.safetensors" --grads "$name.ours.safetensors" \
      --loss0-rtol 1e-5 --grad-rtol 1e-5 --loss-rtol 1e-4 --brief || fail=1
}
run_cfg tiny '{"vocab_size": 64, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4}' 4 8 64
run_cfg odd '{"vocab_size": 97, "n_positions": 24, "n_embd": 48, "n_layer": 3, "n_head": 3}' 3 11 97
# JSON Lines input_ids under a completion_mask: the loss is the mean over the
# completion tokens (PyTorch: cross_entropy's ignore_index), ours over 2
# microbatches whose shares of completion tokens differ
$py "$ref/gpt2_ref.py" records --out masked.jsonl --n $((4*8*2+1)) --vocab 64 --seed 9
mopt="--batch 4 --seq 8 --steps 10 --lr 1e-2 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0"
$py "$ref/gpt2_ref.py" run --config tiny.json --init tiny.init.safetensors --data masked.jsonl $mopt \
    --out-losses masked.ref.json --out-grads masked.ref.safetensors --quiet
./tiny.bin --init tiny.init.safetensors --data masked.jsonl $mopt --microbatches 2 --lr-schedule constant \
    --warmup 0 --dump-grads masked.ours.safetensors --log masked.ours.jsonl --quiet --threads 1
echo "== masked: tiny, prompt tokens' targets left out of the loss"
$py "$ref/compare.py" --ref-losses masked.ref.json --log masked.ours.jsonl --ref-grads masked.ref.safetensors \
    --grads masked.ours.safetensors --loss0-rtol 1e-5 --grad-rtol 1e-5 --loss-rtol 1e-4 --brief || fail=1
# --eod-mask-loss: no loss on a target whose input is the end-of-text token (here the
# stream's most frequent token, 4 of its 65); PyTorch: those targets -100
eod=$($py -c "import sys; sys.path.insert(0, '$ref'); import gpt2_ref, numpy as np; print(np.bincount(gpt2_ref.read_tokens('tiny.tok')).argmax())")
$py "$ref/gpt2_ref.py" run --config tiny.json --init tiny.init.safetensors --data tiny.tok $mopt --eod-token "$eod" \
    --out-losses eod.ref.json --out-grads eod.ref.safetensors --quiet
./tiny.bin --init tiny.init.safetensors --data tiny.tok $mopt --microbatches 2 --lr-schedule constant --warmup 0 \
    --eod-mask-loss 1 --eod-token "$eod" --dump-grads eod.ours.safetensors --log eod.ours.jsonl --quiet --threads 1
echo "== eod: tiny, no loss after token $eod (--eod-mask-loss 1)"
$py "$ref/compare.py" --ref-losses eod.ref.json --log eod.ours.jsonl --ref-grads eod.ref.safetensors \
    --grads eod.ours.safetensors --loss0-rtol 1e-5 --grad-rtol 1e-5 --loss-rtol 1e-4 --brief || fail=1
# the same weights in Hugging Face's prefix-less form ("wte.weight", "h.0...")
# load with --init and give bit-identical losses
$py - "$w/tiny.init.safetensors" "$w/tiny.noprefix.safetensors" "$ref" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import st
tensors = st.load(sys.argv[1])[0] if isinstance(st.load(sys.argv[1]), tuple) else st.load(sys.argv[1])
st.save(sys.argv[2], {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in tensors.items()})
PY
./tiny.bin --init tiny.noprefix.safetensors --data tiny.tok --batch 4 --seq 8 --steps 3 --lr 1e-2 \
    --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 \
    --lr-schedule constant --warmup 0 --log noprefix.jsonl --quiet --threads 1
if [ "$(head -3 tiny.ours.jsonl | grep -o '"loss":[^,]*')" = "$(grep -o '"loss":[^,]*' noprefix.jsonl)" ]; then
  echo "ok   prefix-less checkpoint gives the same losses"
else
  echo "FAIL prefix-less checkpoint"; fail=1
fi
# --eval-mc: each completion's summed loss after its context (cut from the
# left to fit --seq), against the reference's, and the accuracies rank 0
# prints are the counts of examples whose least loss (summed, per token) is
# the label's
$py "$ref/gpt2_ref.py" mcset --out mc.bin --n 24 --vocab 64 --seq 16 --seed 5
$py "$ref/gpt2_ref.py" mc --config tiny.json --init tiny.init.safetensors --mc mc.bin --seq 16 --out mc.ref.json
./tiny.bin --init tiny.init.safetensors --steps 0 --batch 4 --seq 16 --eval-mc mc.bin --eval-mc-out mc.ours.jsonl \
    --log mc.log.jsonl --threads 1 2> mc.err
if $py - mc.ref.json mc.ours.jsonl mc.log.jsonl mc.err mc.bin "$src/tests" <<'PY'
import json, re, sys
ref = json.load(open(sys.argv[1]))
ours = [json.loads(l) for l in open(sys.argv[2])]
log = [json.loads(l) for l in open(sys.argv[3]) if "mc_acc" in l]
err = open(sys.argv[4]).read()
assert len(ours) == len(ref) == 24 and len(log) == 1, (len(ours), len(ref), len(log))
worst = max(abs(a - b) / abs(b) for o, r in zip(ours, ref) for a, b in zip(o["losses"], r["losses"]))
argmin = lambda v: min(range(len(v)), key=lambda i: (v[i], i))
acc = sum(argmin(r["losses"]) == r["label"] for r in ref)
acc_norm = sum(argmin([l / n for l, n in zip(r["losses"], r["tokens"])]) == r["label"] for r in ref)
print(f"  {sum(len(r['losses']) for r in ref)} completions, worst relative loss difference {worst:.2e}; "
      f"acc {acc}/24, acc_norm {acc_norm}/24 from the reference's losses")
assert worst <= 1e-5
assert all(o["tokens"] == r["tokens"] and o["label"] == r["label"] for o, r in zip(ours, ref))
assert abs(log[0]["mc_acc"] - acc / 24) < 1e-8 and abs(log[0]["mc_acc_norm"] - acc_norm / 24) < 1e-8, log[0]
assert f"acc_norm {acc_norm / 24:.4f} ({acc_norm}/24), acc {acc / 24:.4f} ({acc}/24)" in err, err
sys.path.insert(0, sys.argv[6]); import evalfile
cut = sum(len(ctx) + max(map(len, comps)) - 1 > 16 for _, ctx, comps in evalfile.read(sys.argv[5]))
assert cut > 0 and f"({cut} with contexts cut from the left to fit --seq 16)" in err, (cut, err)
PY
then echo "ok   --eval-mc: every completion's loss as PyTorch's, and the accuracies its losses give"
else echo "FAIL --eval-mc against the reference"; fail=1; fi
# a checkpoint we save loads into Hugging Face transformers' GPT2LMHeadModel
# and gives the loss our program computes on the next batch
nhf=0
if $py -c "import transformers" 2>/dev/null; then
  ./tiny.bin --init tiny.init.safetensors --data tiny.tok --batch 4 --seq 8 --steps 3 --lr 1e-2 \
      --save ck --quiet --threads 1
  ./tiny.bin --load ck --data tiny.tok --batch 4 --seq 8 --steps 4 --lr 1e-2 --quiet --threads 1 --log next.jsonl
  ours=$(grep -o '"loss":[^,]*' next.jsonl | head -1 | cut -d: -f2)
  if $py - "ck/$(cat ck/latest)" tiny.tok "$ours" "$ref" <<'PY'
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[4]); import gpt2_ref
from transformers import GPT2Config, GPT2LMHeadModel
d, toks, ours = sys.argv[1], gpt2_ref.read_tokens(sys.argv[2]), float(sys.argv[3])
m = GPT2LMHeadModel.from_pretrained(d, config=GPT2Config(**json.load(open(d + "/config.json")))).eval()
x, y = gpt2_ref.get_batch(toks, 3, 4, 8)
with torch.no_grad():
    logits = m(x).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
print(f"  transformers' loss {loss:.7f}, ours {ours:.7f}")
sys.exit(0 if abs(loss - ours) <= 1e-5 * abs(ours) else 1)
PY
  then echo "ok   our checkpoint loads into transformers' GPT2LMHeadModel with the same loss"; nhf=1
  else echo "FAIL our checkpoint in transformers"; fail=1; fi
else
  echo "skip transformers is not installed: the Hugging Face loading check did not run"
fi
# LLaMA-style blocks with rotary position embeddings (tests/e2e/llama.model)
# against tests/reference/llama_ref.py: step-0 loss and gradients, 10 steps;
# with multi-head (3 key/value heads for 3 query heads) and grouped-query
# attention (2 for 4); and that reference against transformers'
# LlamaForCausalLM (multi-head: transformers 4.30 has no grouped-query)
$py "$ref/gpt2_ref.py" tokens --out llama.tok --n $((4*24*2+1)) --vocab 96 --seed 5
lopt="--batch 4 --seq 24 --steps 10 --lr 1e-2 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0"
llama_cfg() { # name reference-config-json [model build-config-json]; $opt: the training flags
  local name=$1 opt=${opt:-$lopt}
  echo "$2" > "$name.json"
  if [ $# -gt 2 ]; then echo "$4" > "$name.build.json"; else cp "$name.json" "$name.build.json"; fi
  "$shardc" build "${3:-$src/tests/e2e/llama.model}" --config "$name.build.json" -o "$name.bin"
  $py "$ref/llama_ref.py" init --config "$name.json" --out "$name.init.safetensors" --seed 11
  $py "$ref/llama_ref.py" run --config "$name.json" --init "$name.init.safetensors" --data llama.tok $opt \
      --out-losses "$name.ref.json" --out-grads "$name.ref.safetensors"
  "./$name.bin" --init "$name.init.safetensors" --data llama.tok $opt --lr-schedule constant --warmup 0 \
      --dump-grads "$name.ours.safetensors" --log "$name.ours.jsonl" --quiet --threads 1
  echo "== $name: $2"
  $py "$ref/compare.py" --ref-losses "$name.ref.json" --log "$name.ours.jsonl" \
      --ref-grads "$name.ref.safetensors" --grads "$name.ours.safetensors" \
      --loss0-rtol 1e-5 --grad-rtol 1e-5 --loss-rtol 1e-4 --brief || fail=1
}
llama_cfg llama '{"vocab": 96, "dim": 48, "n_layer": 2, "n_head": 3, "n_kv_head": 3, "hidden": 80, "eps": 1e-6, "rope_theta": 10000.0}'
llama_cfg gqa '{"vocab": 96, "dim": 48, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "hidden": 80, "eps": 1e-6, "rope_theta": 500000.0}'
# examples/llama3.model (Llama 3.2: tied head, grouped-query attention, the
# "llama3" rope scaling) under Hugging Face's config keys, the scaling's
# original context 32 so that it changes angles within these 24 positions
l3hf='{"vocab_size": 96, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": true, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}'
# (lr 3e-3: at 1e-2 this tied model's 10 steps amplify float32 round-off
# beyond 1e-4, PyTorch's own float32 run included, measured against float64)
opt=${lopt/--lr 1e-2/--lr 3e-3} llama_cfg llama3 '{"vocab": 96, "dim": 48, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "hidden": 80, "eps": 1e-6, "rope_theta": 500000.0, "tied": true, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}' \
  "$src/examples/llama3.model" "$l3hf"
# examples/qwen2.model (Qwen2.5: biases on q, k and v, rope_theta 1e6, tied
# head), the same way
l2hf='{"model_type": "qwen2", "vocab_size": 96, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true}'
opt=${lopt/--lr 1e-2/--lr 3e-3} llama_cfg qwen2 '{"vocab": 96, "dim": 48, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "hidden": 80, "eps": 1e-6, "rope_theta": 1000000.0, "tied": true, "qkv_bias": true}' \
  "$src/examples/qwen2.model" "$l2hf"
# a part of the model matters when the program without it has another step-0
# loss than the reference: BIN runs one step from NAME's initial weights
matters() { # what name bin
  "./$3" --init "$2.init.safetensors" --data llama.tok $lopt --steps 1 --lr-schedule constant --warmup 0 \
      --log "$3.jsonl" --quiet --threads 1
  if $py - "$2.ref.json" "$3.jsonl" "$1" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["losses"][0]
ours = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l][0]
print(f"   step-0 loss without {sys.argv[3]}: {ours:.7f}, the reference's {ref:.7f}")
sys.exit(0 if abs(ours - ref) > 1e-4 * abs(ref) else 1)
PY
  then echo "ok   $1 matters: without it the step-0 loss is not the reference's"
  else echo "FAIL the reference's loss does not depend on $1"; fail=1; fi
}
# without the llama3 scaling (rope_type "default")
"$shardc" build "$src/examples/llama3.model" --config llama3.build.json --set rope_scaling.rope_type=default \
    -o l3plain.bin
matters "the llama3 rope scaling" llama3 l3plain.bin
# the same model without rotating q (an edited copy of the stdlib, found
# next to the model before the real one): its
# step-0 loss is not the reference's, so the comparison above sees RoPE
mkdir -p norope
# (rope's arguments continue on the next line: joined first)
sed -e '/qr = rope(q, n_head/{N;s/\n */ /}' -e 's/qr = rope(q, n_head, [^)]*)/qr = q/' \
    "$src/stdlib/nn.model" > norope/nn.model
cp "$src/tests/e2e/llama.model" norope/llama.model
if grep -q 'qr = rope(' norope/nn.model || ! grep -q 'kr = rope(k, kv' norope/nn.model; then
  echo "FAIL could not remove the rotation of q from a copy of nn.model"; fail=1
else
  "$shardc" build norope/llama.model --config llama.json -o norope.bin
  matters "rotating q" llama norope.bin
fi
nllama=6
hf_ref() { # name: the reference's model against transformers' LlamaForCausalLM
  if $py "$ref/llama_ref.py" hf --config "$1.json" --init "$1.init.safetensors" --data llama.tok --batch 4 --seq 24
  then echo "ok   the reference's $1 model is transformers' (same loss, 1e-5)"; nllama=$((nllama + 1))
  else echo "FAIL the reference's $1 model against transformers'"; fail=1; fi
}
# Hugging Face Llama files both ways, with a model written under Hugging
# Face's names, layouts and config keys: a random LlamaForCausalLM saved by
# transformers loads with --init and gives transformers' loss; a checkpoint
# we save loads with AutoModelForCausalLM.from_pretrained and gives ours
hf_both_ways() { # name model hf-config-json
  local n=$1
  echo "$3" > "$n.json"
  "$shardc" build "$2" --config "$n.json" -o "$n.bin"
  if $py - "$n.json" "$n.hf" llama.tok "$ref" > "$n.hf0.txt" <<'PY'
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[4]); import gpt2_ref
from transformers import AutoConfig, AutoModelForCausalLM
cfg = dict({"max_position_embeddings": 64, "tie_word_embeddings": False}, **json.load(open(sys.argv[1])))
torch.manual_seed(3)
m = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type", "llama"), **cfg)).eval()
with torch.no_grad():  # norm weights away from 1, q and k large, biases nonzero: every part shows in the loss
    for n, p in m.named_parameters():
        if n.endswith("norm.weight"): p.add_(0.1 * torch.randn_like(p))
        if n.endswith(("q_proj.weight", "k_proj.weight")): p.mul_(12.0)
        if n.endswith("_proj.bias"): p.add_(0.1 * torch.randn_like(p))
m.save_pretrained(sys.argv[2], safe_serialization=True)
x, y = gpt2_ref.get_batch(gpt2_ref.read_tokens(sys.argv[3]), 0, 4, 24)
with torch.no_grad():
    lg = m(x, use_cache=False).logits
print("%.7f" % torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item())
PY
  then
    "./$n.bin" --init "$n.hf" --data llama.tok --batch 4 --seq 24 --steps 1 --log "$n.0.jsonl" --quiet --threads 1
    theirs=$(cat "$n.hf0.txt"); ours=$(grep -o '"loss":[^,]*' "$n.0.jsonl" | head -1 | cut -d: -f2)
    if $py -c "import sys; a, b = $theirs, $ours; sys.exit(0 if abs(a - b) <= 1e-5 * abs(a) else 1)"; then
      echo "ok   $n: a checkpoint saved by transformers loads with --init: loss $ours, transformers' $theirs"
      nllama=$((nllama + 1))
    else echo "FAIL $n: --init of a checkpoint saved by transformers: loss $ours, transformers' $theirs"; fail=1; fi
  else echo "FAIL $n: could not make a checkpoint with transformers"; fail=1; fi
  "./$n.bin" --init "$n.hf" --data llama.tok --batch 4 --seq 24 --steps 3 --lr 1e-3 --save "$n.ck" --quiet --threads 1
  "./$n.bin" --load "$n.ck" --data llama.tok --batch 4 --seq 24 --steps 4 --lr 1e-3 --log "$n.4.jsonl" --quiet \
      --threads 1
  ours=$(grep -o '"loss":[^,]*' "$n.4.jsonl" | head -1 | cut -d: -f2)
  if $py - "$n.ck/$(cat "$n.ck/latest")" llama.tok "$ours" "$ref" <<'PY'
import sys, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, sys.argv[4]); import gpt2_ref
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
x, y = gpt2_ref.get_batch(gpt2_ref.read_tokens(sys.argv[2]), 3, 4, 24)
with torch.no_grad():
    lg = m(x, use_cache=False).logits
loss, ours = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item(), float(sys.argv[3])
c = m.config
print(f"   {type(m).__name__} (model_type {c.model_type}, rope_scaling {getattr(c, 'rope_scaling', None)}, tie_word_embeddings {c.tie_word_embeddings}): "
      f"loss {loss:.7f}, ours {ours:.7f}")
sys.exit(0 if abs(loss - ours) <= 1e-5 * abs(ours) else 1)
PY
  then echo "ok   $n: our checkpoint loads with AutoModelForCausalLM with the same loss"
    nllama=$((nllama + 1))
  else echo "FAIL $n: our checkpoint in transformers"; fail=1; fi
}
if ! $py -c "import transformers" 2>/dev/null; then
  echo "skip transformers is not installed: the LlamaForCausalLM checks did not run"
else
  hf_ref llama
  hf_both_ways hfl "$src/examples/llama.model" \
    '{"vocab_size": 96, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 3, "rms_norm_eps": 1e-6}'
  if $py -c "import sys, transformers as t; sys.exit(tuple(map(int, t.__version__.split('.')[:2])) < (4, 43))"; then
    hf_ref gqa
    hf_ref llama3
    hf_both_ways hfl3 "$src/examples/llama3.model" "$l3hf"
    hf_ref qwen2
    hf_both_ways hfq "$src/examples/qwen2.model" "$l2hf"
  else
    echo "skip transformers $($py -c 'import transformers; print(transformers.__version__)') is older than 4.43:" \
         "grouped-query attention, rope_theta and the llama3 scaling are not checked against it (scripts/setup.sh installs 4.44.2)"
  fi
fi
[ $fail -eq 0 ] && echo "$((5 + nhf + nllama)) passed, 0 failed" || { echo "reference FAILED"; exit 1; }
