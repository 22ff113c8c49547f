"""The process-wide state a plugin must leave as it found it, when it is imported and when it is called in
eval mode: random generators, torch's defaults (dtype, device, threads), grad and autocast modes, the
determinism and precision flags. `discovery` records what each plugin's import changed (`import_changes`);
the conformance kit's `purity` check fails a plugin whose import or call changed anything."""

from __future__ import annotations

import random
import sys
from typing import Any


def process_state() -> dict[str, Any]:
    """What is set process-wide now, by name: each value comparable with `==` (generator states as bytes)."""
    import torch

    state: dict[str, Any] = {
        "torch's random generator": bytes(torch.get_rng_state().numpy()),
        "Python's random generator": random.getstate(),
        "torch's default dtype": torch.get_default_dtype(),
        "torch's default device": str(torch.get_default_device()),
        "torch's threads": torch.get_num_threads(),
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "anomaly detection": torch.is_anomaly_enabled(),
        "CPU autocast": torch.is_autocast_enabled("cpu"),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "cuDNN flags": (
            torch.backends.cudnn.enabled,
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.allow_tf32,
        ),
        "CUDA matmul TF32": torch.backends.cuda.matmul.allow_tf32,
    }
    numpy = sys.modules.get("numpy")  # only when something imported it: a plugin's import may be the first
    if numpy is not None:
        _, keys, position, *_ = numpy.random.get_state()
        state["NumPy's random generator"] = (keys.tobytes(), position)
    return state


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two `process_state`s, by name: a generator 'drew numbers or was seeded', a
    setting 'X -> Y'."""
    found = []
    for name, value in after.items():
        if name not in before or before[name] == value:
            continue
        found.append(
            f"{name} (it drew numbers or was seeded)"
            if "generator" in name
            else f"{name} ({before[name]} -> {value})"
        )
    return found


_import_changes: dict[str, list[str]] = {}  # a plugin module's name -> what its import changed


def record_import(module: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Remember what importing `module` changed in the process (nothing: nothing is kept)."""
    found = changes(before, after)
    if found:
        _import_changes[module] = found


def import_changes(module: str) -> list[str]:
    """What importing the plugin module `module` changed in the process, as `changes` words it; empty
    when it changed nothing, or when discovery did not import it (a test that imports a plugin itself)."""
    return _import_changes.get(module, [])
