"""How a model's weights start (`lm.init`): each module's own PyTorch initialisation, or GPT-2's normal one.

    torch   every module's `reset_parameters`: nn.Embedding N(0, 1), nn.Linear U(±1/√fan_in) weights and
            biases, each mechanism's own choices (the default: what attnx has always done)
    normal  every nn.Linear and nn.Embedding weight N(0, std), their biases 0, an embedding's padding row 0;
            other parameters (norms, convolutions, a mechanism's own tensors) keep theirs. Zoology's
            `_init_weights` (zoology/model.py, std 0.02, GPT-2's `initializer_range`) without its
            residual rescaling, which names `out_proj` and `fc2` and so reaches none of its Based or
            BaseConv models' weights

On MQAR (Zoology's Based at d 64, 1,024 tokens: benchmarks/README.md §17) the unit-variance embedding and
its tied read-out's scale are what the recall circuit has to overcome first: N(0, 0.02) starts every query and
key near zero, where Based's kernel 1 + s + s²/2 is flat, and learns it several times faster per step.
"""

from __future__ import annotations

from torch import nn

INITS = ("torch", "normal")


def check_init(kind: str) -> None:
    if kind not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}; got init={kind!r}")


def initialise(model: nn.Module, kind: str, std: float = 0.02) -> None:
    """Re-initialise `model`'s nn.Linear and nn.Embedding weights by `kind` (INITS); "torch" changes
    nothing."""
    check_init(kind)
    if not std > 0:
        raise ValueError(f"init_std must be > 0, got init_std={std}")
    if kind == "torch":
        return
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            bias = getattr(module, "bias", None)
            if bias is not None:
                nn.init.zeros_(bias)
            padding = getattr(module, "padding_idx", None)
            if padding is not None:
                module.weight.data[padding].zero_()
