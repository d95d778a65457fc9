#!/usr/bin/python3
"""PyTorch side of the training-speed benchmark: the GPT-2 of
tests/reference/gpt2_ref.py (the same model shardc builds from
examples/gpt2.model), trained with AdamW in float32 on the CPU with the given
thread count. Prints the median tokens/s over the timed steps.

usage: torch_train.py --config CFG.json --batch B --seq T --steps N --threads K [--impl ref|fused]

--impl ref (default) runs gpt2_ref.loss_fn as is: LayerNorm, GELU and
attention written out in elementary tensor ops, as the tests' reference does.
--impl fused runs the same model (same parameters, same math) with PyTorch's
own fused CPU kernels: F.layer_norm, F.gelu(approximate="tanh"),
torch.addmm and the fused softmax/cross-entropy. It is what a PyTorch user
would write, so it is the harder baseline.
"""
import argparse, json, os, statistics, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import gpt2_ref  # noqa: E402
import math  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def fused_loss(params, idx, targets, cfg):
    """gpt2_ref.forward + loss, with PyTorch's fused CPU ops."""
    p = lambda n: params[gpt2_ref.PREFIX + n]  # noqa: E731
    B, T = idx.shape
    C, nh = cfg["n_embd"], cfg["n_head"]
    hd = C // nh
    eps = gpt2_ref.LN_EPS
    mask = torch.ones(T, T, dtype=torch.bool).tril().logical_not()
    x = F.embedding(idx, p("wte.weight")) + p("wpe.weight")[:T][None]
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        a = F.layer_norm(x, (C,), p(h + "ln_1.weight"), p(h + "ln_1.bias"), eps)
        qkv = torch.addmm(p(h + "attn.c_attn.bias"), a.view(B * T, C), p(h + "attn.c_attn.weight"))
        q, k, v = qkv.view(B, T, 3, nh, hd).permute(2, 0, 3, 1, 4)  # each [B,nh,T,hd]
        att = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill_(mask, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B * T, C)
        x = x + torch.addmm(p(h + "attn.c_proj.bias"), y, p(h + "attn.c_proj.weight")).view(B, T, C)
        m = F.layer_norm(x, (C,), p(h + "ln_2.weight"), p(h + "ln_2.bias"), eps)
        m = F.gelu(torch.addmm(p(h + "mlp.c_fc.bias"), m.view(B * T, C), p(h + "mlp.c_fc.weight")),
                   approximate="tanh")
        x = x + torch.addmm(p(h + "mlp.c_proj.bias"), m, p(h + "mlp.c_proj.weight")).view(B, T, C)
    x = F.layer_norm(x, (C,), p("ln_f.weight"), p("ln_f.bias"), eps)
    logits = x.view(B * T, C) @ p("wte.weight").t()
    return F.cross_entropy(logits, targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--impl", choices=["ref", "fused"], default="ref")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = gpt2_ref.load_config(a.config)
    params = {n: t.requires_grad_(True) for n, t in gpt2_ref.init_params(cfg, 1).items()}
    loss_of = gpt2_ref.loss_fn if a.impl == "ref" else fused_loss
    opt = torch.optim.AdamW([p for p in params.values() if p.dim() >= 2], lr=1e-4, weight_decay=0.1)
    opt.add_param_group({"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0})
    g = torch.Generator().manual_seed(0)
    times = []
    for k in range(a.steps):
        x = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
        y = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(params, x, y, cfg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:] or times
    tok_s = a.batch * a.seq / statistics.median(timed)
    print(json.dumps({"tokens_per_s": tok_s, "ms_per_step": 1e3 * statistics.median(timed),
                      "torch": torch.__version__, "threads": a.threads, "impl": a.impl,
                      "steps_ms": [round(1e3 * t, 1) for t in times]}))


if __name__ == "__main__":
    main()
