#!/usr/bin/python3
"""Independent PyTorch reference for GPT-2 training (HF GPT2LMHeadModel semantics).

Written from scratch with torch.nn.functional, float32, CPU, deterministic.
Parameter names/layouts are HF's (with the "transformer." prefix); Conv1D weights
are stored [in, out] so a projection is y = x @ W + b. The output head is tied to wte.

Subcommands (see --help of each):
  init    random initial weights -> MODEL.safetensors
  tokens  random llm.c token file -> FILE.bin
  run     K AdamW steps -> LOSSES.json (+ step-0 gradients -> GRADS.safetensors)
  mcset   a random multiple-choice set in llm.c's eval file format -> FILE.bin
  mc      each completion's summed loss after its context -> LOSSES.json
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import st  # noqa: E402
import evalfile  # noqa: E402  (tests/evalfile.py)

PREFIX = "transformer."
LN_EPS = 1e-5
TOKEN_MAGIC = 20240520
TOKEN_VERSION = 1


# ----------------------------------------------------------------------------- config / names

def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        if k not in cfg:
            raise SystemExit(f"{path}: missing config key {k}")
    if cfg["n_embd"] % cfg["n_head"]:
        raise SystemExit("n_embd must be divisible by n_head")
    return cfg


def param_shapes(cfg):
    """Ordered dict name -> shape, exactly HF's names and layouts."""
    V, P, C, L = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"]
    shapes = {PREFIX + "wte.weight": (V, C), PREFIX + "wpe.weight": (P, C)}
    for i in range(L):
        h = f"{PREFIX}h.{i}."
        shapes.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
            h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,),
        })
    shapes[PREFIX + "ln_f.weight"] = (C,)
    shapes[PREFIX + "ln_f.bias"] = (C,)
    return shapes


# ----------------------------------------------------------------------------- model

def gelu_tanh(x):
    """HF "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def layer_norm(x, w, b):
    """LayerNorm over the last dim, biased variance, eps 1e-5."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def causal_self_attention(x, w_attn, b_attn, w_proj, b_proj, n_head):
    """x [B,T,C]; c_attn gives q|k|v along the last dim, heads contiguous inside each."""
    B, T, C = x.shape
    hd = C // n_head
    qkv = x @ w_attn + b_attn                      # [B,T,3C]
    q, k, v = qkv.split(C, dim=-1)                 # each [B,T,C]
    # [B,T,C] -> [B,nh,T,hd]: head h owns channels h*hd .. h*hd+hd-1
    q = q.view(B, T, n_head, hd).transpose(1, 2)
    k = k.view(B, T, n_head, hd).transpose(1, 2)
    v = v.view(B, T, n_head, hd).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # [B,nh,T,T]
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    att = att.masked_fill(~mask, float("-inf"))     # key position > query position masked
    att = torch.softmax(att, dim=-1)
    y = att @ v                                     # [B,nh,T,hd]
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return y @ w_proj + b_proj


def forward(params, idx, cfg):
    """params: dict name -> tensor (with prefix). idx: int64 [B,T]. Returns logits [B,T,V]."""
    p = lambda n: params[PREFIX + n]  # noqa: E731
    B, T = idx.shape
    if T > cfg["n_positions"]:
        raise ValueError("sequence longer than n_positions")
    pos = torch.arange(T, dtype=torch.long)
    x = F.embedding(idx, p("wte.weight")) + F.embedding(pos, p("wpe.weight"))[None]
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        a = layer_norm(x, p(h + "ln_1.weight"), p(h + "ln_1.bias"))
        x = x + causal_self_attention(a, p(h + "attn.c_attn.weight"), p(h + "attn.c_attn.bias"),
                                      p(h + "attn.c_proj.weight"), p(h + "attn.c_proj.bias"),
                                      cfg["n_head"])
        m = layer_norm(x, p(h + "ln_2.weight"), p(h + "ln_2.bias"))
        m = gelu_tanh(m @ p(h + "mlp.c_fc.weight") + p(h + "mlp.c_fc.bias"))
        x = x + (m @ p(h + "mlp.c_proj.weight") + p(h + "mlp.c_proj.bias"))
    x = layer_norm(x, p("ln_f.weight"), p("ln_f.bias"))
    return x @ p("wte.weight").t()                  # tied LM head


def loss_fn(params, idx, targets, cfg):
    """Mean cross-entropy over all B*T positions."""
    logits = forward(params, idx, cfg)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ----------------------------------------------------------------------------- init

def init_params(cfg, seed, perturb=False):
    """GPT-2 init: normal(0, 0.02); c_proj weights normal(0, 0.02/sqrt(2*n_layer));
    biases 0, LayerNorm weight 1 / bias 0. With perturb, biases get N(0, 0.02) and LayerNorm
    weights/biases get 1+N(0, 0.1) / N(0, 0.1) so every gradient path is non-trivial."""
    g = torch.Generator().manual_seed(seed)
    resid_std = 0.02 / math.sqrt(2 * cfg["n_layer"])
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 2:
            std = resid_std if name.endswith("c_proj.weight") else 0.02
            t = torch.randn(shape, generator=g) * std
        elif ".ln_" in name or name.startswith(PREFIX + "ln_f"):
            t = torch.ones(shape) if name.endswith(".weight") else torch.zeros(shape)
            if perturb:
                t = t + 0.1 * torch.randn(shape, generator=g)
        else:  # linear bias
            t = torch.zeros(shape)
            if perturb:
                t = t + 0.02 * torch.randn(shape, generator=g)
        out[name] = t.float()
    return out


def load_params(path, cfg, shapes_of=None):
    """Load and validate a weights file -> dict of float32 leaf tensors requiring grad;
    the names and shapes are shapes_of(cfg) (default: GPT-2's param_shapes)."""
    raw = st.load(path, to_f32=True)
    shapes = (shapes_of or param_shapes)(cfg)
    missing = [n for n in shapes if n not in raw]
    extra = [n for n in raw if n not in shapes]
    if missing or extra:
        raise SystemExit(f"{path}: missing {missing[:5]} unexpected {extra[:5]}")
    params = {}
    for n, shape in shapes.items():
        if tuple(raw[n].shape) != shape:
            raise SystemExit(f"{path}: {n} has shape {raw[n].shape}, expected {shape}")
        params[n] = torch.tensor(raw[n], dtype=torch.float32).requires_grad_(True)
    return params


# ----------------------------------------------------------------------------- data

def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = TOKEN_MAGIC, TOKEN_VERSION, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def read_tokens(path):
    """An llm.c token file's ids; for JSON Lines input_ids records (what
    `records` writes), the pair (ids, completion mask) that get_batch takes."""
    if path.endswith(".jsonl"):
        recs = [json.loads(line) for line in open(path) if line.strip()]
        ids = np.concatenate([np.asarray(r["input_ids"], dtype=np.int64) for r in recs])
        mask = np.concatenate([np.asarray(r.get("completion_mask", [1] * len(r["input_ids"])), dtype=np.int64)
                               for r in recs])
        return ids, mask
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype="<i4")
        if header[0] != TOKEN_MAGIC or header[1] != TOKEN_VERSION:
            raise SystemExit(f"{path}: bad token file header {header[:3]}")
        toks = np.frombuffer(f.read(), dtype="<u2")
    n = int(header[2])
    if len(toks) != n:
        raise SystemExit(f"{path}: header says {n} tokens, file has {len(toks)}")
    return toks.astype(np.int64)


def get_batch(tokens, step, B, T, eod=None):
    """llm.c loader order: E = floor((n-1)/(B*T)) batches per epoch, step k starts at
    s = (k mod E)*B*T; row j = tokens[s+j*T : s+j*T+T], targets shifted by one.
    tokens may be (ids, mask): a target whose mask is 0 is -100, cross_entropy's
    ignore_index, so the loss is the mean over the others; so is a target whose
    input is eod (Megatron's --eod-mask-loss)."""
    tokens, mask = tokens if isinstance(tokens, tuple) else (tokens, None)
    E = (len(tokens) - 1) // (B * T)
    if E < 1:
        raise SystemExit(f"need more than B*T={B * T} tokens, have {len(tokens)}")
    s = (step % E) * B * T
    buf = tokens[s:s + B * T + 1]
    x = torch.from_numpy(buf[:-1].copy()).view(B, T)
    y = torch.from_numpy(buf[1:].copy()).view(B, T)
    if mask is not None:
        y[torch.from_numpy(mask[s + 1:s + B * T + 1] == 0).view(B, T)] = -100
    if eod is not None:
        y[x == eod] = -100
    return x, y


# ----------------------------------------------------------------------------- training

def grad_global_norm(params):
    """L2 norm of all gradients concatenated (same formula as clip_grad_norm_)."""
    return torch.norm(torch.stack([p.grad.detach().norm(2) for p in params]), 2)


def make_optimizer(params, args):
    """AdamW with decay only on 2+-dim parameters; constant LR."""
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def train(cfg, params, tokens, args, log=None, loss=None):
    """Run args.steps steps of loss (default: GPT-2's loss_fn); returns (losses,
    grad_norms, step-0 grads dict)."""
    loss_of = loss or loss_fn
    opt = make_optimizer(params, args)
    plist = list(params.values())
    losses, norms, grads0 = [], [], None
    for k in range(args.steps):
        x, y = get_batch(tokens, k, args.batch, args.seq, getattr(args, "eod_token", None))
        opt.zero_grad(set_to_none=True)
        loss = loss_of(params, x, y, cfg)
        loss.backward()
        if k == 0:
            grads0 = {n: p.grad.detach().clone().numpy() for n, p in params.items()}
        if args.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(plist, args.grad_clip)  # returns pre-clip norm
        else:
            norm = grad_global_norm(plist)
        opt.step()
        losses.append(float(loss.item()))
        norms.append(float(norm.item()))
        if log:
            log(f"step {k} loss {losses[-1]:.6f} grad_norm {norms[-1]:.6f}")
    return losses, norms, grads0


# ----------------------------------------------------------------------------- CLI

def setup_torch():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # summation order independent of the machine's core count
    torch.manual_seed(0)


def cmd_init(a):
    cfg = load_config(a.config)
    params = init_params(cfg, a.seed, a.perturb)
    st.save(a.out, {n: t.numpy() for n, t in params.items()}, dtype="F32")


def cmd_tokens(a):
    if not (0 < a.vocab <= 65536):
        raise SystemExit("vocab must be in 1..65536 (tokens are uint16)")
    rng = np.random.default_rng(a.seed)
    write_tokens(a.out, rng.integers(0, a.vocab, size=a.n))


def cmd_records(a):
    """One input_ids record of random tokens under a completion_mask of
    alternating runs (prompt 0s, completion 1s) of 1 to 6 tokens."""
    rng = np.random.default_rng(a.seed)
    ids = rng.integers(0, a.vocab, size=a.n)
    mask, bit = [], 0
    while len(mask) < a.n:
        mask += [bit] * int(rng.integers(1, 7))
        bit ^= 1
    with open(a.out, "w") as f:
        f.write(json.dumps({"input_ids": ids.tolist(), "completion_mask": mask[:a.n]}) + "\n")


def cmd_mcset(a):
    """n examples of random tokens: a context of 1 to 3*seq/4 tokens (some
    cut to fit, one of exactly 1), 2 to 5 completions of 1 to seq/2 tokens
    (one of exactly seq), in llm.c's eval file format (tests/evalfile.py)."""
    rng = np.random.default_rng(a.seed)
    examples = []
    for i in range(a.n):
        nc = int(rng.integers(2, 6))
        ctx = rng.integers(0, a.vocab, size=1 if i == 1 else int(rng.integers(1, 3 * a.seq // 4 + 1)))
        comps = [rng.integers(0, a.vocab, size=int(rng.integers(1, a.seq // 2 + 1))) for _ in range(nc)]
        if i == 2:
            comps[0] = rng.integers(0, a.vocab, size=a.seq)  # the longest that fits: one context token
        examples.append((int(rng.integers(0, nc)), ctx.tolist(), [c.tolist() for c in comps]))
    evalfile.write(a.out, examples)


def cmd_mc(a):
    """Each completion's summed cross-entropy after its context, the two cut
    from the left to seq+1 tokens: one sequence per completion, unpadded."""
    cfg = load_config(a.config)
    params = load_params(a.init, cfg)
    res = []
    with torch.no_grad():
        for label, ctx, comps in evalfile.read(a.mc):
            losses = []
            for c in comps:
                toks = torch.tensor(np.array(ctx + c)[-(a.seq + 1):])
                logits = forward(params, toks[None, :-1], cfg)[0]
                tgt = toks[1:].clone()
                tgt[:len(toks) - 1 - len(c)] = -100
                losses.append(F.cross_entropy(logits, tgt, reduction="sum").item())
            res.append({"label": label, "losses": losses, "tokens": [len(c) for c in comps]})
    with open(a.out, "w") as f:
        json.dump(res, f)


def cmd_run(a):
    cfg = load_config(a.config)
    params = load_params(a.init, cfg)
    tokens = read_tokens(a.data)
    ids = tokens[0] if isinstance(tokens, tuple) else tokens
    if ids.size and ids.max() >= cfg["vocab_size"]:
        raise SystemExit("token id >= vocab_size")
    if a.seq > cfg["n_positions"]:
        raise SystemExit("--seq exceeds n_positions")
    losses, norms, grads0 = train(cfg, params, tokens, a,
                                  log=None if a.quiet else lambda s: print(s, flush=True))
    if a.out_losses:
        with open(a.out_losses, "w") as f:
            json.dump({"losses": losses, "grad_norms": norms}, f, indent=1)
    if a.out_grads and grads0 is not None:
        st.save(a.out_grads, grads0, dtype="F32")
    if a.out_params:
        st.save(a.out_params, {n: p.detach().numpy() for n, p in params.items()}, dtype="F32")


def add_run_args(p):
    """The `run` subcommand's model, data and AdamW options (llama_ref.py's too)."""
    for k in ("--config", "--init", "--data"):
        p.add_argument(k, required=True)
    for k in ("--batch", "--seq", "--steps"):
        p.add_argument(k, type=int, required=True)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--grad-clip", type=float, default=0.0, help="global-norm clip; <=0 disables")
    p.add_argument("--eod-token", type=int, help="no loss on a target whose input is this token")
    p.add_argument("--out-losses")
    p.add_argument("--out-grads")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("init", help="write random initial weights")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--perturb", action="store_true",
                   help="randomize biases and LayerNorm params too")
    p.set_defaults(fn=cmd_init)

    for name, fn, what in (("tokens", cmd_tokens, "a random llm.c token file"),
                           ("records", cmd_records, "a JSON Lines input_ids record with a completion_mask")):
        p = sub.add_parser(name, help="write " + what)
        p.add_argument("--out", required=True)
        p.add_argument("--n", type=int, required=True)
        p.add_argument("--vocab", type=int, required=True)
        p.add_argument("--seed", type=int, default=0)
        p.set_defaults(fn=fn)

    p = sub.add_parser("mcset", help="write a random multiple-choice set (llm.c's eval file)")
    for k in ("--out", "--n", "--vocab", "--seq"):
        p.add_argument(k, required=True, type=str if k == "--out" else int)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_mcset)

    p = sub.add_parser("mc", help="score a multiple-choice set: each completion's summed loss")
    for k in ("--config", "--init", "--mc", "--out"):
        p.add_argument(k, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.set_defaults(fn=cmd_mc)

    p = sub.add_parser("run", help="train K steps, record losses and step-0 gradients")
    add_run_args(p)
    p.add_argument("--out-params", help="optional: final weights after the last step")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=cmd_run)

    a = ap.parse_args(argv)
    setup_torch()
    a.fn(a)


if __name__ == "__main__":
    main()
