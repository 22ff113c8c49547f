"""`attnx plugins`: list every registered score/attention/encoder/task; `attnx plugins check` runs
the conformance kit (attnx.testing) on every score and attention. Never imports Lightning.

Exit codes: 0 ok, 1 a check failed, 2 a plugin failed to import.
"""

from __future__ import annotations

import argparse
import sys

from attnx.registry import KINDS, PluginImportError, load_all, registry


def describe() -> str:
    """One block per kind: name, origin, hyperparameters (=??? when required)."""
    lines = []
    everything = [registry(kind).entry(name) for kind in KINDS for name in registry(kind).names()]
    name_width = max((len(e.name) for e in everything), default=0)
    origin_width = max((len(e.origin) for e in everything), default=0)
    for kind in KINDS:
        entries = [e for e in everything if e.kind == kind]
        lines.append(f"{kind} ({len(entries)})")
        for e in entries:
            params = [f"{k}={v}" for k, v in e.hyperparams().items()]
            if kind == "attention":
                params = [f"placement={e.cls.placement}", f"default_score={e.cls.default_score}", *params]
            lines.append(f"  {e.name:<{name_width}}  {e.origin:<{origin_width}}  {' '.join(params)}".rstrip())
    return "\n".join(lines)


def check() -> int:
    """PASS/FAIL per score and attention (each attention with every score it accepts)."""
    from attnx.testing import check_all  # imports torch modules only when checking

    failed = 0
    for kind, name, error in check_all():
        failed += error is not None
        print(f"{'FAIL' if error else 'PASS'}  {kind} {name}" + (f": {error}" if error else ""))
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="attnx plugins",
        description="List registered plugins (built-in, ./plugins, ATTNX_PLUGIN_PATH, entry points).",
    )
    parser.add_argument("action", nargs="?", choices=["check"], help="run the conformance kit on all of them")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        load_all()
    except PluginImportError as error:
        print(f"attnx plugins: error: {error}", file=sys.stderr)
        return 2
    if args.action == "check":
        return check()
    print(describe())
    return 0
