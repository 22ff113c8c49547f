"""`attnx dashboard DIR`: TensorBoard on a sweep or run folder, started and its URL printed; Ctrl+C stops it.

It is TensorBoard's own server (`tensorboard.program`), run as `tensorboard --logdir DIR` would run it.
A sweep's runs are listed by what distinguishes them (`0/attention=dot`: attnx.track.loggers), the
HParams tab compares their choices and final metrics, and the images tab holds the attention heatmaps.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import socket
import sys
import threading
from pathlib import Path

from attnx.cli import ArgumentParser

EVENTS = "events.out.tfevents.*"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _port(value: str) -> int:
    if not value.strip().isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {value!r}")
    return int(value)


def _unusable(host: str, port: int | None) -> str | None:
    """Why TensorBoard could not serve on `host` and `port`, found before it starts its data server
    (whose lines, and TensorBoard's own, a bad host or a busy port would otherwise print); None if
    it can. Without a port TensorBoard looks for a free one itself."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port or 0, type=socket.SOCK_STREAM)[0]
    except OSError as error:
        return f"--host {host}: not an address to serve on ({error.strerror or error})"
    if not port:
        return None
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's server binds
        try:
            probe.bind(address)
        except OSError as error:
            return f"--host {host} --port {port}: cannot serve there ({error.strerror or error})"
    return None


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
    problem = _unusable(args.host, args.port)
    if problem:
        print(f"attnx dashboard: {problem}", file=sys.stderr)
        return 2

    from tensorboard import program

    flags = ["attnx dashboard", "--logdir", str(args.dir), "--host", args.host]
    if args.port is not None:  # else TensorBoard's own choice: 6006, or the next free port
        flags += ["--port", str(args.port)]
    board = program.TensorBoard()
    board.configure(flags)
    said = io.StringIO()  # TensorBoard's own lines: its advisory, or an error it prints before exiting
    try:
        with contextlib.redirect_stderr(said):
            url = board.launch()
    except (program.TensorBoardServerException, SystemExit) as error:  # the port is taken, the host unknown
        why = getattr(error, "msg", None) or _last_line(said.getvalue()) or "TensorBoard did not start"
        where = f"--host {args.host}" + (f" --port {args.port}" if args.port is not None else "")
        print(f"attnx dashboard: {where}: {why}", file=sys.stderr)
        return 2
    advisory = getattr(program, "_DATA_SERVER_ADVISORY_MESSAGE", "")  # "NOTE: Using experimental fast ..."
    for line in said.getvalue().replace(advisory, "").splitlines():
        if line.strip():  # anything else TensorBoard said: kept, the advisory about its loader is not news
            print(f"attnx dashboard: {line.strip()}", file=sys.stderr)
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
