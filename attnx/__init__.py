"""attnx: compare attention mechanisms by configuration alone.

`import attnx` stays light: torch-backed names are imported on first use.
"""

from importlib import import_module
from typing import Any

from attnx.registry import (
    available,
    register_attention,
    register_decoder,
    register_encoder,
    register_score,
    register_task,
)

__version__ = "0.1.0"

_LAZY = {
    "Score": "attnx.nn.scores",
    "Attention": "attnx.nn.attention",
    "Encoder": "attnx.nn.encoders",
    "EncoderOutput": "attnx.nn.encoders",
    "Decoder": "attnx.nn.decoders",
    "Positions": "attnx.nn.positions",
    "Task": "attnx.tasks.base",
}

__all__ = [
    "available",
    "register_attention",
    "register_decoder",
    "register_encoder",
    "register_score",
    "register_task",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnx' has no attribute {name!r}")
