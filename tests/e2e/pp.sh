#!/usr/bin/env bash
# Pipeline parallelism: pp=2 and pp=4 with every schedule (interleaved with
# v=2), tp=2 x pp=2 with sequence parallelism and with recomputation, and
# dp=2 x tp=2 x pp=2 on 8 ranks and dp=2 x pp=2 with the gradient all-reduce
# overlapped, reproduce the single-rank losses;
# checkpoints saved at pp=2 load at pp=1 and pp=4; the trace and the
# timeline picture come out.
source "$(dirname "$0")/lib.sh"
cfg="--set n_layer=4 --set n_embd=64 --set n_head=4"
"$shardc" build "$src/examples/tinygpt.model" $cfg -o p1
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 -o p2
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 4 -o p4
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --schedule zb-h1 -o p2z
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 4 --schedule zb-h1 -o p4z
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --virtual-stages 2 --schedule interleaved -o p2v2
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --tp 2 -o p2t2
run="--data text.txt --batch 8 --seq 32 --steps 20 --lr 3e-3 --warmup 2 --grad-clip 1.0 --microbatches 4 --quiet --threads 1"

./p1 $run --log ref.jsonl
for s in gpipe 1f1b zb-h1; do
  z=""; [ $s = zb-h1 ] && z=z # zb-h1 programs are built for it (their memory plan keeps W's inputs)
  $mpi -np 2 ./p2$z $run --pp 2 --schedule $s --log pp2-$s.jsonl
  check "pp=2 $s gives the single-rank losses (20 steps, 1e-5)" same ref.jsonl pp2-$s.jsonl 1e-5
  $mpi -np 4 ./p4$z $run --pp 4 --schedule $s --log pp4-$s.jsonl
  check "pp=4 $s gives the single-rank losses" same ref.jsonl pp4-$s.jsonl 1e-5
done
$mpi -np 2 ./p2v2 $run --pp 2 --schedule interleaved --log iv.jsonl
# without --schedule a program runs the schedule it was built for
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --schedule gpipe -o p2g
for b in p2g:gpipe p2:1f1b p2z:zb-h1 p2v2:interleaved; do
  $mpi -np 2 ./${b%%:*} --data text.txt --batch 8 --seq 32 --steps 1 --microbatches 4 --threads 1 > def.txt 2>&1
  check "built for ${b#*:}: the default schedule ($(grep -o 'for [a-z0-9-]*, p=2' def.txt | head -1))" \
    grep -q "for ${b#*:}, p=2" def.txt
done
check "pp=2 interleaved v=2 gives the single-rank losses" same ref.jsonl iv.jsonl 1e-5
# pp=4 x 2 virtual stages needs 8 layers
cfg8="--set n_layer=8 --set n_embd=64 --set n_head=4"
"$shardc" build "$src/examples/tinygpt.model" $cfg8 -o q1
"$shardc" build "$src/examples/tinygpt.model" $cfg8 --pp 4 --virtual-stages 2 --schedule interleaved -o q4v2
./q1 $run --log ref8.jsonl
$mpi -np 4 ./q4v2 $run --pp 4 --schedule interleaved --log iv4.jsonl
# The 20th batch of this 8-layer run is a loss spike (4.71 after 3.86, an
# unusual stretch of the stdlib's text), where the float32 loss depends on
# round-off by more than 1e-5: the single rank with 1 microbatch instead of 4
# differs from itself there by 1.8e-5. Each step must be within 1e-5 of the
# single rank's loss, or within 4 times what the single rank's own change of
# summation order moves it at that step.
./q1 ${run/--microbatches 4/--microbatches 1} --log ref8m1.jsonl
check "pp=4 interleaved v=2 gives the single-rank losses" same_or_roundoff ref8.jsonl iv4.jsonl ref8m1.jsonl 1e-5
$mpi -np 8 ./p2t2 $run --pp 2 --tp 2 --dp 2 --log x8.jsonl
check "dp=2 x tp=2 x pp=2 on 8 ranks gives the single-rank losses" same ref.jsonl x8.jsonl 1e-5
# JSON Lines prompt-completion records (the loss over completion tokens only)
records records.jsonl
./p1 $run --data records.jsonl --val-data records.jsonl --eval-every 10 --log rec1.jsonl
$mpi -np 8 ./p2t2 $run --data records.jsonl --val-data records.jsonl --eval-every 10 --pp 2 --tp 2 --dp 2 --zero 1 \
  --log rec8.jsonl
check "records: dp=2 x tp=2 x pp=2 with ZeRO-1 gives the single-rank losses" same rec1.jsonl rec8.jsonl 1e-5
check "records: ... and its validation losses (through the stages)" same rec1.jsonl rec8.jsonl 1e-5 val_loss
# data parallelism in a pipeline: each chunk's last gradient pass starts the
# all-reduce of its buckets (small ones here: many), while the rest of the
# schedule runs; every schedule, and a trace that shows the overlap
for s in 1f1b zb-h1 interleaved; do
  b=p2; [ $s = zb-h1 ] && b=p2z; [ $s = interleaved ] && b=p2v2
  $mpi -np 4 ./$b $run --pp 2 --dp 2 --schedule $s --bucket-mb 0.05 --log dpp-$s.jsonl
  check "dp=2 x pp=2 $s, the all-reduce started in the backward, gives the single-rank losses" \
    same ref.jsonl dpp-$s.jsonl 1e-5
done
# one bucket a rank (the default 25 MB): on the last stage it holds the tied
# embedding's copy, final in that stage's backward too
mkdir -p dtr
$mpi -np 4 ./p2 $run --pp 2 --dp 2 --steps 2 --trace dtr
check "dp=2 x pp=2: every rank's gradient all-reduce starts before its last backward ends" \
  starts_in_backward dtr all-reduce 4
# ZeRO-1 in a pipeline: the buckets are reduce-scattered from each chunk's
# last gradient pass; those of the tied embedding wait until its copies are
# summed over the pipeline
for s in 1f1b zb-h1 interleaved; do
  b=p2; [ $s = zb-h1 ] && b=p2z; [ $s = interleaved ] && b=p2v2
  $mpi -np 4 ./$b $run --pp 2 --dp 2 --zero 1 --schedule $s --bucket-mb 0.05 --log zdpp-$s.jsonl
  check "dp=2 x pp=2 $s with ZeRO-1, reduce-scattered in the backward, gives the single-rank losses" \
    same ref.jsonl zdpp-$s.jsonl 1e-5
done
mkdir -p zdtr
$mpi -np 4 ./p2 $run --pp 2 --dp 2 --zero 1 --bucket-mb 0.05 --steps 2 --trace zdtr
check "dp=2 x pp=2 with ZeRO-1: every rank's first reduce-scatter starts before its last backward ends" \
  starts_in_backward zdtr reduce-scatter 4
check "dp=2 x pp=2 with ZeRO-1: each stage's parameter all-gathers are waited for inside the next step's forwards" \
  gathered_in_forward zdtr 4
# --dump-batches in a pipeline: each rank records the microbatches it runs
# (ranks 0, 1: stage 0 of data ranks 0, 1; ranks 2, 3: stage 1)
mkdir -p pb1 pb4
./p1 $run --steps 3 --dump-batches pb1
$mpi -np 4 ./p2 $run --pp 2 --dp 2 --steps 3 --dump-batches pb4
check "dp=2 x pp=2 --dump-batches: each stage's two ranks ran every sequence once per step, the single rank's tokens" \
  [ "$(sort pb1/*.txt)" = "$(cat pb4/batches-rank0.txt pb4/batches-rank1.txt | sort)" -a \
    "$(sort pb1/*.txt)" = "$(cat pb4/batches-rank2.txt pb4/batches-rank3.txt | sort)" -a "$(cat pb1/*.txt | wc -l)" = 24 ]
$mpi -np 2 ./p2 $run --pp 2 --dropout 0.1 --log drop2.jsonl
./p1 $run --dropout 0.1 --log drop1.jsonl
check "dropout 0.1 at pp=2 gives the single-rank losses" same drop1.jsonl drop2.jsonl 1e-5

# sequence parallelism in a pipeline: a stage boundary carries the rank's part
# of the sequence, and the LayerNorms' and row-parallel biases' gradients
# (computed on sequence parts) are summed over the tensor group once per step
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --tp 2 --sequence-parallel -o s22
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --tp 2 --sequence-parallel --schedule zb-h1 -o s22z
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --tp 2 --sequence-parallel --virtual-stages 2 \
  --schedule interleaved -o s22v
for s in gpipe 1f1b zb-h1 interleaved; do
  b=s22; [ $s = zb-h1 ] && b=s22z; [ $s = interleaved ] && b=s22v
  $mpi -np 4 ./$b $run --pp 2 --tp 2 --schedule $s --log sp-$s.jsonl
  check "tp=2 x pp=2 $s with sequence parallelism gives the single-rank losses" same ref.jsonl sp-$s.jsonl 1e-5
  $mpi -np 4 ./$b $run --pp 2 --tp 2 --schedule $s --dropout 0.1 --log spd-$s.jsonl
  check "tp=2 x pp=2 $s with sequence parallelism and dropout 0.1 gives the single-rank losses" \
    same drop1.jsonl spd-$s.jsonl 1e-5
done
$mpi -np 8 ./s22 $run --pp 2 --tp 2 --dp 2 --zero 1 --log spx8.jsonl
check "dp=2 x tp=2 x pp=2 with sequence parallelism and ZeRO-1 gives the single-rank losses" same ref.jsonl spx8.jsonl 1e-5

# activation recomputation: bit-identical losses, less activation memory
"$shardc" build "$src/examples/tinygpt.model" $cfg --recompute block -o r1
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --schedule zb-h1 --recompute block -o r2
./r1 $run --dropout 0.1 --log rc1.jsonl
check "recompute=block gives bit-identical losses (1 rank, dropout 0.1)" \
  [ "$(grep -o '"loss":[^,]*' drop1.jsonl)" = "$(grep -o '"loss":[^,]*' rc1.jsonl)" ]
$mpi -np 2 ./r2 $run --pp 2 --schedule zb-h1 --log rc2.jsonl
check "recompute=block at pp=2 zb-h1 gives the losses of the same layout without it, bit for bit" \
  [ "$(grep -o '"loss":[^,]*' pp2-zb-h1.jsonl)" = "$(grep -o '"loss":[^,]*' rc2.jsonl)" ]
a0=$(./p1 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 2>&1 | grep -o 'activations [0-9.]*' | cut -d' ' -f2)
a1=$(./r1 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 2>&1 | grep -o 'activations [0-9.]*' | cut -d' ' -f2)
check "recompute=block needs less activation memory ($a0 -> $a1 MiB)" $py -c "import sys; sys.exit(0 if $a1 < 0.6 * $a0 else 1)"
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --recompute block -o r2b
b0=$($mpi -np 2 ./p2 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 --microbatches 4 2>&1 | grep -o 'rank 1 (dp.*activations [0-9.]*' | grep -o '[0-9.]*$')
b1=$($mpi -np 2 ./r2b --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 --microbatches 4 2>&1 | grep -o 'rank 1 (dp.*activations [0-9.]*' | grep -o '[0-9.]*$')
check "recompute=block needs less activation memory in a pipeline stage too ($b0 -> $b1 MiB)" $py -c "import sys; sys.exit(0 if $b1 < 0.7 * $b0 else 1)"
# recomputation with tensor parallelism: the collectives inserted for the
# tensor split belong to their block (recomputed with it, cut with it); once
# they formed a block of their own, so tp x pp could not be cut and tp alone
# recomputed only the all-reduces
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --tp 2 --recompute block -o r22
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 2 --tp 2 --recompute block --sequence-parallel -o r22s
$mpi -np 4 ./r22 $run --pp 2 --tp 2 --log rc22.jsonl
check "tp=2 x pp=2 with recompute=block gives the single-rank losses" same ref.jsonl rc22.jsonl 1e-5
$mpi -np 4 ./r22s $run --pp 2 --tp 2 --log rc22s.jsonl
check "tp=2 x pp=2 with sequence parallelism and recompute=block gives the single-rank losses" same ref.jsonl rc22s.jsonl 1e-5
$mpi -np 4 ./r22s $run --pp 2 --tp 2 --dropout 0.1 --log rc22sd.jsonl
check "tp=2 x pp=2 with sequence parallelism, recompute=block and dropout 0.1 gives the losses of the same layout without recomputation, bit for bit" \
  [ "$(grep -o '"loss":[^,]*' spd-1f1b.jsonl)" = "$(grep -o '"loss":[^,]*' rc22sd.jsonl)" ]
c0=$($mpi -np 4 ./p2t2 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 --microbatches 4 --tp 2 --pp 2 2>&1 | grep -o 'rank 0 (dp.*activations [0-9.]*' | grep -o '[0-9.]*$')
c1=$($mpi -np 4 ./r22 --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 --microbatches 4 --tp 2 --pp 2 2>&1 | grep -o 'rank 0 (dp.*activations [0-9.]*' | grep -o '[0-9.]*$')
check "recompute=block needs less activation memory at tp=2 x pp=2 ($c0 -> $c1 MiB)" $py -c "import sys; sys.exit(0 if $c1 < 0.7 * $c0 else 1)"
$mpi -np 2 ./p2 $run --pp 2 --schedule zb-h1 > zb.txt 2>&1; rc=$?
check "zb-h1 with a program not built for it is a usage error that says how (exit $rc)" [ $rc -eq 2 ]
check "zb-h1 with a program not built for it is a usage error that says how (exit $rc): the message" grep -q "rebuild it with shardc build --schedule zb-h1" zb.txt
./r1 $run --recompute none > /dev/null 2> rcerr.txt; rc=$?
check "running with a recompute setting other than the build's is a usage error (exit $rc)" [ $rc -eq 2 ]

# checkpoints across pipeline degrees
$mpi -np 2 ./p2 $run --pp 2 --save ck --save-every 10 --log full.jsonl
./p1 $run --load ck/step-00000010 --log at1.jsonl
$mpi -np 4 ./p4 $run --pp 4 --load ck/step-00000010 --log at4.jsonl
a=$(grep -o '"loss":[^,]*' full.jsonl | sed -n 11p | cut -d: -f2)
b=$(grep -o '"loss":[^,]*' at1.jsonl | head -1 | cut -d: -f2); c=$(grep -o '"loss":[^,]*' at4.jsonl | head -1 | cut -d: -f2)
check "saved at pp=2, loaded at pp=1: same next loss ($a vs $b)" $py -c "import sys; sys.exit(0 if abs($a-$b) <= 1e-5*abs($a) else 1)"
check "saved at pp=2, loaded at pp=4: same next loss ($a vs $c)" $py -c "import sys; sys.exit(0 if abs($a-$c) <= 1e-5*abs($a) else 1)"
# --time-limit (1.8 s) at tp=2 x pp=2: the four ranks stop after the same step
# (a world sum each step), save it from the stages and tensor shards, exit 3; resumed at pp=2 x tp=2
# it continues as one that never stopped (constant rate: --steps does not change the schedule)
tl="${run/--steps 20/} --lr-schedule constant --tp 2 --pp 2"
$mpi -np 4 ./p2t2 $tl --steps 100000000 --time-limit 0.03 --save cktl --log tl1.jsonl > /dev/null 2> tl.err; rc=$?
n=$(grep -c '"loss"' tl1.jsonl)
check "--time-limit at tp=2 x pp=2: exit 3 after $n steps (rc $rc), the checkpoint of step $n the latest" \
  sh -c "[ $rc -eq 3 ] && [ $n -ge 1 ] && [ \"\$(cat cktl/latest)\" = step-$(printf %08d $n) ] && grep -q 'stopped by --time-limit 0.03' tl.err"
$mpi -np 4 ./p2t2 $tl --steps $((n + 3)) --load cktl --log tl2.jsonl
$mpi -np 4 ./p2t2 $tl --steps $((n + 3)) --log tlf.jsonl
check "... stopped at $n + resumed for 3 == $((n + 3)) steps straight, bit-exact" \
  resumed_exact tl1.jsonl tl2.jsonl tlf.jsonl
# each tensor of a checkpoint comes from the pipeline rank that owns it:
# the initial state saved at pp=1, 2 and 4 (and dp=2 x pp=2 with ZeRO-1) is the same file
one="--data text.txt --batch 8 --seq 32 --threads 1 --microbatches 4 --quiet"
./p1 $one --steps 0 --save s1
$mpi -np 2 ./p2 $one --pp 2 --steps 0 --save s2
$mpi -np 4 ./p4 $one --pp 4 --steps 0 --save s4
$mpi -np 4 ./p2 $one --pp 2 --dp 2 --zero 1 --steps 0 --save sz
identical() { # FILE...: not empty, and all the same bytes
  local a=$1; shift
  [ -s "$a" ] || return 1
  for b in "$@"; do cmp -s "$a" "$b" || return 1; done
}
for f in model optimizer; do
  check "the step-0 $f.safetensors of pp=1, pp=2, pp=4 and dp=2 x pp=2 ZeRO-1 are identical, byte for byte" \
    identical s{1,2,4,z}/step-00000000/$f.safetensors
done

# evaluation and sampling run through the pipeline: from the same parameters
# the same validation loss and the same sample as one rank
ev="--data text.txt --val-data text.txt --batch 8 --seq 32 --threads 1 --microbatches 4 --load ck/step-00000010 --steps 10 --sample 48 --eval-batches 4"
./p1 $ev > ev1.out 2> ev1.err
$mpi -np 2 ./p2 $ev --pp 2 > ev2.out 2> ev2.err
$mpi -np 2 ./p2v2 $ev --pp 2 --schedule interleaved > ev2v.out 2> ev2v.err
$mpi -np 4 ./p4 $ev --pp 4 > ev4.out 2> ev4.err
v1=$(grep -o "val loss [0-9.]*" ev1.err); v2=$(grep -o "val loss [0-9.]*" ev2.err)
v2v=$(grep -o "val loss [0-9.]*" ev2v.err); v4=$(grep -o "val loss [0-9.]*" ev4.err)
check "pp=2, pp=2 interleaved and pp=4 evaluate the loss of one rank ($v1; $v2, $v2v, $v4)" \
  $py -c "import sys; sys.exit(0 if '$v1' and len({'$v1', '$v2', '$v2v', '$v4'}) == 1 else 1)"
check "pp=2, pp=2 interleaved and pp=4 sample the tokens of one rank" identical ev1.out ev2.out ev2v.out ev4.out

# --sample-every: a sample while training, through the pipeline and after ZeRO-1's
# gathers settle, and the training and the last sample are those without it, bit for bit
sm="--data text.txt --batch 8 --seq 32 --threads 1 --steps 4 --sample 16 --quiet --pp 2 --dp 2 --zero 1 --microbatches 2"
$mpi -np 4 ./p2 $sm --log sm0.jsonl > sm0.out
$mpi -np 4 ./p2 $sm --sample-every 2 --log sm1.jsonl --save smck --save-every 2 > sm1.out
$mpi -np 4 ./p2 ${sm/--steps 4/--steps 2} --load smck/step-00000002 > sm2.out # step 2's parameters, sampled
sampled_mid() { cmp -s <(tail -c +26 sm1.out | head -c "$(wc -c < sm2.out)") sm2.out && [ -s sm2.out ] &&
  [ "$(grep -c '^--- sample at step' sm1.out)" -eq 1 ] && grep -q '^--- sample at step 2 ---$' sm1.out &&
  cmp -s <(tail -c "$(wc -c < sm0.out)" sm1.out) sm0.out && [ "$(wc -c < sm1.out)" -gt $((2 * $(wc -c < sm0.out))) ] &&
  cmp -s <(grep -o '"loss":[^,]*' sm0.jsonl) <(grep -o '"loss":[^,]*' sm1.jsonl) && [ -s sm0.jsonl ]; }
check "--sample-every 2 at pp=2 x dp=2 ZeRO-1: one sample at step 2 (step 2's checkpoint's), then the run's as without it, losses bit for bit" sampled_mid

# model states: a pipeline rank holds only its stages' parameters, their
# gradients and AdamW moments (the start-up line of every rank); the ranks'
# parameters add up to the whole model plus the tied embedding's second copy
mem="--data text.txt --batch 8 --seq 32 --threads 1 --microbatches 4 --steps 1"
./p1 $mem 2> m1.txt
$mpi -np 2 ./p2 $mem --pp 2 2> m2.txt
$mpi -np 4 ./p4 $mem --pp 4 2> m4.txt
$mpi -np 4 ./p2 $mem --pp 2 --dp 2 --zero 1 --microbatches 2 2> mz.txt
cat > memcheck.py <<'PY'
import re, sys
def lines(f):
    return {int(m[0]): tuple(float(x) for x in m[1:]) for m in
            re.findall(r'rank (\d+) \(dp \d+/\d+\): parameters ([0-9.]+) MiB, gradients ([0-9.]+) MiB, '
                       r'optimizer state ([0-9.]+) MiB', open(f).read())}
whole = lines(sys.argv[1])[0][0]
tied = 256 * 64 * 4 / 2**20  # wte: the embedding on the first stage, the head on the last
ranks, dp, zero = lines(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pp = len(ranks) // dp
if len(ranks) != pp * dp or pp < 2:
    print('     %d memory lines' % len(ranks)); sys.exit(1)
par = [ranks[k * dp][0] for k in range(pp)]  # data rank 0 of each pipeline rank
print('     whole model %.2f MiB; per pipeline rank %s MiB' % (whole, ', '.join('%.2f' % x for x in par)))
ok = abs(sum(par) - whole - tied) <= 0.01 * pp + 0.002      # 2-decimal rounding, 64-byte alignment
ok &= all(x < 1.5 * whole / pp + tied for x in par)          # a stage's share, not the model
for r, (p, g, o) in ranks.items():
    want = 2 * p / (dp if zero else 1)
    ok &= g == p and abs(o - want) <= 0.011                  # gradients as parameters, AdamW m and v
    ok &= p == par[r // dp]                                  # data ranks of a stage alike
sys.exit(0 if ok else 1)
PY
check "pp=2: each rank holds its stage's parameters, gradients and optimizer state" $py memcheck.py m1.txt m2.txt 1 0
check "pp=4: each rank holds about a quarter; the sum is the model plus the tied copy" $py memcheck.py m1.txt m4.txt 1 0
check "dp=2 x pp=2 with ZeRO-1: the stage's share, its optimizer state halved" $py memcheck.py m1.txt mz.txt 2 1
$mpi -np 4 ./p2 $run --pp 2 --dp 2 --zero 1 --microbatches 2 --log zpp.jsonl
check "dp=2 x pp=2 with ZeRO-1 gives the single-rank losses" same ref.jsonl zpp.jsonl 1e-5
# --dump-grads gathers each gradient from its owner (the tied one summed by its holders)
./p1 $run --steps 1 --dump-grads g1.st > /dev/null 2>&1
$mpi -np 4 ./p4 $run --pp 4 --steps 1 --dump-grads g4.st > /dev/null 2>&1
check "pp=4: every parameter's gradient is the single rank's (1e-5)" same_grads g1.st g4.st

# a deadlocking or impossible layout is an error before anything runs
$mpi -np 2 ./p2v2 $run --pp 2 --schedule interleaved --microbatches 3 --batch 9 > bad.txt 2>&1; rc=$?
check "interleaved with microbatches not a multiple of pp is refused (exit $rc)" [ $rc -ne 0 ]
"$shardc" build "$src/examples/tinygpt.model" $cfg --pp 8 -o /dev/null 2> few.txt; rc=$?
check "more stages than layers is a compile-time error" [ $rc -eq 1 ]
check "more stages than layers is a compile-time error: the message" grep -q "cannot fill pipeline=8" few.txt

# traces: forward/backward/send/recv spans with microbatch numbers; the timeline picture
mkdir -p tr
$mpi -np 2 ./p2 --data text.txt --batch 8 --seq 32 --steps 2 --microbatches 4 --threads 1 --pp 2 --trace tr 2> run.txt
check "the run prints the measured bubble next to the theory" grep -q "measured bubble .* (theory 20.0% for 1f1b, p=2, m=4)" run.txt
check "traces have microbatch spans" $py -c "
import json
for r in (0, 1):
    ev = [e for e in json.load(open('tr/trace-rank%d.json' % r))['traceEvents'] if e['ph'] == 'X']
    names = {e['name'] for e in ev}
    assert {'forward', 'backward', 'send', 'recv', 'optimizer'} <= names, names
    assert any(e.get('args', {}).get('info', '').startswith('mb ') for e in ev)
"
if "$shardc" timeline tr -o tl.svg 2> tl.err; then
  check "shardc timeline draws an SVG" $py -c "import xml.dom.minidom; xml.dom.minidom.parse('tl.svg')"
else
  bad "shardc timeline: $(cat tl.err)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
