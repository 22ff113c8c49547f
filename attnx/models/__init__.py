"""Models assembled from the registries: `Seq2Seq` and `Classifier`, built by `build_model`."""

from attnx.models.build import build_model, resolve_score_name
from attnx.models.classifier import Classifier
from attnx.models.seq2seq import Seq2Seq

__all__ = ["Classifier", "Seq2Seq", "build_model", "resolve_score_name"]
