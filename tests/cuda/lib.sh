# lib.sh: what the emulated-CUDA training scripts (train_emu.sh, comm_mpi.sh)
# share. Sourced first; it reads $1 (gen_cuda), $2 (shardc) and $3 (the source
# tree), makes and enters a scratch directory and writes text.txt there.
set -u
gen=$(realpath "$1"); shardc=$(realpath "$2"); src=$(realpath "$3")
py=/usr/bin/python3
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
source "$src/tests/check.sh"
# builds CMD...: each CMD (a command line) run by bash, as many at once as there are cores (the
# emulated builds are g++ compiles of several seconds each); fails, showing each failed one and
# the end of its output (in buildlogs/), when any fails
builds() {
  local i j n=$(getconf _NPROCESSORS_ONLN) rc=0 q=() pid=() cmds=("$@") # (nproc obeys OMP_NUM_THREADS=1)
  mkdir -p buildlogs
  for i in "${!cmds[@]}" end; do
    if [ "$i" != end ]; then
      bash -c "${cmds[$i]}" > "buildlogs/$i" 2>&1 &
      pid[$i]=$! q+=("$i")
    fi
    # at the end every build is waited for; before it, the oldest while all cores are busy
    while [ ${#q[@]} -gt 0 ] && { [ "$i" = end ] || [ ${#q[@]} -ge "$n" ]; }; do
      j=${q[0]} q=("${q[@]:1}")
      wait "${pid[$j]}" || { rc=1; echo "   failed: ${cmds[$j]}"; tail -n 5 "buildlogs/$j"; }
    done
  done
  return $rc
}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
# close A B TOL: the same losses (one per line), line by line, to TOL relative
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
