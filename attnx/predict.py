"""`attnx predict ckpt=PATH input="..."`: decode or classify one input with a trained checkpoint.

The checkpoint is verified and read with `torch.load(weights_only=True)` (attnx.lit.checkpoints):
attnx stores its model spec as plain data, so no pickled code runs. For attention mechanisms it
also prints, per output step (or for the whole input when classifying), the source tokens that
received the most attention, and with `self_attention=true` each self-attention layer's top tokens.

Bad input (an unreadable checkpoint, an empty or too long input, a mistyped option) is one line on
stderr and exit 2. Input tokens the model never saw are read as `<unk>`, with a one-line warning.
A checkpoint saved with a hyperparameter that its class no longer takes (removed or renamed since)
would be rebuilt differently from the model that was trained: refused (exit 2) unless `strict=false`,
and then the first line of the output names what was dropped.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, cast

from attnx.cli import Needs, unmet
from attnx.config.schema import DecodeConfig

if TYPE_CHECKING:
    from attnx.models.spec import ModelSpec

USAGE = """usage: attnx predict ckpt=PATH input=TEXT [decode.beam_size=N] [decode.length_penalty=A]
                     [decode.max_len_ratio=R] [top_k=K] [max_input_len=N] [self_attention=true]
                     [strict=false]

Decodes (seq2seq), classifies (classification) or answers the queries in (lm, e.g. mqar) TEXT with
the model in checkpoint PATH. Unset decode.* keys keep the checkpoint's. max_input_len defaults to
the encoder's or lm's max_len (self_attn, lm), else 1024 tokens. self_attention=true adds the
encoder's and decoder's self-attention, layer by layer (an lm's is always shown). strict=false
rebuilds a model whose saved hyperparameters its class no longer takes, without them (today's defaults
stand in), and says so in the first line of the output."""

# The default max_input_len of encoders without a positional max_len (RNNs take any length, and a
# decoder runs up to decode.max_len_ratio times as many steps: a 10,000-token input takes minutes).
MAX_INPUT_LEN = 1024


@dataclass
class PredictOptions:
    """predict's typed options besides `ckpt` and `input` (whose text is taken as written); `decode`
    is train.yaml's `decode:` schema, its unset keys left MISSING."""

    top_k: int = 3
    self_attention: bool = False
    max_input_len: Optional[int] = None  # noqa: UP045 - OmegaConf needs typing.Optional
    strict: bool = True  # false: rebuild without saved hyperparameters the classes no longer take
    decode: DecodeConfig = field(default_factory=DecodeConfig)


BOUNDS = {"top_k": (">=", 1), "max_input_len": (">=", 1)}  # next to attnx.config.validation.BOUNDS' decode.*

# options that act only with another, given or the checkpoint's (`attnx.cli.Needs`): of a seq2seq's decoding
NEEDS = (
    Needs(
        "decode.length_penalty",
        "ranks beam search's answers",
        "decode.beam_size > 1",
        lambda decode: decode["beam_size"] > 1,
    ),
)


class PredictError(Exception):
    """Bad input to `attnx predict`; the message is the one line the user sees."""


def parse(argv: list[str]) -> tuple[str, str, Any]:
    """(ckpt, input, the typed and bounds-checked `PredictOptions`) from `key=value` arguments."""
    from omegaconf import DictConfig, OmegaConf

    from attnx.config import compose as config
    from attnx.config import validation

    pairs = [item.partition("=") for item in argv]
    bare = [key for key, sep, _ in pairs if not sep]
    if bare:
        raise PredictError(f"expected key=value, got {bare[0]!r} (see attnx predict --help)")
    args = {key: value for key, _, value in pairs}
    missing = [key for key in ("ckpt", "input") if key not in args]
    if missing:
        raise PredictError(f"missing {', '.join(missing)} (see attnx predict --help)")
    rest = [item for item in argv if item.partition("=")[0] not in ("ckpt", "input")]
    try:
        options = OmegaConf.merge(OmegaConf.structured(PredictOptions), OmegaConf.from_dotlist(rest))
        validation.check_bounds(cast(DictConfig, options), {**validation.BOUNDS, **BOUNDS})  # and train's
    except config.ConfigError as error:
        raise PredictError(str(error)) from error
    except Exception as error:  # OmegaConf's type errors and unknown keys, naming the key
        raise PredictError(config.one_line(error)) from error
    return args["ckpt"], args["input"], options


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint at `path` as plain data, verified (attnx.lit.checkpoints: checksum, safe loading,
    finite weights); anything wrong with it is a PredictError naming the file."""
    from attnx.lit.checkpoints import CheckpointError
    from attnx.lit.checkpoints import load as load_checkpoint

    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError as error:
        raise PredictError(f"ckpt={path}: {error.reason}") from None
    if "attnx_spec" not in checkpoint:
        raise PredictError(f"ckpt={path}: not an attnx checkpoint (no model spec inside)")
    return checkpoint


def load(path: str, decode: dict[str, Any] | None = None, dropped: list[str] | None = None) -> Any:
    """The LightningModule stored in a checkpoint, in eval mode on the CPU. Its model spec is upgraded
    to today's (`ModelSpec.from_dict`: an older checkpoint's layout, renamed plugins); a saved
    hyperparameter that a class no longer takes is a PredictError, unless `dropped` is given: it is then
    left out and listed there."""
    from attnx import registry
    from attnx.lit import lit_module
    from attnx.models.spec import ModelSpec

    registry.load_all()
    checkpoint = read_checkpoint(path)
    try:
        spec = ModelSpec.from_dict(checkpoint["attnx_spec"], dropped)
    except registry.StaleArguments as error:
        raise PredictError(
            f"ckpt={path}: {error}; rebuilt without it, the model would differ from the one "
            "trained (strict=false runs it anyway)"
        ) from None
    module = lit_module(spec.with_decode(decode or {}))
    module.load_state_dict(checkpoint["state_dict"])
    return module.eval()


def input_limit(spec: ModelSpec, requested: int | None) -> tuple[int, str]:
    """The longest input to decode and where that number comes from: `max_input_len=` if given,
    else the positional `max_len` of the part that reads it (the encoder, an lm), else MAX_INPUT_LEN.
    That max_len also caps what may be requested."""
    kind = spec.parts[0]
    section = getattr(spec, kind)
    positional = section.get("max_len")
    if positional is not None and requested is not None and requested > positional:
        raise PredictError(
            f"max_input_len={requested}: {kind}={section.get('name', 'default')} takes at most "
            f"{kind}.max_len={positional} tokens"
        )
    if requested is not None:
        return requested, ""
    if positional is not None:
        return positional, f" (the {kind}'s max_len)"
    return MAX_INPUT_LEN, " (the default)"


def encode(task: Any, text: str, limit: tuple[int, str]) -> tuple[Any, Any]:
    """`src`, `src_len` of the input; too long or empty is a PredictError, and tokens the model
    never saw are named in a warning (they are read as <unk>)."""
    try:
        src, src_len = task.encode_source(text)
    except ValueError as error:
        raise PredictError(str(error)) from error
    most, origin = limit
    if src.shape[1] > most:
        raise PredictError(
            f"input has {src.shape[1]} tokens, more than max_input_len={most}{origin}; shorten it"
        )
    unknown = unknown_tokens(task, text)
    if unknown:
        print(f"attnx predict: warning: read as <unk>, unknown to the model: {unknown}", file=sys.stderr)
    return src, src_len


def unknown_tokens(task: Any, text: str) -> str:
    """The tokens of `text` that the model's vocabulary lacks, each once, comma-separated ("" if none)."""
    from attnx.vocab import SPECIALS

    unknown = [t for t in task.tokenize(text) if t not in task.src_vocab.stoi and t not in SPECIALS]
    return ", ".join(dict.fromkeys(unknown))


def trained_task(spec: ModelSpec) -> Any:
    """The spec's task with the trained vocabulary, its data never built: what reads and writes tokens."""
    from attnx import registry
    from attnx.vocab import Vocab

    task = registry.build("task", spec.task)
    task.src_vocab = Vocab(spec.src_itos)
    return task


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    from attnx import registry

    try:
        return predict(*parse(argv))
    except (PredictError, registry.RegistryError, registry.PluginImportError) as error:
        print(f"attnx predict: {error}", file=sys.stderr)
        return 2


def predict(ckpt: str, text: str, options: Any) -> int:
    """Print the model's output for `text`, then the most-attended source tokens per output step."""
    from omegaconf import OmegaConf

    from attnx.tasks.base import Batch

    decode = {k: options.decode[k] for k in options.decode if not OmegaConf.is_missing(options.decode, k)}
    dropped: list[str] | None = None if options.strict else []
    module = load(ckpt, decode, dropped)
    refusal = unmet(NEEDS, lambda option: option.removeprefix("decode.") in decode, module.spec.decode)
    if refusal is not None and "decoder" in module.spec.parts:  # decode.* is a decoder's search
        raise PredictError(refusal)
    if dropped:  # in the output itself: whoever reads the predictions learns the model is not as trained
        print(f"strict=false: rebuilt without saved {'; '.join(dropped)} (today's defaults stand in)")
    spec = module.spec
    task = trained_task(spec)
    src, src_len = encode(task, text, input_limit(spec, options.max_input_len))
    answer = spec.declared.piece("answer")  # the model type's: `decoded`, `classified`, `recalled`
    return int(answer(module, task, Batch(src, src_len), options))


def decoded(module: Any, task: Any, batch: Any, options: Any) -> int:
    """A seq2seq model's output text, then the source tokens behind each output token."""
    import torch

    from attnx.vocab import Vocab

    with torch.no_grad():
        tokens = module.decode(batch.src, batch.src_len)[0].tolist()
    print(task.detokenize(Vocab(module.spec.tgt_itos).decode(tokens)))
    return _attended(module, batch, options)


def classified(module: Any, task: Any, batch: Any, options: Any) -> int:
    """A classifier's class and its probability, then the input tokens its pooling weighed most."""
    import torch

    with torch.no_grad():
        probs = module.model(batch.src, batch.src_len, need_weights=False)[0].softmax(-1)[0]
    best = int(probs.argmax())
    print(f"{module.spec.classes[best]}  (p={probs[best]:.3f})")
    return _attended(module, batch, options)


def _attended(module: Any, batch: Any, options: Any) -> int:
    """The weights behind each output token (or the pooling), averaged over heads: the top source tokens."""
    from attnx.track.maps import attention_maps

    top_k = options.top_k
    for attention_map in attention_maps(module, batch, heads="mean", self_attention=options.self_attention)[
        0
    ]:
        print(f"{attention_map.panels[0]}: {attention_map.row_axis} <- {attention_map.col_axis}, top {top_k}")
        for label, row in zip(attention_map.rows, attention_map.weights[0]):
            print(f"  {label:>12} <- {_top(row, attention_map.cols, top_k)}")
    return 0


def recalled(module: Any, task: Any, batch: Any, options: Any) -> int:
    """An lm's answer at each query position of the input (`task.query_mask`), then per layer the
    positions each query attended to most (heads averaged), as position:token:weight."""
    import torch

    from attnx.track.maps import attention_maps

    top_k = options.top_k
    with torch.no_grad():
        logits, _ = module.model(batch.src, batch.src_len)
    itos = module.spec.src_itos
    tokens = [itos[i] for i in batch.src[0].tolist()]
    queries = task.query_mask(batch.src)[0].nonzero().flatten().tolist()
    if not queries:
        print("no query positions in the input: the task marks none in it")
        return 0
    print("position  query -> predicted")
    for t in queries:
        print(f"{t:>8}  {tokens[t]:>5} -> {itos[int(logits[0, t].argmax())]}")
    labels = [f"{j}:{token}" for j, token in enumerate(tokens)]
    for attention_map in attention_maps(module, batch, heads="mean")[0]:
        print(f"{attention_map.panels[0]}: query position <- key positions, top {top_k}")
        for t in queries:
            print(f"  {labels[t]:>12} <- {_top(attention_map.weights[0][t], labels, top_k)}")
    return 0


def _top(weights: Any, tokens: list[str], k: int) -> str:
    values, index = weights.topk(min(k, len(tokens)))
    return "  ".join(f"{tokens[i]}:{v:.2f}" for v, i in zip(values.tolist(), index.tolist()))
