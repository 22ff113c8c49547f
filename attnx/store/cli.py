"""`attnx store ls` and `attnx store prune --older-than 30d`: the run store's entries (attnx.store.runs), with
their sizes, and removing the old ones. `--store DIR` names another store than the user's cache."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from attnx.cli import ArgumentParser
from attnx.store.runs import Entry, Store, default_root

UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="attnx store", description=__doc__)
    parser.add_argument("action", choices=["ls", "prune"])
    parser.add_argument(
        "--store", type=Path, default=None, help="the store's folder (default: the user's cache)"
    )
    parser.add_argument(
        "--older-than", type=age, default=None, help="prune: entries stored longer ago, e.g. 30d"
    )
    parser.needs(
        "--older-than", "chooses what prune removes", "the prune action", lambda a: a.action == "prune"
    )
    args = parser.parse_args(argv)
    if args.store is not None and args.store.exists() and not args.store.is_dir():
        parser.error(f"--store {args.store}: a file, not a run store's folder")
    store = Store(args.store or default_root())
    entries = store.entries()
    if args.action == "ls":
        print(f"run store {store.root}: {len(entries)} runs, {size(sum(e.size for e in entries))}")
        for entry in entries:
            print(f"  {describe(entry)}")
        return 0
    if args.older_than is None:
        parser.error("prune needs --older-than AGE (e.g. 30d, 12h)")
    cutoff = time.time() - args.older_than
    old = [e for e in entries if time.mktime(time.strptime(e.meta["stored"], "%Y-%m-%d %H:%M:%S")) < cutoff]
    freed = sum(e.size for e in old)
    for entry in old:
        store.remove(entry)
    print(f"run store {store.root}: removed {len(old)} of {len(entries)} runs, {size(freed)} freed")
    return 0


def age(text: str) -> float:
    """`30d`, `12h`, `90m`, `2w` in seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([mhdw])", text.strip())
    if match is None:
        raise ValueError(f"{text!r}: give a number and a unit (m, h, d, w), e.g. 30d")
    return float(match.group(1)) * UNITS[match.group(2)]


age.__name__ = "age (e.g. 30d)"  # argparse's error names the type by it


def describe(entry: Entry) -> str:
    """One line: key, when stored, by which attnx, task and mechanism, size."""
    config = (entry.meta.get("key") or {}).get("config") or {}
    task = (config.get("task") or {}).get("name", "?")
    attention = (config.get("attention") or {}).get("name", "-")
    seed = config.get("seed", "?")
    stored, version = entry.meta["stored"], entry.meta["attnx"]
    return f"{entry.key[:12]}  {stored}  attnx {version}  {task} {attention} seed={seed}  {size(entry.size)}"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
