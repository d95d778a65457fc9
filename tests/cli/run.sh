#!/usr/bin/env bash
# The shardc command line: help, version, usage errors, the examples, and the
# parameter counts that must come out (GPT-2 small, medium, XL).
set -u
shardc=$1; src=$2
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
expect_rc() { # want_rc name cmd...
  local want=$1 name=$2; shift 2
  "$@" >/tmp/cli.out 2>/tmp/cli.err; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name"; else bad "$name (exit $rc, wanted $want)"; cat /tmp/cli.err; fi
}
total() { "$shardc" check "$src/examples/gpt2.model" --params "$@" | sed -n 's/^total: \([0-9,]*\) parameters.*/\1/p'; }
expect_eq() { if [ "$2" = "$3" ]; then ok "$1 = $3"; else bad "$1: got '$2', wanted '$3'"; fi; }

expect_rc 0 "--help" "$shardc" --help
grep -q "usage: shardc" /tmp/cli.out && ok "--help prints usage" || bad "--help prints usage"
expect_rc 0 "check --help" "$shardc" check --help
grep -q -- "--set NAME=VALUE" /tmp/cli.out && ok "check --help lists --set" || bad "check --help lists --set"
expect_rc 0 "--version" "$shardc" --version
grep -q "^shardc [0-9]" /tmp/cli.out && ok "--version prints it" || bad "--version prints it"
expect_rc 2 "no arguments" "$shardc"
expect_rc 2 "unknown command" "$shardc" frobnicate x.model
expect_rc 2 "unknown flag" "$shardc" check "$src/examples/gpt2.model" --frobnicate
grep -q "unknown option '--frobnicate'" /tmp/cli.err && ok "unknown flag is named" || bad "unknown flag is named"
expect_rc 2 "flag without value" "$shardc" check "$src/examples/gpt2.model" --set
expect_rc 2 "bad --set" "$shardc" check "$src/examples/gpt2.model" --set novalue
# -o into a directory that is not there: one line before any compiling, not a linker's error
expect_rc 2 "-o in a missing directory" "$shardc" build "$src/examples/mlp.model" -o /tmp/cli-no-such-dir/m
expect_eq "-o in a missing directory: one line naming it" "$(wc -l < /tmp/cli.err) $(grep -c 'cli-no-such-dir does not exist; create it first' /tmp/cli.err)" "1 1"
expect_rc 2 "bad --tp" "$shardc" check "$src/examples/gpt2.model" --tp zero
expect_rc 1 "--set of an unknown constant" "$shardc" check "$src/examples/gpt2.model" --set n_embed=5
grep -q "no constant named 'n_embed'" /tmp/cli.err && ok "unknown --set is named" || bad "unknown --set is named"
expect_rc 1 "missing file" "$shardc" check /nonexistent/x.model
for f in gpt2 tinygpt mlp; do expect_rc 0 "check examples/$f.model" "$shardc" check "$src/examples/$f.model"; done

expect_eq "GPT-2 small" "$(total)" "124,439,808"
expect_eq "GPT-2 small, vocab 50304" "$(total --set vocab_size=50304)" "124,475,904"
expect_eq "GPT-2 medium" "$(total --set n_embd=1024 --set n_layer=24 --set n_head=16)" "354,823,168"
cat > /tmp/cli-xl.json <<'J'
{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
 "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
 "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 1600, "n_head": 25,
 "n_layer": 48, "n_positions": 1024, "output_past": true, "resid_pdrop": 0.1,
 "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
 "vocab_size": 50257}
J
expect_eq "GPT-2 XL from a HF config.json" "$(total --config /tmp/cli-xl.json)" "1,557,611,200"
expect_eq "--set after --config wins" "$(total --config /tmp/cli-xl.json --set n_layer=1)" "$("$shardc" check "$src/examples/gpt2.model" --params --set n_embd=1600 --set n_head=25 --set n_layer=1 | sed -n 's/^total: \([0-9,]*\).*/\1/p')"
"$shardc" check "$src/examples/gpt2.model" --params > /tmp/cli.out
grep -q "^transformer.h.3.attn.c_attn.weight  *\[768, 2304\]  *1,769,472" /tmp/cli.out && ok "hierarchical HF names" || bad "hierarchical HF names"
grep -q "^transformer.wte.weight" /tmp/cli.out && ! grep -q "lm_head" /tmp/cli.out && ok "tied head has no parameter" || bad "tied head"
echo '{not json' > /tmp/cli-bad.json
expect_rc 1 "corrupt --config" "$shardc" check "$src/examples/gpt2.model" --config /tmp/cli-bad.json
grep -q "cli-bad.json" /tmp/cli.err && ok "corrupt --config names the file" || bad "corrupt --config names the file"
"$shardc" check "$src/examples/gpt2.model" --tp 2 --set vocab_size=50304 --dump=shard > /tmp/cli.out
n=$(grep -c "all-reduce" /tmp/cli.out)
expect_eq "tp=2 GPT-2: all-reduces forward (1 embedding + 2 per block)" "$n" "25"

# qkvpack.c: causal_attention of slice(qkv, 0..2, 3) reads q|k|v where the projection wrote
# them; a slice read elsewhere (v below) or out of order keeps the slices
"$shardc" build "$src/examples/gpt2.model" -o /tmp/cli-gpt2 --dump=autodiff > /tmp/cli.out 2>&1
expect_eq "GPT-2: attentions reading q|k|v in place" "$(grep -c '= \$attention_qkv(%[0-9]*, 12)' /tmp/cli.out)" "12"
expect_eq "GPT-2: slices left" "$(grep -c '= slice(' /tmp/cli.out)" "0"
expect_eq "GPT-2: backward steps writing d(qkv)" "$(grep -c '^  \$attention_qkv.grad(' /tmp/cli.out)" "12"
"$shardc" build "$src/examples/gpt2.model" --tp 2 --set vocab_size=50304 -o /tmp/cli-gpt2 --dump=autodiff > /tmp/cli.out 2>&1
expect_eq "tp=2 GPT-2: attentions of a rank's 6 heads reading q|k|v in place" "$(grep -c '= \$attention_qkv(%[0-9]*, 6)' /tmp/cli.out)" "12"
# a small model's head: the stdlib, V and C, a batch of 2 x 8
tiny_head() { printf 'use "nn"\nconfig {\n  V = 64\n  C = 32\n}\ntrain {\n  batch = 2\n  seq = 8\n}\n'; }
{ tiny_head; cat; } > /tmp/cli-qkv.model <<'M'
block Attn(x: f32[B, T, C], first: int) -> f32[B, T, C] {
  qkv = c_attn: Linear(x, 3 * C)
  q = slice(qkv, first, 3)
  k = slice(qkv, 1, 3)
  v = slice(qkv, 2, 3)
  return causal_attention(q, k, v, 2) + v
}
model M(idx: i32[B, T], targets: i32[B, T]) -> f32[] {
  x = wte: Embedding(idx, V, C)
  y = a: Attn(x, 0)
  z = b: Attn(y, 1)
  return cross_entropy(matmul_t(z, wte.weight), targets, V)
}
M
"$shardc" build /tmp/cli-qkv.model -o /tmp/cli-qkv --dump=autodiff > /tmp/cli.out 2>&1
expect_eq "v read twice, q = slice 1: slices kept" "$(grep -c '= slice(' /tmp/cli.out) $(grep -c '= causal_attention(' /tmp/cli.out) $(grep -c 'attention_qkv' /tmp/cli.out)" "6 2 0"
# gradalias.c: the residual stream's gradient lives in the storage of the gradient it starts
# as (its copy in the residual add's backward, and the clearing before it, are gone)
rm -rf /tmp/cli-src
"$shardc" build "$src/examples/gpt2.model" -o /tmp/cli-gpt2 --emit-src /tmp/cli-src > /dev/null 2>&1
expect_eq "GPT-2 host program: residual add backward steps" "$(grep -c 'nn.model:9[23]  d add' /tmp/cli-src/cli-gpt2.c)" "0"
expect_eq "GPT-2 host program: gradients cleared" "$(grep -c 'sr_zero(' /tmp/cli-src/cli-gpt2.c)" "100"
# lossfuse.c: a training step's forward writes the loss's gradient over the logits (no backward
# step, no gradient buffer or its clearing); evaluation keeps the plain loss
expect_eq "GPT-2 host program: the loss and its gradient in one pass when training" "$(grep -c 'if (e->train)' /tmp/cli-src/cli-gpt2.c) $(grep -c 'sr_crossentropy_fwd_bwd(' /tmp/cli-src/cli-gpt2.c) $(grep -c 'sr_crossentropy_bwd(' /tmp/cli-src/cli-gpt2.c)" "1 1 0"
rm -rf /tmp/cli-src-tp
"$shardc" build "$src/examples/gpt2.model" --tp 2 --set make_vocab_size_divisible_by=128 -o /tmp/cli-gpt2-tp --emit-src /tmp/cli-src-tp > /dev/null 2>&1
expect_eq "GPT-2 at tp=2: the vocab-parallel loss and its gradient over the logits when training, no backward step" "$(grep -c 'if (e->train)' /tmp/cli-src-tp/cli-gpt2-tp.c) $(grep -c 'sr_crossentropy_vp_fwd_bwd(' /tmp/cli-src-tp/cli-gpt2-tp.c) $(grep -c 'sr_crossentropy_vp_bwd(' /tmp/cli-src-tp/cli-gpt2-tp.c) $(grep -c 'sr_crossentropy_vp_bwd_over(' /tmp/cli-src-tp/cli-gpt2-tp.c)" "1 1 0 1"
expect_eq "GPT-2 host program: dropout backward steps that run only at a rate above 0" "$(grep -c 'if (e->dropout > 0.0f) {' /tmp/cli-src/cli-gpt2.c)" "25"
# ... and the 24 residual adds' backward steps, left with nothing to write, are dropped from the
# backward program (199 steps from autodiff), so the memory plan no longer counts their reads;
# so is the loss's (lossfuse.c)
expect_eq "GPT-2: backward steps after gradalias.c and lossfuse.c" "$(sed -n 's/.* \([0-9]*\) backward;.*/\1/p' /tmp/cli-src/cli-gpt2.c)" "174"
# ... but not where a step reading d(out) writes d(a) after it: h = a + gelu(a), whose gelu
# backward reads d(h) (its output's gradient is a copy of it) and adds to d(a)
{ tiny_head; cat; } > /tmp/cli-ga.model <<'M'
model M(idx: i32[B, T], targets: i32[B, T]) -> f32[] {
  a = lin: Linear(wte: Embedding(idx, V, C), C)
  h = a + gelu(a)
  return cross_entropy(matmul_t(h, wte.weight), targets, V)
}
M
rm -rf /tmp/cli-src
"$shardc" build /tmp/cli-ga.model -o /tmp/cli-ga --emit-src /tmp/cli-src > /dev/null 2>&1
expect_eq "h = a + gelu(a): d(a) kept apart from d(h) (its copy stays)" "$(grep -A2 'cli-ga.model:12  d add' /tmp/cli-src/cli-ga.c | grep -c 'sr_add_bwd(F(')" "1"
rm -rf /tmp/cli-gpt2 /tmp/cli-qkv /tmp/cli-qkv.model /tmp/cli-src /tmp/cli-ga /tmp/cli-ga.model
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
