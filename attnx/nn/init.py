"""How a model's weights start (`lm.init`): each module's own PyTorch initialisation, or GPT-2's normal one.

    torch   every module's `reset_parameters`: nn.Embedding N(0, 1), nn.Linear U(±1/√fan_in) weights and
            biases, each mechanism's own choices (the default: what attnx has always done)
    normal  every nn.Linear and nn.Embedding weight N(0, std), their biases 0, an embedding's padding row 0;
            other parameters (norms, convolutions, a mechanism's own tensors) keep theirs. Zoology's
            `_init_weights` (zoology/model.py, std 0.02, GPT-2's `initializer_range`) without its
            residual rescaling, which names `out_proj` and `fc2` and so reaches none of its Based or
            BaseConv models' weights

On MQAR at Zoology's setting (Based, d 64, 1,024 tokens, its data and training loop: benchmarks/README.md
§17) this is the difference that matters most: with everything else Zoology's, PyTorch's start was still
at chance after 1,000 steps (0.003) where N(0, 0.02) reached 0.943.
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
