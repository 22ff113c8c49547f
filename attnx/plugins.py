"""`attnx plugins`: list every registered score/attention/encoder/decoder/task with what it declares;
`attnx plugins check [NAME]` runs the conformance kit (attnx.testing) on every score and attention, or on
those that involve NAME. Never imports Lightning.

Exit codes: 0 ok, 1 a check failed, 2 a plugin failed to import or NAME is unknown.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnx.cli import ArgumentParser
from attnx.registry import KINDS, PluginImportError, RegistryError, load_all, registry, slots_of
from attnx.table import markdown_table

if TYPE_CHECKING:  # for the types only: nn is imported where it is used (`capabilities`)
    from attnx.nn.attention import Attention


def describe() -> str:
    """A table per kind: name (with its other names), origin, what the class declares (an attention's
    capabilities, a score's uses_positions, an encoder's or decoder's slots), hyperparameters (=???
    when required)."""
    blocks = []
    for kind in KINDS:
        declared = DECLARED.get(kind)
        rows = []
        for name in registry(kind).names():
            e = registry(kind).entry(name)
            params = [f"{k}={v}" for k, v in e.hyperparams().items()]
            if kind == "attention":
                cls: type[Attention] = e.cls
                params = [f"placement={cls.placement}", f"default_score={cls.default_score}", *params]
            aliases = registry(kind).aliases(name)
            shown = f"{name} ({', '.join(aliases)})" if aliases else name
            rows.append([shown, e.origin, *([declared[1](e.cls)] if declared else []), " ".join(params)])
        header = ["name", "origin", *([declared[0]] if declared else []), "hyperparameters"]
        blocks.append(f"{kind} ({len(rows)})\n" + markdown_table(header, rows))
    return "\n\n".join(blocks)


def capabilities(cls: type) -> str:
    """The capability flags an attention class declares True, e.g. "self_attention causal"."""
    from attnx.nn.attention import CAPABILITIES

    return " ".join(flag for flag in CAPABILITIES if getattr(cls, flag, False))


def slots(cls: type) -> str:
    """Each attention site of an encoder or decoder: "attention (role self, default multi_head)"."""
    return "; ".join(f"{name} (role {s.role}, default {s.default})" for name, s in slots_of(cls).items())


# kind -> (column, what a class of that kind declares)
DECLARED: dict[str, tuple[str, Callable[[Any], str]]] = {
    "score": ("uses_positions", lambda cls: str(cls.uses_positions)),
    "attention": ("capabilities", capabilities),
    "encoder": ("slots", slots),
    "decoder": ("slots", slots),
}


def check(name: str | None = None) -> int:
    """PASS/FAIL per score and attention (each attention with every score it accepts), or for those that
    involve `name`; under each attention an rnn decoder hosts, whether it compiles."""
    from attnx.testing import check_all, compile_notes  # imports torch modules only when checking

    try:
        results = check_all(name)
    except RegistryError as error:
        print(f"attnx plugins check: error: {error}", file=sys.stderr)
        return 2
    notes = compile_notes(name)
    failed = 0
    for kind, label, message in results:
        failed += message is not None
        print(f"{'FAIL' if message else 'PASS'}  {kind} {label}" + (f": {message}" if message else ""))
        if kind == "attention" and label in notes:  # what `compile: true` does with it in an rnn decoder
            print(f"      compile: {notes[label]}")
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="attnx plugins",
        description="List registered plugins (built-in, shipped, entry points, ATTNX_PLUGIN_PATH, ./plugins)",
    )
    parser.add_argument("action", nargs="?", choices=["check"], help="run the conformance kit on all of them")
    parser.add_argument(
        "name",
        nargs="?",
        help="check only this score (alone and in every mechanism that accepts it) or attention (with every "
        "score it accepts)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.name is not None and args.action != "check":
        parser.error(f"a name goes after 'check': attnx plugins check {args.name}")
    try:
        load_all()
    except PluginImportError as error:
        print(f"attnx plugins: error: {error}", file=sys.stderr)
        return 2
    if args.action == "check":
        return check(args.name)
    print(describe())
    return 0
