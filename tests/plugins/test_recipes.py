"""The recipes of docs/recipes/ (the README's "Writing a plugin") are plugins that pass the whole kit: a
complete mechanism with its own projections, a score with per-head parameters (KERPLE), a softmax variant
(sigmoid attention), a kernel mechanism (ReLU linear attention) and a mechanism with a recurrent decoding
state (retention). The README shows the first whole, as the file is."""

import re

import pytest
import torch

from attnx.registry import get
from attnx.testing import CHECKS, check_attention, check_score

from helpers.paths import REPO
from helpers.plugins import RECIPES, imported

pytestmark = pytest.mark.usefixtures("isolated_registries")

# each mechanism recipe (file, registered name) and the checks its flags leave out: cross-attention checks
# for a self-attention-only mechanism, the permutation check for one that sees positions, `reference` for
# all (the plain formula is the code)
LEFT_OUT = {
    "my_attention": ("reference",),
    "sigmoid_attention": ("reference",),
    "relu_linear": ("reference",),
    "retention": ("queries", "permutation", "reference", "compiled"),
}


@pytest.mark.parametrize("name", list(LEFT_OUT))
def test_each_mechanism_recipe_passes_every_check_that_applies(name: str) -> None:
    module = imported(RECIPES / f"{name}.py")
    cls = get("attention", name)
    assert cls.__module__ == module.__name__
    assert check_attention(cls) == [c for c in CHECKS if c not in LEFT_OUT[name]]


def test_kerples_per_head_vectors_pass_alone_and_in_every_multi_head_mechanism() -> None:
    """r₁ and r₂ of shape [H], judged per head: KERPLE passes alone, in multi_head and in sliding_window."""
    score = imported(RECIPES / "kerple.py").KerpleLogScore
    no_permutation = [c for c in CHECKS if c not in ("permutation", "reference", "compiled")]
    assert check_score(score) == no_permutation
    assert check_attention(get("attention", "multi_head"), score) == no_permutation
    assert check_attention(get("attention", "sliding_window"), score, window=4)[-1] == "reference"
    heads = score(8, 8, num_heads=4)
    assert heads.log_r1.shape == heads.log_r2.shape == (4,)


def test_retention_decodes_from_a_state_that_does_not_grow() -> None:
    cls = imported(RECIPES / "retention.py").Retention
    att = cls(8, 8, 8, num_heads=2)
    assert att.state_size(2) == att.state_size(1000) == 2 * 4 * 4 < att.state_size(1) * 1000


def test_the_readme_shows_the_complete_mechanism_recipe_as_it_is() -> None:
    section = (REPO / "README.md").read_text().split("## Writing a plugin", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert (RECIPES / "my_attention.py").read_text() in blocks


def test_sigmoid_attention_weighs_each_key_on_its_own() -> None:
    """σ(s − log n): a key's weight does not depend on the others' scores, and rows need not sum to 1."""
    att = imported(RECIPES / "sigmoid_attention.py").SigmoidAttention(8, 8, 8, num_heads=2).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.bool)
    _, weights = att(x, x, x, mask)
    changed = x.clone()
    changed[0, 4] += 1  # key 4 moves: the other keys' weights for the first query stay
    _, moved = att(x[:, :1], changed, changed, mask)
    torch.testing.assert_close(moved[..., 0, :4], weights[..., 0, :4])
    assert not torch.allclose(weights.sum(-1), torch.ones(1, dtype=torch.float64))
