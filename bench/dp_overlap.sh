#!/usr/bin/env bash
# Data parallelism on this machine: tinygpt (examples/tinygpt.model) at dp=1
# and dp=2 with the same global batch, the median step time from --log, and
# how much of the gradient all-reduce overlapped the backward, from the run's
# closing line and from its --trace files (bench/trace_overlap.py).
# Usage: bench/dp_overlap.sh [BUILD_DIR]
# Environment: ROUNDS (default 3) runs of each configuration, interleaved;
# STEPS (30), BATCH (16), SEQ (128); WORK=DIR keeps everything in DIR.
# Configurations: dp=1 with 2 OpenMP threads (the whole machine), dp=1 with 1
# thread (reference), dp=2 x 1 thread with the default 25 MB buckets, dp=2 x
# 1 thread with --bucket-mb 0.1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${ROUNDS:-3} steps=${STEPS:-30} batch=${BATCH:-16} seq=${SEQ:-128}
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; w=$(cd "$WORK" && pwd)
else w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; fi
cd "$w"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=/usr/bin/python3
"$build/shardc" build "$src/examples/tinygpt.model" -o tinygpt
# raw bytes for the byte-level model: the repository's docs and C sources
cat "$src"/docs/*.md "$src"/README.md "$src"/compiler/*.c "$src"/runtime/*.c > train.txt
run() { # tag np threads extra-flags...
  local tag=$1 np=$2 th=$3; shift 3
  local dir="$tag.r$r"; rm -rf "$dir"; mkdir -p "$dir/trace"
  local cmd=(./tinygpt --dp "$np" --threads "$th" --data train.txt --batch "$batch" --seq "$seq" --steps "$steps"
             --log "$dir/log.jsonl" --trace "$dir/trace" "$@")
  if [ "$np" -gt 1 ]; then cmd=(mpirun --oversubscribe --bind-to none -np "$np" "${cmd[@]}"); fi
  echo "\$ OMP_NUM_THREADS=$th ${cmd[*]}" > "$dir/cmd"
  OMP_NUM_THREADS=$th "${cmd[@]}" 2> "$dir/stderr" > /dev/null
  grep -h "gradient all-reduce" "$dir/stderr" || true
}
for ((r = 0; r < rounds; r++)); do
  echo "round $r: $(uptime)"
  run dp1t2 1 2
  run dp1t1 1 1
  run dp2 2 1
  run dp2b01 2 1 --bucket-mb 0.1
done
echo
for tag in dp1t2 dp1t1 dp2 dp2b01; do
  cat "$tag.r0/cmd"
  $py - "$tag" "$rounds" <<'PY'
import json, statistics, sys
tag, rounds = sys.argv[1], int(sys.argv[2])
per_round, allms = [], []
for r in range(rounds):
    ms = [json.loads(l)["ms"] for l in open(f"{tag}.r{r}/log.jsonl") if '"loss"' in l][2:]
    per_round.append(statistics.median(ms)); allms += ms
print(f"  step ms (steps 2.. of each run): median {statistics.median(allms):.1f}, "
      f"min {min(allms):.1f}, max {max(allms):.1f}; per-run medians "
      + ", ".join(f"{m:.1f}" for m in per_round))
PY
  for ((r = 0; r < rounds; r++)); do
    if grep -q "gradient all-reduce" "$tag.r$r/stderr"; then
      echo "  run $r: $(grep -h "gradient all-reduce" "$tag.r$r/stderr")"
      $py "$here/trace_overlap.py" "$tag.r$r/trace" --skip 0 | sed 's/^/    all steps: /'
    fi
  done
done
