"""Models assembled from the registries: `Seq2Seq`, `Classifier` and `CausalLM`, built by `build_model` from
config sections or by `model_from_spec` from a `ModelSpec`, on their checked attention `Sites`."""

from attnx.models.assembly import Sizes, build_model, model_from_spec
from attnx.models.classifier import Classifier
from attnx.models.seq2seq import Seq2Seq
from attnx.models.sites import Sites, resolve_score_name, resolve_sites
from attnx.models.spec import ModelSpec

__all__ = [
    "Classifier",
    "ModelSpec",
    "Seq2Seq",
    "Sites",
    "Sizes",
    "build_model",
    "model_from_spec",
    "resolve_score_name",
    "resolve_sites",
]
