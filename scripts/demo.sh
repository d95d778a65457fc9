#!/usr/bin/env bash
# The main job: set up the machine, build shardc, plan and build
# examples/tinygpt.model for a layout that uses tensor and pipeline
# parallelism, train it under mpirun on English text, and show the plan, the
# validation loss falling, the measured pipeline bubble, a generated sample
# and the timeline picture.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
out=${SHARDC_DEMO_DIR:-out/demo}
steps=${SHARDC_DEMO_STEPS:-600}
mkdir -p "$out"

# data: the fortunes database (Debian's fortunes packages), bytes as tokens
if [ ! -s "$out/train.txt" ]; then
  find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat > "$out/all.txt"
  n=$(stat -c %s "$out/all.txt"); nval=$((n / 20))
  head -c $((n - nval)) "$out/all.txt" > "$out/train.txt"
  tail -c "$nval" "$out/all.txt" > "$out/val.txt"
fi
echo "== data: $(stat -c %s "$out/train.txt") bytes of training text, $(stat -c %s "$out/val.txt") of validation"

layout="--tp 2 --pp 2"
np=4
echo "== the layout: tensor=2 x pipeline=2 on $np ranks, 1F1B over 4 microbatches (shardc plan)"
./build/shardc plan examples/tinygpt.model $layout --microbatches 4 --gpu cpu | sed -n '1,70p'
echo "== shardc build examples/tinygpt.model $layout -o $out/tinygpt"
./build/shardc build examples/tinygpt.model $layout -o "$out/tinygpt"

echo "== training $steps steps under mpirun -np $np on $(nproc) cores (oversubscribed)"
rm -rf "$out/log.jsonl" "$out/trace"
mkdir -p "$out/trace"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none -np $np "$out/tinygpt" $layout --microbatches 4 --schedule 1f1b \
  --data "$out/train.txt" --val-data "$out/val.txt" --steps "$steps" --threads 1 \
  --eval-every 100 --log "$out/log.jsonl" --save "$out/ckpt" --trace "$out/trace" \
  --sample 400 --prompt "The " --temperature 0.8 --top-k 40 > "$out/sample.txt"

first=$(grep -m1 -o '"val_loss":[0-9.e+-]*' "$out/log.jsonl" | cut -d: -f2)
last=$(grep -o '"val_loss":[0-9.e+-]*' "$out/log.jsonl" | tail -1 | cut -d: -f2)
python3 - "$first" "$last" <<'PY'
import math, sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print(f"== validation loss: {a:.3f} before training -> {b:.3f} at the end "
      f"(fell {a - b:.2f} nats; a uniform guess over 256 bytes is ln 256 = {math.log(256):.2f})")
PY
echo "== a sample from the trained model (prompt \"The \"):"
cat "$out/sample.txt"
echo
./build/shardc timeline "$out/trace" -o "$out/timeline.svg"
echo "== pipeline timeline (open in a browser): $out/timeline.svg"
echo "== checkpoint: $out/ckpt/$(cat "$out/ckpt/latest")"
