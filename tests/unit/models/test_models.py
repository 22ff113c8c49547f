"""Seq2Seq decoding (greedy, beam), Classifier pooling, and build_model over every combination."""

import itertools

import pytest
import torch
from torch import nn

from attnx import registry
from attnx.models import Classifier, Seq2Seq, build_model, resolve_score_name
from attnx.models.seq2seq import gnmt_penalty, until_eos
from attnx.vocab import BOS, EOS, PAD

SRC_VOCAB, TGT_VOCAB = 12, 7
SMALL = {"name": "rnn", "embed_dim": 8, "hidden_dim": 16}
TRANSFORMER = {"name": "transformer", "d_model": 16, "ff_dim": 16}
DECODERS = [SMALL, TRANSFORMER]
ENCODERS = [
    {"name": "rnn", "embed_dim": 8, "hidden_dim": 8},
    {"name": "self_attn", "d_model": 16, "ff_dim": 16},
]
MECHANISMS = ["none", "fixed_c", "additive", "dot", "multi_head"]


def source() -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([5, 3, 4, 1])
    src = torch.randint(4, SRC_VOCAB, (4, 5)).masked_fill(torch.arange(5) >= lengths[:, None], PAD)
    return src, lengths


def seq2seq(
    mechanism: str, encoder: dict = ENCODERS[0], eos_bias: float = 0.0, decoder: dict = SMALL
) -> Seq2Seq:
    """A random model with peaked output distributions, so sequences end at varied lengths."""
    model = build_model(
        "seq2seq", SRC_VOCAB, encoder, {"name": mechanism}, None, {}, decoder=decoder, tgt_vocab=TGT_VOCAB
    )
    with torch.no_grad():
        model.decoder.out.weight.mul_(3.0)
        model.decoder.out.bias[EOS] += eos_bias
    return model.eval()


@pytest.mark.parametrize("decoder", DECODERS, ids=["rnn", "transformer"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_greedy_is_argmax_of_teacher_forcing_and_stops_at_eos(mechanism, decoder) -> None:
    model = seq2seq(mechanism, decoder=decoder)
    src, lengths = source()
    tokens, weights = model.greedy(src, lengths, max_len=9)
    assert tokens.size(1) <= 9
    assert ((tokens == EOS).any(1) | (tokens.size(1) == 9)).all()
    assert not (tokens == BOS).any()
    assert (tokens[~until_eos(tokens)] == PAD).all()  # PAD after EOS, nowhere before
    assert (tokens[until_eos(tokens)] != PAD).all()
    if tokens.size(1) < 9:
        assert (tokens == EOS).any(1).all() and (tokens[:, -1:] != PAD).any()  # stopped when all done
    tgt_in = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], 1)
    logits, _ = model(src, lengths, tgt_in)
    logits[..., [PAD, BOS]] = float("-inf")
    keep = until_eos(tokens)
    assert torch.equal(logits.argmax(-1)[keep], tokens[keep])
    if mechanism in ("none", "fixed_c"):
        assert weights is None
    else:
        heads = (4,) if mechanism == "multi_head" else ()
        assert weights.shape == (4, *heads, tokens.size(1), 5)


@pytest.mark.parametrize("decoder", DECODERS, ids=["rnn", "transformer"])
@pytest.mark.parametrize("encoder", ENCODERS, ids=["rnn", "self_attn"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_beam_of_one_is_greedy(mechanism, encoder, decoder) -> None:
    model = seq2seq(mechanism, encoder, decoder=decoder)
    src, lengths = source()
    greedy, _ = model.greedy(src, lengths, max_len=8)
    for alpha in (0.0, 1.0):
        tokens, scores = model.beam_search(src, lengths, max_len=8, beam_size=1, length_penalty=alpha)
        assert torch.equal(tokens, greedy)
    logprob = model.sequence_logprob(src, lengths, greedy) / gnmt_penalty(until_eos(greedy).sum(1), 1.0)
    torch.testing.assert_close(scores, logprob, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("decoder", DECODERS, ids=["rnn", "transformer"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wider_beam_never_scores_below_greedy(mechanism, decoder) -> None:
    """Plain beam search loses to greedy on ~1% of these sources (greedy's prefix gets pruned)."""
    lengths = torch.randint(1, 6, (64,))
    src = torch.randint(4, SRC_VOCAB, (64, 5)).masked_fill(torch.arange(5) >= lengths[:, None], PAD)
    model = seq2seq(mechanism, decoder=decoder)
    greedy, _ = model.greedy(src, lengths, max_len=8)
    greedy_logprob = model.sequence_logprob(src, lengths, greedy)
    improved = 0
    for k in (2, 3, 5):
        tokens, scores = model.beam_search(src, lengths, max_len=8, beam_size=k, length_penalty=0.0)
        logprob = model.sequence_logprob(src, lengths, tokens)
        torch.testing.assert_close(scores, logprob, atol=1e-4, rtol=1e-4)  # scores are log p(Y)
        assert (logprob >= greedy_logprob - 1e-5).all()
        improved += int((logprob > greedy_logprob + 1e-4).sum())
    assert improved > 0  # the beam does search: it finds better sequences than greedy somewhere


@pytest.mark.parametrize("decoder", DECODERS, ids=["rnn", "transformer"])
def test_beam_with_room_for_every_prefix_is_exact(decoder) -> None:
    """With K ≥ every prefix count, beam search must return the most probable sequence (α = 0)."""
    model = seq2seq("additive", eos_bias=0.0, decoder=decoder)
    src, lengths = source()
    outputs = [EOS, 3, 4, 5, 6]  # every token but PAD and BOS
    every = torch.tensor(list(itertools.product(outputs, repeat=3)))  # [125, 3]
    every = every.masked_fill(~until_eos(every), PAD)
    tokens, scores = model.beam_search(src, lengths, max_len=3, beam_size=125, length_penalty=0.0)
    for i in range(4):
        best = model.sequence_logprob(src[i : i + 1].expand(125, -1), lengths[i : i + 1].expand(125), every)
        torch.testing.assert_close(scores[i], best.max(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decoder", DECODERS, ids=["rnn", "transformer"])
def test_beam_search_is_batch_invariant(decoder) -> None:
    model = seq2seq("dot", eos_bias=0.5, decoder=decoder)
    src, lengths = source()
    tokens, scores = model.beam_search(src, lengths, max_len=8, beam_size=3)
    for i in range(4):
        alone, score = model.beam_search(
            src[i : i + 1, : lengths[i]], lengths[i : i + 1], max_len=8, beam_size=3
        )
        n = alone.size(1)
        assert torch.equal(tokens[i, :n], alone[0]) and (tokens[i, n:] == PAD).all()
        torch.testing.assert_close(scores[i], score[0], atol=1e-5, rtol=1e-5)


def test_length_penalty_is_gnmt() -> None:
    torch.testing.assert_close(gnmt_penalty(torch.tensor([1, 7]), 1.0), torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(gnmt_penalty(torch.tensor([7]), 0.0), torch.tensor([1.0]))
    model = seq2seq("additive")
    src, lengths = source()
    tokens, scores = model.beam_search(src, lengths, max_len=8, beam_size=3, length_penalty=0.6)
    expected = model.sequence_logprob(src, lengths, tokens) / gnmt_penalty(until_eos(tokens).sum(1), 0.6)
    torch.testing.assert_close(scores, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("encoder", ENCODERS, ids=["rnn", "self_attn"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_classifier_pools_with_each_mechanism(mechanism, encoder) -> None:
    model = build_model("classification", SRC_VOCAB, encoder, {"name": mechanism}, None, {}, num_classes=3)
    assert isinstance(model, Classifier)
    src, lengths = source()
    logits, weights = model(src, lengths)
    assert logits.shape == (4, 3)
    logits.sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    if mechanism in ("none", "fixed_c"):
        assert weights is None
        assert not model.query.requires_grad  # these pool without a query
        return
    assert model.query.grad.abs().sum() > 0
    heads = (4,) if mechanism == "multi_head" else ()
    assert weights.shape == (4, *heads, 5)
    mask = (torch.arange(5) < lengths[:, None]).view(4, *(1 for _ in heads), 5).expand_as(weights)
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_classifier_pooling_means() -> None:
    """none = mean of the unmasked states; fixed_c = the encoder summary C."""
    src, lengths = source()
    for mechanism in ("none", "fixed_c"):
        model = build_model(
            "classification", SRC_VOCAB, ENCODERS[0], {"name": mechanism}, None, {}, num_classes=3
        )
        enc = model.encoder.eval()(src, lengths)
        pooled = enc.summary if mechanism == "fixed_c" else enc.states.sum(1) / lengths[:, None]
        torch.testing.assert_close(model.eval()(src, lengths)[0], model.head(pooled))


@pytest.mark.parametrize("model_type", ["seq2seq", "classification"])
@pytest.mark.parametrize("encoder", ENCODERS, ids=["rnn", "self_attn"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_build_model_every_mechanism_and_encoder(model_type, encoder, mechanism) -> None:
    sizes = {"tgt_vocab": TGT_VOCAB, "decoder": {**SMALL, "dropout": 0.2}}
    if model_type == "classification":
        sizes = {"num_classes": 2}
    model = build_model(model_type, SRC_VOCAB, encoder, {"name": mechanism}, None, {"dropout": 0.2}, **sizes)
    assert type(model.encoder) is registry.get("encoder", encoder["name"])
    attention = model.decoder.attention if model_type == "seq2seq" else model.attention
    assert type(attention) is registry.get("attention", mechanism)
    src, lengths = source()
    if model_type == "seq2seq":
        assert model.decoder.hidden_dim == 16 and model.decoder.dropout.p == 0.2
        logits, _ = model(src, lengths, torch.randint(1, TGT_VOCAB, (4, 3)))
        assert logits.shape == (4, 3, TGT_VOCAB)
    else:
        assert model.head[0].p == 0.2
        assert model(src, lengths)[0].shape == (4, 2)


def test_score_choice_reaches_the_mechanism() -> None:
    model = build_model(
        "seq2seq", SRC_VOCAB, ENCODERS[0], {"name": "dot"}, {"name": "general"}, {}, SMALL, TGT_VOCAB
    )
    assert type(model.decoder.attention.score) is registry.get("score", "general")
    default = build_model("seq2seq", SRC_VOCAB, ENCODERS[0], {"name": "additive"}, None, {}, SMALL, TGT_VOCAB)
    assert type(default.decoder.attention.score) is registry.get("score", "additive")
    assert resolve_score_name("additive", None) == "additive"
    assert resolve_score_name("multi_head", None) == "scaled_dot"
    assert resolve_score_name("dot", {"name": "cosine"}) == "cosine"
    assert resolve_score_name("none", None) is None


@pytest.mark.parametrize("mechanism", ["none", "fixed_c"])
def test_score_with_a_scoreless_mechanism_is_an_error(mechanism) -> None:
    message = f"attention={mechanism} uses no score function; remove score=dot"
    with pytest.raises(ValueError, match=message):
        resolve_score_name(mechanism, {"name": "dot"})
    with pytest.raises(ValueError, match=message):
        build_model(
            "classification", SRC_VOCAB, ENCODERS[0], {"name": mechanism}, {"name": "dot"}, {}, num_classes=2
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_type": "translation"}, "unknown model type 'translation'.*classification, lm, seq2seq"),
        (
            {"model_type": "classification", "num_classes": 2, "classifier": {"hiden_dim": 8}},
            "unknown classifier key.*hiden_dim",
        ),
        ({"tgt_vocab": None}, "needs tgt_vocab"),
        ({"model_type": "classification"}, "needs num_classes"),
    ],
)
def test_build_model_errors(kwargs, message) -> None:
    args = {
        "model_type": "seq2seq",
        "src_vocab": SRC_VOCAB,
        "encoder": ENCODERS[0],
        "attention": {"name": "additive"},
        "score": None,
        "classifier": {},
        "decoder": SMALL,
        "tgt_vocab": TGT_VOCAB,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        build_model(**args)


@pytest.mark.slow
def test_additive_seq2seq_learns_to_copy() -> None:
    torch.manual_seed(0)
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 10, 11, 4, 5], [6, 6, 9, 9, 10], [11, 8, 5, 7, 4]])
    lengths = torch.full((4,), 5)
    tgt = torch.cat([src, torch.full((4, 1), EOS)], 1)
    tgt_in = torch.cat([torch.full((4, 1), BOS), src], 1)
    model = build_model("seq2seq", SRC_VOCAB, ENCODERS[0], {"name": "additive"}, None, {}, SMALL, SRC_VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(100):
        logits, _ = model(src, lengths, tgt_in, need_weights=False)
        loss = nn.functional.cross_entropy(logits.reshape(-1, SRC_VOCAB), tgt.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    tokens, _ = model.eval().greedy(src, lengths, max_len=8)
    assert torch.equal(tokens, tgt)
