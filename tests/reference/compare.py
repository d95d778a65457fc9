#!/usr/bin/python3
"""Compare a training run against the PyTorch reference (gpt2_ref.py run).

  compare.py --ref-losses A.json --log B.jsonl --ref-grads G1.safetensors --grads G2.safetensors \
             [--loss0-rtol 1e-5] [--grad-rtol 1e-5] [--loss-rtol 1e-4]

A.json    {"losses": [...], "grad_norms": [...]} from gpt2_ref.py run.
B.jsonl   our program's log: one JSON object per line; lines with a "loss" key must also
          have "step" (0-based: step k is compared with losses[k]); other lines are ignored.
G1/G2     step-0 gradients; names are matched after stripping a "transformer." prefix.

Either pair (losses or grads) may be omitted. Prints one line per check (--brief: only
the failed ones and the worst gradient), then exactly `N passed, M failed`; exits 1 if
anything failed.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

PREFIX = "transformer."


class Checks:
    def __init__(self, brief=False):
        self.passed = self.failed = 0
        self.brief = brief

    def check(self, ok, msg):
        ok = bool(ok)  # NaN comparisons are False, so NaN always fails
        if not (ok and self.brief):
            print(("PASS " if ok else "FAIL ") + msg)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


def strip(name):
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def read_log(path):
    """-> dict step -> loss (last occurrence wins)."""
    out = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # not a JSON line: not ours to judge
            if not isinstance(obj, dict) or "loss" not in obj:
                continue
            if "step" not in obj:
                raise SystemExit(f"{path}:{lineno}: loss line without a step")
            out[int(obj["step"])] = float(obj["loss"])
    return out


def rel(a, b):
    """|a-b| / |a| with a the reference."""
    return abs(a - b) / max(abs(a), 1e-12)


def compare_losses(c, ref_path, log_path, loss0_rtol, loss_rtol):
    with open(ref_path) as f:
        ref = json.load(f)["losses"]
    ours = read_log(log_path)
    c.check(len(ours) > 0, f"log has loss lines ({len(ours)} steps)")
    missing = [k for k in range(len(ref)) if k not in ours]
    extra = sorted(k for k in ours if not 0 <= k < len(ref))
    c.check(not missing and not extra,
            f"log steps match the reference's 0..{len(ref) - 1}"
            + (f" (missing {missing[:10]})" if missing else "")
            + (f" (no reference for {extra[:10]})" if extra else ""))
    for k in range(len(ref)):
        if k not in ours:
            continue
        tol = loss0_rtol if k == 0 else loss_rtol
        r = rel(ref[k], ours[k])
        c.check(r <= tol, f"loss step {k}: ref {ref[k]:.8f} ours {ours[k]:.8f} rel {r:.3e} (tol {tol:g})")


def compare_grads(c, ref_path, our_path, rtol):
    ref = {strip(n): t.astype(np.float64) for n, t in st.load(ref_path, to_f32=True).items()}
    ours = {}
    for n, t in st.load(our_path, to_f32=True).items():
        ours[strip(n)] = t.astype(np.float64)
    missing = sorted(set(ref) - set(ours))
    extra = sorted(set(ours) - set(ref))
    c.check(not missing, f"grads: all {len(ref)} reference tensors present"
            + (f" (missing {missing[:5]}{'...' if len(missing) > 5 else ''})" if missing else ""))
    c.check(not extra, "grads: no unexpected tensors" + (f" ({extra[:5]})" if extra else ""))
    worst = (None, -1.0)
    for name in sorted(ref):
        if name not in ours:
            continue
        a, b = ref[name], ours[name]
        if a.shape != b.shape:
            c.check(False, f"grad {name}: shape ref {a.shape} ours {b.shape}")
            continue
        # Error relative to the tensor's scale, not element-wise: a gradient tensor has many
        # entries near zero whose element-wise relative error is meaningless noise from
        # float32 summation order, so we divide the worst absolute difference by the largest
        # reference magnitude in the same tensor (floored at 1e-8 for all-zero gradients).
        scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-8)
        err = float(np.max(np.abs(a - b))) / scale if a.size else 0.0
        if not np.isfinite(err):
            err = float("inf")
        if err > worst[1]:
            worst = (name, err)
        c.check(err <= rtol, f"grad {name} {list(a.shape)}: max|d|/max|ref| {err:.3e} (tol {rtol:g})")
    if worst[0] is not None:
        print(f"worst grad tensor: {worst[0]} rel {worst[1]:.3e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref-losses")
    ap.add_argument("--log")
    ap.add_argument("--ref-grads")
    ap.add_argument("--grads")
    ap.add_argument("--loss0-rtol", type=float, default=1e-5)
    ap.add_argument("--grad-rtol", type=float, default=1e-5)
    ap.add_argument("--loss-rtol", type=float, default=1e-4)
    ap.add_argument("--brief", action="store_true", help="print only failed checks and the summary")
    a = ap.parse_args(argv)
    if bool(a.ref_losses) != bool(a.log) or bool(a.ref_grads) != bool(a.grads):
        ap.error("--ref-losses/--log and --ref-grads/--grads come in pairs")
    if not (a.ref_losses or a.ref_grads):
        ap.error("nothing to compare")
    c = Checks(a.brief)
    if a.ref_losses:
        compare_losses(c, a.ref_losses, a.log, a.loss0_rtol, a.loss_rtol)
    if a.ref_grads:
        compare_grads(c, a.ref_grads, a.grads, a.grad_rtol)
    print(f"{c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
