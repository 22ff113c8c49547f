"""The kit's `compiled` check and `attnx plugins check`'s compile line: a mechanism traced whole must
compute what its eager code computes; one that cannot be traced passes (training runs it eager) and is
told why."""

import pytest
import torch
from test_kit import Sound

from attnx.registry import registry
from attnx.testing import check_attention, compile_notes


class ShortcutWhenCompiled(Sound):
    """Rounds its weights to 3 decimals when compiled, to save a kernel: another context than eager's."""

    def sharpen(self, weights: torch.Tensor) -> torch.Tensor:
        return weights.round(decimals=3) if torch.compiler.is_compiling() else weights


class BranchesOnAValue(Sound):
    """Correct, but branches on a tensor's value: Dynamo cannot trace it whole."""

    def sharpen(self, weights: torch.Tensor) -> torch.Tensor:
        if weights.max().item() > 2:  # never: weights are at most 1
            return weights / weights.max()
        return weights


def test_a_mechanism_that_computes_otherwise_when_compiled_fails_compiled() -> None:
    with pytest.raises(
        AssertionError, match=r"^compiled \([^)]*\): attention ShortcutWhenCompiled .*Tq=1.*another context"
    ):
        check_attention(ShortcutWhenCompiled, checks=("compiled",))


@pytest.mark.usefixtures("isolated_registries")
def test_a_mechanism_that_cannot_be_traced_passes_and_is_told_why() -> None:
    assert check_attention(BranchesOnAValue, checks=("compiled",)) == ["compiled"]
    registry("attention").register("branches_test")(BranchesOnAValue)
    note = compile_notes("branches_test")["branches_test score=dot"]
    assert note.startswith("runs eager under compile: sharpen at test_kit_compiled.py:") and "\n" not in note


@pytest.mark.slow  # Dynamo traces every registered mechanism with every score
def test_the_builtin_mechanisms_an_rnn_decoder_hosts_compile() -> None:
    notes = compile_notes()
    for label in (
        "additive score=additive",
        "dot score=dot",
        "multi_head score=scaled_dot",
        "none",
        "fixed_c",
    ):
        assert notes[label] == "compiles", (label, notes[label])
    assert not [label for label in notes if label.startswith("sliding_window")]  # self-attention only
