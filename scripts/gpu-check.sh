#!/bin/bash
# gpu-check.sh [LOG]: the CUDA backend on a real GPU, in one go (about
# 5 minutes on one H200; everything printed also goes to LOG, default
# gpu-check.log in the current directory):
#   0. where mpicc, bison, flex or OpenBLAS are missing (a CUDA image with no
#      package registry), unpacks the .deb files of .gpu-deps (made by
#      scripts/gpu-deps.sh where apt works, and carried) into a private
#      prefix, /tmp/shardc-deps, and points PATH, the compilers and CMake at it;
#   1. builds everything (nvcc for the GPU's architecture, SHARDC_CUDA_ARCHS);
#   2. runs every CUDA kernel against the host kernels on the device;
#   3. trains tinygpt 20 steps with the fp32 CUDA binary and the host binary
#      from the same data and seed: losses within 1e-4 relative; and the bf16
#      CUDA binary: within 2e-2;
#   4. two ranks on the one GPU (data parallelism): over NCCL, or, where NCCL
#      refuses two ranks on one device (its error must say to use --comm mpi),
#      over the MPI path (--comm mpi: staged through page-locked host memory);
#   5. two pipeline stages on the GPU (--pp 2, block recomputation), over
#      the comm path step 4 found: losses as one rank's;
#   6. GPT-2 124M at seq 1024 with the largest batch that fits: 30 steps,
#      tokens/s and MFU (FLOPs per token 6N + 6*L*C*T as llm.c counts them,
#      H200 dense bf16 peak 989 TFLOP/s); target >= 45%.
# Exit status: 0 when every check passed.
set -u -o pipefail
log=$(realpath -m "${1:-gpu-check.log}")
exec > >(tee "$log") 2>&1
src=$(cd "$(dirname "$0")/.." && pwd)
bld=${SHARDC_GPU_BUILD:-$src/build-gpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=python3
t0=$(date +%s)
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
stage() { echo; echo "== [$(( $(date +%s) - t0 ))s] $*"; }
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
close() { # close A B TOL: the same losses, line by line, to TOL relative
  $py - "$1" "$2" "$3" <<'PY'
import sys
a = [float(x) for x in open(sys.argv[1]).read().split()]
b = [float(x) for x in open(sys.argv[2]).read().split()]
tol = float(sys.argv[3])
worst = max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=float("inf"))
print("   steps %d/%d, worst relative difference %.3g (tolerance %g)" % (len(a), len(b), worst, tol))
print("   host %s\n   cuda %s" % (" ".join("%.5f" % x for x in a[:5]), " ".join("%.5f" % x for x in b[:5])))
sys.exit(0 if a and len(a) == len(b) and worst <= tol else 1)
PY
}

stage "machine"
nvidia-smi -L || { bad "no GPU visible (nvidia-smi -L)"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
nvcc --version | tail -1
echo "GPU architecture sm_$cap; $(nproc) CPU cores"

stage "dependencies"
cmake_extra=()
missing=""
command -v mpicc > /dev/null || missing+=" mpi"
command -v bison > /dev/null || missing+=" bison"
command -v flex > /dev/null || missing+=" flex"
ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so' || missing+=" openblas"
if [ -z "$missing" ] && [ -z "${SHARDC_GPU_DEPS_FORCE:-}" ]; then
  echo "   mpicc, bison, flex and OpenBLAS are installed"
else
  deps=${SHARDC_GPU_DEPS:-$src/.gpu-deps}
  source "$src/scripts/gpu-deps-env.sh"
  if gpu_deps_env "$deps" /tmp/shardc-deps; then
    cmake_extra=("${GPU_DEPS_CMAKE[@]}")
    ok "missing:$missing; unpacked $(ls "$deps"/*.deb | wc -l) packages of $deps into /tmp/shardc-deps"
  else
    bad "missing:$missing, and $deps could not provide them (see above)"
    exit 1
  fi
fi

# NCCL: the toolkit's, or the one PyTorch's image has as a Python package
# (nvidia-nccl-cu*: include/nccl.h and lib/libnccl.so.2, no libnccl.so)
nvinc=$(dirname "$(command -v nvcc)")/../include
if [ ! -f "$nvinc/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  nd=$($py -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null ||
       $py -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nd" ] && [ -f "$nd/include/nccl.h" ] && ls "$nd"/lib/libnccl.so* > /dev/null 2>&1; then
    ncl=$(ls "$nd"/lib/libnccl.so* | head -1)
    cmake_extra+=(-DNCCL_INCLUDE_DIR="$nd/include" -DNCCL_LIBRARY="$ncl")
    export LD_LIBRARY_PATH=$nd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "   NCCL from the Python package: $ncl"
  else
    echo "   no nccl.h next to nvcc nor in a Python package: the CUDA binaries will only have --comm mpi"
  fi
fi

stage "build (cmake, nvcc for sm_$cap)"
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DSHARDC_CUDA_ARCHS="$cap" "${cmake_extra[@]}" > "$bld.cmake.txt" 2>&1 ||
  { cat "$bld.cmake.txt"; bad "cmake configure"; exit 1; }
grep -E "shardc cuda|shardrt comm" "$bld.cmake.txt"
if grep -q "NCCL backend NOT compiled in" "$bld.cmake.txt"; then
  export SHARDC_COMM=mpi # the CUDA programs' default, nccl, would be a usage error
  bad "NCCL not found: every run below uses --comm mpi (SHARDC_COMM=mpi); NCCL itself is not checked"
fi
if cmake --build "$bld" -j"$(nproc)" > "$bld.build.txt" 2>&1; then ok "build"; else
  tail -40 "$bld.build.txt"; bad "build"; exit 1; fi
ex=$bld/cuda_examples
for b in "$bld/test_kernels_cuda" "$ex/tinygpt_fp32" "$ex/tinygpt_bf16" "$ex/gpt2_bf16"; do
  [ -x "$b" ] || { bad "missing $b (was nvcc found?)"; exit 1; }
done

stage "kernels on the device"
if timeout 300 "$bld/test_kernels_cuda" > kernels.txt 2>&1; then ok "$(tail -1 kernels.txt)"; else
  grep -E "FAIL|error" kernels.txt | head -20; bad "kernel tests: $(tail -1 kernels.txt)"; fi

stage "tinygpt: 20 steps, CUDA vs host"
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
for i in $(seq 60); do cat "$src"/stdlib/*.model "$src"/examples/*.model "$src"/docs/*.md 2>/dev/null; done |
  head -c 2000000 > "$w/text.txt"
"$bld/shardc" build "$src/examples/tinygpt.model" -o "$w/tg_host" || bad "host build of tinygpt"
opts="--data $w/text.txt --steps 20 --batch 16 --seq 128 --eval-every 0 --quiet"
timeout 300 "$w/tg_host" $opts --log "$w/host.jsonl" --threads "$(nproc)" || bad "host tinygpt run"
timeout 120 "$ex/tinygpt_fp32" $opts --log "$w/fp32.jsonl" || bad "fp32 CUDA tinygpt run"
timeout 120 "$ex/tinygpt_bf16" $opts --log "$w/bf16.jsonl" || bad "bf16 CUDA tinygpt run"
losses "$w/host.jsonl" > "$w/h.txt"; losses "$w/fp32.jsonl" > "$w/f.txt"; losses "$w/bf16.jsonl" > "$w/b.txt"
if close "$w/h.txt" "$w/f.txt" 1e-4; then ok "fp32: 20 losses within 1e-4 of the host's"; else bad "fp32 losses vs host"; fi
if close "$w/h.txt" "$w/b.txt" 2e-2; then ok "bf16: 20 losses within 2e-2 of the host's"; else bad "bf16 losses vs host"; fi

stage "two ranks on one GPU (--dp 2)"
dpopts="--data $w/text.txt --steps 6 --batch 16 --seq 128 --eval-every 0 --quiet"
"$w/tg_host" $dpopts --log "$w/h1.jsonl" --threads "$(nproc)"
if timeout 120 mpirun --oversubscribe -np 2 "$ex/tinygpt_fp32" $dpopts --dp 2 --log "$w/dp.jsonl" > "$w/dp.txt" 2>&1; then
  how="NCCL"
else
  echo "   NCCL: $(grep -m1 -iE "error|duplicate" "$w/dp.txt")"
  if grep -q -- "--comm mpi" "$w/dp.txt"; then ok "NCCL's refusal says to use --comm mpi"; else
    bad "NCCL failed without saying to use --comm mpi"; fi
  how="MPI path (--comm mpi)"
  rm -f "$w/dp.jsonl"
  timeout 120 mpirun --oversubscribe -np 2 "$ex/tinygpt_fp32" $dpopts --dp 2 --comm mpi \
    --log "$w/dp.jsonl" > "$w/dp.txt" 2>&1 || { echo "   MPI path: $(grep -m1 -i error "$w/dp.txt")"; how=""; }
fi
if [ -n "$how" ]; then
  losses "$w/h1.jsonl" > "$w/h1.txt"; losses "$w/dp.jsonl" > "$w/dp2.txt"
  if close "$w/h1.txt" "$w/dp2.txt" 1e-4; then ok "dp=2 on one GPU over $how matches one rank"; else bad "dp=2 over $how"; fi
else
  bad "dp=2 on one GPU: neither NCCL nor the MPI path ran (see above)"
fi

stage "pipeline on one GPU (--pp 2, 1F1B, block recomputation)"
# two stages with 4 microbatches: each rank's waiting microbatches keep
# their own slots while the recomputed blocks run in the shared scratch
losses "$w/h1.jsonl" > "$w/h1.txt"
cflag=""; [ "$how" = "MPI path (--comm mpi)" ] && cflag="--comm mpi"
if "$bld/shardc" build "$src/examples/tinygpt.model" --backend cuda --precision fp32 --cuda-arch "$cap" --pp 2 \
     --recompute block -o "$w/tg_pp2" > "$w/ppb.txt" 2>&1; then
  if timeout 120 mpirun --oversubscribe -np 2 "$w/tg_pp2" $dpopts --pp 2 --microbatches 4 $cflag \
       --log "$w/pp.jsonl" > "$w/pp.txt" 2>&1; then
    losses "$w/pp.jsonl" > "$w/pp2.txt"
    if close "$w/h1.txt" "$w/pp2.txt" 1e-4; then ok "pp=2 with recomputation on one GPU (${cflag:-NCCL}) matches one rank"
    else bad "pp=2 with recomputation: losses differ from one rank"; fi
  else
    bad "pp=2 run: $(grep -m1 -i error "$w/pp.txt")"
  fi
else
  bad "shardc build --backend cuda --pp 2: $(tail -1 "$w/ppb.txt")"
fi

stage "GPT-2 124M, seq 1024: the largest batch, 30 steps"
$py - "$w/tokens.bin" <<'PY'
import random, struct, sys, array
n = 8 << 20  # 8M random GPT-2 token ids: throughput does not care what they say
random.seed(1)
toks = array.array("H", (random.randrange(50257) for _ in range(n)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(toks.tobytes())
PY
bench="--data $w/tokens.bin --seq 1024 --eval-every 0 --lr 6e-4 --warmup 5 --quiet"
B=0
for b in 128 96 64 48 32 24 16 8 4; do
  if timeout 120 "$ex/gpt2_bf16" $bench --batch $b --steps 2 --log "$w/try.jsonl" > "$w/try.txt" 2>&1; then B=$b; break; fi
  echo "   batch $b: $(grep -m1 -i -E "error|memory" "$w/try.txt" | head -c 160)"
done
if [ $B -eq 0 ]; then bad "GPT-2 did not run at any batch size"; else
  echo "   largest batch that fits: $B x 1024 tokens"
  timeout 400 "$ex/gpt2_bf16" $bench --batch $B --steps 30 --log "$w/gpt2.jsonl" || bad "GPT-2 30 steps"
  $py - "$w/gpt2.jsonl" "$B" <<'PY' && ok "GPT-2 MFU >= 45%" || bad "GPT-2 MFU below the 45% target"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
B = int(sys.argv[2])
V, C, L, Tmax, T = 50257, 768, 12, 1024, 1024
N = V * C + Tmax * C + L * (12 * C * C + 13 * C) + 2 * C   # 124,439,808 with the tied head
flops_tok = 6 * N + 6 * L * C * T                            # llm.c's count
steady = rows[10:] if len(rows) > 12 else rows[1:]
tps = sum(r["tokens_per_s"] for r in steady) / max(1, len(steady))
mfu = tps * flops_tok / 989e12
print("   %d parameters; %.1f GFLOP/token; steps %d..%d: %.0f tokens/s, %.1f ms/step" % (
    N, flops_tok / 1e9, len(rows) - len(steady), len(rows) - 1, tps,
    sum(r["ms"] for r in steady) / max(1, len(steady))))
print("   loss %.4f -> %.4f" % (rows[0]["loss"], rows[-1]["loss"]))
print("   MFU %.1f%% of 989 TFLOP/s (target 45%%)" % (100 * mfu))
sys.exit(0 if mfu >= 0.45 else 1)
PY
fi

stage "done: $pass passed, $fail failed ($(( $(date +%s) - t0 ))s); log in $log"
[ $fail -eq 0 ]
