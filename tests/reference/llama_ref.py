#!/usr/bin/python3
"""Independent PyTorch reference for tests/e2e/llama.model: a LLaMA-style model with
rotary position embeddings (RoPE), written from scratch with torch.nn.functional,
float32, CPU, deterministic. Parameter names and layouts are the .model's, which are
Hugging Face's Llama ones: projection weights [out, in] (y = x @ W^T); lm_head untied, or
with "tied": true the output head is embed_tokens (examples/llama3.model, Llama 3.2);
"qkv_bias": true adds biases to the q, k and v projections (Qwen2, examples/qwen2.model).

RoPE as Hugging Face's LlamaRotaryEmbedding and rotate_half: in each head, channel i <
hd/2 pairs with channel i + hd/2; position t rotates the pair by t * inv_freq[i], with
inv_freq = 1 / theta^(arange(0, hd, 2) / hd) in float32. With "rope_scaling" (Llama 3.1's
"llama3": factor, low_freq_factor, high_freq_factor, original_max_position_embeddings),
written from Meta's description: wavelengths 2 pi / inv_freq longer than orig / low are
divided by factor, shorter than orig / high kept, and in between mixed with
s = (orig / wavelength - low) / (high - low) as (1 - s) * f / factor + s * f.

Subcommands (see --help of each):
  init    random initial weights -> MODEL.safetensors
  run     K AdamW steps -> LOSSES.json (+ step-0 gradients -> GRADS.safetensors)
  hf      the loss of one batch under transformers' LlamaForCausalLM (Qwen2ForCausalLM
          with qkv_bias) from the same weights (the same names); exit 1 if it differs
          from this reference's loss by more than --rtol
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as G  # noqa: E402  (token files, batches, AdamW training loop)
import st  # noqa: E402

KEYS = ("vocab", "dim", "n_layer", "n_head", "hidden", "eps", "rope_theta")


def load_config(path):
    """The .model's config constants; n_kv_head (key/value heads, grouped-query
    attention) defaults to n_head."""
    with open(path) as f:
        cfg = json.load(f)
    missing = [k for k in KEYS if k not in cfg]
    if missing:
        raise SystemExit(f"{path}: missing config keys {missing}")
    cfg.setdefault("n_kv_head", cfg["n_head"])
    cfg.setdefault("tied", False)
    cfg.setdefault("qkv_bias", False)
    cfg.setdefault("rope_scaling", None)
    if cfg["dim"] % cfg["n_head"] or (cfg["dim"] // cfg["n_head"]) % 2:
        raise SystemExit("dim must split into n_head heads of an even size")
    if cfg["n_head"] % cfg["n_kv_head"]:
        raise SystemExit("n_head must be a multiple of n_kv_head")
    return cfg


def param_shapes(cfg):
    V, C, L, H = cfg["vocab"], cfg["dim"], cfg["n_layer"], cfg["hidden"]
    Ckv = C // cfg["n_head"] * cfg["n_kv_head"]
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (C, C), p + "self_attn.k_proj.weight": (Ckv, C),
            p + "self_attn.v_proj.weight": (Ckv, C), p + "self_attn.o_proj.weight": (C, C),
            p + "post_attention_layernorm.weight": (C,),
            p + "mlp.gate_proj.weight": (H, C), p + "mlp.up_proj.weight": (H, C),
            p + "mlp.down_proj.weight": (C, H),
        })
        if cfg["qkv_bias"]:
            shapes.update({p + "self_attn.q_proj.bias": (C,), p + "self_attn.k_proj.bias": (Ckv,),
                           p + "self_attn.v_proj.bias": (Ckv,)})
    shapes["model.norm.weight"] = (C,)
    if not cfg["tied"]:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def scale_freq(inv_freq, sc):
    """Llama 3.1's frequency scaling of inv_freq (float32) by the dict sc."""
    factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
    orig = sc["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    s = (orig / wavelen - low) / (high - low)
    mid = (1 - s) * inv_freq / factor + s * inv_freq
    return torch.where(wavelen > orig / low, inv_freq / factor, torch.where(wavelen < orig / high, inv_freq, mid))


def rope(x, theta, scaling=None):
    """x [B, nh, T, hd] -> rotated; pairs (i, i + hd/2), angle t * inv_freq[i]."""
    T, hd = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    if scaling:
        inv_freq = scale_freq(inv_freq, scaling)
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # [T, hd/2]
    ang = torch.cat((ang, ang), dim=-1)                                  # [T, hd]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * ang.cos() + torch.cat((-x2, x1), dim=-1) * ang.sin()


def attention(x, p, cfg):
    B, T, C = x.shape
    nh, nkv = cfg["n_head"], cfg["n_kv_head"]
    hd = C // nh
    heads = lambda t, n: t.view(B, T, n, hd).transpose(1, 2)  # noqa: E731
    proj = lambda n: x @ p[f"self_attn.{n}_proj.weight"].t() + p.get(f"self_attn.{n}_proj.bias", 0)  # noqa: E731
    q = rope(heads(proj("q"), nh), cfg["rope_theta"], cfg["rope_scaling"])
    k = rope(heads(proj("k"), nkv), cfg["rope_theta"], cfg["rope_scaling"])
    v = heads(proj("v"), nkv)
    # grouped-query attention: query head h reads key/value head h // (nh / nkv)
    k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    return y @ p["self_attn.o_proj.weight"].t()


def forward(params, idx, cfg):
    x = F.embedding(idx, params["model.embed_tokens.weight"])
    for i in range(cfg["n_layer"]):
        pre = f"model.layers.{i}."
        p = {k[len(pre):]: v for k, v in params.items() if k.startswith(pre)}
        x = x + attention(rms_norm(x, p["input_layernorm.weight"], cfg["eps"]), p, cfg)
        m = rms_norm(x, p["post_attention_layernorm.weight"], cfg["eps"])
        gate, up = m @ p["mlp.gate_proj.weight"].t(), m @ p["mlp.up_proj.weight"].t()
        x = x + (F.silu(gate) * up) @ p["mlp.down_proj.weight"].t()
    head = params["model.embed_tokens.weight" if cfg["tied"] else "lm_head.weight"]
    return rms_norm(x, params["model.norm.weight"], cfg["eps"]) @ head.t()


def loss_fn(params, idx, targets, cfg):
    logits = forward(params, idx, cfg)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def init_params(cfg, seed):
    """normal(0, 0.02) matrices, but q and k normal(0, 0.25): attention logits of a few
    units, so the attention is far from uniform and the rotation changes the loss at
    once; RMSNorm weights 1 + N(0, 0.1) so their gradients matter; biases N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 2:
            std = 0.25 if name.endswith(("q_proj.weight", "k_proj.weight")) else 0.02
            out[name] = (torch.randn(shape, generator=g) * std).float()
        elif name.endswith(".bias"):
            out[name] = (0.1 * torch.randn(shape, generator=g)).float()
        else:
            out[name] = (1.0 + 0.1 * torch.randn(shape, generator=g)).float()
    return out


def cmd_init(a):
    cfg = load_config(a.config)
    st.save(a.out, {n: t.numpy() for n, t in init_params(cfg, a.seed).items()}, dtype="F32")


def cmd_run(a):
    cfg = load_config(a.config)
    params = G.load_params(a.init, cfg, param_shapes)
    tokens = G.read_tokens(a.data)
    if tokens.size and tokens.max() >= cfg["vocab"]:
        raise SystemExit("token id >= vocab")
    losses, norms, grads0 = G.train(cfg, params, tokens, a, loss=loss_fn)
    if a.out_losses:
        with open(a.out_losses, "w") as f:
            json.dump({"losses": losses, "grad_norms": norms}, f, indent=1)
    if a.out_grads:
        st.save(a.out_grads, grads0, dtype="F32")


def cmd_hf(a):
    import warnings
    warnings.filterwarnings("ignore")
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    cfg = load_config(a.config)
    params = G.load_params(a.init, cfg, param_shapes)
    import transformers
    if tuple(int(v) for v in transformers.__version__.split(".")[:2]) < (4, 43) and (
            cfg["rope_scaling"] or cfg["n_kv_head"] != cfg["n_head"] or cfg["rope_theta"] != 10000.0):
        raise SystemExit(f"transformers {transformers.__version__} has no rope_scaling llama3, grouped-query "
                         "attention or rope_theta; the check needs 4.43 or later")
    conf, model = (Qwen2Config, Qwen2ForCausalLM) if cfg["qkv_bias"] else (LlamaConfig, LlamaForCausalLM)
    hf = model(conf(
        vocab_size=cfg["vocab"], hidden_size=cfg["dim"], intermediate_size=cfg["hidden"],
        num_hidden_layers=cfg["n_layer"], num_attention_heads=cfg["n_head"], num_key_value_heads=cfg["n_kv_head"],
        rms_norm_eps=cfg["eps"], rope_theta=cfg["rope_theta"], max_position_embeddings=max(a.seq, 64),
        rope_scaling=dict(cfg["rope_scaling"], rope_type="llama3") if cfg["rope_scaling"] else None,
        tie_word_embeddings=cfg["tied"])).eval()
    sd = dict(params)  # the same names and layouts
    missing, unexpected = hf.load_state_dict({k: v.detach().contiguous() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k and not (cfg["tied"] and k == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"transformers' state dict: missing {missing[:5]} unexpected {unexpected[:5]}")
    x, y = G.get_batch(G.read_tokens(a.data), 0, a.batch, a.seq)
    with torch.no_grad():
        logits = hf(x, use_cache=False).logits
        theirs = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
        ours = loss_fn(params, x, y, cfg).item()
    print(f"   transformers' {type(hf).__name__} loss {theirs:.7f}, this reference's {ours:.7f}")
    sys.exit(0 if abs(theirs - ours) <= a.rtol * abs(theirs) else 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init", help="write random initial weights")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_init)
    p = sub.add_parser("run", help="train K steps, record losses and step-0 gradients")
    G.add_run_args(p)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("hf", help="compare with transformers' LlamaForCausalLM on one batch")
    for k in ("--config", "--init", "--data"):
        p.add_argument(k, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--rtol", type=float, default=1e-5)
    p.set_defaults(fn=cmd_hf)
    a = ap.parse_args(argv)
    G.setup_torch()
    a.fn(a)


if __name__ == "__main__":
    main()
