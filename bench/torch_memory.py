"""A GPT-2 training step's memory in PyTorch, against the memory lab's estimate.

The model is the one chapter 3 holds the lab to: token and position embeddings;
blocks of LayerNorm, a fused QKV linear with bias, eager masked-softmax or
FlashAttention (F.scaled_dot_product_attention), an output projection,
LayerNorm and a 4h MLP with exact GELU; a final LayerNorm; logits tied to the
token embedding, cast to fp32, then F.cross_entropy. No dropout, fused AdamW,
autocast to bf16 where asked. Step 3 is measured (AdamW's state exists by then):
torch.cuda.memory_allocated at its start and after forward, and
max_memory_allocated over it. The lab runs the same configuration and the table
puts the two side by side.

    python3 bench/torch_memory.py --model gpt2 --batch 8 --precision fp32 --attention eager \
        --lab build/default/labs/memory --json out/torch_memory.json
"""
import argparse
import json
import subprocess
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

# The memory lab's presets this script can build: layers, hidden, heads (GPT-2's vocabulary and 1024 positions).
SHAPES = {"gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16), "gpt2-large": (36, 1280, 20),
          "gpt2-xl": (48, 1600, 25)}
VOCAB, POSITIONS = 50257, 1024


class Block(nn.Module):
    def __init__(self, hidden, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc, self.fc_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def attend(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(C, dim=2))
        if self.attention == "flash":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.heads) ** 0.5)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, attention):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, hidden), nn.Embedding(POSITIONS, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = (self.ln_f(x) @ self.wte.weight.t()).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def measure(args):
    torch.manual_seed(0)
    model = Gpt(*SHAPES[args.model], args.attention).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(VOCAB, (args.batch, args.seq), device="cuda")
    targets = torch.randint(VOCAB, (args.batch, args.seq), device="cuda")
    for step in range(3):
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step == 2:
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "autocast"):
            loss = model(idx, targets)
        if step == 2:
            after_forward = torch.cuda.memory_allocated()
        loss.backward()
        optimizer.step()
        del loss
    torch.cuda.synchronize()
    return {"params": sum(p.numel() for p in model.parameters()), "start": start, "after_forward": after_forward,
            "peak": torch.cuda.max_memory_allocated()}


def estimate(args):
    precision = ["--autocast"] if args.precision == "autocast" else ["--precision", "fp32"]
    with tempfile.NamedTemporaryFile(suffix=".json") as report_file:
        subprocess.run([args.lab, "--model", args.model, *precision, "--attention", args.attention, "--micro-batch",
                        str(args.batch), "--seq", str(args.seq), "--optimizer", "adamw", "--dropout", "off",
                        "--timeline", "--json", report_file.name],
                       check=True, stdout=subprocess.DEVNULL)
        report = json.load(open(report_file.name))
    phases = {row["phase"]: row["bytes"] for row in report["timeline"]}
    return {"start": phases["start of step"], "after_forward": phases["forward"], "peak": max(phases.values())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(SHAPES), default="gpt2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--precision", choices=["fp32", "autocast"], default="fp32")
    parser.add_argument("--attention", choices=["eager", "flash"], default="eager")
    parser.add_argument("--lab", default="build/default/labs/memory")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this measures a GPU's allocator")
    measured, estimated = measure(args), estimate(args)
    print(f"{args.model}, {args.precision}, {args.attention} attention, batch {args.batch} x {args.seq}, on "
          f"{torch.cuda.get_device_name()}; {measured['params']:,} parameters")
    print(f"{'term':<14}{'PyTorch':>16}{'labkit':>16}{'off':>8}")
    terms = {"start of step": (measured["start"], estimated["start"]),
             "activations": (measured["after_forward"] - measured["start"],
                             estimated["after_forward"] - estimated["start"]),
             "peak": (measured["peak"], estimated["peak"])}
    worst = 0.0
    for term, (m, e) in terms.items():
        worst = max(worst, abs(e - m) / m)
        print(f"{term:<14}{m:>16,}{int(e):>16,}{100 * (e - m) / m:>7.1f}%")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"config": vars(args), "measured": measured, "estimated": estimated}, out, indent=2)
    raise SystemExit(0 if worst <= 0.03 else 1)


if __name__ == "__main__":
    main()
