"""Benchmark 6: Transformer greedy decoding with the key/value cache vs recomputing the prefix.

`TransformerDecoder.step` runs every layer on the new token only; each layer's self-attention keeps
its keys and values (`KVCache`; `multi_head` extends its projected K, V). The reference decodes the
way a decoder without a cache must: at step t, a teacher-forced pass over the whole prefix
y_0..y_t, keeping the last position's logits. Both decode the same random model greedily (no EOS
stop, so both run every step) and are checked to emit the same tokens.

    python benchmarks/cached_decoding.py [--steps 64,16 --source 32 --batch 32,1 --layers 2 --dim 64]

Goal: cached >= 3x recomputing the prefix at 64 target tokens and batch 32 (the first --steps and --batch).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Callable

import common
import torch

from attnx import registry
from attnx.bench.measure import interleaved, ratios
from attnx.nn.attention import Mechanism
from attnx.nn.decoders import TransformerDecoder
from attnx.nn.encoders import EncoderOutput
from attnx.vocab import BOS, PAD

VOCAB = 32


def pick(logits: torch.Tensor) -> torch.Tensor:
    """Greedy choice as `Seq2Seq.greedy` makes it: never PAD or BOS."""
    return logits.index_fill(-1, torch.tensor([PAD, BOS], device=logits.device), float("-inf")).argmax(-1)


def cached(decoder: TransformerDecoder, enc: EncoderOutput, steps: int) -> torch.Tensor:
    state = decoder.init_state(enc)
    y = torch.full((enc.mask.size(0),), BOS, device=enc.mask.device)
    tokens = []
    for _ in range(steps):
        logits, state, _ = decoder.step(y, state, need_weights=False)
        y = pick(logits)
        tokens.append(y)
    return torch.stack(tokens, 1)


def recomputed(decoder: TransformerDecoder, enc: EncoderOutput, steps: int) -> torch.Tensor:
    prefix = torch.full((enc.mask.size(0), 1), BOS, device=enc.mask.device)
    for _ in range(steps):
        logits, _ = decoder(enc, prefix, need_weights=False)
        prefix = torch.cat([prefix, pick(logits[:, -1])[:, None]], dim=1)
    return prefix[:, 1:]


def candidates(args, device: torch.device) -> dict[str, Callable[[], torch.Tensor]]:
    d = args.dim
    cross = Mechanism(registry.get("attention", "multi_head"))
    decoder = TransformerDecoder(VOCAB, d, cross, d_model=d, num_layers=args.layers, ff_dim=2 * d)
    decoder = decoder.to(device).eval()
    lengths = torch.linspace(args.source // 2, args.source, args.batch, device=device).long()
    mask = torch.arange(args.source, device=device) < lengths[:, None]
    enc = EncoderOutput(torch.randn(args.batch, args.source, d, device=device) * mask[..., None], None, mask)

    def run(decode: Callable[..., torch.Tensor]) -> Callable[[], torch.Tensor]:
        def step() -> torch.Tensor:
            with torch.no_grad():
                return decode(decoder, enc, args.steps)

        return step

    fns = {"cached": run(cached), "recomputed": run(recomputed)}
    same = torch.equal(fns["cached"](), fns["recomputed"]())
    if not same:
        raise SystemExit("cached and recomputed decoding emitted different tokens")
    return fns


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=ints, default=[64, 16], help="target tokens decoded (a comma list)")
    p.add_argument("--source", type=int, default=32, help="source length (cross-attention keys)")
    p.add_argument("--batch", type=ints, default=[32, 1], help="batch sizes (a comma list)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64, help="d_model (4 heads)")
    args = p.parse_args()
    device = common.start(args)
    rows, values = [], {}
    for batch, steps in itertools.product(args.batch, args.steps):
        setting = argparse.Namespace(**{**vars(args), "steps": steps, "batch": batch})
        fns = candidates(setting, device)
        times = interleaved(fns, device, common.rounds(list(fns.values()), device, args.budget), warmup=1)
        speedup = ratios(times, "recomputed")["cached"]
        ms = [statistics.median(times[k]) * 1e3 for k in ("cached", "recomputed")]
        rows.append([steps, args.source, batch, args.layers, args.dim, *ms, speedup, "yes"])
        values[f"T{steps}_B{batch}"] = speedup
    header = ["T", "source", "batch", "layers", "d_model", "cached ms", "recomputed ms", "speed-up (≥3)"]
    header.append("same tokens")
    steps, batch = args.steps[0], args.batch[0]
    goal = values[f"T{steps}_B{batch}"]
    others = [row for row in rows if row[0] == steps and row[2] != batch]
    also = "".join(f" ({row[-2]:.2f}× at batch {row[2]})" for row in others)
    headline = {
        "what": f"Transformer greedy decoding, {steps} tokens, KV cache vs recomputing the prefix",
        "goal": "≥ 3×",
        "measured": f"{goal:.2f}× at batch {batch}{also}",
        "verdict": common.verdict(goal >= 3) + f" at batch {batch}",
    }
    common.record(args, {"settings": common.table(header, rows)}, values, [headline])


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


if __name__ == "__main__":
    main()
