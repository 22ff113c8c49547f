"""attnx's command line, shared by every command: an option given without the one it acts with is refused
in one line (`Needs`, `ArgumentParser.needs`), and attnx's own warnings are one line (`one_line_warnings`)."""

from __future__ import annotations

import warnings

import pytest

from attnx.cli import ArgumentParser, Needs, one_line_warnings, unmet
from attnx.registry import RenamedWarning


def parser() -> ArgumentParser:
    parser = ArgumentParser(prog="attnx test")
    parser.add_argument("--bench")
    parser.add_argument("--bench-n", type=int)
    parser.add_argument("--causal", action="store_true")
    parser.needs("--bench-n", "picks the N of --bench's rows", "--bench", lambda args: args.bench is not None)
    parser.needs("--causal", "masks the rows", "--bench", lambda args: args.bench is not None)
    return parser


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["--bench-n", "0"], "--bench-n picks the N of --bench's rows: give --bench too"),  # 0 is given too
        (["--causal"], "--causal masks the rows: give --bench too"),
    ],
)
def test_an_option_without_the_one_it_acts_with_is_one_line_and_exit_2(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"attnx test: {refusal} (see attnx test --help)\n"


def test_with_what_it_acts_with_or_not_given_it_parses() -> None:
    assert parser().parse_args(["--bench", "b.csv", "--bench-n", "8", "--causal"]).bench_n == 8
    assert parser().parse_args([]).bench_n is None


def test_unmet_names_the_first_option_given_alone() -> None:
    needs = [Needs(k, "acts", "switch=true", lambda options: options["switch"]) for k in ("a", "b")]
    assert unmet(needs, {"b"}.__contains__, {"switch": False}) == "b acts: give switch=true too"
    assert unmet(needs, {"a", "b"}.__contains__, {"switch": True}) is None


def test_a_renamed_name_is_formatted_as_one_line_and_other_warnings_as_python_does() -> None:
    with one_line_warnings("train"):
        renamed = warnings.formatwarning(
            RenamedWarning("`model` is now `classifier`"), RenamedWarning, "x.py", 3
        )
        other = warnings.formatwarning(UserWarning("careful"), UserWarning, "x.py", 3, "call()")
    assert renamed == "attnx train: warning: `model` is now `classifier`\n"
    assert other == "x.py:3: UserWarning: careful\n  call()\n"
    assert warnings.formatwarning(RenamedWarning("x"), RenamedWarning, "x.py", 3, "").startswith("x.py:3:")
