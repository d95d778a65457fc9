#!/usr/bin/python3
"""Gradient all-reduce against backward, from the --trace files of a run
(runtime/trace.c: Chrome trace JSON, one file per rank; spans "forward",
"backward", "optimizer" on tid 0 (compute), "all-reduce" on tid 1
(communication, one span per gradient bucket: launch -> completion seen)).

usage: trace_overlap.py TRACE_DIR [--skip N]   (N first steps left out, default 2)

Per rank, over the steps kept:
  spans      all-reduce spans (buckets x steps)
  sum        sum of the spans' durations (buckets that are in flight
             together count twice)
  union      the time at least one all-reduce was in flight: what the run's
             closing line "gradient all-reduce: X ms in flight" reports
  hidden     the part of each span that lies inside a backward span (summed
             over spans), and as a share of sum
  hidden(u)  the part of the union inside backward, as a share of union (the
             closing line's "Y% of it hidden")
  exposed    per step, from the end of the backward to the start of the
             optimizer: the time the compute thread waits for the gradients
             (the all-reduce left on the critical path), in total and per step
"""
import json, os, sys


def load(path):
    d = json.load(open(path))
    return d["traceEvents"] if isinstance(d, dict) else d


def overlap(a0, a1, spans):
    return sum(max(0.0, min(a1, b1) - max(a0, b0)) for b0, b1 in spans)


def union(iv):
    tot, cur0, cur1 = 0.0, None, None
    for a, b in sorted(iv):
        if cur1 is None or a > cur1:
            if cur1 is not None:
                tot += cur1 - cur0
            cur0, cur1 = a, b
        else:
            cur1 = max(cur1, b)
    if cur1 is not None:
        tot += cur1 - cur0
    return tot, cur0


def merged(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def main():
    d = sys.argv[1]
    skip = int(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else 2
    files = sorted(f for f in os.listdir(d) if f.startswith("trace-rank") and f.endswith(".json"))
    for f in files:
        ev = [e for e in load(os.path.join(d, f)) if e.get("ph") == "X"]
        spans = lambda name, tid: sorted((e["ts"], e["ts"] + e["dur"]) for e in ev  # noqa: E731
                                         if e["name"] == name and e["tid"] == tid)
        fwd, bwd, opt = spans("forward", 0), spans("backward", 0), spans("optimizer", 0)
        ar = spans("all-reduce", 1)
        if len(fwd) <= skip:
            print(f"{f}: {len(fwd)} steps, nothing left after --skip {skip}")
            continue
        t_start = fwd[skip][0]  # keep spans from the first kept step's forward on
        bwd = [s for s in bwd if s[0] >= t_start]
        opt = [s for s in opt if s[0] >= t_start]
        ar = [s for s in ar if s[0] >= t_start]
        steps = len(opt)
        tot = sum(b - a for a, b in ar)
        hid = sum(overlap(a, b, bwd) for a, b in ar)
        u = merged(ar)
        utot = sum(b - a for a, b in u)
        uhid = sum(overlap(a, b, bwd) for a, b in u)
        exposed = sum(max(0.0, o[0] - b[1]) for b, o in zip(bwd, opt))
        btot = sum(b - a for a, b in bwd)
        print(f"{f}: {steps} steps, {len(ar)} all-reduce spans ({len(ar) // max(steps, 1)} per step); "
              f"backward {btot / 1e3:.1f} ms; all-reduce sum {tot / 1e3:.1f} ms, union {utot / 1e3:.1f} ms; "
              f"hidden {hid / 1e3:.1f} ms = {100 * hid / tot if tot else 0:.0f}% of sum, "
              f"hidden(u) {uhid / 1e3:.1f} ms = {100 * uhid / utot if utot else 0:.0f}% of union; "
              f"exposed (backward end -> optimizer) {exposed / 1e3:.1f} ms, {exposed / 1e3 / max(steps, 1):.2f} ms/step")


if __name__ == "__main__":
    main()
