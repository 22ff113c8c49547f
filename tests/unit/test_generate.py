"""`attnx generate`'s decoding: greedy, sampled with a temperature and top-k, on a tiny random lm."""

from __future__ import annotations

import argparse

import pytest
import torch

from attnx.generate import GenerateError, check, generate, next_token, parser, symbol_logits
from attnx.models.assembly import build_model
from attnx.models.lm import CausalLM

VOCAB, PROMPT, NEW = 24, 5, 8


@pytest.fixture(scope="module")
def model() -> CausalLM:
    torch.manual_seed(0)
    sizes = {"d_model": 16, "num_layers": 2, "ff_dim": 16, "ff": "swiglu", "conv": 3, "max_len": 32}
    lm = build_model("lm", VOCAB, None, {"name": "multi_head", "num_heads": 2}, None, None, lm=sizes)
    assert isinstance(lm, CausalLM)
    return lm.eval()


def prompt() -> torch.Tensor:
    return torch.randint(4, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(1))


def test_greedy_appends_the_argmax_of_a_full_forward_pass_each_time(model: CausalLM) -> None:
    new, logits = generate(model, prompt(), NEW)
    sequence = prompt()
    with torch.no_grad():
        for _ in range(NEW):
            full, _ = model(sequence, torch.tensor([sequence.size(1)]))
            sequence = torch.cat([sequence, symbol_logits(full[:, -1:]).argmax(-1)], dim=1)
    assert torch.equal(new, sequence[:, PROMPT:])
    assert logits.shape == (1, PROMPT + NEW - 1, VOCAB)  # every position read; the last new token is not
    torch.testing.assert_close(logits, full[:, : PROMPT + NEW - 1], rtol=0, atol=1e-5)


def test_sampling_is_reproducible_by_seed_and_top_k_1_is_greedy(model: CausalLM) -> None:
    a, _ = generate(model, prompt(), NEW, temperature=2.0, seed=3)
    b, _ = generate(model, prompt(), NEW, temperature=2.0, seed=3)
    others = [generate(model, prompt(), NEW, temperature=2.0, seed=s)[0] for s in range(4, 8)]
    assert torch.equal(a, b) and any(not torch.equal(a, o) for o in others)
    greedy, _ = generate(model, prompt(), NEW)
    assert torch.equal(generate(model, prompt(), NEW, temperature=5.0, top_k=1, seed=3)[0], greedy)


def test_top_k_draws_only_among_the_k_likeliest() -> None:
    # the four special tokens first (never drawn), then the symbols 4..8
    logits = torch.tensor([[9.0, 9.0, 9.0, 9.0, 0.0, 3.0, 1.0, 2.9, -1.0]]).repeat(4000, 1)
    drawn = next_token(logits, 1.0, 2, torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {5, 7}
    freq = (drawn == 5).float().mean().item()  # softmax over the two: e^3 / (e^3 + e^2.9) = 0.525
    assert freq == pytest.approx(0.525, abs=0.03)
    hot = next_token(logits, 100.0, None, torch.Generator().manual_seed(0))  # a high temperature: ~uniform
    assert set(hot.tolist()) == {4, 5, 6, 7, 8}
    assert torch.equal(next_token(logits[:1], 0.0, None, torch.Generator()), torch.tensor([5]))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"temperature": -0.5}, "--temperature=-0.5: must be >= 0 (0: greedy)"),
        ({"temperature": float("nan")}, "--temperature=nan: must be >= 0"),
        ({"temperature": 1.0, "top_k": 0}, "--top-k=0: must be >= 1"),
        ({"max_new_tokens": 0}, "--max-new-tokens=0: must be >= 1"),
    ],
)
def test_bad_options_name_the_option_and_its_limit(options: dict, expected: str) -> None:
    args = argparse.Namespace(**{"max_new_tokens": 4, "temperature": 0.0, "top_k": None, **options})
    with pytest.raises(GenerateError, match=expected.replace("(", "\\(").replace(")", "\\)")):
        check(args)


@pytest.mark.parametrize(("option", "role"), [("--top-k", "limits sampling"), ("--seed", "seeds sampling")])
def test_a_sampling_option_is_refused_when_decoding_is_greedy(
    option: str, role: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["run", "a b", option, "5"])  # --temperature 0, the default: greedy
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"attnx generate: {option} {role} (--temperature 0 is greedy): give --temperature > 0 too "
        "(see attnx generate --help)\n"
    )
    assert parser().parse_args(["run", "a b", option, "5", "--temperature", "0.5"]).temperature == 0.5
