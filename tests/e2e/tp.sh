#!/usr/bin/env bash
# Tensor parallelism derived by the compiler: tp=2, tp=4 and dp=2 x tp=2
# reproduce the single-rank losses (dropout 0 and 0.1), the collectives per
# block match Megatron's count, recomputation repeats a block's collectives,
# and checkpoints move across tensor degrees.
source "$(dirname "$0")/lib.sh"
cfg="--set n_layer=2 --set n_embd=64 --set n_head=4"
for t in 1 2 4; do "$shardc" build "$src/examples/tinygpt.model" $cfg --tp $t -o tg$t; done
run="--data text.txt --batch 8 --seq 32 --steps 20 --lr 3e-3 --warmup 2 --grad-clip 1.0 --quiet --threads 1"

./tg1 $run --log t1.jsonl
$mpi -np 2 ./tg2 $run --tp 2 --log t2.jsonl
check "tp=2 gives the single-rank losses (20 steps, 1e-5)" same t1.jsonl t2.jsonl 1e-5
$mpi -np 4 ./tg4 $run --tp 4 --log t4.jsonl
check "tp=4 gives the single-rank losses" same t1.jsonl t4.jsonl 1e-5
$mpi -np 4 ./tg2 $run --tp 2 --dp 2 --log d2t2.jsonl
check "dp=2 x tp=2 gives the single-rank losses" same t1.jsonl d2t2.jsonl 1e-5
./tg1 $run --dropout 0.1 --seed 7 --log drop1.jsonl
$mpi -np 2 ./tg2 $run --tp 2 --dropout 0.1 --seed 7 --log drop2.jsonl
check "dropout 0.1 at tp=2 gives the single-rank losses (same seed)" same drop1.jsonl drop2.jsonl 1e-5
$mpi -np 4 ./tg4 $run --tp 4 --dropout 0.1 --seed 7 --log drop4.jsonl
check "dropout 0.1 at tp=4 gives the single-rank losses" same drop1.jsonl drop4.jsonl 1e-5
$mpi -np 4 ./tg2 $run --tp 2 --dp 2 --dropout 0.1 --seed 7 --log dropd2t2.jsonl
check "dropout 0.1 at dp=2 x tp=2 gives the single-rank losses" same drop1.jsonl dropd2t2.jsonl 1e-5
$mpi -np 4 ./tg2 $run --tp 2 --dp 2 --zero 1 --microbatches 2 --log z.jsonl
check "dp=2 x tp=2 with ZeRO-1 and 2 microbatches" same t1.jsonl z.jsonl 1e-5

# a padded vocabulary (Megatron's --make-vocab-size-divisible-by): 256 byte
# classes in a table of 384 rows; the loss and the sampler leave the padding
# out, so every layout gives the unpadded model's losses. At tp=4 rank 3's 96
# columns are all padding, at tp=2 rank 1 holds 64 classes and 128 padding.
pad="--set make_vocab_size_divisible_by=384"
"$shardc" build "$src/examples/tinygpt.model" $cfg $pad -o vp1
"$shardc" build "$src/examples/tinygpt.model" $cfg $pad --tp 2 -o vp2
"$shardc" build "$src/examples/tinygpt.model" $cfg $pad --tp 4 -o vp4
./vp1 $run --log vp1.jsonl
check "vocabulary padded 256 -> 384, from random init: the unpadded losses (the init draws by element)" \
  same t1.jsonl vp1.jsonl 1e-5
./tg1 --steps 0 --save init0 --quiet > /dev/null
./tg1 $run --init init0 --log u0.jsonl
./vp1 $run --init init0 --log vi1.jsonl
./vp1 --init init0 --steps 0 > vi1.out 2>&1
check "--init of the unpadded checkpoint into the padded table says so" \
  grep -q "transformer.wte.weight: 256 rows from .*, padded with zeros to 384" vi1.out
check "vocabulary padded, --init from the unpadded checkpoint: the unpadded losses" same u0.jsonl vi1.jsonl 1e-5
$mpi -np 2 ./vp2 $run --tp 2 --init init0 --log vi2.jsonl
check "vocabulary padded at tp=2 (vocab-parallel loss): the unpadded losses" same u0.jsonl vi2.jsonl 1e-5
$mpi -np 4 ./vp4 $run --tp 4 --init init0 --log vi4.jsonl
check "vocabulary padded at tp=4 (a rank of padding only): the unpadded losses" same u0.jsonl vi4.jsonl 1e-5
./tg1 --init init0 --steps 0 --sample 60 --seed 3 --quiet 2> /dev/null | tail -1 > s0.txt
./vp1 --init init0 --steps 0 --sample 60 --seed 3 --quiet 2> /dev/null | tail -1 > s1.txt
check "sampling (temperature 1) from the padded model draws the unpadded model's bytes" cmp s0.txt s1.txt
check "the padded program's --help names both sizes" sh -c "./vp1 --help | grep -q 'vocab 256 (padded to 384)'"

# LLaMA-style blocks (RMSNorm, rotary embeddings on q and k, grouped-query
# attention with 2 key/value heads for 4 query heads, SiLU-gated MLP,
# bias-free projections): rope and repeat_kv run on a rank's whole heads (at
# tp=2 one key/value head per rank), and on the gathered sequence under
# sequence parallelism; tp=4 needs 4 key/value heads (multi-head attention)
"$shardc" build "$src/tests/e2e/llama.model" -o l1
"$shardc" build "$src/tests/e2e/llama.model" --tp 2 -o l2
"$shardc" build "$src/tests/e2e/llama.model" --tp 4 --set n_kv_head=4 -o l4
"$shardc" build "$src/tests/e2e/llama.model" --tp 2 --sequence-parallel -o lsp
"$shardc" build "$src/tests/e2e/llama.model" --pp 2 -o lpp
./l1 $run --log l1.jsonl
$mpi -np 2 ./l2 $run --tp 2 --log l2.jsonl
check "LLaMA-style blocks at tp=2 give the single-rank losses" same l1.jsonl l2.jsonl 1e-5
"$shardc" build "$src/tests/e2e/llama.model" --set n_kv_head=4 -o l1m
./l1m $run --log l1m.jsonl
$mpi -np 4 ./l4 $run --tp 4 --log l4.jsonl
check "LLaMA-style blocks at tp=4 (one head per rank) give the single-rank losses" same l1m.jsonl l4.jsonl 1e-5
check "grouped-query attention (2 key/value heads) trains differently from multi-head (4)" \
  sh -c "! cmp -s l1.jsonl l1m.jsonl"
$mpi -np 2 ./lsp $run --tp 2 --log lsp.jsonl
check "LLaMA-style blocks with sequence parallelism give the single-rank losses" same l1.jsonl lsp.jsonl 1e-5
$mpi -np 2 ./lpp $run --pp 2 --microbatches 2 --log lpp.jsonl
check "LLaMA-style blocks in a 2-stage pipeline give the single-rank losses" same l1.jsonl lpp.jsonl 1e-5
check "rope and repeat_kv: no collective before them at tp=2 (a rank works on its own heads)" sh -c \
  "'$shardc' check '$src/tests/e2e/llama.model' --tp 2 --dump=shard | grep -q 'collectives for tensor=2 (5)'"
# examples/llama3.model (Llama 3.2: the llama3 rope scaling, here reaching
# these short sequences, and the output head tied to the embedding, which
# the first and the last pipeline stage both hold) at tp=2 x pp=2
l3="--set hidden_size=64 --set intermediate_size=128 --set num_hidden_layers=2"
l3="$l3 --set rope_scaling.original_max_position_embeddings=16"
"$shardc" build "$src/examples/llama3.model" $l3 -o m1
"$shardc" build "$src/examples/llama3.model" $l3 --tp 2 --pp 2 -o m4
./m1 $run --log m1.jsonl
$mpi -np 4 ./m4 $run --tp 2 --pp 2 --microbatches 2 --log m4.jsonl
check "Llama 3.2-style (tied head, llama3 rope scaling) at tp=2 x pp=2 gives the single-rank losses" \
  same m1.jsonl m4.jsonl 1e-5
# examples/qwen2.model (biases on q, k and v, split with their heads) at tp=2
q2="--set hidden_size=64 --set intermediate_size=128 --set num_hidden_layers=2"
"$shardc" build "$src/examples/qwen2.model" $q2 -o q1
"$shardc" build "$src/examples/qwen2.model" $q2 --tp 2 -o q2
./q1 $run --log q1.jsonl
$mpi -np 2 ./q2 $run --tp 2 --log q2.jsonl
check "Qwen2-style (q/k/v biases, tied head) at tp=2 gives the single-rank losses" same q1.jsonl q2.jsonl 1e-5
# tied and untied weights do not mix silently: the untied model's
# lm_head.weight has no place in the tied model, which has none to load
"$shardc" build "$src/examples/llama.model" --set hidden_size=64 --set intermediate_size=128 \
  --set num_hidden_layers=2 --set num_key_value_heads=2 -o mu
./mu $run --steps 1 --save mu_ck
./m1 $run --steps 1 --save m1_ck
./m1 $run --init mu_ck 2> err.txt; rc=$?
check "--init of untied weights into the tied model: exit 1, naming lm_head.weight ($(head -c 150 err.txt))" \
  sh -c "[ $rc -eq 1 ] && grep -q \"no parameter for, such as 'lm_head.weight'\" err.txt"
./mu $run --init m1_ck 2> err.txt; rc=$?
check "--init of tied weights into the untied model: exit 1, no lm_head.weight ($(head -c 150 err.txt))" \
  sh -c "[ $rc -eq 1 ] && grep -q \"no tensor 'lm_head.weight'\" err.txt"

# sequence parallelism: reduce-scatter and all-gather instead of all-reduce
"$shardc" build "$src/examples/tinygpt.model" $cfg --tp 2 --sequence-parallel -o sp2
$mpi -np 2 ./sp2 $run --tp 2 --log sp2.jsonl
check "sequence parallelism at tp=2 gives the single-rank losses" same t1.jsonl sp2.jsonl 1e-5
$mpi -np 2 ./sp2 $run --tp 2 --dropout 0.1 --seed 7 --log spd.jsonl
check "sequence parallelism with dropout 0.1 gives the single-rank losses" same drop1.jsonl spd.jsonl 1e-5
# the LayerNorms' and row-parallel biases' gradients are summed over the
# tensor group once per step, not after every microbatch's backward
$mpi -np 2 ./sp2 $run --tp 2 --microbatches 2 --log spm.jsonl
check "sequence parallelism with 2 microbatches gives the single-rank losses" same t1.jsonl spm.jsonl 1e-5
$mpi -np 4 ./sp2 $run --tp 2 --dp 2 --zero 1 --microbatches 2 --log spz.jsonl
check "sequence parallelism at dp=2 x tp=2 with ZeRO-1 and 2 microbatches" same t1.jsonl spz.jsonl 1e-5
./tg1 $run --steps 1 --microbatches 2 --dump-grads g1.st > /dev/null 2>&1
$mpi -np 2 ./sp2 $run --tp 2 --steps 1 --microbatches 2 --dump-grads gsp.st > /dev/null 2>&1
check "sequence parallelism, 2 microbatches: every parameter's gradient is the single rank's (1e-5)" same_grads g1.st gsp.st
"$shardc" check "$src/examples/tinygpt.model" $cfg --tp 2 --sequence-parallel --dump=shard > sp.txt
check "sequence parallelism: 5 reduce-scatters and 5 all-gathers replace the all-reduces" \
  [ "$(grep -c '^  reduce-scatter' sp.txt)" = 5 -a "$(grep -c '^  all-gather' sp.txt)" = 5 -a "$(grep -c '^  all-reduce' sp.txt)" = 0 ]
# the backward of an all-gather along the sequence is one reduce-scatter of
# the column-parallel layer's partial input gradient (Megatron), not an
# all-reduce of it followed by a slice
"$shardc" build "$src/examples/tinygpt.model" $cfg --tp 2 --sequence-parallel -o /dev/null --dump=autodiff > spad.txt 2>&1
check "sequence parallelism: the 5 all-gathers' backwards reduce-scatter, no [B, T, 64] gradient is all-reduced" \
  [ "$(grep -c 'allgather.grad.*reduce-scatter(tensor)' spad.txt)" = 5 -a "$(grep 'all-reduce(tensor)' spad.txt | grep -c '\[B, T, 64\]')" = 0 ]
# one step, S = B*T*n_embd floats: 5 reduce-scatters of S forward and 5 backward
# (each counted as its whole send buffer); the all-reduces left: the position
# embedding's sequence-sliced gradient (T*64), 14 LayerNorm/bias gradients once
# per step (64 each), the vocab-parallel loss's sums (2 floats a row)
$mpi -np 2 ./sp2 $run --tp 2 --steps 1 --comm-stats spcomm.txt > /dev/null 2>&1
S=$((8 * 32 * 64 * 4))
got=$(grep -o '^tensor reduce_scatter calls [0-9]* bytes [0-9]*' spcomm.txt)
check "sequence parallelism: 10 tensor reduce-scatters a step, 5 of them backward ($got)" \
  [ "$got" = "tensor reduce_scatter calls 10 bytes $((10 * S))" ]
got=$(grep -o '^tensor allreduce calls [0-9]* bytes [0-9]*' spcomm.txt)
check "sequence parallelism: no activation-gradient all-reduce of S left ($got)" \
  [ "$got" = "tensor allreduce calls 16 bytes $((32 * 64 * 4 + 14 * 64 * 4 + 2 * 8 * 32 * 4))" ]
# bytes each rank sends in a ring, n = 2: all-reduce 2(n-1)/n of its buffer,
# reduce-scatter (n-1)/n of the send buffer, all-gather (n-1) send blocks.
# Before, the backward all-reduced the 5 gathered gradients (5 S more
# all-reduce bytes) and the 5 backward reduce-scatters were not there
check "sequence parallelism: the tensor group sends less per step than with all-reduce + slice" $py - spcomm.txt $S <<'PY'
import sys
n, S = 2, int(sys.argv[2])
st = {}
for l in open(sys.argv[1]):
    w = l.split()
    if w[0] == "tensor": st[w[1]] = int(w[5])
f = {"allreduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "allgather": n - 1}
wire = lambda d: sum(f[k] * d.get(k, 0) for k in f)
before = dict(st, allreduce=st["allreduce"] + 5 * S, reduce_scatter=st["reduce_scatter"] - 5 * S)
print(f"  tensor group sends {wire(st):.0f} bytes a step, {wire(before):.0f} with all-reduce + slice")
sys.exit(0 if wire(st) < wire(before) else 1)
PY
$mpi -np 2 ./sp2 $run --tp 2 --seq 31 > spbad.txt 2>&1; rc=$?
check "a sequence not divisible by tp is refused with sequence parallelism (exit $rc)" [ $rc -eq 2 ]

# collectives per block against Megatron's count: 2 all-reduces of B*T*n_embd
# floats forward (attention, MLP) and 2 backward, per transformer block
"$shardc" build "$src/examples/tinygpt.model" $cfg --tp 2 -o /dev/null --dump=autodiff > ad.txt 2>&1
fwd=$(grep -c '= \$allreduce(' ad.txt); bwd=$(grep -c 'all-reduce(tensor)' ad.txt)
# 2 layers: 2*2 block all-reduces + 1 for the vocab-parallel embedding forward;
# backward: 2*2 + 1 for the final norm's output before the vocab-parallel head
check "forward all-reduces: 2 per block + 1 embedding (got $fwd, want 5)" [ "$fwd" = 5 ]
check "backward all-reduces: 2 per block + 1 head (got $bwd, want 5)" [ "$bwd" = 5 ]
check "every block all-reduce moves B*T*n_embd floats" \
  [ "$(grep '= \$allreduce(' ad.txt | grep -c 'f32\[B, T, 64\]')" = 5 -a "$(grep 'all-reduce(tensor)' ad.txt | grep -c '\[B, T, 64\]')" = 5 ]
# and the runtime counts that traffic: one step, B*T = 8*32 rows of 64 floats:
# 10 activation all-reduces, plus the vocab-parallel loss's sums (2 floats a row)
$mpi -np 2 ./tg2 $run --tp 2 --steps 1 --comm-stats comm.txt > /dev/null 2>&1
got=$(grep -o '^tensor allreduce calls [0-9]* bytes [0-9]*' comm.txt)
want="tensor allreduce calls 11 bytes $((10 * 8 * 32 * 64 * 4 + 2 * 8 * 32 * 4))"
check "runtime counts the compiler's tensor all-reduces ($got)" [ "$got" = "$want" ]
# --comm-stats with %r: every rank writes its own; both ranks of the tensor
# group run the same all-reduces
$mpi -np 2 ./tg2 $run --tp 2 --steps 1 --comm-stats rank%r.txt > /dev/null 2>&1
g0=$(grep -o '^tensor allreduce calls [0-9]* bytes [0-9]*' rank0.txt); g1=$(grep -o '^tensor allreduce calls [0-9]* bytes [0-9]*' rank1.txt)
check "--comm-stats rank%r.txt: a file per rank, each with the same tensor all-reduces ($g1)" \
  [ "$g0" = "$want" -a "$g1" = "$want" -a ! -e 'rank%r.txt' ]

# recomputation: each block's forward runs again in its backward, with the
# block's own all-reduces (not the embedding's), the same numbers bit for bit
"$shardc" build "$src/examples/tinygpt.model" $cfg --tp 2 --recompute block -o tr2
$mpi -np 2 ./tr2 $run --tp 2 --dropout 0.1 --seed 7 --log rdrop2.jsonl
check "recompute=block at tp=2 gives the losses of tp=2 without it, bit for bit (dropout 0.1)" \
  [ "$(grep -o '"loss":[^,]*' drop2.jsonl)" = "$(grep -o '"loss":[^,]*' rdrop2.jsonl)" ]
$mpi -np 2 ./tr2 $run --tp 2 --steps 1 --comm-stats rcomm.txt > /dev/null 2>&1
got=$(grep -o '^tensor allreduce calls [0-9]* bytes [0-9]*' rcomm.txt)
want="tensor allreduce calls 15 bytes $((14 * 8 * 32 * 64 * 4 + 2 * 8 * 32 * 4))"
check "recompute=block at tp=2 repeats the blocks' 4 forward all-reduces ($got)" [ "$got" = "$want" ]
a0=$($mpi -np 2 ./tg2 --tp 2 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 2>&1 | grep -o 'rank 0 (dp.*activations [0-9.]*' | grep -o '[0-9.]*$')
a1=$($mpi -np 2 ./tr2 --tp 2 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 2>&1 | grep -o 'rank 0 (dp.*activations [0-9.]*' | grep -o '[0-9.]*$')
check "recompute=block needs less activation memory at tp=2 ($a0 -> $a1 MiB)" $py -c "import sys; sys.exit(0 if $a1 < 0.7 * $a0 else 1)"

# checkpoints keep full logical shapes: tp=2 -> tp=1 and tp=1 -> tp=2
$mpi -np 2 ./tg2 $run --tp 2 --save ck2 --save-every 10 --log a.jsonl
./tg1 $run --load ck2/step-00000010 --log b.jsonl
x=$(grep -o '"loss":[^,]*' a.jsonl | sed -n 11p | cut -d: -f2); y=$(grep -o '"loss":[^,]*' b.jsonl | head -1 | cut -d: -f2)
check "saved at tp=2, loaded at tp=1: same next loss ($x vs $y)" $py -c "import sys; sys.exit(0 if abs($x-$y) <= 1e-5*abs($x) else 1)"
./tg1 $run --save ck1 --save-every 10 --log c.jsonl
$mpi -np 2 ./tg2 $run --tp 2 --load ck1/step-00000010 --log d.jsonl
x=$(grep -o '"loss":[^,]*' c.jsonl | sed -n 11p | cut -d: -f2); y=$(grep -o '"loss":[^,]*' d.jsonl | head -1 | cut -d: -f2)
check "saved at tp=1, loaded at tp=2: same next loss ($x vs $y)" $py -c "import sys; sys.exit(0 if abs($x-$y) <= 1e-5*abs($x) else 1)"
$py - ck2/step-00000010/model.safetensors "$src/tests/reference" <<'PY' && ok "tp=2 checkpoint holds full shapes" || bad "tp=2 checkpoint holds full shapes"
import sys
sys.path.insert(0, sys.argv[2]); import st
t = st.load(sys.argv[1])
assert t["transformer.h.0.attn.c_attn.weight"].shape == (64, 192), t["transformer.h.0.attn.c_attn.weight"].shape
assert t["transformer.wte.weight"].shape == (256, 64)
PY
# a binary built for one degree refuses another, with the fix in the message
# --eval-mc after 5 steps of training: every layout scores each completion as
# the single rank does (examples dealt over data ranks, logits over tensor
# ranks, a padded vocabulary's padding left out, the last pipeline stage's
# sums shared); HellaSwag's JSON Lines as its bytes and the llm.c .bin of
# the same tokens give the same scores
$py - "$src/tests" <<'PY'
import json, random, sys
sys.path.insert(0, sys.argv[1]); import evalfile
random.seed(3)
words = "the a cat dog sat ran on to mat park and then saw bird it where".split()
ex = []
for i in range(11):
    ctx = " ".join(random.choice(words) for _ in range(random.randint(2, 14)))
    ends = [" ".join(random.choice(words) for _ in range(random.randint(1, 6))) for _ in range(2 + i % 3)]
    ex.append({"ctx": ctx, "endings": ends, "label": str(i % len(ends)) if i == 4 else i % len(ends)})
open("mc.jsonl", "w").write("".join(json.dumps(e) + "\n" for e in ex))
evalfile.write("mc.bin", [(int(e["label"]), list(e["ctx"].encode()), [list((" " + x).encode()) for x in e["endings"]])
                          for e in ex])
PY
# same_mc A B TOL: two --eval-mc-out files score the same examples alike
same_mc() { $py - "$1" "$2" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
tol = float(sys.argv[3])
keys = lambda r: (r["step"], r["example"], r["label"], r["tokens"])
if not a or [keys(x) for x in a] != [keys(y) for y in b]:
    print(f"  {len(a)} vs {len(b)} examples, or other examples"); sys.exit(1)
worst = max(abs(u - v) / abs(u) for x, y in zip(a, b) for u, v in zip(x["losses"], y["losses"]))
print(f"  {len(a)} examples, worst relative loss difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
mcrun="${run/--steps 20/--steps 5} --eval-every 5"
./tg1 $mcrun --eval-mc mc.jsonl --eval-mc-out mc1.jsonl --log mc1.log 2> mc1.err
./tg1 $mcrun --eval-mc mc.bin --eval-mc-out mcb.jsonl
check "--eval-mc: HellaSwag's JSON Lines and the llm.c .bin of its bytes score alike, bit for bit" cmp mc1.jsonl mcb.jsonl
check "... at steps 0 and 5 (--eval-every 5), 11 examples each, acc and acc_norm logged" sh -c \
  "[ \"\$(grep -c '\"mc_acc_norm\":.*\"mc_examples\":11' mc1.log)\" = 2 ] && [ \"\$(grep -c '\"example\":' mc1.jsonl)\" = 22 ]"
$mpi -np 2 ./tg1 $mcrun --dp 2 --eval-mc mc.jsonl --eval-mc-out mcd2.jsonl
check "--eval-mc at dp=2 (the examples dealt over the data ranks): the single rank's scores" same_mc mc1.jsonl mcd2.jsonl 1e-5
$mpi -np 4 ./tg2 $mcrun --tp 2 --dp 2 --eval-mc mc.jsonl --eval-mc-out mcd2t2.jsonl
check "--eval-mc at dp=2 x tp=2 (the logits' columns over the tensor ranks)" same_mc mc1.jsonl mcd2t2.jsonl 1e-5
./vp1 $mcrun --eval-mc mc.jsonl --eval-mc-out mcv1.jsonl
$mpi -np 4 ./vp4 $mcrun --tp 4 --eval-mc mc.jsonl --eval-mc-out mcv4.jsonl
check "--eval-mc with a padded vocabulary at tp=4 (rank 3's columns all padding)" same_mc mcv1.jsonl mcv4.jsonl 1e-5
check "... and the padding out of the softmax: the unpadded model's scores" same_mc mc1.jsonl mcv1.jsonl 1e-5
./l1 $mcrun --eval-mc mc.jsonl --eval-mc-out mcl1.jsonl
$mpi -np 4 ./lpp $mcrun --pp 2 --dp 2 --eval-mc mc.jsonl --eval-mc-examples 7 --eval-mc-out mclpp.jsonl
check "--eval-mc in a 2-stage pipeline x dp=2, its first 7 examples: the single rank's" \
  same_mc <(grep -E '"example":[0-6],' mcl1.jsonl) mclpp.jsonl 1e-5
./l1 $mcrun --eval-mc mc.jsonl --seq 8 > mcseq.out 2>&1; rc=$?
check "--eval-mc with a completion longer than --seq: exit 2 naming it" sh -c \
  "[ $rc -eq 2 ] && grep -q 'mc.jsonl example [0-9]*: completion [0-9]* has [0-9]* tokens, more than --seq 8' mcseq.out"
$mpi -np 2 ./tg1 $run --tp 2 > wrong.txt 2>&1; rc=$?
check "tp mismatch with the build is a clear usage error (exit $rc)" [ $rc -ne 0 ]
check "tp mismatch with the build is a clear usage error (exit $rc): the message" grep -q "rebuild it with shardc build --tp 2" wrong.txt
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
