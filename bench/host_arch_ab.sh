#!/bin/bash
# host_arch_ab.sh SHARDC_NONE SHARDC_V3 [TEXT]: the same source built twice,
# the host kernels for baseline x86-64 (cmake -DSHARDC_HOST_ARCH=none) and for
# x86-64-v3 (the default on a machine with AVX2 and FMA): tinygpt, batch 16 x
# 128, 30 steps, --threads 2, 4 rounds alternating; medians of steps 2..29,
# and whether the losses differ. Run in an empty directory with TEXT there.
set -e
A=${1:?usage: host_arch_ab.sh SHARDC_NONE SHARDC_V3 [TEXT]}; B=${2:?}; TEXT=${3:-train.txt}
m=$(dirname "$0")/../examples/tinygpt.model
"$A" build "$m" -o tg_none > /dev/null
"$B" build "$m" -o tg_v3 > /dev/null
for r in 1 2 3 4; do
  for b in none v3; do
    ./tg_$b --data $TEXT --steps 30 --batch 16 --seq 128 --eval-every 0 --threads 2 --quiet --log $b.$r.jsonl
  done
done
python3 - <<'PY'
import json, statistics
for b in ('none', 'v3'):
    ms = []; per = []
    for r in (1, 2, 3, 4):
        x = [json.loads(l)['ms'] for l in open('%s.%d.jsonl' % (b, r))][2:]
        ms += x; per.append(statistics.median(x))
    q = statistics.quantiles(ms, n=4)
    print('%s: median %.1f ms [%.1f-%.1f], fastest %.1f, rounds %s' % (b, statistics.median(ms), q[0], q[2], min(ms), ', '.join('%.1f' % p for p in per)))
a = [json.loads(l)['loss'] for l in open('none.1.jsonl')]; c = [json.loads(l)['loss'] for l in open('v3.1.jsonl')]
print('losses: max rel diff %.2e over %d steps' % (max(abs(x - y) / abs(x) for x, y in zip(a, c)), len(a)))
PY
