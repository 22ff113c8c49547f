"""A fourth model type is one plugin file and one entry (`register_model_type`): sequence tagging, a task,
its model, its LightningModule, its maps and its answer, written outside attnx. `attnx train` trains it and
records its declared metrics, `attnx report` ranks it by them, and `attnx
predict` answers with it: nothing in the package knows the model type."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.paths import PACKAGE
from helpers.tiny import TINY_RNN

TAGGING = '''
"""Sequence tagging: every token's tag (here whether a digit is even or odd) from a self-attention layer
over an encoder's states, the run's `attention` at the `self` role."""

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from attnx import Metric, ModelType, register_model_type, register_task
from attnx.lit.module import AttnxModule
from attnx.models.assembly import build_host
from attnx.models.sites import RUN, encoder_sites, site
from attnx.tasks.base import PaddedSplit, SizedTask
from attnx.track.maps import AttentionMap
from attnx.vocab import PAD, Vocab

DIGITS = [str(d) for d in range(10)]


@register_task("parity_tags")
class ParityTags(SizedTask):
    model_type = "tagging"

    def __init__(self, length: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.length = length
        self.src_vocab = Vocab([*DIGITS, "even", "odd"])

    def build(self):
        ids = torch.tensor(self.src_vocab.encode(DIGITS))
        tags = torch.tensor(self.src_vocab.encode(["even", "odd"]))
        splits = {}
        for split, size in self.sizes.items():
            digits = torch.randint(0, 10, (size, self.length), generator=self.generator(split))
            length = torch.full((size,), self.length)
            splits[split] = PaddedSplit(ids[digits], length, tags[digits % 2], length)
        return splits


class Tagger(nn.Module):
    """tag_t = W [h_t; c_t]: each encoder state with its context over the sequence."""

    def __init__(self, encoder, attention, vocab_size):
        super().__init__()
        self.encoder, self.attention = encoder, attention
        self.head = nn.Linear(encoder.output_dim + attention.output_dim, vocab_size)

    def forward(self, src, src_len, need_weights=False):
        enc = self.encoder(src, src_len)
        context, weights = self.attention(enc.states, enc.states, enc.states, enc.mask, need_weights)
        return self.head(torch.cat([enc.states, context], -1)), weights


def sites(sections):
    own = site(RUN, sections["attention"], sections.get("score"), "self", True)
    return {"attention": own, **encoder_sites(sections)}


def model(sections, sites, sizes):
    slots = sites.mechanisms("encoder")
    encoder = build_host("encoder", sections["encoder"], slots, vocab_size=sizes.src_vocab)
    width = encoder.output_dim
    return Tagger(encoder, sites.attention.mechanism(width, width, width), sizes.src_vocab)


class TaggerModule(AttnxModule):
    def __init__(self, spec, sites=None):
        super().__init__(spec, sites)
        vocab = len(spec.src_itos)
        acc = MulticlassAccuracy(vocab, average="micro", ignore_index=PAD)
        self.evaluated_by(MetricCollection({"loss": MeanMetric(), "acc": acc}))

    def forward(self, batch, need_weights=False):
        return self.model(batch.src, batch.src_len, need_weights)

    def loss(self, logits, batch):
        return F.cross_entropy(logits.flatten(0, 1), batch.tgt.flatten(), ignore_index=PAD)

    def _evaluate(self, batch, stage):
        logits, _ = self(batch)
        metrics = self.metrics_of(stage)
        metrics["loss"].update(self.loss(logits, batch), weight=(batch.tgt != PAD).sum().float())
        metrics["acc"].update(logits.flatten(0, 1), batch.tgt.flatten())
        self.log_metrics(metrics, len(batch.src), stage)


def maps(module, batch, self_attention, layers):
    _, weights = module.model(batch.src, batch.src_len, need_weights=True)
    tokens = [[module.spec.src_itos[i] for i in row] for row in batch.src.tolist()]
    return [
        [AttentionMap("self_layer1", w[None], t, t, "the input", "tagging attention", "token (queries)")]
        for w, t in zip(weights, tokens)
    ]


def answer(module, task, batch, options):
    logits, _ = module.model(batch.src, batch.src_len)
    print("tags:", " ".join(module.spec.src_itos[i] for i in logits.argmax(-1)[0].tolist()))
    return 0


register_model_type(
    ModelType(
        "tagging",
        parts=("encoder",),
        targets="aligned",
        metrics=(Metric("loss", higher_is_better=False), Metric("acc", higher_is_better=True, ceiling=1.0)),
        headline="acc",
        report=("acc",),
        sites=sites,
        model=model,
        module=TaggerModule,
        maps=maps,
        answer=answer,
    )
)
'''

COMMANDS = """
import sys
from attnx.cli import main
sweep, = sys.argv[1:]
codes = [main(["train", "-m", *{train!r}, "seed=0,1", f"hydra.sweep.dir={{sweep}}"])]
codes.append(main(["report", sweep]))
codes.append(main(["predict", f"ckpt={{sweep}}/0/checkpoints/last.ckpt", "input=3 4 7 8"]))
print("codes", codes)
"""


def test_a_model_type_in_one_plugin_file_trains_reports_and_predicts(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "tagging.py").write_text(TAGGING)
    train = [
        "task=parity_tags",
        "task.train_size=256",
        "task.val_size=32",
        "task.test_size=32",
        "task.batch_size=32",
        *TINY_RNN,
        "trainer.max_epochs=8",
        "optim.lr=0.01",
        "optim/scheduler=constant",
        "callbacks.model_checkpoint.save_last=true",
    ]
    sweep = tmp_path / "sweep"
    script = COMMANDS.format(train=train)
    env = os.environ | {"ATTNX_PLUGIN_PATH": str(plugins), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(sweep)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "codes [0, 0, 0]" in done.stdout, done.stdout + done.stderr
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert len(records) == 2 and all(r["status"] == "completed" for r in records)
    for record in records:
        assert record["model_type"] == "tagging"
        assert {"val/acc", "test/acc", "test/loss"} <= set(record["metrics"])
        assert record["convergence"]["metric"] == "val/acc"  # the declared headline, in its direction
        assert record["metric_declarations"]["test/loss"] == {"higher_is_better": False, "ceiling": None}
        assert record["metrics"]["test/acc"] > 0.9  # a digit's parity is in its own token: learnt
    report = (sweep / "report.md").read_text()
    assert "test/acc" in report  # what the records' judged metric names, with no plugin imported
    assert (sweep / "0" / "attention_maps").is_dir()  # the heatmaps callback drew the plugin's maps
    assert "tags: odd even odd even" in done.stdout  # predict's answer is the plugin's
    # and nothing in the package names it: the model type exists only in the plugin file
    assert not any("tagging" in p.read_text() for p in PACKAGE.rglob("*.py"))
