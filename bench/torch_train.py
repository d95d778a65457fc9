#!/usr/bin/python3
"""PyTorch side of the training-speed benchmark: the GPT-2 of
tests/reference/gpt2_ref.py (the same model shardc builds from
examples/gpt2.model), trained with AdamW in float32 on the CPU with the given
thread count. Prints the median tokens/s over the timed steps.

usage: torch_train.py --config CFG.json --batch B --seq T --steps N --threads K
"""
import argparse, json, os, statistics, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import gpt2_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = gpt2_ref.load_config(a.config)
    params = gpt2_ref.init_params(cfg, 1)
    opt = torch.optim.AdamW([p for p in params.values() if p.dim() >= 2], lr=1e-4, weight_decay=0.1)
    opt.add_param_group({"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0})
    g = torch.Generator().manual_seed(0)
    times = []
    for k in range(a.steps):
        x = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
        y = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = gpt2_ref.loss_fn(params, x, y, cfg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:] or times
    tok_s = a.batch * a.seq / statistics.median(timed)
    print(json.dumps({"tokens_per_s": tok_s, "ms_per_step": 1e3 * statistics.median(timed),
                      "torch": torch.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
