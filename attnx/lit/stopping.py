"""`callbacks.stop_at`: stop training once a validation metric reaches a threshold, or no callback at all."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import EarlyStopping


def stop_at(stopping_threshold: float | None, **early_stopping: Any) -> EarlyStopping | None:
    """Lightning's `EarlyStopping` with `stopping_threshold`; None (the Trainer gets no callback) when the
    threshold is null. An EarlyStopping without a threshold would still check its metric, and a run
    shorter than one epoch, which never validates, failed on that check."""
    if stopping_threshold is None:
        return None
    return EarlyStopping(stopping_threshold=stopping_threshold, **early_stopping)
