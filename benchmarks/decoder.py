"""Benchmark 3: the additive (Bahdanau) decoder with its key work hoisted vs a naive per-step version.

attnx's RNNDecoder calls the mechanism's `prepare()` once per sequence, so the additive score's
U·h_j (and the value masking) is done before the time loop; the naive version redoes it at every
step, as a decoder calling `attention(query, keys, values, mask)` would. Both run the same modules
and are checked to give the same logits.

    python benchmarks/decoder.py [--steps 50 --source 50 --batch 64 --hidden 128]

Goal: hoisted >= 1.5x the naive version at T = 50 (training step: teacher-forced forward+backward).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import common
import torch

from attnx import registry
from attnx.bench.measure import interleaved, ratios
from attnx.nn.attention import Mechanism
from attnx.nn.decoders import RNNDecoder
from attnx.nn.encoders import EncoderOutput

VOCAB = 32


def naive(decoder: RNNDecoder, enc: EncoderOutput, tgt_in: torch.Tensor) -> torch.Tensor:
    """Teacher forcing that prepares the keys again at every step."""
    attention = decoder.attention
    state = decoder.init_state(enc)
    logits = []
    for t in range(tgt_in.size(1)):
        memory = attention.prepare(*attention.memory(enc.states, enc.summary, enc.mask))
        logits_t, state, _ = decoder.step(tgt_in[:, t], state._replace(memory=memory), need_weights=False)
        logits.append(logits_t)
    return torch.stack(logits, dim=1)


def candidates(args: argparse.Namespace, device: torch.device) -> dict[str, Callable[[], None]]:
    h = args.hidden
    additive = Mechanism(registry.get("attention", "additive"))
    decoder = RNNDecoder(VOCAB, h, additive, embed_dim=64, hidden_dim=h, dropout=0.0).to(device)
    lengths = torch.linspace(args.source // 2, args.source, args.batch, device=device).long()
    mask = torch.arange(args.source, device=device) < lengths[:, None]
    states = (torch.randn(args.batch, args.source, h, device=device) * mask[..., None]).requires_grad_()
    enc = EncoderOutput(states, torch.randn(args.batch, h, device=device), mask)
    tgt_in = torch.randint(4, VOCAB, (args.batch, args.steps), device=device)
    forwards = {
        "hoisted": lambda: decoder(enc, tgt_in, need_weights=False)[0],
        "naive": lambda: naive(decoder, enc, tgt_in),
    }
    with torch.no_grad():
        torch.testing.assert_close(forwards["naive"](), forwards["hoisted"](), atol=1e-5, rtol=1e-5)

    def train(forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            forward().sum().backward()
            decoder.zero_grad(set_to_none=True)
            states.grad = None

        return step

    def infer(forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            with torch.no_grad():
                forward()

        return step

    return {
        **{f"{name} train": train(f) for name, f in forwards.items()},
        **{f"{name} forward": infer(f) for name, f in forwards.items()},
    }


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="target length T")
    p.add_argument("--source", type=int, default=50, help="source length (keys)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    args = p.parse_args()
    device = common.start(args)
    fns = candidates(args, device)
    times = interleaved(fns, device, common.rounds(list(fns.values()), device, args.budget), warmup=2)
    rows = []
    for mode in ("train", "forward"):
        hoisted, slow = f"hoisted {mode}", f"naive {mode}"
        speedup = ratios({k: times[k] for k in (hoisted, slow)}, slow)[hoisted]
        ms = [statistics.median(times[k]) * 1e3 for k in (hoisted, slow)]
        rows.append([mode, args.steps, args.source, args.batch, args.hidden, *ms, speedup])
    header = ["step", "T", "source", "batch", "hidden", "hoisted ms", "naive ms", "speed-up (≥1.5)"]
    speedup = {row[0]: row[-1] for row in rows}
    headline = {
        "what": f"additive decoder, hoisted keys vs naive, T={args.steps}",
        "goal": "≥ 1.5×",
        "measured": f"{speedup['train']:.2f}× (train), {speedup['forward']:.2f}× (inference)",
        "verdict": common.verdict(speedup["train"] >= 1.5),
    }
    common.record(args, {"steps": common.table(header, rows)}, speedup, [headline])


if __name__ == "__main__":
    main()
