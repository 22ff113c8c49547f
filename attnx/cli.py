"""`attnx` command line: a thin dispatcher that imports each subcommand only when it runs.

Every subcommand module exposes `main(argv: list[str]) -> int`. Keeping torch and Lightning out
of this file is what makes `attnx --help` answer instantly.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from importlib import import_module
from typing import Any, NamedTuple, NoReturn

from attnx.registry import RenamedWarning

COMMANDS = {
    "train": (
        "attnx.train.cli",
        "train a model; Hydra overrides, e.g. task=reverse attention=additive (-m: sweep)",
    ),
    "predict": ("attnx.predict", "decode or classify an input with a checkpoint: ckpt=PATH input='...'"),
    "generate": ("attnx.generate", "continue a prompt with a trained lm (cached decoding): RUN 'PROMPT'"),
    "report": ("attnx.report.cli", "tabulate and plot every results.json under a (multi)run folder"),
    "compare": (
        "attnx.compare.cli",
        "a candidate mechanism or score against the classic five on a suite of tasks: attention=NAME",
    ),
    "dashboard": ("attnx.dashboard", "start TensorBoard on a sweep or run folder and print its URL"),
    "sync": ("attnx.sync", "upload a sweep's offline W&B runs (wandb sync)"),
    "store": (
        "attnx.store.cli",
        "the run store compare reuses finished runs from: `store ls`, `store prune --older-than 30d`",
    ),
    "bench": ("attnx.bench.cli", "time, memory and FLOPs of attention mechanisms vs sequence length"),
    "plugins": (
        "attnx.plugins",
        "list registered scores/attentions/encoders/tasks; `plugins check` runs the kit",
    ),
}


class Needs(NamedTuple):
    """An option that acts only with another: given without it, it would be accepted and silently ignored,
    so it is refused in one line (exit 2), the same way in every command: `ArgumentParser.needs` for a
    command's flags, `unmet` for its KEY=VALUE options."""

    option: str  # as the user writes it: "--bench-n", "protocol.lr_grid"
    role: str  # what it does with the other: "picks the N of --bench's rows"
    other: str  # what to give too: "--bench", "--temperature > 0"
    holds: Callable[[Any], bool]  # whether `other` is in effect, from the command's parsed options

    def refusal(self) -> str:
        return f"{self.option} {self.role}: give {self.other} too"


def unmet(needs: Iterable[Needs], given: Callable[[str], bool], options: Any) -> str | None:
    """The refusal of the first of `needs` whose option is `given` while its other does not hold."""
    return next((n.refusal() for n in needs if given(n.option) and not n.holds(options)), None)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line naming the argument, exit 2 (argparse's own prints
    the usage first), and which refuses an option given without the one it acts with (`needs`). Every
    subcommand's parser is one, so bad input reads the same everywhere."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._needs: list[Needs] = []

    def needs(self, option: str, role: str, other: str, holds: Callable[[argparse.Namespace], bool]) -> None:
        """Refuse `option` when given while `holds(args)` is false. Its default must be None (False for a
        flag), so that given means set."""
        self._needs.append(Needs(option, role, other, holds))

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        parsed = super().parse_args(*args, **kwargs)
        dest = {option: action.dest for action in self._actions for option in action.option_strings}

        def given(option: str) -> bool:
            value = getattr(parsed, dest[option])
            return value is not None and value is not False  # not `in (None, False)`: 0 == False

        refusal = unmet(self._needs, given, parsed)
        if refusal is not None:
            self.error(refusal)
        return parsed

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


@contextlib.contextmanager
def one_line_warnings(command: str) -> Iterator[None]:
    """attnx's own warnings (`RenamedWarning`: a renamed key or name was read) formatted as one line,
    `attnx COMMAND: warning: ...`, like its errors; Python's format adds the file, line number and source
    line of the call. Only the format changes: a warning is still shown, filtered or recorded (pytest's
    `warns`) as Python does; other warnings keep their format."""
    before = warnings.formatwarning

    def one_line(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
    ) -> str:
        if issubclass(category, RenamedWarning):
            return f"attnx {command}: warning: {message}\n"
        return before(message, category, filename, lineno, line)

    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = before


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = ArgumentParser(
        prog="attnx",
        description="Compare attention mechanisms by configuration alone.",
        epilog="Run `attnx COMMAND --help` for a command's own options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    try:
        with one_line_warnings(argv[0]):
            return import_module(COMMANDS[argv[0]][0]).main(argv[1:]) or 0
    except KeyboardInterrupt as error:  # Ctrl-C that no command handles itself (a hanging plugin import)
        print(f"attnx {argv[0]}: {error or 'interrupted'}", file=sys.stderr)
        return 130  # the shell's convention for SIGINT


if __name__ == "__main__":
    sys.exit(main())
