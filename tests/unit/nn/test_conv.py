"""Zoology's short causal convolution (attnx.nn.conv.ShortConvolution): y_t = Σ_{i<k} w_i ⊙ x_{t−i}."""

from __future__ import annotations

import pytest
import torch

from attnx.nn.conv import ShortConvolution


def conv(kernel_size: int = 3, dim: int = 4) -> ShortConvolution:
    """A convolution with random taps: the initial identity would hide a tap read at the wrong offset."""
    torch.manual_seed(0)
    layer = ShortConvolution(dim, kernel_size).double()
    torch.nn.init.normal_(layer.weight)
    return layer


def test_it_starts_as_the_identity_so_a_block_starts_as_the_block_without_it() -> None:
    x = torch.randn(2, 6, 4)
    torch.testing.assert_close(ShortConvolution(4, 3)(x)[0], x, rtol=0, atol=0)


def test_each_output_is_the_weighted_sum_of_the_last_k_inputs() -> None:
    layer, x = conv(), torch.randn(2, 6, 4, dtype=torch.float64)
    y, _ = layer(x)
    w = layer.weight[:, 0].flip(-1)  # w[:, i] multiplies x_{t−i}
    expected = torch.stack(
        [sum(w[:, i] * x[:, t - i] for i in range(3) if t - i >= 0) for t in range(6)], dim=1
    )
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-12)


def test_it_is_causal_changing_a_later_input_leaves_earlier_outputs_unchanged() -> None:
    layer, x = conv(), torch.randn(1, 8, 4, dtype=torch.float64)
    y, _ = layer(x)
    for t in range(7):
        changed = x.clone()
        changed[:, t + 1] += 1.0
        y_changed, _ = layer(changed)
        assert torch.equal(y_changed[:, : t + 1], y[:, : t + 1])
        assert not torch.equal(y_changed[:, t + 1], y[:, t + 1])  # and the changed input is read


@pytest.mark.parametrize("kernel_size", [1, 3, 4])
def test_token_by_token_with_the_last_k_minus_1_inputs_equals_the_whole_sequence(kernel_size: int) -> None:
    layer, x = conv(kernel_size), torch.randn(2, 7, 4, dtype=torch.float64)
    whole, final = layer(x)
    y, state = layer(x[:, :2])  # a prompt, then one token at a time
    steps = [y]
    for t in range(2, 7):
        assert state.shape == (2, kernel_size - 1, 4)
        y, state = layer(x[:, t : t + 1], state)
        steps.append(y)
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=0, atol=1e-12)
    assert torch.equal(state, final) and torch.equal(final, x[:, 7 - (kernel_size - 1) :])
    assert layer.state_size() == (kernel_size - 1) * 4


def test_a_kernel_size_below_1_is_refused() -> None:
    with pytest.raises(ValueError, match="kernel size must be >= 1, got 0"):
        ShortConvolution(4, 0)
