#!/usr/bin/env bash
# The main job: set up, build shardc, check the examples and print their
# parameter tables.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
for m in examples/tinygpt.model examples/gpt2.model examples/mlp.model; do
  echo "== shardc check $m --params"
  ./build/shardc check "$m" --params
  echo
done
echo "== GPT-2 at tensor=2: the collectives the compiler derives"
./build/shardc check examples/gpt2.model --tp 2 --set vocab_size=50304 --dump=shard | sed -n '/^collectives/,$p' | head -5
echo "== a layout that cannot work is caught at compile time"
./build/shardc check examples/gpt2.model --tp 8 --set vocab_size=50304 || true
