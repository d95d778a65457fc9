#!/usr/bin/env bash
# Pipeline schedules on this machine: tinygpt with 8 layers
# (examples/tinygpt.model --set n_layer=8) built with --pp 4 (equal stages of
# 2 layers) and with --pp 4 --virtual-stages 2 --schedule interleaved, each
# also with --recompute block; every schedule (gpipe, 1f1b, zb-h1 on the
# first build, interleaved on the second) run on 4 ranks with
# --microbatches 8. Records the median step time, the measured bubble per
# pipeline rank and the peak activations per stage that the run prints at the
# end, and the per-rank start-up memory lines; then the schedule simulator's
# bubble for the same p and m (bench/sched_sim.c). A control: the same
# model at --pp 2 (2 ranks on the 2 cores, not oversubscribed), 1f1b.
# Usage: bench/pp_schedules.sh [BUILD_DIR]
# Environment: ROUNDS (default 3) runs of each, interleaved; STEPS (10; the
# first 2 steps are not counted in the step time); BATCH (16), SEQ (128);
# WORK=DIR keeps everything.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${ROUNDS:-3} steps=${STEPS:-10} batch=${BATCH:-16} seq=${SEQ:-128}
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; w=$(cd "$WORK" && pwd)
else w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; fi
cd "$w"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=/usr/bin/python3
model="$src/examples/tinygpt.model"
b() { echo "\$ shardc build examples/tinygpt.model $*"; "$build/shardc" build "$model" "$@" > /dev/null; }
b --set n_layer=8 --pp 4 -o pp4
b --set n_layer=8 --pp 4 --virtual-stages 2 --schedule interleaved -o pp4v2
b --set n_layer=8 --pp 4 --recompute block -o pp4rc
b --set n_layer=8 --pp 4 --virtual-stages 2 --schedule interleaved --recompute block -o pp4v2rc
b --set n_layer=8 --pp 2 -o pp2
"$build/shardc" build "$model" --set n_layer=8 --pp 4 -o /dev/null --dump=pipeline 2>/dev/null | head -8 || true
cat "$src"/docs/*.md "$src"/README.md "$src"/compiler/*.c "$src"/runtime/*.c > train.txt
${CC:-cc} -O2 -I"$src/runtime/include" "$here/sched_sim.c" "$build/libshardrt.a" -lm -o sched_sim
run() { # tag prog np schedule
  local tag=$1 prog=$2 np=$3 sched=$4 dir="$1.r$r"
  mkdir -p "$dir"
  local cmd=(mpirun --oversubscribe --bind-to none -np "$np" "./$prog" --pp "$np" --threads 1 --schedule "$sched"
             --microbatches 8 --data train.txt --batch "$batch" --seq "$seq" --steps "$steps" --log "$dir/log.jsonl")
  echo "\$ OMP_NUM_THREADS=1 ${cmd[*]}" > "$dir/cmd"
  OMP_NUM_THREADS=1 "${cmd[@]}" 2> "$dir/stderr" > /dev/null
}
for ((r = 0; r < rounds; r++)); do
  echo "round $r: $(uptime)"
  for s in gpipe 1f1b zb-h1; do run "$s" pp4 4 "$s"; run "$s-rc" pp4rc 4 "$s"; done
  run interleaved pp4v2 4 interleaved
  run interleaved-rc pp4v2rc 4 interleaved
  run pp2-1f1b pp2 2 1f1b
done
echo "done: $(uptime)"
for tag in gpipe 1f1b interleaved zb-h1 gpipe-rc 1f1b-rc interleaved-rc zb-h1-rc pp2-1f1b; do
  echo; echo "== $tag"; cat "$tag.r0/cmd"
  $py - "$tag" "$rounds" <<'PY'
import json, re, statistics, sys
tag, rounds = sys.argv[1], int(sys.argv[2])
ms, bub, stage, startup = [], {}, {}, {}
for r in range(rounds):
    d = f"{tag}.r{r}"
    ms += [json.loads(l)["ms"] for l in open(f"{d}/log.jsonl") if '"loss"' in l][2:]
    for line in open(f"{d}/stderr"):
        m = re.match(r"pipeline rank (\d+): measured bubble ([\d.]+)% \(theory ([\d.]+)%", line)
        if m:
            bub.setdefault(int(m[1]), []).append(float(m[2])); theory = m[3]
        m = re.match(r"pipeline stage (\d+) \(rank (\d+)\): peak (\d+) microbatch(?:es)? in flight, activations ([\d.]+) MiB", line)
        if m:
            stage[int(m[1])] = (int(m[2]), int(m[3]), float(m[4]))
        m = re.match(r"rank (\d+) \(dp [^)]*\): .*activations ([\d.]+) MiB", line)
        if m:
            startup[int(m[1])] = float(m[2])
print(f"  step ms (steps 2.. of {rounds} runs): median {statistics.median(ms):.1f}, min {min(ms):.1f}, max {max(ms):.1f}")
for k in sorted(bub):
    v = bub[k]
    print(f"  rank {k}: measured bubble median {statistics.median(v):.1f}% (runs: {', '.join(f'{x:.1f}' for x in v)}), "
          f"theory {theory}%; start-up activations {startup.get(k, float('nan')):.2f} MiB")
for s in sorted(stage):
    rk, pk, mib = stage[s]
    print(f"  stage {s} (rank {rk}): peak {pk} in flight, activations {mib:.2f} MiB (last run)")
PY
done
echo; echo "== schedule simulator (runtime/schedule.c), p=4, m=8"; ./sched_sim 4 8 2
echo; echo "== p=2, m=8"; ./sched_sim 2 8 2 | tail -4
