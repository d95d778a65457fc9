#!/usr/bin/env bash
# shardc plan: the numbers that must come out.
#   - GPT-3 175B: 700 GB of weights, 700 GB of gradients, 1.4 TB of Adam
#     state, 2.8 TB in all (fp32); 18 bytes per parameter in bf16 as the
#     CUDA backend holds them (Megatron-LM's bf16 weights + fp32 gradients),
#     16 as the ZeRO paper counts (--param-bytes 2,2,12)
#   - the ZeRO paper (arXiv 1910.02054), psi = 7.5 B on 64 data ranks:
#     120 / 31.4 / 16.6 / 1.9 GB of model states for ZeRO 0 / 1 / 2 / 3
#   - Megatron-LM (arXiv 2104.04473) Table 1: parameter counts, and matmul
#     FLOPs equal to 72 (96 with recomputation) B s l h^2 (...) ; all FLOPs
#     within 2%
#   - the memory plan, the bubble, the collectives of tensor, pipeline and
#     data parallelism; --json parses; --search on 8 GPUs; human output
# usage: run.sh SHARDC SRCDIR     (prints "N passed, M failed")
set -u
shardc=$1; src=$2
export SHARDC_STDLIB=${SHARDC_STDLIB:-$src/stdlib}
gpt2=$src/examples/gpt2.model
tiny=$src/examples/tinygpt.model
tmp=$(mktemp -d /tmp/plan-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }

expect_rc() { # want_rc name cmd...
  local want=$1 name=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name"; else bad "$name (exit $rc, wanted $want)"; head -5 "$tmp/err"; fi
}

# json NAME FILE PYTHON-EXPRESSIONS...: each expression (d is the JSON) must be
# true; an expression "print: EXPR" only prints
json() {
  local name=$1 file=$2; shift 2
  python3 - "$file" "$@" <<'PY' && ok "$name" || bad "$name"
import json, sys
d = json.load(open(sys.argv[1]))
good = True
for e in sys.argv[2:]:
    if e.startswith("print:"):
        print("     " + str(eval(e[6:])))
        continue
    try:
        r = eval(e)
    except Exception as x:
        r = False
        print("     error in %s: %s" % (e, x))
    if not r:
        good = False
        print("     not true: " + e)
sys.exit(0 if good else 1)
PY
}

plan() { "$shardc" plan "$@"; }

# ---- the command line ------------------------------------------------------------------
expect_rc 0 "plan --help" plan --help
grep -q -- "--search" "$tmp/out" && ok "plan --help lists --search" || bad "plan --help lists --search"
expect_rc 2 "unknown flag" plan "$gpt2" --frobnicate
grep -q "unknown option '--frobnicate'" "$tmp/err" && ok "unknown flag is named" || bad "unknown flag is named"
expect_rc 2 "no file" plan --tp 2
expect_rc 2 "bad --zero" plan "$gpt2" --zero 4
expect_rc 2 "bad --gpu" plan "$gpt2" --gpu tpu
expect_rc 2 "bad --precision" plan "$gpt2" --precision fp8
for pb in 2,2 2,2,0 2,2,12,4 a,2,12 2,,12; do expect_rc 2 "bad --param-bytes $pb" plan "$gpt2" --param-bytes $pb; done
expect_rc 2 "bad --backend" plan "$gpt2" --backend tpu
expect_rc 2 "--backend host with --precision bf16 (the host runs fp32)" plan "$gpt2" --backend host --precision bf16
expect_rc 2 "--search needs --gpus" plan "$gpt2" --search
expect_rc 2 "--gpus not divisible" plan "$gpt2" --gpus 6 --tp 4
expect_rc 1 "layout error: vocab 50257 over tensor=2" plan "$gpt2" --tp 2
grep -q "50257, which is not divisible by 2" "$tmp/err" && ok "the compiler's message comes through" || bad "the compiler's message comes through"
expect_rc 1 "batch not divisible by microbatches" plan "$gpt2" --microbatches 3
expect_rc 1 "--virtual-stages needs interleaved" plan "$gpt2" --pp 2 --virtual-stages 2
expect_rc 1 "missing file" plan /nonexistent/x.model
for f in gpt2 tinygpt mlp; do expect_rc 0 "plan examples/$f.model" plan "$src/examples/$f.model"; done

# ---- GPT-3 175B ------------------------------------------------------------------------
gpt3="--set n_embd=12288 --set n_layer=96 --set n_head=96 --set n_positions=2048 --set seq=2048"
plan "$gpt2" $gpt3 --batch 1 --json > "$tmp/gpt3.json" 2>"$tmp/err" || { bad "GPT-3 175B plan"; cat "$tmp/err"; }
json "GPT-3 175B fp32: 700 GB weights, 700 GB gradients, 1.4 TB Adam state, 2.8 TB in all" "$tmp/gpt3.json" \
  "abs(d['parameters']['total'] / 175e9 - 1) < 0.005" \
  "round(d['roles'][0]['memory']['weights'] / 1e11) * 100 == 700" \
  "round(d['roles'][0]['memory']['gradients'] / 1e11) * 100 == 700" \
  "round(d['roles'][0]['memory']['optimizer'] / 1e11) / 10 == 1.4" \
  "round(sum(d['roles'][0]['memory'][k] for k in ('weights', 'gradients', 'optimizer')) / 1e11) / 10 == 2.8" \
  "d['roles'][0]['memory']['weights'] == 4 * d['parameters']['total']" \
  "d['roles'][0]['memory']['optimizer'] == 8 * d['parameters']['total']" \
  "print: 'parameters %.4g, weights %.1f GB, gradients %.1f GB, optimizer %.1f GB' % (d['parameters']['total'], d['roles'][0]['memory']['weights'] / 1e9, d['roles'][0]['memory']['gradients'] / 1e9, d['roles'][0]['memory']['optimizer'] / 1e9)"
plan "$gpt2" $gpt3 --batch 1 --precision bf16 --json > "$tmp/gpt3m.json" 2>"$tmp/err" || bad "GPT-3 175B bf16 plan"
json "GPT-3 175B in bf16 as the CUDA backend holds it: 6 (fp32 + bf16 copy) + 4 + 8 = 18 bytes per parameter" "$tmp/gpt3m.json" \
  "d['parameters']['bytes_per_parameter'] == {'weights': 6, 'gradients': 4, 'optimizer': 8}" \
  "d['parameters']['model_states_bytes'] == 18 * d['parameters']['total']" \
  "sum(d['roles'][0]['memory'][k] for k in ('weights', 'gradients', 'optimizer')) == 18 * d['parameters']['total']" \
  "print: 'model states %.2f TB' % (d['roles'][0]['memory']['zero_stages'][0]['model_states'] / 1e12)"
plan "$gpt2" $gpt3 --batch 1 --precision bf16 --param-bytes 2,2,12 --json > "$tmp/gpt3p.json" 2>"$tmp/err" ||
  bad "GPT-3 175B --param-bytes 2,2,12 plan"
json "GPT-3 175B as the ZeRO paper counts (--param-bytes 2,2,12): 16 bytes per parameter" "$tmp/gpt3p.json" \
  "d['parameters']['bytes_per_parameter'] == {'weights': 2, 'gradients': 2, 'optimizer': 12}" \
  "sum(d['roles'][0]['memory'][k] for k in ('weights', 'gradients', 'optimizer')) == 16 * d['parameters']['total']"

# ---- the CUDA program sums a column-parallel layer's input gradient during its weight-gradient GEMM
# (all-reduce; reduce-scatter with sequence parallelism): each call hides min(its time, the GEMM's);
# two per layer (q|k|v's and the MLP's first), none on the host, none in zb-h1's split passes
hid() { # hid FILE: the hidden time recomputed from the collectives' entries, and the plan's
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); r = d['roles'][0]; lay = d['layout']
F = d['hardware']['peak_flops'] * d['hardware']['efficiency']
m = lay['microbatches']
h = sum(c['calls_per_step'] / m * min(c['seconds_per_step'] / c['calls_per_step'], c['gemm_flops_during_each'] / F)
        for c in r['collectives'] if c['gemm_flops_during_each'] > 0)
print(h, r['time']['tensor_comm_hidden'], sum(c['calls_per_step'] for c in r['collectives'] if c['gemm_flops_during_each'] > 0))
PY
}
plan "$gpt2" --tp 2 --set vocab_size=50304 --precision bf16 --json > "$tmp/ov.json" 2>/dev/null
plan "$gpt2" --tp 2 --set vocab_size=50304 --precision bf16 --sequence-parallel --json > "$tmp/ovs.json" 2>/dev/null
plan "$gpt2" --tp 2 --set vocab_size=50304 --json > "$tmp/ovh.json" 2>/dev/null
plan "$gpt2" --tp 2 --set vocab_size=50304 --pp 2 --microbatches 4 --schedule zb-h1 --precision bf16 --json > "$tmp/ovz.json" 2>/dev/null
plan "$gpt2" --tp 2 --set vocab_size=50304 --precision bf16 > "$tmp/ov.txt" 2>/dev/null
read -r h1 p1 n1 <<< "$(hid "$tmp/ov.json")"; read -r h2 p2 n2 <<< "$(hid "$tmp/ovs.json")"
read -r h3 p3 n3 <<< "$(hid "$tmp/ovh.json")"; read -r h4 p4 n4 <<< "$(hid "$tmp/ovz.json")"
echo "     hidden: bf16 $p1 ($n1 calls), sequence-parallel $p2 ($n2), host $p3 ($n3), zb-h1 $p4 ($n4)"
json "tensor comm during the weight gradients (CUDA): 24 calls of 12 layers, min(call, GEMM) each, out of the microbatch time" "$tmp/ov.json" \
  "abs($h1 - $p1) <= 1e-12 + 1e-9 * $p1 and $p1 > 0 and $n1 == 24" \
  "abs($h2 - $p2) <= 1e-12 + 1e-9 * $p2 and $p2 > 0 and $n2 == 24" \
  "[c['what'] for c in json.load(open('$tmp/ovs.json'))['roles'][0]['collectives'] if c['gemm_flops_during_each'] > 0] == ['sequence-split activation grad'] * 2" \
  "$p1 <= d['roles'][0]['time']['tensor_comm']" \
  "abs(d['roles'][0]['time']['per_microbatch'] - sum(d['roles'][0]['time'][k] for k in ('forward', 'backward', 'recompute', 'tensor_comm', 'send_recv')) + $p1) < 1e-12" \
  "$p3 == 0 and $n3 == 0 and $p4 == 0 and $n4 == 0"
grep -q "tensor comm [0-9.]* [mu]s of which [0-9.]* [mu]s during weight gradients" "$tmp/ov.txt" &&
  ok "the human output says how much tensor comm runs during weight gradients" ||
  bad "the human output says how much tensor comm runs during weight gradients ($(grep 'tensor comm' "$tmp/ov.txt"))"

# ---- each backend's parameter layout: the CUDA program aligns tensors to 256 bytes, the host to 64
plan "$tiny" --set n_embd=64 --set n_head=4 --tp 2 --dp 2 --json > "$tmp/bh.json" 2>/dev/null
plan "$tiny" --set n_embd=64 --set n_head=4 --tp 2 --dp 2 --backend cuda --json > "$tmp/bc.json" 2>/dev/null
plan "$tiny" --set n_embd=64 --set n_head=4 --tp 2 --dp 2 --precision bf16 --json > "$tmp/bb.json" 2>/dev/null
json "--backend cuda: the arena of 256-byte aligned tensors (n_embd 64 at tensor 2: 96-float biases); bf16 implies it" "$tmp/bc.json" \
  "d['layout']['backend'] == 'cuda' and json.load(open('$tmp/bh.json'))['layout']['backend'] == 'host'" \
  "json.load(open('$tmp/bb.json'))['layout']['backend'] == 'cuda'" \
  "d['roles'][0]['comm_counters']['data']['bytes'][0] > json.load(open('$tmp/bh.json'))['roles'][0]['comm_counters']['data']['bytes'][0]" \
  "d['roles'][0]['memory']['weights'] == json.load(open('$tmp/bh.json'))['roles'][0]['memory']['weights']"

# ---- the ZeRO paper: psi = 7.5 B, N_d = 64 -----------------------------------------------
zero="$src/tests/plan/zero75.model"
plan "$zero" --dp 64 --precision bf16 --param-bytes 2,2,12 --json > "$tmp/zero.json" 2>"$tmp/err" || { bad "ZeRO plan"; cat "$tmp/err"; }
json "ZeRO paper: 120 / 31.4 / 16.6 / 1.9 GB per GPU for stages 0-3" "$tmp/zero.json" \
  "d['parameters']['total'] == 7.5e9" \
  "[round(z['model_states'] / 1e8) / 10 for z in d['roles'][0]['memory']['zero_stages']] == [120.0, 31.4, 16.6, 1.9]" \
  "[z['model_states'] for z in d['roles'][0]['memory']['zero_stages']] == [120e9, 31.40625e9, 16.640625e9, 1.875e9]" \
  "print: ' / '.join('%.4g GB' % (z['model_states'] / 1e9) for z in d['roles'][0]['memory']['zero_stages'])"
for z in 1 2 3; do
  plan "$zero" --dp 64 --precision bf16 --param-bytes 2,2,12 --zero $z --json > "$tmp/zero$z.json" 2>/dev/null
  json "--zero $z: the rank's model states are stage $z's" "$tmp/zero$z.json" \
    "abs(sum(d['roles'][0]['memory'][k] for k in ('weights', 'gradients', 'optimizer')) - d['roles'][0]['memory']['zero_stages'][$z]['model_states']) < 1" \
    "d['layout']['zero'] == $z"
done
json "ZeRO 3: parameters gathered per tensor in forward and backward, gradients reduce-scattered" "$tmp/zero3.json" \
  "sorted((c['op'], c['group']) for c in d['roles'][0]['collectives']) == [('all-gather', 'data'), ('reduce-scatter', 'data')]" \
  "[c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['op'] == 'all-gather'] == [2]"
plan "$zero" --dp 64 --precision bf16 --zero 1 --json > "$tmp/zr.json" 2>/dev/null
json "ZeRO 1 as the CUDA backend runs it (bf16): 6 + 4 + 8/64 bytes per parameter; fp32 gradients and weights move, twice the paper's bytes" "$tmp/zr.json" \
  "abs(d['roles'][0]['memory']['zero_stages'][1]['model_states'] - 7.5e9 * (10 + 8 / 64)) < 1" \
  "[round(z['model_states'] / 1e8) / 10 for z in d['roles'][0]['memory']['zero_stages']] == [135.0, 75.9, 46.4, 2.1]" \
  "[d['roles'][0]['comm_counters']['data']['bytes'][k] for k in (1, 2)] == [2 * json.load(open('$tmp/zero1.json'))['roles'][0]['comm_counters']['data']['bytes'][k] for k in (1, 2)]"

# ---- Megatron-LM Table 1 (arXiv 2104.04473): V = 51200, s = 2048 -------------------------
# params (B), heads, hidden, layers, tensor, pipeline, GPUs, batch
cat > "$tmp/table1" <<'T'
1.7 24 2304 24 1 1 32 512
3.6 32 3072 30 2 1 64 512
7.5 32 4096 36 4 1 128 512
18.4 48 6144 40 8 1 256 1024
39.1 64 8192 48 8 2 512 1536
76.1 80 10240 60 8 4 1024 1792
145.6 96 12288 80 8 8 1536 2304
310.1 128 16384 96 8 16 1920 2160
529.6 128 20480 105 8 35 2520 2520
1008.0 160 25600 128 8 64 3072 3072
T
while read -r P a h l t p n B; do
  dp=$((n / (t * p))); m=$((B / dp))
  cfg="--set n_embd=$h --set n_layer=$l --set n_head=$a --set n_positions=2048 --set seq=2048 --set vocab_size=51200"
  lay="--batch $B --tp $t --pp $p --dp $dp --microbatches $m --gpu a100 --precision bf16"
  plan "$gpt2" $cfg $lay --json > "$tmp/t1.json" 2>"$tmp/err" || { bad "Table 1 ${P}B plan"; head -3 "$tmp/err"; continue; }
  plan "$gpt2" $cfg $lay --recompute block --json > "$tmp/t1r.json" 2>"$tmp/err" || { bad "Table 1 ${P}B recompute plan"; continue; }
  f72="72*$B*2048*$l*$h**2*(1 + 2048/(6*$h) + 51200/(12*$l*$h))"   # = 72 B s l h^2 (1 + s/6h) + 6 B s h V
  f72m="72*$B*2048*$l*$h**2*(1 + 2048/(6*$h) + 51200/(16*$l*$h))"  # Megatron's V/16lh as printed
  f96="96*$B*2048*$l*$h**2*(1 + 2048/(6*$h) + 51200/(16*$l*$h))"
  json "Table 1 ${P}B: parameters, matmul FLOPs = 72 B s l h^2 (1 + s/6h + V/12lh), all FLOPs within 2%" "$tmp/t1.json" \
    "round(d['parameters']['total'] / 1e9, 1) == $P" \
    "abs(d['flops']['matmul_per_step'] / ($f72) - 1) < 1e-9" \
    "abs(d['flops']['model_per_step'] / ($f72) - 1) < 0.02" \
    "abs(d['flops']['model_per_step'] / ($f72m) - 1) < 0.02" \
    "print: '%.4g params; matmul/formula - 1 = %.1e; all/formula - 1 = %.2f%%; MFU %.1f%%' % (d['parameters']['total'], d['flops']['matmul_per_step'] / ($f72) - 1, 100 * (d['flops']['model_per_step'] / ($f72) - 1), 100 * d['time']['mfu'])"
  json "Table 1 ${P}B with recomputation: matmul FLOPs = 96 B s l h^2 (1 + s/6h + V/16lh), all within 2%" "$tmp/t1r.json" \
    "abs(d['flops']['matmul_hardware_per_step'] / ($f96) - 1) < 1e-9" \
    "abs(d['flops']['hardware_per_step'] / ($f96) - 1) < 0.02" \
    "abs(d['flops']['matmul_per_step'] / ($f72) - 1) < 1e-9" \
    "max(r['memory']['total_saved_only'] for r in d['roles']) < 80 * 2**30"
done < "$tmp/table1"

# ---- memory plan, FLOPs per token, the bubble ------------------------------------------
plan "$tiny" --json > "$tmp/tiny.json" 2>/dev/null
json "pp=1: the workspace is the memory plan's" "$tmp/tiny.json" \
  "d['roles'][0]['memory']['workspace_per_microbatch'] == d['memplan_workspace_bytes']" \
  "d['roles'][0]['memory']['activations'] == d['memplan_workspace_bytes']" \
  "d['flops']['model_per_token'] * d['batch']['tokens_per_step'] == d['flops']['model_per_step']"
plan "$gpt2" --tp 2 --set vocab_size=50304 --json > "$tmp/tp2.json" 2>/dev/null
json "tp=2: the workspace is the memory plan's (local shapes)" "$tmp/tp2.json" \
  "d['roles'][0]['memory']['workspace_per_microbatch'] == d['memplan_workspace_bytes']"
for s in gpipe 1f1b interleaved zb-h1; do
  v=1; [ $s = interleaved ] && v=2
  plan "$tiny" --set n_layer=8 --pp 4 --microbatches 8 --schedule $s --virtual-stages $v --json > "$tmp/b.json" 2>"$tmp/err" ||
    { bad "pp=4 $s"; cat "$tmp/err"; continue; }
  case $s in gpipe|1f1b) want="3/11";; interleaved) want="3/19";; zb-h1) want="3/27";; esac
  json "bubble of $s (p=4, m=8) = $want" "$tmp/b.json" "abs(d['time']['bubble_fraction'] - $want) < 1e-12"
done
plan "$tiny" --pp 4 --microbatches 8 --schedule gpipe --json > "$tmp/g.json" 2>/dev/null
plan "$tiny" --pp 4 --microbatches 8 --schedule 1f1b --json > "$tmp/f.json" 2>/dev/null
json "in flight: gpipe keeps m microbatches, 1f1b p - stage" "$tmp/g.json" \
  "[r['memory']['in_flight'] for r in d['roles']] == [8, 8, 8]"
json "1f1b: in flight 4, 3 (worst middle stage), 1; roles first / middle / last" "$tmp/f.json" \
  "[r['memory']['in_flight'] for r in d['roles']] == [4, 3, 1]" \
  "[r['name'] for r in d['roles']] == ['stage 0 (first)', 'stages 1-2', 'stage 3 (last)']" \
  "[s['parameters'] for s in d['stages']][1] == [s['parameters'] for s in d['stages']][2]" \
  "sum(r['layers'] * (r['stages'][1] - r['stages'][0] + 1) for r in d['roles']) == 4"
plan "$gpt2" --pp 5 --json > "$tmp/u.json" 2>/dev/null
json "pp=5: every layer in one stage, every stage at least one; the head's stage is the last" "$tmp/u.json" \
  "sum(r['layers'] * (r['stages'][1] - r['stages'][0] + 1) for r in d['roles']) == 12" \
  "min(r['layers'] for r in d['roles']) >= 1" \
  "d['roles'][0]['stages'][0] == 0 and d['roles'][-1]['stages'] == [4, 4]" \
  "print: 'layers per role: %s' % [(r['name'], r['layers']) for r in d['roles']]"
plan "$tiny" --pp 4 --microbatches 2 --schedule zb-h1 --json > "$tmp/zb.json" 2>/dev/null
json "zb-h1 with fewer microbatches than stages: (2p-m-1)/(2p+2m-1)" "$tmp/zb.json" \
  "abs(d['time']['bubble_fraction'] - 5/11) < 1e-12"
plan "$gpt2" --recompute block --json > "$tmp/rc.json" 2>/dev/null
plan "$gpt2" --json > "$tmp/norc.json" 2>/dev/null
python3 - "$tmp/rc.json" "$tmp/norc.json" <<'PY' && ok "recompute=block: less activation memory, one more forward of the blocks" || bad "recompute=block"
import json, sys
r, n = (json.load(open(f)) for f in sys.argv[1:3])
assert r['roles'][0]['memory']['activations'] < 0.5 * n['roles'][0]['memory']['activations']
assert r['flops']['model_per_step'] == n['flops']['model_per_step']
assert 0 < r['flops']['recompute_per_step'] < n['flops']['forward_per_step']
assert r['flops']['hardware_per_step'] == n['flops']['model_per_step'] + r['flops']['recompute_per_step']
PY

# without --recompute the plan follows the model, as shardc build does
sed 's|^  data = 1|  data = 1\n  recompute = "block"|' "$tiny" > "$tmp/tinyrc.model"
plan "$tmp/tinyrc.model" --json > "$tmp/frc.json" 2>/dev/null
plan "$tiny" --recompute block --json > "$tmp/crc.json" 2>/dev/null
plan "$tmp/tinyrc.model" --recompute none --json > "$tmp/nrc.json" 2>/dev/null
python3 - "$tmp/frc.json" "$tmp/crc.json" "$tmp/nrc.json" "$tmp/tiny.json" <<'PY' && ok "parallel.recompute = \"block\" in the model: planned as --recompute block; --recompute none overrides it" || bad "the model's recompute setting"
import json, sys
f, c, n, t = (json.load(open(x)) for x in sys.argv[1:5])
assert f['layout']['recompute'] == 'block' and n['layout']['recompute'] == 'none'
assert f['roles'][0]['memory'] == c['roles'][0]['memory']
assert n['roles'][0]['memory'] == t['roles'][0]['memory']
PY

# a pipeline rank holds, per microbatch in flight, only the values that
# outlive a pass, and one scratch for the rest (memplan.c); with block
# recomputation that is what makes recomputation pay in a pipeline
plan "$gpt2" --pp 4 --microbatches 8 --batch 32 --json > "$tmp/p.json" 2>/dev/null
plan "$gpt2" --pp 4 --microbatches 8 --batch 32 --recompute block --json > "$tmp/pr.json" 2>/dev/null
python3 - "$tmp/p.json" "$tmp/pr.json" <<'PY' && ok "pp=4 1f1b: activations = in flight x kept part + one scratch; recompute=block holds under a third on stage 0" || bad "pp=4: kept and scratch"
import json, sys
n, r = (json.load(open(f)) for f in sys.argv[1:3])
for d in (n, r):
    for role in d['roles']:
        m = role['memory']
        assert 0 < m['scratch'] < m['workspace_per_microbatch'], m
        assert m['activations'] == m['in_flight'] * (m['workspace_per_microbatch'] - m['scratch']) + m['scratch'], m
s0, r0 = n['stages'][0]['activations'], r['stages'][0]['activations']
print('     stage 0 activations %.1f MiB, with recomputation %.1f MiB' % (s0 / 2**20, r0 / 2**20))
assert r0 < s0 / 3
PY

# ---- collectives ------------------------------------------------------------------------
# GPT-2 small, tensor 2: Megatron's count: forward 1 (embedding) + 2 per block,
# backward 2 per block + 1 (the head's input); the vocab-parallel loss gathers
# the row maxima and sums two numbers per row
plan "$gpt2" --tp 2 --set vocab_size=50304 --microbatches 2 --json > "$tmp/c.json" 2>/dev/null
json "tensor=2: 25 all-reduces forward and 25 backward per microbatch, the loss's two" "$tmp/c.json" \
  "sum(c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['group'] == 'tensor' and c['phase'] == 'forward' and c['op'] == 'all-reduce' and c['bytes'] == 8*1024*768*4/2) == 25 * 2" \
  "sum(c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['group'] == 'tensor' and c['phase'] == 'backward') == 25 * 2" \
  "[c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['what'].startswith('cross-entropy')] == [2, 2]" \
  "all(abs(c['sent_bytes_per_step'] - c['bytes'] * c['calls_per_step'] * (2*(c['group_size']-1)/c['group_size'] if c['op'] == 'all-reduce' else (c['group_size']-1)/c['group_size'] if c['op'] != 'send' else 1)) < 1 for c in d['roles'][0]['collectives'] if c['op'] != 'recv')"
# sequence parallelism: each block all-reduce becomes a reduce-scatter and an
# all-gather (the same bytes sent, ring algorithms); the backward all-gathers
# the reduce-scatters' gradients and reduce-scatters the gathered inputs'
# (Megatron: no all-reduce then slice), so it sends the forward's bytes;
# the LayerNorms' and row-parallel biases' gradients are
# summed once per step; a rank keeps 1/tp of the sequence-split activations
plan "$gpt2" --tp 2 --set vocab_size=50304 --microbatches 2 --sequence-parallel --json > "$tmp/sp.json" 2>/dev/null
json "tensor=2, sequence parallel: 25 reduce-scatters and 25 all-gathers forward, the forward's bytes of the all-reduces" "$tmp/sp.json" \
  "d['layout']['sequence_parallel'] == 1" \
  "sum(c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'forward' and c['op'] == 'reduce-scatter' and c['bytes'] == 8*1024*768*4/2) == 25 * 2" \
  "sum(c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'forward' and c['op'] == 'all-gather' and c['bytes'] == 8*1024*768*4/2) == 25 * 2" \
  "not any(c['op'] == 'all-reduce' and c['phase'] == 'forward' and c['bytes'] == 8*1024*768*4/2 for c in d['roles'][0]['collectives'])" \
  "sum(c['sent_bytes_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'forward') == sum(c['sent_bytes_per_step'] for c in json.load(open('$tmp/c.json'))['roles'][0]['collectives'] if c['phase'] == 'forward')"
json "tensor=2, sequence parallel: backward 25 all-gathers, 25 reduce-scatters, 1 all-reduce, the forward's bytes; 74 parameter gradient sums per step" "$tmp/sp.json" \
  "sum(c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'backward' and c['op'] == 'all-gather') == 25 * 2" \
  "sum(c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'backward' and c['op'] == 'reduce-scatter' and c['what'] == 'sequence-split activation grad' and c['bytes'] == 8*1024*768*4/2) == 25 * 2" \
  "[c['what'] for c in d['roles'][0]['collectives'] if c['phase'] == 'backward' and c['op'] == 'all-reduce'] == ['sequence-sliced input grad']" \
  "sum(c['sent_bytes_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'backward' and c['op'] != 'all-reduce') == sum(c['sent_bytes_per_step'] for c in d['roles'][0]['collectives'] if c['phase'] == 'forward' and c['op'] != 'all-reduce' and not c['what'].startswith('cross-entropy'))" \
  "[c['calls_per_step'] for c in d['roles'][0]['collectives'] if c['what'] == 'sequence-sliced input grad'] == [2]" \
  "[(c['calls_per_step'], c['phase']) for c in d['roles'][0]['collectives'] if c['what'] == 'sequence-parallel param grad'] == [(74, 'step')]"
json "tensor=2, sequence parallel: less activation memory than without, the same matmul FLOPs" "$tmp/sp.json" \
  "d['roles'][0]['memory']['activations'] < json.load(open('$tmp/c.json'))['roles'][0]['memory']['activations']" \
  "d['flops']['matmul_per_step'] == json.load(open('$tmp/c.json'))['flops']['matmul_per_step']"
sed 's/^  schedule = "1f1b"/&\n  sequence_parallel = 1/' "$tiny" > "$tmp/tinysp.model"
expect_rc 0 "parallel { sequence_parallel = 1 }: planned (the lowering's T/tp is a symbol of its own)" \
  plan "$tmp/tinysp.model" --tp 2 --json
json "parallel { sequence_parallel = 1 } is the flag's plan" "$tmp/out" "d['layout']['sequence_parallel'] == 1"
expect_rc 1 "--sequence-parallel without tensor > 1" plan "$tiny" --sequence-parallel
grep -q "needs tensor > 1" "$tmp/err" && ok "... says it needs tensor > 1" || bad "... says it needs tensor > 1"
expect_rc 1 "--sequence-parallel with a sequence not divisible by tensor" plan "$tiny" --tp 2 --sequence-parallel --seq 31
grep -q "sequence 31 is not divisible by tensor=2" "$tmp/err" && ok "... says so" || bad "... says so"
plan "$tiny" --pp 2 --microbatches 4 --json > "$tmp/p.json" 2>/dev/null
json "pipeline=2: one activation [B, T, C] each way per microbatch; the tied embedding's gradient summed by its two holders" "$tmp/p.json" \
  "[(c['op'], c['calls_per_step'], c['bytes']) for c in d['roles'][0]['collectives'] if c['group'] == 'pipeline' and c['phase'] != 'step'] == [('send', 4, 4*128*128*4), ('recv', 4, 4*128*128*4)]" \
  "[(c['op'], c['calls_per_step']) for c in d['roles'][1]['collectives'] if c['group'] == 'pipeline'] == [('send', 1), ('recv', 1), ('recv', 4), ('send', 4)]" \
  "[(c['op'], c['bytes']) for c in d['roles'][0]['collectives'] if c['what'] == 'tied parameter gradient'] == [('recv', 256*128*4), ('send', 256*128*4)]" \
  "d['roles'][0]['comm_counters']['pipeline']['calls'] == [0, 0, 0, 0, 5, 5]" \
  "abs(d['roles'][0]['memory']['weights'] + d['roles'][1]['memory']['weights'] - 4 * (d['parameters']['total'] + 256*128)) < 64 * 4 * 40"
plan "$tiny" --pp 4 --microbatches 4 --json > "$tmp/p4.json" 2>/dev/null
json "pipeline=4: each rank holds its stage's parameters; the middle ones take no part in the tied sum" "$tmp/p4.json" \
  "[r['name'] for r in d['roles']] == ['stage 0 (first)', 'stages 1-2', 'stage 3 (last)']" \
  "d['roles'][1]['memory']['weights'] < 0.3 * 4 * d['parameters']['total']" \
  "not any(c['what'] == 'tied parameter gradient' for c in d['roles'][1]['collectives'])"
plan "$tiny" --dp 2 --json > "$tmp/d.json" 2>/dev/null
json "data=2: the gradient arena all-reduced (runtime layout: 64-byte aligned tensors)" "$tmp/d.json" \
  "d['roles'][0]['comm_counters']['data']['calls'][0] >= 1" \
  "d['roles'][0]['comm_counters']['data']['bytes'][0] >= 4 * d['parameters']['total']" \
  "d['roles'][0]['comm_counters']['data']['bytes'][0] < 4 * d['parameters']['total'] + 64 * 200" \
  "d['roles'][0]['comm_counters']['data']['bytes'][0] % 64 == 0"
plan "$tiny" --dp 2 --zero 1 --json > "$tmp/z1.json" 2>/dev/null
json "data=2, ZeRO 1: reduce-scatter and all-gather, optimizer state halved" "$tmp/z1.json" \
  "d['roles'][0]['comm_counters']['data']['calls'] == [0, 1, 1, 0, 0, 0]" \
  "d['roles'][0]['memory']['optimizer'] == 8 * d['parameters']['total'] / 2"
plan "$gpt2" --dp 8 --json > "$tmp/g8.json" 2>/dev/null
plan "$gpt2" --dp 8 --zero 1 --json > "$tmp/g8z1.json" 2>/dev/null
json "GPT-2, data=8: the all-reduce hides behind the last backward but its last bucket; ZeRO 1's bucketed reduce-scatter hides alike, its gather behind the next forward but the first bucket (19 each; exposed 1/19 of the traffic)" "$tmp/g8.json" \
  "d['roles'][0]['time']['data_comm_exposed'] < 0.2 * d['roles'][0]['time']['data_comm']" \
  "0.04 < json.load(open('$tmp/g8z1.json'))['roles'][0]['time']['data_comm_exposed'] / json.load(open('$tmp/g8z1.json'))['roles'][0]['time']['data_comm'] < 0.07" \
  "json.load(open('$tmp/g8z1.json'))['roles'][0]['comm_counters']['data']['calls'][1:3] == [19, 19]" \
  "[c['phase'] for c in json.load(open('$tmp/g8z1.json'))['roles'][0]['collectives'] if c['op'] == 'all-gather'] == ['forward']"

# the generated program issues what the plan counts: every sr_tp_allreduce in
# its source runs once per microbatch (the loss's two are inside its kernel)
if "$shardc" build "$tiny" --tp 2 -o "$tmp/tiny-tp2" --emit-src "$tmp/src" >/dev/null 2>"$tmp/err"; then
  n=$(grep -o "sr_tp_allreduce(" "$tmp/src"/*.c | wc -l)
  plan "$tiny" --tp 2 --json > "$tmp/tt.json" 2>/dev/null
  json "tensor=2: the plan's all-reduces are the generated program's ($n + the loss's)" "$tmp/tt.json" \
    "d['roles'][0]['comm_counters']['tensor']['calls'][0] == $n + 1" \
    "d['roles'][0]['comm_counters']['tensor']['calls'][2] == $(grep -o "sr_tp_allgather(" "$tmp/src"/*.c | wc -l) + 1"
else
  echo "skip the generated program's collectives (shardc build failed: $(head -1 "$tmp/err"))"
fi

# ---- measured against planned: what the runtime counts and allocates ------------------
# (the runtime's --comm-stats: rank 0's calls and bytes per communicator over
# the training steps; its start-up line: the bytes it allocated per rank)
small="--set n_layer=2 --set n_embd=64 --set n_head=4"
small4="--set n_layer=4 --set n_embd=64 --set n_head=4"
if command -v mpirun >/dev/null && "$shardc" build "$tiny" $small -o "$tmp/tg1" >/dev/null 2>&1 &&
   "$shardc" build "$tiny" $small --tp 2 -o "$tmp/tg2" >/dev/null 2>&1 &&
   "$shardc" build "$tiny" $small --pp 2 -o "$tmp/tgp" >/dev/null 2>&1; then
  head -c 300000 "$src/docs/language.md" "$src/compiler/shape.c" "$src/compiler/sema.c" > "$tmp/text.txt"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  # sequence parallelism (reduce-scatters, all-gathers, the per-step sums
  # of the LayerNorms' and row-parallel biases' gradients, T/tp activations)
  # and block recomputation (its clones and the memory plan of the program
  # built with it), at tensor 2 and at pipeline 2
  built=""
  # and the pools of zb-h1 and of the interleaved schedule (per chunk)
  for b in "tgs --tp 2 --sequence-parallel" "tgsp --tp 2 --pp 2 --sequence-parallel" "tgr --tp 2 --recompute block" \
           "tgpr --pp 2 --recompute block" "tgz --pp 2 --schedule zb-h1" \
           "tgi --pp 2 --virtual-stages 2 --schedule interleaved"; do
    set -- $b; cfg=$small
    [ $1 = tgi ] && cfg=$small4
    if "$shardc" build "$tiny" $cfg "${@:2}" -o "$tmp/$1" >/dev/null 2>"$tmp/err"; then
      built="$built $1"
    else
      bad "shardc build ${*:2}: $(head -1 "$tmp/err")"
    fi
  done
  # ranks  binary  tp dp pp zero microbatches schedule  sequence-parallel  recompute
  for lay in "2 tg2 2 1 1 0 1 1f1b 0 0" "2 tg1 1 2 1 0 1 1f1b 0 0" "4 tg2 2 2 1 0 1 1f1b 0 0" "2 tg1 1 2 1 1 2 1f1b 0 0" \
             "2 tgp 1 1 2 0 4 1f1b 0 0" "2 tgp 1 1 2 0 4 gpipe 0 0" "4 tgp 1 2 2 0 2 1f1b 0 0" "4 tgp 1 2 2 1 2 1f1b 0 0" \
             "2 tgs 2 1 1 0 2 1f1b 1 0" "4 tgsp 2 1 2 0 4 1f1b 1 0" "4 tgsp 2 1 2 0 4 gpipe 1 0" \
             "2 tgr 2 1 1 0 2 1f1b 0 1" "2 tgpr 1 1 2 0 4 1f1b 0 1" "2 tgpr 1 1 2 0 4 gpipe 0 1" \
             "2 tgz 1 1 2 0 4 zb-h1 0 0" "2 tgi 1 1 2 0 4 interleaved 0 0"; do
    set -- $lay; np=$1; bin=$2; t=$3; d=$4; p=$5; z=$6; mb=$7; sc=$8; s=""; rc=""
    [ "$9" = 1 ] && s=--sequence-parallel
    [ "${10}" = 1 ] && rc="--recompute block"
    cfg=$small
    [ $bin = tgi ] && cfg=$small4 && rc="--virtual-stages 2" # plan's arguments only
    case " $built tg1 tg2 tgp " in *" $bin "*) ;; *) continue;; esac
    rm -f "$tmp/comm.txt"
    (cd "$tmp" && mpirun --oversubscribe --bind-to none -np $np ./$bin --data text.txt --batch 8 --seq 32 \
       --steps 2 --threads 1 --tp $t --dp $d --pp $p --zero $z --microbatches $mb --schedule $sc \
       --comm-stats comm.txt) > /dev/null 2> "$tmp/run.err"
    plan "$tiny" $cfg --batch 8 --seq 32 --tp $t --dp $d --pp $p --zero $z --microbatches $mb --schedule $sc $s \
      $rc --json > "$tmp/m.json" 2>/dev/null
    name="tp=$t${s:+ sp} dp=$d pp=$p zero=$z m=$mb $sc${rc:+ (${rc#--})}"
    python3 - "$tmp/m.json" "$tmp/comm.txt" "$tmp/run.err" "$src/tests/plan" <<'PY' && ok "$name: the runtime's collectives and memory are the plan's" || bad "$name: measured against planned"
import json, re, sys
sys.path.insert(0, sys.argv[4])
from counters import read_stats, planned
d = json.load(open(sys.argv[1])); r = d['roles'][0]
try:
    steps, peak, got = read_stats(sys.argv[2])
except OSError:
    print('     the run failed: ' + open(sys.argv[3]).read()[-300:]); sys.exit(1)
want = planned(r, steps)
good = got == want
if not good:
    print('     runtime', got, '\n     plan   ', want)
m = re.search(r'rank 0 .*parameters ([0-9.]+) MiB, gradients ([0-9.]+) MiB, optimizer state ([0-9.]+) MiB, '
              r'activations ([0-9.]+) MiB', open(sys.argv[3]).read())
if not m:
    print('     no memory line from the runtime'); sys.exit(1)
mem = dict(r['memory'])
names = ('weights', 'gradients', 'optimizer', 'activations')
if d['layout']['pp'] > 1:
    # the runtime counts a slot's boundary buffers with its workspace
    mem['activations'] += mem['boundary_buffers']
for name, x in zip(('weights', 'gradients', 'optimizer', 'activations'), m.groups()):
    if name in names and abs(float(x) - mem[name] / 2**20) > 0.01 + 0.01 * float(x):
        print('     %s: runtime %s MiB, plan %.2f MiB' % (name, x, mem[name] / 2**20)); good = False
# the runtime's allocator peak against the plan's per-rank total: to the byte
total = mem.get('total')
if peak is not None and total:
    print('     peak allocated %d bytes, plan total %d bytes (%.2f MiB)' % (peak, total, total / 2**20))
    if peak != total:
        good = False
sys.exit(0 if good else 1)
PY
  done
else
  echo "skip measured against planned (no mpirun, or shardc build failed)"
fi

# ---- --json and --search -------------------------------------------------------------------
plan "$gpt2" --tp 2 --pp 2 --dp 2 --set vocab_size=50304 --microbatches 4 --json > "$tmp/j.json" 2>/dev/null
python3 -m json.tool "$tmp/j.json" > /dev/null && ok "--json parses (python3 -m json.tool)" || bad "--json parses"
plan "$gpt2" --search --gpus 8 --set vocab_size=50304 --json > "$tmp/s.json" 2>"$tmp/err"; rc=$?
[ $rc = 0 ] && ok "--search exits 0" || { bad "--search exits 0 ($rc)"; cat "$tmp/err"; }
python3 -m json.tool "$tmp/s.json" > /dev/null && ok "--search --json parses" || bad "--search --json parses"
json "--search on 8 GPUs: valid layouts ranked by step time; n_head=12 over tensor=8 rejected" "$tmp/s.json" \
  "len([x for x in d['layouts'] if x['status'] == 'ok']) >= 10" \
  "all(x['layout']['dp'] * x['layout']['tp'] * x['layout']['pp'] == 8 for x in d['layouts'])" \
  "[x['step'] for x in d['layouts'] if x['status'] == 'ok'] == sorted(x['step'] for x in d['layouts'] if x['status'] == 'ok')" \
  "any('n_head=12 is not divisible by 8' in x['reason'] for x in d['layouts'] if x['status'] == 'invalid' and x['layout']['tp'] == 8)" \
  "not any(x['layout']['tp'] == 8 for x in d['layouts'] if x['status'] == 'ok')" \
  "{(x['layout']['dp'], x['layout']['tp'], x['layout']['pp']) for x in d['layouts'] if x['status'] == 'ok'} == {(8,1,1), (4,2,1), (2,4,1), (4,1,2), (2,2,2), (1,4,2), (2,1,4), (1,2,4), (1,1,8)}" \
  "print: 'best: %s, %.2f ms, MFU %.1f%%' % (d['layouts'][0]['layout'], 1e3 * d['layouts'][0]['step'], 100 * d['layouts'][0]['mfu'])"
json "--search tries sequence parallelism where tensor > 1, and only there" "$tmp/s.json" \
  "any(x['layout']['sequence_parallel'] for x in d['layouts'] if x['status'] == 'ok')" \
  "all(x['layout']['tp'] > 1 for x in d['layouts'] if x['status'] != 'invalid' and x['layout']['sequence_parallel'])" \
  "{(x['layout']['dp'], x['layout']['tp'], x['layout']['pp']) for x in d['layouts'] if x['status'] == 'ok' and x['layout']['sequence_parallel']} == {(4,2,1), (2,4,1), (2,2,2), (1,4,2), (1,2,4)}"
plan "$gpt2" --search --gpus 8 --set vocab_size=50304 --sequence-parallel --json > "$tmp/s3.json" 2>/dev/null
json "--search --sequence-parallel: every layout with tensor > 1 is sequence parallel" "$tmp/s3.json" \
  "all(bool(x['layout']['sequence_parallel']) == (x['layout']['tp'] > 1) for x in d['layouts'] if x['status'] != 'invalid')"
plan "$gpt2" --search --gpus 8 --set vocab_size=50304 > "$tmp/s.txt" 2>&1
grep -q "^invalid (1):" "$tmp/s.txt" && grep -q "dp 1 tp 8 pp 1 .*n_head=12 is not divisible by 8" "$tmp/s.txt" &&
  ok "--search lists the invalid layout with the reason" || bad "--search lists the invalid layout"
plan "$gpt2" --search --gpus 8 --set vocab_size=50304 --gpu-mem 1.5GiB --json > "$tmp/s2.json" 2>/dev/null
json "--search with 1.5 GiB: layouts that do not fit are listed with what they need" "$tmp/s2.json" \
  "any(x['status'] == 'out of memory' and x['reason'].startswith('needs ') for x in d['layouts'])" \
  "all(x['max_memory'] <= 1.5 * 2**30 for x in d['layouts'] if x['status'] == 'ok')"

# ---- human output --------------------------------------------------------------------------
plan "$gpt2" --tp 2 --pp 3 --dp 2 --set vocab_size=50304 --microbatches 4 --batch 16 > "$tmp/h.txt" 2>&1
for want in "^memory per rank  *stage 0 (first)  *stage 1  *stage 2 (last)$" "^  weights  " "^  gradients  " \
            "^  optimizer (Adam m, v)  " "^  activations (peak)  " "^  total  .*GiB" "^model states by ZeRO stage (data 2)" \
            "^  stage 1 (optimizer)  .* = .*MB" "^FLOPs per step  *model  *hardware" "^  per token  .*MFLOP" \
            "^communication per step, per rank" "all-reduce  *tensor (2)  *forward  *row-parallel output" \
            "send  *pipeline (2)  *forward  *activation" "all-reduce  *data (2)" "each rank sends" \
            "^  pipeline bubble  .*(p-1)/(m+p-1)" "^  step  " "^  MFU  *[0-9.]*%$"; do
  grep -q -- "$want" "$tmp/h.txt" && ok "human output: /$want/" || bad "human output: /$want/"
done
awk '/^memory per rank/{on=1} /^$/{on=0} on{print length($0)}' "$tmp/h.txt" | sort -u | wc -l | grep -q "^1$" &&
  ok "human output: the memory table's columns line up" || bad "human output: the memory table's columns line up"
plan "$tiny" --tp 2 --sequence-parallel > "$tmp/hs.txt" 2>&1
for want in "^  layout  .*tensor 2 (sequence parallel)" "reduce-scatter  *tensor (2)  *forward  *row-parallel output" \
            "all-gather  *tensor (2)  *backward  *row-parallel output grad" \
            "all-reduce  *tensor (2)  *step  *sequence-parallel param grad"; do
  grep -q -- "$want" "$tmp/hs.txt" && ok "human output, sequence parallel: /$want/" || bad "human output, sequence parallel: /$want/"
done
plan "$zero" --dp 64 --precision bf16 --param-bytes 2,2,12 > "$tmp/hz.txt" 2>&1
grep -q "stage 1 (optimizer)  *29.2 GiB = 31.41 GB" "$tmp/hz.txt" && grep -q "stage 3 (+ weights)  *1.7 GiB = 1.88 GB" "$tmp/hz.txt" &&
  ok "human output: ZeRO table in GiB and GB" || { bad "human output: ZeRO table"; grep "stage" "$tmp/hz.txt"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
