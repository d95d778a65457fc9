#!/usr/bin/python3
"""Self-check of the reference: checks gpt2_ref.py against naive, independently written
formulations (numpy float64 loops, finite differences, hand-written AdamW) and exercises
the CLI end to end on a tiny config. Prints one line per check, then `N passed, M failed`.

  /usr/bin/python3 tests/reference/selfcheck.py
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402
import gpt2_ref as G  # noqa: E402

PY = sys.executable or "/usr/bin/python3"
TINY = {"vocab_size": 64, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4}

passed = failed = 0


def check(ok, msg):
    global passed, failed
    ok = bool(ok)
    print(("PASS " if ok else "FAIL ") + msg, flush=True)
    if ok:
        passed += 1
    else:
        failed += 1


def relmax(a, b):
    """max|a-b| / max|a| (scale-relative)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))


# ----------------------------------------------------------------------------- naive numpy GPT-2

def np_layernorm(x, w, b):
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-1]):
        v = x[idx]
        m = sum(v) / len(v)
        var = sum((vi - m) ** 2 for vi in v) / len(v)
        out[idx] = (v - m) / math.sqrt(var + 1e-5) * w + b
    return out


def np_gelu(x):
    # erf-free tanh approximation written out independently
    return np.vectorize(lambda z: 0.5 * z * (1 + math.tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))))(x)


def np_attention(x, wa, ba, wp, bp, nh):
    """Explicit loops over batch, head, query, key."""
    B, T, C = x.shape
    hd = C // nh
    qkv = x @ wa + ba
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    y = np.zeros((B, T, C))
    for b in range(B):
        for h in range(nh):
            sl = slice(h * hd, (h + 1) * hd)
            for t in range(T):
                scores = [float(np.dot(q[b, t, sl], k[b, s, sl])) / math.sqrt(hd) for s in range(t + 1)]
                mx = max(scores)
                e = [math.exp(s - mx) for s in scores]
                z = sum(e)
                for s in range(t + 1):
                    y[b, t, sl] += e[s] / z * v[b, s, sl]
    return y @ wp + bp


def np_forward(P, idx, cfg):
    p = lambda n: P["transformer." + n]  # noqa: E731
    B, T = idx.shape
    x = np.stack([np.stack([p("wte.weight")[idx[b, t]] + p("wpe.weight")[t] for t in range(T)])
                  for b in range(B)])
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        a = np_layernorm(x, p(h + "ln_1.weight"), p(h + "ln_1.bias"))
        x = x + np_attention(a, p(h + "attn.c_attn.weight"), p(h + "attn.c_attn.bias"),
                             p(h + "attn.c_proj.weight"), p(h + "attn.c_proj.bias"), cfg["n_head"])
        m = np_layernorm(x, p(h + "ln_2.weight"), p(h + "ln_2.bias"))
        m = np_gelu(m @ p(h + "mlp.c_fc.weight") + p(h + "mlp.c_fc.bias"))
        x = x + m @ p(h + "mlp.c_proj.weight") + p(h + "mlp.c_proj.bias")
    x = np_layernorm(x, p("ln_f.weight"), p("ln_f.bias"))
    return x @ p("wte.weight").T


def np_loss(logits, targets):
    tot = 0.0
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            row = logits[b, t]
            mx = row.max()
            lse = mx + math.log(sum(math.exp(r - mx) for r in row))
            tot += lse - row[targets[b, t]]
    return tot / (logits.shape[0] * logits.shape[1])


# ----------------------------------------------------------------------------- checks

def check_safetensors(tmp):
    rng = np.random.default_rng(1)
    t = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32),
         "b": rng.standard_normal(7).astype(np.float32), "c": np.zeros((0, 4), np.float32)}
    path = os.path.join(tmp, "rt.safetensors")
    st.save(path, t)
    back = st.load(path)
    check(all(np.array_equal(t[k], back[k]) and back[k].dtype == np.float32 for k in t),
          "safetensors F32 round trip is bit exact")
    hdr, meta, start = st.read_header(path)
    check(start % 8 == 0 and meta == {"format": "pt"}, "safetensors header padded to 8 and has format pt")
    raw = open(path, "rb").read()
    off = hdr["a.weight"]["data_offsets"][0]
    check(np.array_equal(np.frombuffer(raw[start + off:start + off + 60], "<f4").reshape(3, 5), t["a.weight"]),
          "safetensors data little-endian at data_offsets")
    st.save(path, t, dtype="F16")
    check(relmax(t["a.weight"], st.load(path)["a.weight"].astype(np.float32)) < 1e-3
          and st.load(path)["a.weight"].dtype == np.float16, "safetensors F16 write/read")
    st.save(path, t, dtype="BF16")
    bf = st.load(path)["a.weight"]
    check(relmax(t["a.weight"], bf) < 1e-2 and bf.dtype == np.float32, "safetensors BF16 write/read")
    # BF16 bits vs torch's own bfloat16 conversion
    tb = torch.tensor(t["a.weight"]).bfloat16().float().numpy()
    check(np.array_equal(tb, bf), "safetensors BF16 rounding equals torch's")


def check_primitives():
    torch.manual_seed(3)
    x = torch.randn(4, 9, 32, dtype=torch.float64) * 3
    check(torch.allclose(G.gelu_tanh(x), F.gelu(x, approximate="tanh"), rtol=0, atol=1e-12),
          "gelu_tanh == F.gelu(approximate='tanh')")
    w, b = torch.randn(32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    check(torch.allclose(G.layer_norm(x, w, b), F.layer_norm(x, (32,), w, b, eps=1e-5), atol=1e-12),
          "layer_norm == F.layer_norm(eps=1e-5)")
    C, nh = 32, 4
    wa, ba = torch.randn(C, 3 * C, dtype=torch.float64) * 0.2, torch.randn(3 * C, dtype=torch.float64) * 0.1
    wp, bp = torch.randn(C, C, dtype=torch.float64) * 0.2, torch.randn(C, dtype=torch.float64) * 0.1
    y = G.causal_self_attention(x, wa, ba, wp, bp, nh).numpy()
    yn = np_attention(x.numpy(), wa.numpy(), ba.numpy(), wp.numpy(), bp.numpy(), nh)
    check(relmax(yn, y) < 1e-12, f"attention == explicit per-head/per-query loop (rel {relmax(yn, y):.1e})")
    # causality: changing the last position must not change earlier outputs
    x2 = x.clone()
    x2[:, -1] += 1.0
    y2 = G.causal_self_attention(x2, wa, ba, wp, bp, nh).numpy()
    check(np.array_equal(y[:, :-1], y2[:, :-1]) and not np.allclose(y[:, -1], y2[:, -1]),
          "attention is causal")


def tiny_params(seed=5, dtype=torch.float64):
    return {n: t.to(dtype) for n, t in G.init_params(TINY, seed, perturb=True).items()}


def check_forward():
    P = tiny_params()
    rng = np.random.default_rng(7)
    idx = torch.tensor(rng.integers(0, 64, size=(2, 8)))
    tgt = torch.tensor(rng.integers(0, 64, size=(2, 8)))
    Pn = {n: t.numpy() for n, t in P.items()}
    ref = np_forward(Pn, idx.numpy(), TINY)
    got64 = G.forward(P, idx, TINY).numpy()
    check(relmax(ref, got64) < 1e-10, f"float64 logits == naive numpy GPT-2 (rel {relmax(ref, got64):.1e})")
    P32 = {n: t.float() for n, t in P.items()}
    got32 = G.forward(P32, idx, TINY).detach().numpy()
    check(relmax(ref, got32) < 1e-5, f"float32 logits == naive numpy GPT-2 (rel {relmax(ref, got32):.1e})")
    l_ref = np_loss(ref, tgt.numpy())
    l64 = G.loss_fn(P, idx, tgt, TINY).item()
    l32 = G.loss_fn(P32, idx, tgt, TINY).item()
    check(abs(l64 - l_ref) / l_ref < 1e-12 and abs(l32 - l_ref) / l_ref < 1e-6,
          f"loss == naive mean cross-entropy (ref {l_ref:.10f}, f64 {l64:.10f}, f32 {l32:.8f})")
    check(abs(l_ref - math.log(64)) < 0.5, f"initial loss near ln(V)={math.log(64):.3f} ({l_ref:.3f})")


def check_gradients():
    """Backward (float64) vs central finite differences of the loss."""
    P = {n: t.requires_grad_(True) for n, t in tiny_params(seed=11).items()}
    rng = np.random.default_rng(8)
    idx = torch.tensor(rng.integers(0, 64, size=(2, 8)))
    tgt = torch.tensor(rng.integers(0, 64, size=(2, 8)))
    G.loss_fn(P, idx, tgt, TINY).backward()
    grads = {n: p.grad.clone() for n, p in P.items()}
    nz = all(float(g.abs().max()) > 0 for g in grads.values())
    check(nz, "every parameter gets a nonzero gradient (perturbed init)")

    def f(Q):
        with torch.no_grad():
            return G.loss_fn(Q, idx, tgt, TINY).item()
    # directional derivative along a random direction over all params
    D = {n: torch.randn(p.shape, dtype=torch.float64) for n, p in P.items()}
    h = 1e-5
    plus = {n: (p.detach() + h * D[n]) for n, p in P.items()}
    minus = {n: (p.detach() - h * D[n]) for n, p in P.items()}
    fd = (f(plus) - f(minus)) / (2 * h)
    an = sum(float((grads[n] * D[n]).sum()) for n in P)
    check(abs(fd - an) / abs(an) < 1e-6, f"directional derivative: backward {an:.9f} vs finite diff {fd:.9f}")
    # a few individual entries of every tensor (wte includes the tied-head contribution)
    worst = 0.0
    for n, p in P.items():
        flat = p.detach().reshape(-1)
        for j in rng.choice(flat.numel(), size=min(3, flat.numel()), replace=False):
            e = torch.zeros_like(flat)
            e[j] = h
            Qp = dict((k, v.detach()) for k, v in P.items())
            Qm = dict(Qp)
            Qp[n] = (flat + e).view(p.shape)
            Qm[n] = (flat - e).view(p.shape)
            fdj = (f(Qp) - f(Qm)) / (2 * h)
            scale = float(grads[n].abs().max())
            worst = max(worst, abs(fdj - float(grads[n].reshape(-1)[j])) / scale)
    check(worst < 1e-6, f"per-entry finite differences on every tensor (worst scale-rel {worst:.1e})")


def check_adamw():
    """One optimizer step with our param groups vs a hand-written AdamW."""
    P = {n: t.float().requires_grad_(True) for n, t in tiny_params(seed=2).items()}
    args = types.SimpleNamespace(lr=3e-3, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1)
    opt = G.make_optimizer(P, args)
    before = {n: p.detach().double().numpy().copy() for n, p in P.items()}
    gr = {}
    for step in (1, 2):
        for n, p in P.items():
            p.grad = torch.randn(p.shape)
        gr[step] = {n: p.grad.double().numpy().copy() for n, p in P.items()}
        opt.step()
    worst = 0.0
    for n in P:
        w = before[n].copy()
        m = np.zeros_like(w)
        v = np.zeros_like(w)
        wd = args.weight_decay if w.ndim >= 2 else 0.0
        for t in (1, 2):
            g = gr[t][n]
            w = w * (1 - args.lr * wd)            # decoupled decay
            m = args.beta1 * m + (1 - args.beta1) * g
            v = args.beta2 * v + (1 - args.beta2) * g * g
            mhat = m / (1 - args.beta1 ** t)
            vhat = v / (1 - args.beta2 ** t)
            w = w - args.lr * mhat / (np.sqrt(vhat) + args.eps)
        worst = max(worst, float(np.max(np.abs(w - P[n].detach().numpy()))))
    check(worst < 1e-6, f"AdamW (decay on 2-D only) == hand-written update (max abs diff {worst:.1e})")


def check_data(tmp):
    path = os.path.join(tmp, "t.bin")
    subprocess.run([PY, os.path.join(HERE, "gpt2_ref.py"), "tokens", "--out", path,
                    "--n", "100", "--vocab", "64", "--seed", "3"], check=True)
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw[:1024], "<i4")
    toks = np.frombuffer(raw[1024:], "<u2")
    check(len(raw) == 1024 + 200 and hdr[0] == 20240520 and hdr[1] == 1 and hdr[2] == 100
          and not hdr[3:].any() and toks.max() < 64,
          "token file: 256 x int32 header (20240520, 1, N) then N uint16 < V")
    tokens = np.arange(100, dtype=np.int64)
    # B=2, T=8: E = floor(99/16) = 6 batches; step 7 wraps to batch 1 (start 16)
    x, y = G.get_batch(tokens, 7, 2, 8)
    check(x[0, 0] == 16 and x[1, 0] == 24 and y[1, 7] == 32 and x.shape == (2, 8),
          "batch layout: step k starts at (k mod E)*B*T, targets shifted by one")
    x, y = G.get_batch(tokens, 5, 2, 8)
    check(int(y[-1, -1]) == 96, "last batch of an epoch uses token index E*B*T")


def check_cli(tmp):
    cfg = os.path.join(tmp, "cfg.json")
    json.dump(TINY, open(cfg, "w"))
    model, data = os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "d.bin")
    ref = lambda *a: subprocess.run([PY, os.path.join(HERE, "gpt2_ref.py"), *a],  # noqa: E731
                                    check=True, capture_output=True, text=True)
    t0 = time.time()
    ref("init", "--config", cfg, "--out", model, "--seed", "1", "--perturb")
    # learnable data: a repeating pattern so the loss must fall quickly
    toks = np.tile(np.random.default_rng(0).integers(0, 64, 40), 20)
    G.write_tokens(data, toks)
    common = ["run", "--config", cfg, "--init", model, "--data", data, "--batch", "4", "--seq", "8",
              "--steps", "10", "--lr", "1e-2", "--weight-decay", "0.1", "--beta1", "0.9",
              "--beta2", "0.95", "--eps", "1e-8", "--quiet"]
    out = [os.path.join(tmp, f) for f in ("l.json", "g.safetensors", "l2.json", "g2.safetensors", "l3.json")]
    ref(*common, "--grad-clip", "1.0", "--out-losses", out[0], "--out-grads", out[1])
    dt = time.time() - t0
    L = json.load(open(out[0]))
    print(f"     tiny run losses: {' '.join(f'{v:.4f}' for v in L['losses'])}")
    check(len(L["losses"]) == 10 and L["losses"][-1] < L["losses"][0] - 0.5,
          f"tiny run: loss falls {L['losses'][0]:.4f} -> {L['losses'][-1]:.4f}")
    check(dt < 20, f"tiny init+run takes {dt:.1f}s")
    g = st.load(out[1])
    shapes = G.param_shapes(TINY)
    check(set(g) == set(shapes) and all(g[n].shape == shapes[n] for n in g),
          "grads file: every parameter under its HF name and shape")
    # step-0 gradient and norm agree with an in-process computation
    P = G.load_params(model, TINY)
    x, y = G.get_batch(G.read_tokens(data), 0, 4, 8)
    loss = G.loss_fn(P, x, y, TINY)
    loss.backward()
    check(abs(loss.item() - L["losses"][0]) == 0 and
          all(np.array_equal(P[n].grad.numpy(), g[n]) for n in P),
          "step-0 loss and gradients reproduce exactly in process")
    gn = math.sqrt(sum(float((P[n].grad.double() ** 2).sum()) for n in P))
    check(abs(gn - L["grad_norms"][0]) / gn < 1e-5, f"grad_norms[0] is the pre-clip norm ({gn:.5f})")
    # determinism
    ref(*common, "--grad-clip", "1.0", "--out-losses", out[2], "--out-grads", out[3])
    check(json.load(open(out[2])) == L and open(out[1], "rb").read() == open(out[3], "rb").read(),
          "two identical runs give bit-identical outputs")
    ref(*common, "--grad-clip", "0", "--out-losses", out[4])
    L3 = json.load(open(out[4]))
    check(L3["losses"][0] == L["losses"][0] and L3["losses"][1:] != L["losses"][1:],
          "clipping changes later steps only")

    # compare.py: identical data passes (with prefix-less names), perturbed data fails
    log = os.path.join(tmp, "log.jsonl")
    with open(log, "w") as f:
        f.write('{"event": "start"}\nnot json\n')
        for k, v in enumerate(L["losses"]):
            f.write(json.dumps({"step": k, "loss": v * (1 + 3e-6 if k else 1)}) + "\n")
    st.save(os.path.join(tmp, "ours.safetensors"), {n[len("transformer."):]: a for n, a in g.items()})
    cmp = [PY, os.path.join(HERE, "compare.py"), "--ref-losses", out[0], "--log", log,
           "--ref-grads", out[1], "--grads", os.path.join(tmp, "ours.safetensors"),
           "--loss0-rtol", "1e-5", "--grad-rtol", "1e-5", "--loss-rtol", "1e-4"]
    r = subprocess.run(cmp, capture_output=True, text=True)
    last = r.stdout.strip().splitlines()[-1]
    check(r.returncode == 0 and last == f"{2 + 10 + 2 + len(g)} passed, 0 failed",
          f"compare.py accepts a matching run: '{last}'")
    bad = dict(g)
    bad["transformer.h.1.mlp.c_fc.bias"] = bad["transformer.h.1.mlp.c_fc.bias"] * (1 + 1e-4)
    st.save(os.path.join(tmp, "ours.safetensors"), bad)
    r = subprocess.run(cmp, capture_output=True, text=True)
    last = r.stdout.strip().splitlines()[-1]
    check(r.returncode == 1 and last.endswith(" 1 failed") and "worst grad tensor: h.1.mlp.c_fc.bias" in r.stdout,
          f"compare.py rejects a 1e-4 gradient error: '{last}'")


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        check_safetensors(tmp)
        check_primitives()
        check_forward()
        check_gradients()
        check_adamw()
        check_data(tmp)
        check_cli(tmp)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
