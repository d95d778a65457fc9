# lib.sh: what the multi-rank e2e scripts (dp.sh, tp.sh, pp.sh) share.
# Sourced first; it reads $1 (shardc) and $2 (the source tree), makes and enters a
# scratch directory, and writes a small training text there (text.txt).
set -u
shardc=$(realpath "$1"); src=$(realpath "$2")
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi="mpirun --oversubscribe --bind-to none"
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
# same losses in two --log files, within a relative tolerance
same() { $py - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    print(f"  {len(a)} vs {len(b)} steps"); sys.exit(1)
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
print(f"  {len(a)} steps, worst relative loss difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
cat "$src"/stdlib/*.model "$src"/examples/*.model > text.txt
for i in 1 2 3 4 5 6; do cat text.txt text.txt > t2 && mv t2 text.txt; done
