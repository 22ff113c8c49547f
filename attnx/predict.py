"""`attnx predict ckpt=PATH input="..."`: decode or classify one input with a trained checkpoint.

The checkpoint is read with `torch.load(weights_only=True)`: attnx stores its model spec as plain
data, so no pickled code runs. For attention mechanisms it also prints, per output step (or for
the whole input when classifying), the source tokens that received the most attention.
"""

from __future__ import annotations

import sys
import typing
from typing import Any

from attnx.schema import DecodeConfig

USAGE = """usage: attnx predict ckpt=PATH input=TEXT [decode.beam_size=N] [decode.length_penalty=A]
                     [decode.max_len_ratio=R] [top_k=K]

Decodes (seq2seq) or classifies (classification) TEXT with the model in checkpoint PATH."""
DECODE_TYPES = typing.get_type_hints(DecodeConfig)  # train.yaml's `decode:` keys and their types


def parse(argv: list[str]) -> dict[str, str]:
    if not argv or argv[0] in ("-h", "--help"):
        raise SystemExit(USAGE)
    args = {}
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"attnx predict: expected key=value, got {item!r}\n{USAGE}")
        args[key] = value
    unknown = set(args) - {"ckpt", "input", "top_k", *(f"decode.{k}" for k in DECODE_TYPES)}
    missing = {"ckpt", "input"} - set(args)
    if unknown or missing:
        problem = (
            f"unknown {', '.join(sorted(unknown))}" if unknown else f"missing {', '.join(sorted(missing))}"
        )
        raise SystemExit(f"attnx predict: {problem}\n{USAGE}")
    return args


def load(path: str, decode: dict[str, Any] | None = None) -> Any:
    """The LightningModule stored in a checkpoint, in eval mode on the CPU. Its model spec is upgraded
    to today's registry (renamed plugins, dropped hyperparameters: `registry.upgrade`)."""
    import torch

    from attnx import registry
    from attnx.lit import lit_module

    registry.load_all()
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if "attnx_spec" not in checkpoint:
        raise SystemExit(f"attnx predict: {path} is not an attnx checkpoint (no model spec inside)")
    spec = checkpoint["attnx_spec"]
    for kind in ("task", "encoder", "attention", "score"):
        if spec[kind] is not None:
            spec[kind] = registry.upgrade(kind, spec[kind])
    spec["decode"].update(decode or {})
    module = lit_module(spec)
    module.load_state_dict(checkpoint["state_dict"])
    return module.eval()


def main(argv: list[str]) -> int:
    args = parse(argv)
    import torch

    from attnx import registry
    from attnx.tasks.base import Batch
    from attnx.track.maps import attention_maps
    from attnx.vocab import Vocab

    decode = {k.split(".")[1]: DECODE_TYPES[k.split(".")[1]](v) for k, v in args.items() if "." in k}
    try:
        module = load(args["ckpt"], decode)
    except FileNotFoundError:
        print(f"attnx predict: no checkpoint at {args['ckpt']}", file=sys.stderr)
        return 2
    spec, top_k = module.spec, int(args.get("top_k", 3))
    task = registry.build("task", spec["task"])
    task.src_vocab = Vocab(spec["src_itos"])  # the trained vocabulary; the task's data is never built
    try:
        src, src_len = task.encode_source(args["input"])
    except ValueError as error:
        print(f"attnx predict: {error}", file=sys.stderr)
        return 2
    batch = Batch(src, src_len)
    with torch.no_grad():
        if spec["model_type"] == "classification":
            probs = module.model(src, src_len, need_weights=False)[0].softmax(-1)[0]
            best = int(probs.argmax())
            print(f"{spec['classes'][best]}  (p={probs[best]:.3f})")
        else:
            words = Vocab(spec["tgt_itos"]).decode(module.decode(src, src_len)[0].tolist())
            print(task.detokenize(words))
    # The weights behind each output token (or the pooling), averaged over heads.
    for attention_map in attention_maps(module, batch, heads="mean", self_attention=False)[0]:
        print(f"{attention_map.panels[0]}: {attention_map.row_axis} <- {attention_map.col_axis}, top {top_k}")
        for label, row in zip(attention_map.rows, attention_map.weights[0]):
            print(f"  {label:>12} <- {_top(row, attention_map.cols, top_k)}")
    return 0


def _top(weights: Any, tokens: list[str], k: int) -> str:
    values, index = weights.topk(min(k, len(tokens)))
    return "  ".join(f"{tokens[i]}:{v:.2f}" for v, i in zip(values.tolist(), index.tolist()))
