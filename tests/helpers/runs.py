"""A run's pieces as `attnx train` makes them, outside the CLI: its config composed and resolved once
(`resolved`), then its task, LightningModule and Trainer (`assembled`)."""

from __future__ import annotations

from typing import Any

from attnx import registry
from attnx.config.compose import compose
from attnx.config.resolved import ResolvedRun
from attnx.config.validation import validate
from attnx.train.assemble import assemble


def resolved(overrides: list[str]) -> ResolvedRun:
    """`attnx train <overrides>`'s config, validated: what a run reads."""
    registry.load_all()
    return validate(compose(overrides))


def assembled(overrides: list[str]) -> tuple[Any, Any, Any]:
    """(task, LightningModule, Trainer) as a run of `attnx train <overrides>` assembles them, untrained."""
    registry.load_all()
    cfg = compose(overrides)
    return assemble(validate(cfg), cfg)
