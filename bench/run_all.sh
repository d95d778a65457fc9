#!/usr/bin/env bash
# Runs the benchmarks of RESULTS.md's training, data-, tensor- and pipeline-
# parallel sections one after the other, each output in OUT/NAME.log with the
# machine, the date and the load before and after.
# Usage: bench/run_all.sh BUILD_DIR OUT_DIR   (a Release build: cmake -S . -B
# build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd); mkdir -p "$2"; out=$(cd "$2" && pwd)
{ date -u; nproc; lscpu | head -20; free -g | head -2; uname -r; mpirun --version | head -1; cc --version | head -1
  env | grep '^OPENBLAS' || true; } > "$out/machine.txt" 2>&1
step() { # name command...
  local name=$1; shift
  { echo "# $(date -u)  load: $(uptime)"; echo "# $*"; "$@"; echo "# rc=$?  $(date -u)  load: $(uptime)"; } \
      > "$out/$name.log" 2>&1
}
step train env WORK="$out/train" ROUNDS=3 STEPS_BIG=6 bash "$here/bench_train.sh" "$build"
step train_avx512 env -u OPENBLAS_CORETYPE WORK="$out/train_avx512" ROUNDS=2 STEPS_BIG=6 bash "$here/bench_train.sh" "$build"
step train_torch_default env TORCH_ENV= WORK="$out/train_torch_default" ROUNDS=2 MODELS=tinygpt bash "$here/bench_train.sh" "$build"
step kernels bash "$here/kernel_bench.sh" "$build" 4 256 768 12 50257 12 9
step kernels_avx512 env -u OPENBLAS_CORETYPE bash "$here/kernel_bench.sh" "$build" 4 256 768 12 50257 12 9
step kernels_tiny bash "$here/kernel_bench.sh" "$build" 16 128 128 4 256 4 15 128
step dp env WORK="$out/dp" ROUNDS=5 bash "$here/dp_overlap.sh" "$build"
step tp env WORK="$out/tp" ROUNDS=3 bash "$here/tp_bench.sh" "$build"
step pp env WORK="$out/pp" ROUNDS=3 bash "$here/pp_schedules.sh" "$build"
