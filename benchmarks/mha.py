"""Benchmark 2: attnx `multi_head` + `scaled_dot` forward+backward vs torch.nn.MultiheadAttention and
vs bare SDPA (three projections, F.scaled_dot_product_attention, output projection: the least code
that computes the same thing). All three share weights, inputs and a padding mask (lengths N/2..N),
and their outputs are checked equal before timing.

    python benchmarks/mha.py [--lengths 128,256,512,1024,2048] [--dim 64 --heads 4 --batch 8]

Goals: speed >= 1.0x nn.MultiheadAttention and >= 0.95x bare SDPA at every N.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import common
import torch
import torch.nn.functional as F
from torch import nn

from attnx.bench.measure import interleaved, ratios
from attnx.nn.multihead import MultiHeadAttention


def candidates(n: int, d: int, heads: int, batch: int, device: torch.device) -> dict[str, Callable[[], None]]:
    ours = MultiHeadAttention(d, d, d, num_heads=heads).to(device)
    theirs = nn.MultiheadAttention(d, heads, batch_first=True).to(device)
    with torch.no_grad():  # the same function: W_q, W_k, W_v packed, no input bias, same W_o
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.in_proj_bias.zero_()
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        theirs.out_proj.bias.copy_(ours.W_o.bias)
    x = torch.randn(batch, n, d, device=device, requires_grad=True)
    lengths = torch.linspace(n // 2, n, batch, device=device).long()
    mask = torch.arange(n, device=device) < lengths[:, None]  # True = a real key
    grad = torch.randn(batch, n, d, device=device)

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (heads, d // heads)).transpose(1, 2)

    def bare() -> torch.Tensor:
        q, k, v = (split(F.linear(x, lin.weight)) for lin in (ours.W_q, ours.W_k, ours.W_v))
        heads_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        return ours.W_o(heads_out.transpose(1, 2).flatten(2))

    forwards = {
        "attnx multi_head": lambda: ours(x, x, x, mask, need_weights=False)[0],
        "nn.MultiheadAttention": lambda: theirs(x, x, x, key_padding_mask=~mask, need_weights=False)[0],
        "bare SDPA": bare,
    }
    with torch.no_grad():
        outputs = [f() for f in forwards.values()]
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], atol=1e-4, rtol=1e-4)

    def train(forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            forward().backward(grad)
            for module in (ours, theirs):
                module.zero_grad(set_to_none=True)
            x.grad = None

        return step

    return {name: train(forward) for name, forward in forwards.items()}


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--lengths", default="128,256,512,1024,2048")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    device = common.start(args)
    print(f"fwd+bwd, d={args.dim}, heads={args.heads}, batch={args.batch}, padding mask (lengths N/2..N)\n")
    rows = []
    for n in (int(v) for v in args.lengths.split(",")):
        fns = candidates(n, args.dim, args.heads, args.batch, device)
        times = interleaved(fns, device, common.rounds(list(fns.values()), device, args.budget), warmup=2)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        vs_torch = ratios(times, "nn.MultiheadAttention")["attnx multi_head"]
        vs_bare = ratios(times, "bare SDPA")["attnx multi_head"]
        rows.append([n, *ms.values(), vs_torch, vs_bare])
    header = ["N", *(f"{name} ms" for name in fns), "speed vs nn.MHA (≥1.0)", "vs bare SDPA (≥0.95)"]
    vs_nn, bare = [row[-2] for row in rows], [row[-1] for row in rows]
    values = {"nn_low": min(vs_nn), "nn_high": max(vs_nn), "bare_low": min(bare), "bare_high": max(bare)}
    headlines = [
        {
            "what": "`multi_head` fwd+bwd vs `nn.MultiheadAttention`",
            "goal": "≥ 1.0×",
            "measured": f"{min(vs_nn):.2f}–{max(vs_nn):.2f}×",
            "verdict": common.verdict(min(vs_nn) >= 1.0),
        },
        {
            "what": "`multi_head` fwd+bwd vs bare SDPA",
            "goal": "≥ 0.95×",
            "measured": f"{min(bare):.2f}–{max(bare):.2f}×",
            "verdict": common.verdict(min(bare) >= 0.95),
        },
    ]
    common.record(args, {"lengths": common.table(header, rows)}, values, headlines)


if __name__ == "__main__":
    main()
