"""`AttentionHeatmaps`: attention of a fixed set of validation examples, drawn as the model trains.

Every `every_n_epochs` validation epochs and at test end, the callback takes the first
`num_examples` validation examples, reads their attention maps (`attnx.track.maps`), draws each as
a heatmap labelled with the real tokens, the axes named and each panel titled with the mechanism,
layer and head it shows, writes the PNGs into the run folder and sends them to every logger that
takes images: TensorBoard (`add_figure`) and W&B (`wandb.Image`). Figures are plain
`matplotlib.figure.Figure`s drawn by the Agg canvas: no pyplot state, no display needed.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from matplotlib.figure import Figure

from attnx.tasks.base import Batch
from attnx.track.maps import AttentionMap, attention_maps

log = logging.getLogger("attnx")
CELL_INCHES = 0.22  # one token's row/column: room for a 7-point label
CHAR_INCHES = 0.055  # one character of a 7-point title


def heatmap(attention_map: AttentionMap) -> Figure:
    """One panel per head, titled with what it shows ("multi_head self-attention layer 2, head 3"):
    queries down the side, keys along the top (as in Bahdanau et al. 2015), both axes named, one colour scale.

    Panels share their axes, so only the outer ones carry token labels: text is most of the cost."""
    weights, titles = attention_map.weights, attention_map.panels
    heads, rows, cols = weights.shape
    ncols = 1 if rows == 1 else min(heads, 4)  # pooling strips stack; square maps go side by side
    nrows = math.ceil(heads / ncols)
    width = max(CELL_INCHES * cols, CHAR_INCHES * max(len(t) for t in titles))  # a panel's title fits
    size = (max(3.0, ncols * width + 2.0), max(1.6, nrows * (CELL_INCHES * rows + 0.6) + 1.2))
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(nrows, ncols, squeeze=False, sharex="col", sharey="row")
    vmax = float(weights.max())  # the same scale in every panel, so the one colour bar reads them all
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[head].numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
        ax.set_title(titles[head], fontsize=7)
        ax.set_xticks(range(cols), attention_map.cols, rotation=90, fontsize=7)
        ax.set_yticks(range(rows), attention_map.rows, fontsize=7)
        ax.tick_params(top=True, labeltop=True, bottom=False, labelbottom=False, length=0)
        ax.xaxis.set_label_position("top")
        ax.set_xlabel(attention_map.col_axis, fontsize=7)
        ax.label_outer()
    figure.supylabel(attention_map.row_axis, fontsize=7)  # once: stacked pooling strips are too short
    bar = figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02)
    bar.set_label("attention weight", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    figure.suptitle(attention_map.title, fontsize=8)
    return figure


class AttentionHeatmaps(Callback):
    """Heatmaps of attention weights for `num_examples` fixed validation examples.

    `heads`: "each" draws a panel per head, "mean" their average. `self_attention` also draws the
    encoder's and decoder's self-attention, for the `layers` listed (negative from the end; None = all).
    Mechanisms that return no weights (`none`, `fixed_c`) are skipped with one log line.
    """

    def __init__(
        self,
        dirpath: str | Path,
        every_n_epochs: int = 4,
        num_examples: int = 4,
        heads: str = "each",
        self_attention: bool = True,
        layers: list[int] | None = None,
    ) -> None:
        if heads not in ("each", "mean"):
            raise ValueError(f"callbacks.attention_heatmaps.heads must be each or mean, got {heads!r}")
        if every_n_epochs < 1 or num_examples < 1:
            raise ValueError("callbacks.attention_heatmaps.every_n_epochs and num_examples must be >= 1")
        self.dirpath = Path(dirpath)
        self.every_n_epochs, self.num_examples = every_n_epochs, num_examples
        self.heads, self.self_attention = heads, self_attention
        self.layers = None if layers is None else list(layers)
        self._examples: Batch | None = None
        self._warned = False

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Not during the sanity check, nor the separate validation of the best checkpoint after fit.
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        if (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self.draw(trainer, pl_module, "val", f"epoch{trainer.current_epoch + 1:03d}")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.draw(trainer, pl_module, "test", "test")

    def draw(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str, folder: str) -> None:
        """Write `<dirpath>/<folder>/<kind>_<example>.png` and log them under `<stage>/attention/<kind>`."""
        if not trainer.is_global_zero:
            return
        was_training = pl_module.training
        pl_module.eval()
        try:
            examples = self.examples(trainer, pl_module)
            maps = attention_maps(pl_module, examples, self.heads, self.self_attention, self.layers)
        finally:
            pl_module.train(was_training)
        if not any(maps):
            if not self._warned:
                log.info("attention heatmaps: this model returns no attention weights; none drawn")
                self._warned = True
            return
        (self.dirpath / folder).mkdir(parents=True, exist_ok=True)
        drawn: dict[str, list[tuple[Figure, Path, str]]] = defaultdict(list)
        for index, example in enumerate(maps):
            for attention_map in example:
                figure = heatmap(attention_map)
                path = self.dirpath / folder / f"{attention_map.kind}_{index}.png"
                figure.savefig(path, dpi=100)
                drawn[attention_map.kind].append((figure, path, attention_map.title))
        for kind, items in drawn.items():
            publish(trainer, f"{stage}/attention/{kind}", items)

    def examples(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Batch:
        """The first `num_examples` of the validation split, on the module's device; the same every time
        (taken from the split, not the loader, whose batches bucketing orders by length)."""
        if self._examples is None:
            split = trainer.datamodule.task.splits["val"]  # type: ignore[attr-defined]  # Lightning's, untyped
            self._examples = split[torch.arange(min(self.num_examples, len(split)))]
        return Batch._make(None if t is None else t.to(pl_module.device) for t in self._examples)


def publish(trainer: pl.Trainer, key: str, items: list[tuple[Figure, Path, str]]) -> None:
    """Send figures to the loggers that take images; the others (CSV) have the PNGs in the run folder."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            for index, (figure, _, _) in enumerate(items):
                logger.experiment.add_figure(f"{key}/{index}", figure, trainer.global_step, close=False)
        elif isinstance(logger, WandbLogger):
            paths, captions = [str(path) for _, path, _ in items], [title for _, _, title in items]
            logger.log_image(key, paths, step=trainer.global_step, caption=captions)
