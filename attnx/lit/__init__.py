"""Lightning modules: training/evaluation steps, torchmetrics, optimisers; the task data module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnx.models.sites import Sites
    from attnx.models.spec import ModelSpec


def lit_module(spec: ModelSpec, sites: Sites | None = None) -> Any:
    """The LightningModule of the spec's model type (its `module` piece), built from a model spec (see
    `AttnxModule`) on `sites`, config validation's resolution of the spec's attention sites (resolved anew
    without them)."""
    return spec.declared.piece("module")(spec, sites)
