"""`attnx dashboard DIR`: TensorBoard on a sweep or run folder, started and its URL printed; Ctrl+C stops it.

It is TensorBoard's own server (`tensorboard.program`), run as `tensorboard --logdir DIR` would run it.
A sweep's runs are listed by what distinguishes them (`0/attention=dot`: attnx.track.loggers), the
HParams tab compares their choices and final metrics, and the images tab holds the attention heatmaps.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from pathlib import Path

from attnx.cli import ArgumentParser

EVENTS = "events.out.tfevents.*"


def _port(value: str) -> int:
    if not value.strip().isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {value!r}")
    return int(value)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="attnx dashboard", description=__doc__.splitlines()[0])
    parser.add_argument(
        "dir", type=Path, help="a sweep or run folder, or a folder of them (searched recursively)"
    )
    parser.add_argument(
        "--port", type=_port, help="default: 6006, or the next free port after it; 0: any free port"
    )
    parser.add_argument(
        "--host", default="localhost", help="the address to serve on (default: localhost; 0.0.0.0: all)"
    )
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        print(f"attnx dashboard: no such folder: {args.dir}", file=sys.stderr)
        return 2

    from tensorboard import program

    flags = ["attnx dashboard", "--logdir", str(args.dir), "--host", args.host]
    if args.port is not None:  # else TensorBoard's own choice: 6006, or the next free port
        flags += ["--port", str(args.port)]
    board = program.TensorBoard()
    board.configure(flags)
    try:
        url = board.launch()
    except program.TensorBoardServerException as error:  # the port is taken, the host unknown
        print(f"attnx dashboard: {error.msg}", file=sys.stderr)
        return 2
    if next(args.dir.rglob(EVENTS), None) is None:  # a sweep just launched has none yet: they will appear
        print(
            f"attnx dashboard: no TensorBoard event files under {args.dir} yet "
            "(runs write them with logger=tensorboard or logger=many)",
            file=sys.stderr,
        )
    print(f"attnx dashboard: TensorBoard on {args.dir} at {url} (Ctrl+C stops it)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl+C is how it is meant to stop
        threading.Event().wait()  # the server runs in launch()'s thread
    return 0
