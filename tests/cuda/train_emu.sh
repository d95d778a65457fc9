#!/bin/bash
# train_emu.sh GEN_CUDA SHARDC SRCDIR: the CUDA program of tinygpt, built
# against the CPU emulator, trained by the runtime's driver exactly as the
# GPU binary would be, against the host binary:
#  - fp32 losses equal the host's to 1e-5 relative (with dropout: same masks);
#  - a checkpoint the CUDA binary saves continues on the host binary;
#  - bf16 losses within 2e-2;
#  - tensor parallelism (tp=2) over the MPI path of the comm layer;
#  - without a GPU (EMU_DEVICES=0) the binary says so in one line, exit 1.
set -u
gen=$(realpath "$1"); shardc=$(realpath "$2"); src=$(realpath "$3")
py=/usr/bin/python3
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
# same losses, line by line, to a relative tolerance
close() {
  $py - "$1" "$2" "$3" <<'PY'
import sys
a = [float(x) for x in open(sys.argv[1]).read().split()]
b = [float(x) for x in open(sys.argv[2]).read().split()]
tol = float(sys.argv[3])
bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if abs(x - y) > tol * abs(x)]
if len(a) != len(b) or not a or bad:
    print("   host", a, "\n   cuda", b, "\n   mismatches", bad[:3])
    sys.exit(1)
PY
}
for i in $(seq 40); do cat "$src"/stdlib/*.model "$src"/examples/*.model; done | head -c 300000 > text.txt
m="$src/examples/tinygpt.model"
opts="--data text.txt --batch 4 --seq 32 --lr 1e-3 --warmup 2 --quiet"

check "emulated CUDA build of tinygpt (fp32)" "$gen" "$m" --cuda tg.cu --build tg_cuda --emulate
check "emulated CUDA build of tinygpt (bf16)" "$gen" "$m" --bf16 --cuda tgb.cu --build tgb_cuda --emulate
check "host build of tinygpt" "$shardc" build "$m" -o tg_host

./tg_host $opts --steps 6 --dropout 0.1 --log host.jsonl
./tg_cuda $opts --steps 6 --dropout 0.1 --log cuda.jsonl --save ck --save-every 3
losses host.jsonl > h.txt; losses cuda.jsonl > c.txt
check "fp32: 6 steps (dropout 0.1) match the host binary to 1e-5" close h.txt c.txt 1e-5
./tg_host $opts --steps 6 --dropout 0.1 --load ck/step-00000003 --log resumed.jsonl
losses resumed.jsonl > r.txt; tail -3 c.txt > c3.txt
check "a checkpoint saved by the CUDA binary continues on the host binary" close c3.txt r.txt 1e-5

./tgb_cuda $opts --steps 6 --dropout 0.1 --log bf16.jsonl
losses bf16.jsonl > b.txt
check "bf16: 6 steps within 2e-2 of the host binary" close h.txt b.txt 2e-2

if command -v mpirun >/dev/null; then
  "$gen" "$m" --tp 2 --cuda tg2.cu --build tg2_cuda --emulate && "$shardc" build "$m" --tp 2 -o tg2_host
  mpirun --oversubscribe -np 2 ./tg2_host $opts --tp 2 --steps 4 --log h2.jsonl
  mpirun --oversubscribe -np 2 ./tg2_cuda $opts --tp 2 --steps 4 --log c2.jsonl
  losses h2.jsonl > h2.txt; losses c2.jsonl > c2.txt
  check "tp=2 over MPI: 4 steps match the host binary's tp=2 to 1e-5" close h2.txt c2.txt 1e-5
fi

EMU_DEVICES=0 ./tg_cuda $opts --steps 1 2> nogpu.txt; rc=$?
want="no CUDA device: this program was built for NVIDIA GPUs (--backend cuda); rebuild with --backend host to run on the CPU"
check "no GPU: exit 1 (got $rc)" [ $rc -eq 1 ]
check "no GPU: one line saying so ($(head -c 200 nogpu.txt))" bash -c "[ \$(wc -l < nogpu.txt) -eq 1 ] && grep -qF '$want' nogpu.txt"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
