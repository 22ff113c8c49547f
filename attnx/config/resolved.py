"""A run's configuration, resolved once: `ResolvedRun`, what `attnx.config.validation.validate` returns and
every later step reads (assembly and training, the results record, preflight, `attnx compare`'s checks
and matching), never going back to the composed DictConfig for what it holds.

It holds the config's sections as plain data, resolved once and frozen (`sections`: every key but
`PLUMBING`), the model type's declaration, the checked attention `Sites`, the metrics a run logs with
their declared direction and ceiling (`metrics`: each validation and test split's names, the model type's
and the task's text metrics), the one its convergence judges (`judged`), and what the model reads of the
data: each part's limit (`readers`) and, where the task's arguments bound it, the data's shape (`shape`).

The `PLUMBING` nodes stay in the DictConfig: Hydra instantiates them for Lightning (Trainer, callbacks,
loggers), and they resolve from Hydra's runtime (`paths.output_dir` is `${hydra:runtime.output_dir}`),
which exists only inside a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from attnx.registry import Metric, ModelType

if TYPE_CHECKING:
    from attnx.models.sites import Sites
    from attnx.tasks.shape import Reader, Shape

PLUMBING = ("trainer", "callbacks", "logger", "paths", "hydra")
# top-level keys that change no number a run records: where it writes, how it logs, whether it resumes
# (exactly: attnx.lit.resume), where its compiled kernels are cached, the run store, its printed summary. The
# one list a run store's key leaves out (attnx.store.key), that resume=auto and the store ignore when they ask
# whether a folder's run is this one (attnx.train.identity), and that compare ignores in a planned job
UNRESULTED = ("logger", "paths", "resume", "compile_cache", "store", "summary")


def frozen(value: Any) -> Any:
    """Plain data made read-only: mappings become MappingProxyTypes, lists tuples, all the way down."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """`frozen`'s inverse: dicts and lists again, for what stores or mutates them (a checkpoint's spec,
    results.json, a Hydra `instantiate`)."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


@dataclass(frozen=True)
class ResolvedRun:
    """A validated run configuration (module doc)."""

    sections: Mapping[str, Any]  # frozen; every config key but PLUMBING
    model_type: ModelType
    sites: Sites
    metrics: Mapping[str, Metric]  # every metric name a validation or a test split logs -> its declaration
    judged: str  # the validation metric whose curve `convergence` judges
    readers: tuple[Reader, ...]  # each model part's limit on what it reads
    shape: Shape | None  # the data's longest sequences, when the task declares them without data
    budget: Mapping[str, int]  # the trainer's limits that are set: trainer.max_epochs, trainer.max_steps

    def __getitem__(self, key: str) -> Any:
        return self.sections[key]

    def plain(self, key: str) -> Any:
        """A section as mutable plain data (dicts and lists), or None where the config has none."""
        return thawed(self.sections.get(key))

    def logged(self, stage: str = "val") -> list[str]:
        """The names a validation (`val`) or the test splits (`test`: `test/...`, `test@2x/...`) log."""
        prefixes = ("val/",) if stage == "val" else ("test/", "test@")
        return sorted(name for name in self.metrics if name.startswith(prefixes))

    def choices(self) -> dict[str, str | None]:
        """The registered names the run chose: its task, each part's, its attention and the score it really
        uses (its mechanism's default when none is set), or an lm plan's label (`Sites.chosen`); None for a
        part its model type lacks."""
        parts = self.model_type.parts
        attention, score = self.sites.chosen()
        return {
            "task": self["task"]["name"],
            **{
                p: self[p]["name"] if p in parts and self.sections.get(p) else None
                for p in ("encoder", "decoder")
            },
            "attention": attention,
            "score": score,
        }
