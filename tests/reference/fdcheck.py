#!/usr/bin/python3
"""Finite-difference check of a whole program's gradient, independent of
PyTorch: perturb single parameter entries of the initial safetensors by +-eps,
run the program for one step (its logged step-0 loss is the loss at the given
weights) and compare (L+ - L-) / 2eps with the gradient the program dumped.

usage: fdcheck.py BIN INIT.safetensors TOKENS [--per-tensor K] [--eps E]
"""
import argparse, json, os, subprocess, sys, tempfile
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st


def run(binary, init, tokens, workdir, extra):
    log = os.path.join(workdir, "log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [binary, "--init", init, "--data", tokens, "--steps", "1", "--quiet",
           "--threads", "1", "--log", log] + extra
    subprocess.run(cmd, check=True)
    with open(log) as f:
        return float(json.loads(f.readline())["loss"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary"); ap.add_argument("init"); ap.add_argument("tokens")
    ap.add_argument("--per-tensor", type=int, default=2)
    ap.add_argument("--eps", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=3e-2)
    ap.add_argument("--batch", default="2"); ap.add_argument("--seq", default="8")
    a = ap.parse_args()
    extra = ["--batch", a.batch, "--seq", a.seq]
    w = tempfile.mkdtemp()
    grads_path = os.path.join(w, "grads.safetensors")
    run(a.binary, a.init, a.tokens, w, extra + ["--dump-grads", grads_path])
    params = st.load(a.init)
    grads = st.load(grads_path)
    gmap = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in grads.items()}
    passed = failed = 0
    pert = os.path.join(w, "pert.safetensors")
    for name, p in params.items():
        g = gmap[name[len("transformer."):] if name.startswith("transformer.") else name].reshape(-1)
        # the entries with the largest gradients: their differences are well above round-off
        for idx in np.argsort(-np.abs(g))[: a.per_tensor]:
            losses = []
            for sgn in (1, -1):
                q = {k: v.copy() for k, v in params.items()}
                flat = q[name].reshape(-1)
                flat[idx] += sgn * a.eps
                st.save(pert, q)
                losses.append(run(a.binary, pert, a.tokens, w, extra))
            fd = (losses[0] - losses[1]) / (2 * a.eps)
            err = abs(fd - g[idx]) / max(abs(g[idx]), 1e-3)
            ok = err <= a.rtol
            passed += ok; failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name}[{idx}]: grad {g[idx]:.6g} fd {fd:.6g} rel {err:.2e}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
