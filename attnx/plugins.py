"""`attnx plugins`: list every registered score/attention/encoder/decoder/task with what it declares;
`attnx plugins check [NAME [KEY=VALUE ...]]` runs the conformance kit (attnx.testing) on every score and
attention, or on those that involve NAME: at the given values of their hyperparameters
(`attention.window=4`, `score.bandwidth=0.5`) and width (`d_model=64`). Never imports Lightning.

Exit codes: 0 ok, 1 a check failed, 2 a plugin failed to import, NAME is unknown or a value is bad.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnx.cli import ArgumentParser
from attnx.registry import (
    KINDS,
    PluginImportError,
    RegistryError,
    config_class,
    load_all,
    registry,
    slots_of,
)
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
    """Each attention site of an encoder or decoder: "attention (role self, default multi_head, per layer:
    layers)"."""
    return "; ".join(
        f"{name} (role {s.role}, default {s.default}{f', per layer: {s.plan}' if s.plan else ''})"
        for name, s in slots_of(cls).items()
    )


# kind -> (column, what a class of that kind declares)
DECLARED: dict[str, tuple[str, Callable[[Any], str]]] = {
    "score": ("uses_positions", lambda cls: str(cls.uses_positions)),
    "attention": ("capabilities", capabilities),
    "encoder": ("slots", slots),
    "decoder": ("slots", slots),
}


def check(name: str | None = None, assignments: list[str] | None = None) -> int:
    """PASS/FAIL per score and attention (each attention with every score it accepts), or for those that
    involve `name`, at the `assignments` (KEY=VALUE); under each attention an rnn decoder hosts, whether it
    compiles."""
    from attnx.testing import check_all, compile_notes  # imports torch modules only when checking

    try:
        values, dims = parse_values(name, assignments or [])
        results = check_all(name, values, dims)
    except (RegistryError, ValueError) as error:
        print(f"attnx plugins check: error: {error}", file=sys.stderr)
        return 2
    notes = compile_notes(name, values, dims)
    failed = 0
    for kind, label, message in results:
        failed += message is not None
        print(f"{'FAIL' if message else 'PASS'}  {kind} {label}" + (f": {message}" if message else ""))
        if kind == "attention" and label in notes:  # what `compile: true` does with it in an rnn decoder
            print(f"      compile: {notes[label]}")
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


def parse_values(
    name: str | None, assignments: list[str]
) -> tuple[dict[str, dict[str, Any]], tuple[int, int, int] | None]:
    """`attention.KEY=VALUE` and `score.KEY=VALUE` as typed values by kind, and `d_model=N` as the kit's
    dims; a ValueError of one line for a key that no checked class takes or a value of the wrong type."""
    from attnx.testing.suite import hyperparameters, pairs

    if assignments and name is None:
        raise ValueError(f"name the plugin to check at {assignments[0]}: attnx plugins check NAME KEY=VALUE")
    checked = pairs(name)
    values: dict[str, dict[str, Any]] = {}
    dims = None
    for assignment in assignments:
        key, equals, value = assignment.partition("=")
        kind, _, field = key.partition(".")
        if not equals or not value:
            raise ValueError(
                f"{assignment}: expected KEY=VALUE (attention.window=4, score.bandwidth=0.5, d_model=64)"
            )
        if key == "d_model":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"d_model={value}: expected a positive integer")
            dims = (int(value),) * 3
            continue
        classes: set[type] | None = None
        if kind == "attention":
            classes = {pair.subject.cls for pair in checked}
        elif kind == "score":
            classes = {cls for pair in checked if (cls := pair.subject.score_class()) is not None}
        if classes is None or not field:
            raise ValueError(
                f"{assignment}: unknown key {key}; keys are attention.NAME, score.NAME and d_model"
            )
        takes = [cls for cls in classes if field in hyperparameters(kind, cls)]
        if not takes:
            known = sorted({p for cls in classes for p in hyperparameters(kind, cls)})
            raise ValueError(
                f"{assignment}: no {kind} checked for {name} takes {field}; their hyperparameters: "
                f"{', '.join(known) or 'none'}"
            )
        values.setdefault(kind, {})[field] = typed(kind, takes[0], field, value)
    return values, dims


def typed(kind: str, cls: type, field: str, value: str) -> Any:
    """`value` as the type of `cls`'s config field `field` (its registered config class), or a one-line
    ValueError naming the key."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    entry = next(e for n in registry(kind).names() if (e := registry(kind).entry(n)).cls is cls)
    node = OmegaConf.structured(config_class(entry))
    try:
        merged = OmegaConf.merge(node, OmegaConf.from_dotlist([f"{field}={value}"]))
        assert isinstance(merged, DictConfig)  # a config class is a mapping
        return merged[field]
    except OmegaConfBaseException as error:
        reason = str(error).splitlines()[0]
        raise ValueError(f"{kind}.{field}={value}: {reason}") from None


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
    parser.add_argument(
        "values",
        nargs="*",
        metavar="KEY=VALUE",
        help="check at these values: attention.NAME=VALUE and score.NAME=VALUE set hyperparameters of the "
        "checked mechanisms and scores that take them, d_model=N the width",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.name is not None and "=" in args.name:
        parser.error(f"name the plugin to check at {args.name} first: attnx plugins check NAME KEY=VALUE")
    if args.name is not None and args.action != "check":
        parser.error(f"a name goes after 'check': attnx plugins check {args.name}")
    try:
        load_all()
    except PluginImportError as error:
        print(f"attnx plugins: error: {error}", file=sys.stderr)
        return 2
    if args.action == "check":
        return check(args.name, args.values)
    print(describe())
    return 0
