#!/usr/bin/env bash
# Data parallelism under mpirun --oversubscribe: the loss curve does not
# depend on the layout; ZeRO-1 and microbatches change nothing; every
# sequence of a global batch is trained on exactly once per step; a wrong
# world size and a killed rank end the run with an error, not a hang;
# checkpoints move between layouts; ZeRO-1's gathers overlap the next forward
# and are whole before an evaluation or a sample.
source "$(dirname "$0")/lib.sh"
"$shardc" build "$src/examples/tinygpt.model" -o tg --set n_layer=2 --set n_embd=64 --set n_head=4
run="./tg --data text.txt --batch 8 --seq 32 --steps 20 --lr 3e-3 --warmup 2 --grad-clip 1.0 --quiet --threads 1"

$run --log dp1.jsonl
$mpi -np 2 $run --dp 2 --log dp2.jsonl
check "dp=2 gives the single-rank losses (20 steps, 1e-5)" same dp1.jsonl dp2.jsonl 1e-5
$mpi -np 4 $run --dp 4 --log dp4.jsonl
check "dp=4 gives the single-rank losses (20 steps, 1e-5)" same dp1.jsonl dp4.jsonl 1e-5
$mpi -np 2 $run --dp 2 --zero 1 --log zero.jsonl
check "ZeRO-1 gives the plain data-parallel losses" same dp2.jsonl zero.jsonl 1e-5
# ZeRO-1's buckets are reduce-scattered during the backward: at dp=3 the
# arena's cuts (multiples of 3) fall inside parameters, which are then in
# two buckets; small buckets make many
$run --batch 12 --log b12.jsonl
$mpi -np 3 $run --batch 12 --dp 3 --zero 1 --bucket-mb 0.01 --log zero3.jsonl
check "ZeRO-1 at dp=3 with 0.01 MB buckets (cuts inside parameters) gives the single-rank losses" \
  same b12.jsonl zero3.jsonl 1e-5
$mpi -np 4 $run --dp 4 --zero 1 --bucket-mb 0.05 --microbatches 2 --log zero4.jsonl
check "ZeRO-1 at dp=4 with small buckets and 2 microbatches gives the single-rank losses" same dp1.jsonl zero4.jsonl 1e-5
$run --microbatches 4 --log mb4.jsonl
check "4 microbatches give the unsplit losses" same dp1.jsonl mb4.jsonl 1e-5
$mpi -np 2 $run --dp 2 --microbatches 2 --bucket-mb 0.05 --log small-buckets.jsonl
check "small buckets (many all-reduces) and microbatches change nothing" same dp1.jsonl small-buckets.jsonl 1e-5

# JSON Lines prompt-completion records: the loss is the mean over the global
# batch's completion tokens, whichever rank and microbatch holds them
records records.jsonl
$run --data records.jsonl --val-data records.jsonl --eval-every 10 --log rec1.jsonl
$mpi -np 2 $run --data records.jsonl --val-data records.jsonl --eval-every 10 --dp 2 --microbatches 2 --zero 1 \
  --log rec2.jsonl
check "records (loss on completions): dp=2 x 2 microbatches with ZeRO-1 gives the single-rank losses" \
  same rec1.jsonl rec2.jsonl 1e-5
check "... and the same validation losses (mean over completion tokens; steps 0, 10, 20)" \
  same rec1.jsonl rec2.jsonl 1e-5 val_loss
check "... 3 of them" [ "$(grep -c val_loss rec1.jsonl)" = 3 ]
# --eod-mask-loss ('\n' as the end of text): no loss on the token after each newline, the
# mean over the global batch's other targets, whichever rank and microbatch holds them
eod="--eod-mask-loss 1 --eod-token 10 --val-data text.txt --eval-every 10"
$run $eod --log eod1.jsonl
$mpi -np 2 $run $eod --dp 2 --microbatches 2 --zero 1 --log eod2.jsonl
check "--eod-mask-loss: dp=2 x 2 microbatches with ZeRO-1 gives the single-rank losses" same eod1.jsonl eod2.jsonl 1e-5
check "... and validation losses" same eod1.jsonl eod2.jsonl 1e-5 val_loss
check "... which are not those without it" bash -c \
  "[ \"\$(grep -o '\"loss\":[^,]*' dp1.jsonl)\" != \"\$(grep -o '\"loss\":[^,]*' eod1.jsonl)\" ]"

# every sequence of each global batch exactly once per step, same tokens as one rank
mkdir -p b1 b4
$run --steps 3 --dump-batches b1
$mpi -np 4 $run --steps 3 --dp 4 --microbatches 2 --dump-batches b4
check "every sequence once per step across 4 ranks, same tokens" \
  [ "$(sort b1/*.txt)" = "$(cat b4/*.txt | sort)" -a "$(cat b4/*.txt | wc -l)" = 24 ]

# the memory log: ZeRO-1 divides the optimizer state by dp
$mpi -np 2 ./tg --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 --dp 2 --zero 1 2> zmem.txt
./tg --data text.txt --batch 8 --seq 32 --steps 1 --threads 1 2> mem1.txt
o1=$(grep -o 'optimizer state [0-9.]*' mem1.txt | head -1 | awk '{print $3}')
o2=$(grep -o 'optimizer state [0-9.]*' zmem.txt | head -1 | awk '{print $3}')
check "ZeRO-1 halves the optimizer state per rank at dp=2 ($o1 -> $o2 MiB)" \
  $py -c "import sys; sys.exit(0 if abs($o2 - $o1/2) <= 0.01 else 1)"

# wrong world size: one clear error, every rank exits non-zero, no hang
timeout 60 $mpi -np 3 $run --dp 2 > ws.out 2> ws.err; rc=$?
check "world size 3 with --dp 2: error and non-zero exit (rc $rc)" [ $rc -ne 0 -a $rc -ne 124 ]
check "the error names the numbers" grep -q "2\*1\*1 = 2 but the world has 3 ranks" ws.err

# different flags on different ranks: the start-up handshake stops it before step 0
timeout 60 mpirun --oversubscribe --bind-to none -np 1 $run --dp 2 --log /dev/null : -np 1 $run --dp 2 --seq 16 > hs.txt 2>&1; rc=$?
check "ranks with different flags fail the start-up handshake (exit $rc), no hang" [ $rc -ne 0 -a $rc -ne 124 ]
check "the handshake error says what to do" grep -q "different program or different flags than rank 0" hs.txt

# a signal to one rank of two (preemption, --save): both stop after the same
# step, save it, exit 3; resumed, the run is the one that never stopped
# (constant rate: --steps does not change the schedule)
stop="$run --dp 2 --lr-schedule constant --eval-every 0"
$mpi -np 2 $stop --steps 100000 --save cks --log stop1.jsonl > stop.out 2> stop.err &
mp=$!
logged 5 stop1.jsonl
kill -USR1 "$(pgrep -x -P $mp tg | tail -1)" # the ranks are mpirun's children; other tests run a tg too
timeout 60 tail --pid=$mp -f /dev/null || kill -KILL $mp; wait $mp; rc=$?
n=$(grep -c '"loss"' stop1.jsonl)
check "SIGUSR1 to one rank of dp=2: exit 3 after $n steps (rc $rc)" [ $rc -eq 3 -a "$n" -ge 5 ]
check "rank 0 names the step and the checkpoint (whichever rank got the signal)" \
  grep -Eq "stopped by (SIGUSR1|a signal to another rank) after step $n of 100000: checkpoint cks/step-$(printf %08d "$n"); resume with --load cks" stop.err
$mpi -np 2 $stop --steps $((n + 3)) --load cks --log stop2.jsonl > /dev/null 2>&1
$mpi -np 2 $stop --steps $((n + 3)) --log stopfull.jsonl > /dev/null 2>&1
check "stopped at $n + resumed for 3 == $((n + 3)) steps straight (dp=2, bit-exact)" \
  resumed_exact stop1.jsonl stop2.jsonl stopfull.jsonl

# a killed rank: the others stop within the bound
start=$(date +%s)
timeout 120 $mpi -np 2 ./tg --data text.txt --batch 8 --seq 32 --steps 100000 --dp 2 --comm-timeout 10 \
  --threads 1 --quiet > kill.out 2> kill.err &
mpipid=$!
sleep 3
victim=$(pgrep -f "tg --data text.txt --batch 8 --seq 32 --steps 100000" | grep -v "^$mpipid$" | tail -1)
kill -9 "$victim" 2>/dev/null
wait $mpipid; rc=$?
took=$(( $(date +%s) - start ))
check "killed rank: the run exits non-zero (rc $rc) within 60 s (took ${took}s)" [ $rc -ne 0 -a $rc -ne 124 -a $took -lt 63 ]

# checkpoints across layouts: dp=2 with ZeRO-1 resumes at dp=2 bit-exactly and loads at dp=1
$mpi -np 2 $run --dp 2 --zero 1 --save ck --save-every 10 --log full.jsonl
$mpi -np 2 $run --dp 2 --zero 1 --load ck/step-00000010 --log resumed.jsonl
check "ZeRO-1 dp=2 resume is bit-exact" [ "$(grep -o '"loss":[^,]*' full.jsonl | tail -10)" = "$(grep -o '"loss":[^,]*' resumed.jsonl)" ]
$run --load ck/step-00000010 --log at1.jsonl
a=$(grep -o '"loss":[^,]*' full.jsonl | sed -n 11p | cut -d: -f2); b=$(grep -o '"loss":[^,]*' at1.jsonl | head -1 | cut -d: -f2)
check "the dp=2 ZeRO-1 checkpoint loads at dp=1 with the same next loss ($a vs $b)" \
  $py -c "import sys; sys.exit(0 if abs($a - $b) <= 1e-5 * abs($a) else 1)"

$mpi -np 3 $run --batch 12 --dp 3 --zero 1 --bucket-mb 0.01 --save ck3 --save-every 10 --log full3.jsonl
$mpi -np 3 $run --batch 12 --dp 3 --zero 1 --bucket-mb 0.02 --load ck3/step-00000010 --log resumed3.jsonl
check "ZeRO-1 dp=3 resumes with other buckets (so other slices) bit-exactly" \
  [ "$(grep -o '"loss":[^,]*' full3.jsonl | tail -10)" = "$(grep -o '"loss":[^,]*' resumed3.jsonl)" ]

# ZeRO-1's trace: a reduce-scatter per bucket, the first launched before the
# backward ends, the parameters all-gathered after the optimizer and waited
# for bucket by bucket in the next forward
mkdir -p ztr
$mpi -np 2 $run --dp 2 --zero 1 --bucket-mb 0.05 --steps 2 --trace ztr
check "ZeRO-1: every rank's first reduce-scatter starts before its backward ends" \
  starts_in_backward ztr reduce-scatter 2
check "ZeRO-1: a reduce-scatter per bucket, no all-reduce, the parameters all-gathered after the optimizer" $py -c "
import json
for r in (0, 1):
    ev = [e for e in json.load(open('ztr/trace-rank%d.json' % r))['traceEvents'] if e['ph'] == 'X']
    opt = min(e['ts'] for e in ev if e['name'] == 'optimizer')
    step = [e for e in ev if e['ts'] < opt]
    names = [e['name'] for e in step]
    assert names.count('reduce-scatter') > 3 and 'all-reduce' not in names, names
    assert any(e['name'] == 'all-gather' and e['ts'] >= opt for e in ev)
"
check "ZeRO-1: each bucket's parameter all-gather is waited for inside the next step's forward" \
  gathered_in_forward ztr 2

# ZeRO-1's parameter gather runs into the next forward: an evaluation
# between steps and the sample after the last wait for all of it first
head -c 20000 text.txt > val.txt
ev="--steps 6 --val-data val.txt --eval-every 2 --eval-batches 2 --sample 24 --prompt model"
$mpi -np 2 $run --dp 2 $ev --log ev0.jsonl > ev0.out
$mpi -np 2 $run --dp 2 --zero 1 --bucket-mb 0.05 $ev --log ev1.jsonl > ev1.out
check "ZeRO-1: evaluations between steps and the sample read whole parameters (plain dp=2's val losses, to 1e-6, and sample)" $py -c "
import json, sys
v = [[json.loads(l)['val_loss'] for l in open(f) if 'val_loss' in l] for f in ('ev0.jsonl', 'ev1.jsonl')]
print('  val losses', v[0], v[1])
assert len(v[0]) == 4 and len(v[1]) == 4 and all(abs(a - b) <= 1e-6 * a for a, b in zip(*v))
assert open('ev0.out', 'rb').read() == open('ev1.out', 'rb').read() and len(open('ev0.out', 'rb').read()) > 24
"

# a trace per rank, with compute and communication tracks
mkdir -p tr
$mpi -np 2 $run --dp 2 --steps 3 --trace tr
check "a Chrome trace per rank" $py -c "
import json
for r in (0, 1):
    d = json.load(open('tr/trace-rank%d.json' % r))
    names = {e['name'] for e in d['traceEvents']}
    assert {'forward', 'backward', 'optimizer', 'all-reduce'} <= names, names
    assert {e.get('tid') for e in d['traceEvents'] if e['ph'] == 'X'} >= {0, 1}
"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
