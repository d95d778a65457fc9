#!/bin/bash
# nvcc_examples.sh DIR: every example's CUDA binary (built by nvcc, see
# tests/cuda/cuda.cmake; and tinygpt's at tp=2, with and without sequence parallelism) exists; on a machine without a GPU each one says so
# in one line and exits 1; with a GPU, each answers --help.
set -u
dir=$1
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
want="no CUDA device: this program was built for NVIDIA GPUs (--backend cuda); rebuild with --backend host to run on the CPU"
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
for m in tinygpt mlp gpt2 llama llama3 qwen2 tinygpt_tp2sp tinygpt_tp2; do
  for p in bf16 fp32; do
    [ "${m#tinygpt_tp2}" != "$m" ] && [ $p = fp32 ] && continue # tp=2 (with and without sequence parallelism): bf16
    b="$dir/${m}_$p"
    if [ ! -x "$b" ]; then bad "$m ($p): $b was not built"; continue; fi
    ok "$m ($p): built and linked by nvcc"
    if [ $gpu -eq 1 ]; then
      if "$b" --help >/dev/null 2>&1; then ok "$m ($p): --help"; else bad "$m ($p): --help"; fi
      continue
    fi
    "$b" --steps 1 > out.txt 2> err.txt; rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < err.txt)" -eq 1 ] && grep -qF "$want" err.txt; then
      ok "$m ($p): without a GPU, one line and exit 1"
    else
      bad "$m ($p): without a GPU: exit $rc, stderr: $(head -c 300 err.txt)"
    fi
  done
done
rm -f out.txt err.txt
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
