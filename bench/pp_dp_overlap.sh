#!/bin/bash
# pp_dp_overlap.sh SHARDC [SHARDC_B] [TEXT]: data parallelism inside a pipeline,
# dp=2 x pp=2 (1F1B, 4 microbatches) on 4 ranks, host backend. Builds
# tinygpt (4 layers of 256) with each shardc given (A/B: two builds of the
# compiler, each linking its own runtime), runs 3 alternating rounds of 12
# steps (batch 16 x 128), then one 6-step run each with --trace, and prints:
# the run's closing gradient-reduction line, the median step time (steps
# 2..11 of each round), and per rank from the trace (steps 1..5) the time
# from its first bucket's launch to the end of its last backward pass of the
# step (positive: launched during the backward), and from that end to the
# end of its last bucket's reduction (what the step waited for); with ZeRO
# also when the parameter all-gather ended relative to the next forward's
# start (negative: before it) and how long that forward waited for it.
# Environment: PP (default 2; 1: no pipeline, dp ranks only), ZERO (default
# 0; 1: --zero 1, whose buckets are reduce-scattered), BUCKET_MB (default 25).
set -e
A=$1; B=${2:-}; TEXT=${3:-train.txt}
PP=${PP:-2}; ZERO=${ZERO:-0}; BUCKET_MB=${BUCKET_MB:-25}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg="--set n_layer=4 --set n_embd=256 --set n_head=4"
[ "$PP" -gt 1 ] && cfg="$cfg --pp $PP"
m=$(dirname "$0")/../examples/tinygpt.model
bins="a"; "$A" build "$m" $cfg -o a > /dev/null
[ -n "$B" ] && { bins="a b"; "$B" build "$m" $cfg -o b > /dev/null; }
run="--data $TEXT --batch 16 --seq 128 --lr 3e-4 --warmup 2 --microbatches 4 --threads 1 --dp 2 --pp $PP"
run="$run --zero $ZERO --bucket-mb $BUCKET_MB"
np=$((2 * PP)); mpi="mpirun --oversubscribe --bind-to none -np $np"
for i in 1 2 3; do
  for b in $bins; do
    OMP_NUM_THREADS=1 $mpi ./$b $run --steps 12 --log $b-$i.jsonl > $b-$i.txt 2>&1
    echo "$b round $i: $(grep -E '^(gradient (all-reduce|reduce-scatter)|parameter all-gather)' $b-$i.txt)"
  done
done
for b in $bins; do rm -rf tr-$b; OMP_NUM_THREADS=1 $mpi ./$b $run --steps 6 --quiet --trace tr-$b; done
python3 - $np $bins <<'PY'
import json, statistics, sys
np = int(sys.argv[1])
for b in sys.argv[2:]:
    per = [statistics.median([json.loads(l)['ms'] for l in open('%s-%d.jsonl' % (b, i))][2:]) for i in (1, 2, 3)]
    allms = sum(([json.loads(l)['ms'] for l in open('%s-%d.jsonl' % (b, i))][2:] for i in (1, 2, 3)), [])
    print('%s: step median %.1f ms (rounds %s)' % (b, statistics.median(allms), ', '.join('%.1f' % x for x in per)))
    for r in range(np):
        ev = [e for e in json.load(open('tr-%s/trace-rank%d.json' % (b, r)))['traceEvents'] if e['ph'] == 'X']
        opt = sorted(e['ts'] for e in ev if e['name'] == 'optimizer')
        lead, tail = [], []
        for lo, hi in zip(opt, opt[1:]):  # the steps after the first
            step = [e for e in ev if lo < e['ts'] < hi]
            end = max(e['ts'] + e['dur'] for e in step if e['name'].startswith('backward'))
            red = [e for e in step if e['name'] in ('all-reduce', 'reduce-scatter')]
            lead.append((end - min(e['ts'] for e in red)) / 1e3)
            tail.append((max(e['ts'] + e['dur'] for e in red) - end) / 1e3)
        print('  rank %d: first gradient bucket launched %.1f ms before its last backward ended, the last done '
              '%.2f ms after it (means of %d steps)' % (r, statistics.mean(lead), statistics.mean(tail), len(lead)))
        # ZeRO-1's parameter all-gather: from the optimizer's end to the next step's first forward, and the
        # time that forward spent waiting for gathered buckets (traced since the gather overlaps it)
        gap, waits = [], []
        for o, nxt in zip(sorted((e for e in ev if e['name'] == 'optimizer'), key=lambda e: e['ts']), opt[1:]):
            ags = [e for e in ev if e['name'] == 'all-gather' and o['ts'] <= e['ts'] < nxt]
            if not ags:
                continue
            fwd = min(e['ts'] for e in ev if e['name'] == 'forward' and e['ts'] > o['ts'])
            gap.append((max(e['ts'] + e['dur'] for e in ags) - fwd) / 1e3)
            waits.append(sum(e['dur'] for e in ev if e['name'] == 'wait' and o['ts'] < e['ts'] < nxt) / 1e3)
        if gap:
            print('  rank %d: parameter all-gather done %.2f ms after the next forward began, the forward waited '
                  '%.2f ms for it (means of %d steps)' % (r, statistics.mean(gap), statistics.mean(waits), len(gap)))
PY
