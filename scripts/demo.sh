#!/usr/bin/env bash
# The main job: set up the machine, build shardc, check and build
# examples/tinygpt.model, train it on English text on this machine's cores,
# and show the validation loss falling and a generated sample.
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

echo "== shardc check examples/tinygpt.model --params"
./build/shardc check examples/tinygpt.model --params | tail -4
echo "== shardc build examples/tinygpt.model -o $out/tinygpt"
./build/shardc build examples/tinygpt.model -o "$out/tinygpt"

echo "== training $steps steps on $(nproc) cores"
rm -f "$out/log.jsonl"
"$out/tinygpt" --data "$out/train.txt" --val-data "$out/val.txt" --steps "$steps" \
  --eval-every 100 --log "$out/log.jsonl" --save "$out/ckpt" --threads "$(nproc)" \
  --sample 400 --prompt "The " --temperature 0.8 --top-k 40 > "$out/sample.txt"

first=$(grep -m1 -o '"val_loss":[0-9.e+-]*' "$out/log.jsonl" | cut -d: -f2)
last=$(grep -o '"val_loss":[0-9.e+-]*' "$out/log.jsonl" | tail -1 | cut -d: -f2)
python3 - "$first" "$last" <<'PY'
import math, sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print(f"== validation loss: {a:.3f} at the first evaluation -> {b:.3f} at the end "
      f"(fell {a - b:.2f} nats; a uniform guess over 256 bytes is ln 256 = {math.log(256):.2f})")
PY
echo "== a sample from the trained model (prompt \"The \"):"
cat "$out/sample.txt"
echo
echo "== checkpoint: $out/ckpt/$(cat "$out/ckpt/latest")"
