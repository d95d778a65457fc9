#!/usr/bin/env bash
# Builds bench/kernel_bench.c against a build tree's libshardrt.a and runs it:
# the host kernels of one GPT-2 training step, timed one by one.
# Usage: bench/kernel_bench.sh [BUILD_DIR] [B T C NH V L reps P]
#   (defaults: build, then 4 256 768 12 50257 12 5 256: the 12-layer n_embd
#   768 GPT of bench_train.sh; P = n_positions). THREADS (default nproc) sets OMP_NUM_THREADS.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd); shift || true
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
${CC:-cc} -std=c11 -O2 -fopenmp -I"$src/runtime/include" "$here/kernel_bench.c" "$build/libshardrt.a" \
    -lopenblas -lm -o "$w/kernel_bench"
OMP_NUM_THREADS=${THREADS:-$(nproc)} "$w/kernel_bench" "$@"
