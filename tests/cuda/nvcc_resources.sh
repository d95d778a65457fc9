#!/bin/bash
# nvcc_resources.sh NVCC ARCHS SRCDIR EXAMPLES_DIR: what a GPU refuses at
# launch ("too many resources requested for launch") checked at build time.
# GPT-2's generated CUDA sources (bf16 and fp32: every kernel a training
# step instantiates) are compiled for each architecture in ARCHS (comma
# separated) with nvcc --resource-usage, and for every kernel:
#  - registers x threads per block <= 65536 (the register file of one block),
#    registers rounded up to the allocation unit of 8; threads = 128 for the
#    tensor-core attention kernels (srk_tc::, srk_mma::, __launch_bounds__(128)), 256
#    for the layernorm backward (__launch_bounds__(32 * NORM_WARPS), all three forms) and the
#    norms' 16-byte forward, else
#    1024, the largest block a launch may use, so the rule holds for any
#    launch the runtime makes;
#  - static shared memory <= 48 KiB (more needs dynamic shared memory and
#    cudaFuncSetAttribute, which the emulator checks).
# Spills are printed (speed, not correctness). nvcc must print no warnings.
set -u
nvcc=$1; archs=$2; src=$3; ex=$4
source "$src/tests/check.sh"
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
for p in bf16 fp32; do
  f="$ex/gpt2_$p.cu"
  [ -f "$f" ] || { bad "missing $f (cuda_examples not built)"; continue; }
  for a in ${archs//,/ }; do
    if ! "$nvcc" -std=c++20 -O3 -gencode "arch=compute_$a,code=sm_$a" --resource-usage \
        -I"$src/runtime/include" -I"$src/runtime/cuda" -c "$f" -o "$w/o.o" > "$w/res.txt" 2>&1; then
      bad "nvcc --resource-usage gpt2_$p.cu sm_$a"; tail -5 "$w/res.txt"; continue
    fi
    out=$(python3 - "$w/res.txt" <<'PY'
import re, subprocess, sys
rows, name = {}, None
for line in open(sys.argv[1]):
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        name = m.group(1)
        continue
    m = re.search(r"(\d+) bytes spill stores", line)
    if m and name:
        rows.setdefault(name, {})["spill"] = int(m.group(1))
    m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?$", line.strip())
    if m and name:
        r = rows.setdefault(name, {})
        r["reg"] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", line)
        r["smem"] = int(s.group(1)) if s else 0
        name = None
names = list(rows)
dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
# the kernels whose __launch_bounds__ fix their block size
bounded = {"void srk_tc::": 128, "void srk_mma::": 128, "void layernorm_bwd_dx_kernel<": 256,
           "void layernorm_bwd_dx8_kernel<": 256, "void layernorm_bwd_dx8_sums_kernel<": 256,
           "void norm_fwd8_kernel<": 256}
def block(d):
    return next((t for k, t in bounded.items() if d.startswith(k)), 1024)
bad, most = [], 0
for n, d in zip(names, dem):
    r = rows[n]
    threads = block(d)
    regs = (r.get("reg", 0) + 7) // 8 * 8
    most = max(most, regs * threads)
    if regs * threads > 65536 or r.get("smem", 0) > 48 * 1024:
        bad.append("%s: %d registers x %d threads, %d bytes static shared" % (d[:90], r.get("reg", 0), threads, r.get("smem", 0)))
spills = sum(1 for r in rows.values() if r.get("spill", 0) > 0)
print("%d kernels, %d spill; largest block register file %d of 65536; %s" % (len(rows), spills, most,
      "; ".join(bad) if bad else "all fit"))
sys.exit(1 if bad or not rows else 0)
PY
)
    rc=$?
    if [ $rc -eq 0 ]; then ok "gpt2_$p sm_$a: $out"; else bad "gpt2_$p sm_$a: $out"; fi
    # a user's `shardc build --backend cuda` shows what nvcc prints: no warnings
    check "gpt2_$p sm_$a: nvcc prints no warnings ($(grep -m1 -i 'warning' "$w/res.txt" | head -c 120))" \
      bash -c "! grep -qi warning '$w/res.txt'"
  done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
