#!/usr/bin/env bash
# Tensor parallelism on this machine: the 12-layer n_embd 768 GPT
# (examples/gpt2.model, n_positions 256, vocab 50304) built with --tp 1 and
# --tp 2, step time at tp=1 (1 rank, 2 OpenMP threads) and tp=2 (2 ranks x 1
# thread), and the communication per step that the runtime counts
# (--comm-stats, 1 step) next to `shardc plan`'s figure.
# Usage: bench/tp_bench.sh [BUILD_DIR]
# Environment: ROUNDS (default 3) runs of each, interleaved; STEPS (default
# 5; the first step is warm-up and not counted); WORK=DIR keeps everything.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${ROUNDS:-3} steps=${STEPS:-5}
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; w=$(cd "$WORK" && pwd)
else w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; fi
cd "$w"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=/usr/bin/python3
S=(--set n_layer=12 --set n_positions=256 --set vocab_size=50304)
model="$src/examples/gpt2.model"
for tp in 1 2; do
  echo "\$ shardc build examples/gpt2.model ${S[*]} --tp $tp -o g12tp$tp"
  "$build/shardc" build "$model" "${S[@]}" --tp $tp -o g12tp$tp
done
echo "\$ shardc plan examples/gpt2.model ${S[*]} --tp 2 --batch 4 --seq 256"
"$build/shardc" plan "$model" "${S[@]}" --tp 2 --batch 4 --seq 256 > plan_tp2.txt
"$build/shardc" plan "$model" "${S[@]}" --tp 2 --batch 4 --seq 256 --json > plan_tp2.json
sed -n '/^communication per step/,/^$/p' plan_tp2.txt
[ -f tok.bin ] || $py "$src/tests/reference/gpt2_ref.py" tokens --out tok.bin --n $((4 * 256 * (steps + 2) + 1)) \
    --vocab 50304 --seed 1
common=(--data tok.bin --batch 4 --seq 256 --lr 1e-4)
echo "\$ OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 ./g12tp2 --tp 2 --threads 1 ${common[*]} --steps 1 --comm-stats comm_tp2.txt"
OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 ./g12tp2 --tp 2 --threads 1 "${common[@]}" --steps 1 \
    --comm-stats comm_tp2.txt 2> comm_tp2.stderr
cat comm_tp2.txt
for ((r = 0; r < rounds; r++)); do
  echo "round $r: $(uptime)"
  OMP_NUM_THREADS=2 ./g12tp1 --threads 2 "${common[@]}" --steps "$steps" --log tp1.r$r.jsonl 2> tp1.r$r.stderr
  OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 ./g12tp2 --tp 2 --threads 1 "${common[@]}" \
      --steps "$steps" --log tp2.r$r.jsonl 2> tp2.r$r.stderr
done
echo "\$ OMP_NUM_THREADS=2 ./g12tp1 --threads 2 ${common[*]} --steps $steps --log tp1.rR.jsonl"
echo "\$ OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 ./g12tp2 --tp 2 --threads 1 ${common[*]} --steps $steps --log tp2.rR.jsonl"
grep -h "^rank" tp1.r0.stderr tp2.r0.stderr || true
for tp in 1 2; do
  $py - "$tp" "$rounds" <<'PY'
import json, statistics, sys
tp, rounds = sys.argv[1], int(sys.argv[2])
runs = [[json.loads(l)["ms"] for l in open(f"tp{tp}.r{r}.jsonl") if '"loss"' in l][1:] for r in range(rounds)]
ms = [x for r in runs for x in r]
print(f"tp={tp}: step ms (steps 1.. of {rounds} runs): median {statistics.median(ms):.0f}, min {min(ms):.0f}, "
      f"max {max(ms):.0f}; all: " + " | ".join(" ".join(f"{x:.0f}" for x in r) for r in runs))
PY
done
