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
source "$src/tests/check.sh"
# same losses in two --log files, within a relative tolerance (same A B TOL
# [KEY]: KEY's values, val_loss for the evaluations; loss by default)
same() { $py - "$1" "$2" "$3" "${4:-loss}" <<'PY'
import json, sys
key = sys.argv[4]
a = [json.loads(l) for l in open(sys.argv[1]) if f'"{key}"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if f'"{key}"' in l]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    print(f"  {len(a)} vs {len(b)} steps"); sys.exit(1)
worst = max(abs(x[key] - y[key]) / abs(x[key]) for x, y in zip(a, b))
print(f"  {len(a)} steps, worst relative loss difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
# logged N FILE: wait (up to 60 s) until a --log FILE holds N steps
logged() { for _ in $(seq 1 600); do [ "$(grep -c '"loss"' "$2" 2>/dev/null)" -ge "$1" ] 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# resumed_exact A B FULL: the losses of A then B (a run stopped, then resumed) are FULL's, bit for bit
resumed_exact() { cat "$1" "$2" | grep -o '"loss":[^,]*' > resumed.txt; grep -o '"loss":[^,]*' "$3" > full.txt
  [ "$(wc -l < resumed.txt)" -eq "$(wc -l < full.txt)" ] && [ -s full.txt ] && cmp -s resumed.txt full.txt; }
# same_or_roundoff REF B REF2 TOL: B's losses are REF's, each step within TOL
# relative or within 4 times |REF - REF2| at that step, where REF2 is the
# single rank run with another summation order (its round-off spread)
same_or_roundoff() { $py - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
r, b, r2 = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:4])
tol = float(sys.argv[4])
if not r or len(r) != len(b) or len(r) != len(r2):
    print(f"  {len(r)} vs {len(b)} vs {len(r2)} steps"); sys.exit(1)
rows = [(abs(x - y) / abs(x), max(tol, 4 * abs(x - z) / abs(x)), abs(x - z) / abs(x)) for x, y, z in zip(r, b, r2)]
k = max(range(len(rows)), key=lambda i: rows[i][0] / rows[i][1])
print(f"  {len(r)} steps, worst relative loss difference {rows[k][0]:.2e} at step {k} (tolerance there "
      f"{rows[k][1]:.2e}; the single rank's own spread {rows[k][2]:.2e})")
sys.exit(0 if all(d <= t for d, t, _ in rows) else 1)
PY
}
# starts_in_backward DIR NAME RANKS: in each rank's --trace (DIR) the first
# step's first NAME span (all-reduce, reduce-scatter) starts before the end
# of its last backward pass of that step
starts_in_backward() { $py - "$1" "$2" "$3" <<'PY'
import json, sys
d, name, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
for r in range(ranks):
    ev = [e for e in json.load(open('%s/trace-rank%d.json' % (d, r)))['traceEvents'] if e['ph'] == 'X']
    opt = min(e['ts'] for e in ev if e['name'] == 'optimizer')
    step = [e for e in ev if e['ts'] < opt]
    first = min(e['ts'] for e in step if e['name'] == name)
    bwd = max(e['ts'] + e['dur'] for e in step if e['name'].startswith('backward'))
    assert first < bwd, (r, first, bwd)
PY
}

# gathered_in_forward DIR RANKS: in each rank's --trace (DIR, 2 steps or
# more) ZeRO-1's parameter all-gathers of the first step start in its
# optimizer, one per bucket, and each is waited for inside a forward of the
# next step (not all before it)
gathered_in_forward() { $py - "$1" "$2" <<'PY'
import json, sys
d, ranks = sys.argv[1], int(sys.argv[2])
for r in range(ranks):
    ev = [e for e in json.load(open('%s/trace-rank%d.json' % (d, r)))['traceEvents'] if e['ph'] == 'X']
    opt = sorted((e for e in ev if e['name'] == 'optimizer'), key=lambda e: e['ts'])
    lo, hi = opt[0]['ts'], opt[1]['ts']
    bucket = lambda e: e.get('args', {}).get('info', '')
    ags = {bucket(e) for e in ev if e['name'] == 'all-gather' and lo <= e['ts'] < hi}
    waits = [e for e in ev if e['name'] == 'wait' and bucket(e).startswith('param') and lo <= e['ts'] < hi]
    fwd = [e for e in ev if e['name'] == 'forward' and lo <= e['ts'] < hi]
    assert len(ags) >= 2 and {bucket(e) for e in waits} == ags, (r, sorted(ags), [bucket(e) for e in waits])
    for w in waits:
        assert any(f['ts'] <= w['ts'] and w['ts'] + w['dur'] <= f['ts'] + f['dur'] for f in fwd), (r, w)
PY
}

# same_grads A B: two --dump-grads files hold the same gradients, each within
# 1e-5 of its largest magnitude
same_grads() { $py - "$1" "$2" "$src/tests/reference" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[3]); import st
a, b = st.load(sys.argv[1]), st.load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
worst = {k: float(np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-30)) for k in a}
bad = [f"{k} {v:.1e}" for k, v in worst.items() if v > 1e-5]
print(f"  {len(a)} gradients, worst relative difference {max(worst.values()):.2e}")
assert not bad, bad
PY
}
cat "$src"/stdlib/*.model "$src"/examples/*.model > text.txt
for i in 1 2 3 4 5 6; do cat text.txt text.txt > t2 && mv t2 text.txt; done
# records FILE: JSON Lines prompt-completion records cut from text.txt (the
# loss on the completions only), prompts and completions of 1 to 39 bytes
records() { $py "$src/tests/records.py" text.txt "$1" 1500 5 100 39; }
