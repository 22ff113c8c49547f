"""attnx: compare attention mechanisms by configuration alone.

This is the one import a plugin needs: the base classes of the five kinds, a model type's declaration
(`ModelType`, `Metric`, `register_model_type`: what a new kind of model is made of), the building blocks the
shipped plugins (`attnx.contrib`) use, the `register_*` decorators and `available`, all from `attnx`.
`import attnx` stays light (`attnx --help`, `attnx plugins` start fast): the torch-backed names are
imported on first use, through `__getattr__`; type checkers see them through the TYPE_CHECKING block.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from attnx.registry import (
    Metric,
    ModelType,
    Slot,
    available,
    register_attention,
    register_decoder,
    register_encoder,
    register_model_type,
    register_score,
    register_task,
)

if TYPE_CHECKING:
    from attnx.nn.attention import Attention, masked_softmax, score_state, visible
    from attnx.nn.classic import ScoredAttention, SoftmaxAttention
    from attnx.nn.decoders import Decoder
    from attnx.nn.encoders import Encoder, EncoderOutput
    from attnx.nn.multihead import HeadsAttention, MultiHeadAttention
    from attnx.nn.positions import Positions
    from attnx.nn.scores import ScaledDotScore, Score, ScoreFactory, build_score, require_equal_dims
    from attnx.tasks.base import PaddedSplit, Task
    from attnx.tasks.text import TextTask

__version__ = "0.1.0"

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "Score": "attnx.nn.scores",
    "ScoreFactory": "attnx.nn.scores",
    "ScaledDotScore": "attnx.nn.scores",
    "build_score": "attnx.nn.scores",
    "require_equal_dims": "attnx.nn.scores",
    "Attention": "attnx.nn.attention",
    "ScoredAttention": "attnx.nn.classic",
    "SoftmaxAttention": "attnx.nn.classic",
    "HeadsAttention": "attnx.nn.multihead",
    "MultiHeadAttention": "attnx.nn.multihead",
    "masked_softmax": "attnx.nn.attention",
    "score_state": "attnx.nn.attention",
    "visible": "attnx.nn.attention",
    "Positions": "attnx.nn.positions",
    "Encoder": "attnx.nn.encoders",
    "EncoderOutput": "attnx.nn.encoders",
    "Decoder": "attnx.nn.decoders",
    "Task": "attnx.tasks.base",
    "PaddedSplit": "attnx.tasks.base",
    "TextTask": "attnx.tasks.text",
}

# the plugin API: what a plugin may import from attnx (a test checks every lazy name is listed)
__all__ = [
    "Attention",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "HeadsAttention",
    "Metric",
    "ModelType",
    "MultiHeadAttention",
    "PaddedSplit",
    "Positions",
    "ScaledDotScore",
    "Score",
    "ScoreFactory",
    "ScoredAttention",
    "Slot",
    "SoftmaxAttention",
    "Task",
    "TextTask",
    "available",
    "build_score",
    "masked_softmax",
    "register_attention",
    "register_decoder",
    "register_encoder",
    "register_model_type",
    "register_score",
    "register_task",
    "require_equal_dims",
    "score_state",
    "visible",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'attnx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
