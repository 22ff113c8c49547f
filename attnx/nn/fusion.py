"""Compiled regions: `torch.compile` on the parts of a training step that fuse, the rest left eager.

A module names its fusable methods in `fusable` (the RNN decoder: its teacher-forced recurrence, cell
and cross-attention together). `compile_regions` replaces each with a `Region`, which compiles it whole
(`fullgraph=True`) on its first call and runs the compiled code after; the module decides when to call
it (the RNN decoder: in training only, where the same few shapes repeat for hundreds of steps).

Why regions and not the whole model: Dynamo cannot trace torch's RNN modules (`nn.GRU`, `nn.LSTM`) at
all, not even their parameters, so a region gets them as tensors; and a whole model breaks its graph
at every data-dependent shape (the decoder's active rows, a batch's length), recompiling per batch.

A region that cannot be compiled (a graph break, an operator Inductor cannot lower, a recompile past
Dynamo's limit) runs eager from then on, and says so once, naming the function and the reason. Compiled
code draws dropout masks from torch's generator as eager code does (`fallback_random`), so compiling
changes no random number and results only by float rounding.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger("attnx")


class Region:
    """`fn` compiled whole on its first call, eager for good once it cannot be; `graphs` counts the
    graphs its calls compiled (one per new input shape Dynamo cannot cover with the ones it has)."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn, self.name = fn, name
        self.compiled: Callable[..., Any] | None = None
        self.eager_because: str | None = None
        self.graphs = 0

    def __call__(self, *args: Any) -> Any:
        if self.eager_because is not None:
            return self.fn(*args)
        if self.compiled is None:
            self.compiled = torch.compile(self.fn, fullgraph=True)
        from torch._dynamo.exc import TorchDynamoException
        from torch._dynamo.utils import counters

        graphs = counters["stats"]["unique_graphs"]
        try:
            result = self.compiled(*args)
        except TorchDynamoException as error:
            self.eager_because = reason(error)
            log.warning("compile: %s runs eager: %s", self.name, self.eager_because)
            return self.fn(*args)
        self.graphs += counters["stats"]["unique_graphs"] - graphs
        return result

    def record(self) -> dict[str, Any]:
        """What results.json says of this region."""
        if self.eager_because is not None:
            return {"compiled": False, "reason": self.eager_because}
        return {"compiled": True, "graphs": self.graphs}


def reason(error: BaseException) -> str:
    """A compile error in one line: the function and line Dynamo stopped at (a plugin's `attend`, say)
    and the first meaningful line of its message, which runs to pages of explanation."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = next((line for line in lines if not line.startswith(("Graph break", "Encountered"))), "")
    stack = getattr(error, "real_stack", None)  # Dynamo's user frames, innermost last
    where = (
        f"{stack[-1].name} at {os.path.basename(stack[-1].filename)}:{stack[-1].lineno}: " if stack else ""
    )
    return f"{where}{type(error).__name__}: {text or (lines[0] if lines else '')}"[:300]


class Fusable:
    """Mixin of a module with methods worth compiling: `fusable` names them. A region's loop unrolls
    over its input's length, so the module pads a shorter input to `widest`, the longest its regions
    have run (`pad_to_widest`): one graph per new longest input, not per length. The padded steps come
    after every real one and add exact zeros to every sum, so how far a batch is padded changes no bit
    of a result, and a resumed run, which starts from `widest` 0, equals an uninterrupted one."""

    fusable: ClassVar[tuple[str, ...]] = ()
    widest: int = 0

    def pad_to_widest(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, ...] padded with zeros along T to `widest` (which T may raise)."""
        self.widest = max(self.widest, x.size(1))
        return F.pad(x, (0, 0) * (x.dim() - 2) + (0, self.widest - x.size(1)))


def compile_regions(model: nn.Module) -> dict[str, Region]:
    """Wrap every fusable method of `model`'s modules in a `Region` (once: a second call finds them
    wrapped), by name "Class.method"."""
    import torch._dynamo.config
    import torch._inductor.config

    torch._inductor.config.fallback_random = True  # the same dropout masks as eager
    # past its recompile limit Dynamo would fall back to eager silently; a Region says so instead
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    # a new model: the guards of an earlier run's (a launcher's worker trains one after another) would
    # pile up to the recompile limit; its graphs stay in Inductor's on-disk cache
    torch._dynamo.reset()
    reset_stats()
    regions: dict[str, Region] = {}
    for module in model.modules():
        for name in getattr(module, "fusable", ()):
            current = getattr(module, name)
            if not isinstance(current, Region):
                current = Region(current, f"{type(module).__name__}.{name}")
                setattr(module, name, current)
            regions[current.name] = current
    return regions


def reset_stats() -> None:
    """Start `stats` afresh: a launcher's worker process runs one job after another."""
    from torch._dynamo.utils import clear_compilation_metrics, counters

    counters.clear()
    clear_compilation_metrics()


def stats() -> dict[str, Any]:
    """What compiling cost this process since `reset_stats`: seconds (Dynamo, AOTAutograd and Inductor,
    forward graphs and the backward graphs compiled at their first backward), graphs compiled, and
    Inductor's on-disk cache: graphs found there (hits) and graphs it had to generate (misses). A run
    whose misses are 0 compiled nothing new: an earlier run paid."""
    from torch._dynamo.utils import counters, get_compilation_metrics

    seconds = sum(
        (m.entire_frame_compile_time_s or 0.0) + (m.backward_cumulative_compile_time_us or 0) / 1e6
        for m in get_compilation_metrics()
    )
    return {
        "seconds": round(seconds, 2),
        "graphs": counters["stats"]["unique_graphs"],
        "cache_hits": counters["inductor"]["fxgraph_cache_hit"],
        "cache_misses": counters["inductor"]["fxgraph_cache_miss"],
    }


def regions_of(model: nn.Module) -> dict[str, Region]:
    """The regions `compile_regions` put into `model`, by name."""
    return {
        region.name: region
        for module in model.modules()
        for name in getattr(module, "fusable", ())
        if isinstance(region := getattr(module, name), Region)
    }


def is_compiled(method: Any) -> bool:
    """Whether a fusable method is a `Region` that has not fallen back to eager."""
    return isinstance(method, Region) and method.eager_because is None
