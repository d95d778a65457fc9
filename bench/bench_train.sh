#!/usr/bin/env bash
# Training speed on this machine's CPU: shardc's host backend against
# PyTorch running the same model (bench/torch_train.py) with the same thread
# count. Usage: bench/bench_train.sh [BUILD_DIR]; prints one line per model.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
threads=${THREADS:-$(nproc)}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
py=/usr/bin/python3
median_tok_s() { $py -c "
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l][2:]
print(round(statistics.median(x['tokens_per_s'] for x in r)))" "$1"; }
bench() { # name config-json batch seq steps
  local name=$1 cfg=$2 B=$3 T=$4 N=$5
  echo "$cfg" > "$name.json"
  "$build/shardc" build "$src/examples/gpt2.model" --config "$name.json" -o "$name"
  $py "$src/tests/reference/gpt2_ref.py" tokens --out "$name.tok" --n $((B * T * (N + 1) + 1)) \
      --vocab "$($py -c "import json; print(json.load(open('$name.json'))['vocab_size'])")" --seed 1
  OMP_NUM_THREADS=$threads "./$name" --data "$name.tok" --batch "$B" --seq "$T" --steps "$N" --lr 1e-4 \
      --grad-clip 1.0 --threads "$threads" --log "$name.jsonl" --quiet
  ours=$(median_tok_s "$name.jsonl")
  theirs=$($py "$here/torch_train.py" --config "$name.json" --batch "$B" --seq "$T" --steps "$N" --threads "$threads" \
           | $py -c "import json, sys; print(round(json.load(sys.stdin)['tokens_per_s']))")
  echo "$name: B=$B T=$T threads=$threads  shardc $ours tok/s  PyTorch $theirs tok/s  ratio $($py -c "print(f'{$ours/$theirs:.2f}')")"
}
bench tinygpt '{"vocab_size": 256, "n_positions": 128, "n_embd": 128, "n_layer": 4, "n_head": 4}' 16 128 12
bench gpt12x768 '{"vocab_size": 50257, "n_positions": 256, "n_embd": 768, "n_layer": 12, "n_head": 12}' 4 256 6
