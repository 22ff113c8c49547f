"""Encoders: padding never leaks, summaries are what they claim, options are validated."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnx.nn.attention import Mechanism
from attnx.nn.classic import FixedContext
from attnx.nn.encoders import EncoderOutput, RNNEncoder, SelfAttentionEncoder
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.scores import GeneralScore
from attnx.testing import projection_loss

VOCAB = 20


def heads(num_heads: int, score: str | None = None) -> Mechanism:
    """multi_head with `num_heads` heads (and the general score), as a slot receives it."""
    return Mechanism(MultiHeadAttention, GeneralScore if score else None, {"num_heads": num_heads})


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three sequences of lengths 6, 3, 1 padded with PAD=0, plus garbage-free padding."""
    lengths = torch.tensor([6, 3, 1])
    tokens = torch.randint(4, VOCAB, (3, 6))
    tokens[torch.arange(6) >= lengths[:, None]] = 0
    return tokens, lengths


ENCODERS = {
    "gru-bi": lambda: RNNEncoder(VOCAB, 8, 12, cell="gru"),
    "lstm-bi-2layers": lambda: RNNEncoder(VOCAB, 8, 12, cell="lstm", num_layers=2),
    "rnn-uni": lambda: RNNEncoder(VOCAB, 8, 12, cell="rnn", bidirectional=False),
    "lstm-uni": lambda: RNNEncoder(VOCAB, 8, 12, cell="lstm", bidirectional=False),
    "self_attn-mean-sinusoidal": lambda: SelfAttentionEncoder(VOCAB, 16, 2, 32, attention=heads(2)),
    "self_attn-cls-learned": lambda: SelfAttentionEncoder(
        VOCAB, 16, 2, 32, attention=heads(2), positions="learned", summary="cls"
    ),
    "self_attn-general": lambda: SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(2, "general")),
}


@pytest.mark.parametrize("make", ENCODERS.values(), ids=ENCODERS.keys())
def test_padding_never_leaks(make) -> None:
    encoder = make().eval()
    tokens, lengths = batch()
    out = encoder(tokens, lengths)
    assert out.states.shape == (3, 6, encoder.output_dim)
    assert out.summary.shape == (3, encoder.output_dim)
    assert torch.equal(out.mask, torch.arange(6) < lengths[:, None])
    assert (out.states[~out.mask] == 0).all()
    # Extra padding with different (non-PAD) junk must change nothing.
    junk = torch.cat([tokens, torch.randint(4, VOCAB, (3, 4))], dim=1)
    junk[:, :6][tokens == 0] = 5
    padded = encoder(junk, lengths)
    torch.testing.assert_close(padded.summary, out.summary, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded.states[:, :6], out.states, atol=1e-5, rtol=1e-5)
    for i, n in enumerate(lengths.tolist()):
        alone = encoder(tokens[i : i + 1, :n], lengths[i : i + 1])
        torch.testing.assert_close(alone.states[0], out.states[i, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone.summary[0], out.summary[i], atol=1e-5, rtol=1e-5)


def test_rnn_summary_is_final_state_of_each_direction() -> None:
    encoder = RNNEncoder(VOCAB, 8, 12, cell="gru").eval()
    tokens, lengths = batch()
    out = encoder(tokens, lengths)
    assert encoder.output_dim == 24
    for i, n in enumerate(lengths.tolist()):
        # forward direction ends at the last real token, backward direction at the first
        torch.testing.assert_close(out.summary[i, :12], out.states[i, n - 1, :12])
        torch.testing.assert_close(out.summary[i, 12:], out.states[i, 0, 12:])


@pytest.mark.parametrize(
    "cell,num_layers,bidirectional", [("gru", 2, True), ("lstm", 2, True), ("rnn", 1, False)]
)
def test_rnn_states_and_gradients_equal_torchs_packed_rnn(cell, num_layers, bidirectional) -> None:
    """The per-direction whole-sequence runs are the packed module's computation, padding skipped."""
    encoder = RNNEncoder(VOCAB, 8, 12, cell=cell, num_layers=num_layers, bidirectional=bidirectional).eval()
    tokens, lengths = batch()
    target = torch.randn(3, 6, encoder.output_dim)

    def run(packed: bool) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        encoder.zero_grad()
        if packed:
            x = pack_padded_sequence(encoder.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
            out, hidden = encoder.rnn(x)
            states = pad_packed_sequence(out, batch_first=True, total_length=6)[0]
            h_n = hidden[0] if cell == "lstm" else hidden
            summary = h_n[-encoder.directions :].transpose(0, 1).reshape(3, -1)
        else:
            states, summary, _ = encoder(tokens, lengths)
        ((states * target).sum() + summary.sum()).backward()
        return states, summary, [p.grad.clone() for p in encoder.parameters()]

    for ours, torchs in zip(run(packed=False), run(packed=True)):
        torch.testing.assert_close(ours, torchs, atol=1e-5, rtol=1e-5)


def test_self_attn_summaries() -> None:
    tokens, lengths = batch()
    mean = SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(2)).eval()
    out = mean(tokens, lengths)
    expected = torch.stack([out.states[i, :n].mean(0) for i, n in enumerate(lengths.tolist())])
    torch.testing.assert_close(out.summary, expected)
    cls = SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(2), summary="cls").eval()
    out = cls(tokens, lengths)
    assert out.states.shape == (3, 6, 16)  # CLS is not among the token states
    assert not torch.allclose(out.summary, (out.states.sum(1) / lengths[:, None]))
    assert cls.cls.requires_grad


def test_learned_positions_are_trained_and_order_matters() -> None:
    encoder = SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(2), positions="learned", dropout=0.0)
    tokens = torch.tensor([[4, 5, 6]])
    projection_loss(encoder(tokens, torch.tensor([3])).summary).backward()
    grad = encoder.positions.table.grad
    assert (grad[:3].norm(dim=-1) > 1e-2).all() and (grad[3:] == 0).all()  # the input's positions only
    sinus = SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(2), dropout=0.0).eval()
    forward = sinus(tokens, torch.tensor([3])).states[0]
    backward = sinus(tokens.flip(1), torch.tensor([3])).states[0].flip(0)
    assert (forward - backward).abs().max() > 0.1  # positions break permutation symmetry (~1 here)


def test_record_weights() -> None:
    tokens, lengths = batch()
    encoder = SelfAttentionEncoder(VOCAB, 16, 3, 32, attention=heads(4)).eval()
    encoder(tokens, lengths)
    assert encoder.attention_weights == []
    encoder.record_weights = True
    out = encoder(tokens, lengths)
    assert len(encoder.attention_weights) == 3
    for weights in encoder.attention_weights:
        assert weights.shape == (3, 4, 6, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 6))
        assert (weights.masked_select(~out.mask[:, None, None, :]) == 0).all()
    encoder.record_weights = False
    torch.testing.assert_close(encoder(tokens, lengths).states, out.states, atol=1e-5, rtol=1e-5)
    cls = SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(4), summary="cls").eval()
    cls.record_weights = True
    cls(tokens, lengths)
    assert cls.attention_weights[0].shape == (3, 4, 7, 7)  # CLS first


def test_gradients_reach_every_parameter() -> None:
    tokens, lengths = batch()
    encoders = (
        RNNEncoder(VOCAB, 8, 12, "lstm", num_layers=2),
        SelfAttentionEncoder(VOCAB, 16, 2, 32, attention=heads(2)),
    )
    for encoder in encoders:
        out = encoder(tokens, lengths)
        projection_loss(out.states, out.summary).backward()
        # rounding noise is ~1e-7: a parameter cut off from the loss could not reach 1e-4
        missing = [n for n, p in encoder.named_parameters() if p.grad is None or p.grad.abs().max() < 1e-4]
        assert missing == [], missing
        assert isinstance(out, EncoderOutput)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RNNEncoder(VOCAB, cell="transformer"), "cell must be one of gru, lstm, rnn"),
        (lambda: SelfAttentionEncoder(VOCAB, positions="rotary"), "positions must be one of sinusoidal, lea"),
        (lambda: SelfAttentionEncoder(VOCAB, summary="max"), "summary must be one of mean, cls"),
        (
            lambda: SelfAttentionEncoder(VOCAB, attention=Mechanism(FixedContext)),
            "FixedContext cannot be a self-attention layer: it declares self_attention = False",
        ),
    ],
)
def test_bad_options_are_clear_errors(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_too_long_input_names_max_len() -> None:
    encoder = SelfAttentionEncoder(VOCAB, 16, 1, 32, attention=heads(2), max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        encoder(torch.ones(1, 5, dtype=torch.long) + 3, torch.tensor([5]))
