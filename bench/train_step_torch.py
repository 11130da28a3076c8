"""The tiny GPT of labkit (core/src/gpt.cpp) in PyTorch eager, for a side-by-side
step time: same weights (read from bench_train_step --dump), same batch, same
AdamW. Checks first that its loss on the batch is labkit's, so the two time the
same model.

    python3 bench/train_step_torch.py DIR --device cuda --steps 50
"""
import argparse
import json
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F


def load(dump, device):
    cfg = json.load(open(f"{dump}/config.json"))
    flat = torch.from_numpy(np.fromfile(f"{dump}/params.bin", dtype=np.float32))
    xy = torch.from_numpy(np.fromfile(f"{dump}/batch.bin", dtype=np.int32)).long()
    V, T, C, L = cfg["vocab"], cfg["seq"], cfg["channels"], cfg["layers"]
    shapes = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        shapes += [(f"{l}.ln1.w", (C,)), (f"{l}.ln1.b", (C,)), (f"{l}.qkv.w", (3 * C, C)), (f"{l}.qkv.b", (3 * C,)),
                   (f"{l}.proj.w", (C, C)), (f"{l}.proj.b", (C,)), (f"{l}.ln2.w", (C,)), (f"{l}.ln2.b", (C,)),
                   (f"{l}.fc.w", (4 * C, C)), (f"{l}.fc.b", (4 * C,)), (f"{l}.fcproj.w", (C, 4 * C)),
                   (f"{l}.fcproj.b", (C,))]
    shapes += [("lnf.w", (C,)), ("lnf.b", (C,))]
    params, at = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        params[name] = flat[at:at + n].view(shape).clone().to(device).requires_grad_()
        at += n
    assert at == flat.numel(), f"layout mismatch: {at} of {flat.numel()} weights"
    B = cfg["batch"]
    x, y = xy[:B * T].view(B, T).to(device), xy[B * T:].view(B, T).to(device)
    return cfg, params, x, y


def forward(cfg, p, x, y):
    B, T = x.shape
    C, NH = cfg["channels"], cfg["heads"]
    h = p["wte"][x] + p["wpe"][:T]
    for l in range(cfg["layers"]):
        a = F.layer_norm(h, (C,), p[f"{l}.ln1.w"], p[f"{l}.ln1.b"], eps=1e-5)
        q, k, v = F.linear(a, p[f"{l}.qkv.w"], p[f"{l}.qkv.b"]).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + F.linear(att.transpose(1, 2).reshape(B, T, C), p[f"{l}.proj.w"], p[f"{l}.proj.b"])
        a = F.layer_norm(h, (C,), p[f"{l}.ln2.w"], p[f"{l}.ln2.b"], eps=1e-5)
        a = F.gelu(F.linear(a, p[f"{l}.fc.w"], p[f"{l}.fc.b"]), approximate="tanh")
        h = h + F.linear(a, p[f"{l}.fcproj.w"], p[f"{l}.fcproj.b"])
    h = F.layer_norm(h, (C,), p["lnf.w"], p["lnf.b"], eps=1e-5)
    logits = h @ p["wte"].T  # the head shares the token embeddings, as GPT-2
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 matmuls, as labkit's cublasSgemm
    torch.backends.cudnn.allow_tf32 = False
    cfg, params, x, y = load(args.dump, args.device)
    adamw = torch.optim.AdamW(params.values(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    ms, first_loss = [], None
    for s in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        loss = forward(cfg, params, x, y)
        adamw.zero_grad(set_to_none=False)
        loss.backward()
        adamw.step()
        value = loss.item()  # labkit's step also brings the loss to the host
        sync()
        elapsed = (time.perf_counter() - start) * 1e3
        if s == 0:
            first_loss = value
        if s >= args.warmup:
            ms.append(elapsed)
    median = statistics.median(ms)
    B, T = x.shape
    print(f"pytorch  {args.device:>4}  {cfg.get('model', 'tiny-gpt')} ({sum(p.numel() for p in params.values())} parameters), B={B} T={T}: "
          f"first loss {first_loss:.6f}, step {median:.3f} ms median of {args.steps} "
          f"({B * T / median * 1e3:.0f} tokens/s); torch {torch.__version__}")
    if args.json:
        json.dump({"framework": "pytorch", "torch": torch.__version__, "device": args.device, "batch": B, "seq": T,
                   "first_loss": first_loss, "step_ms": median, "steps": args.steps}, open(args.json, "w"), indent=2)


if __name__ == "__main__":
    main()
