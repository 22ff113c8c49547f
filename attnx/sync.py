"""`attnx sync DIR`: upload the offline W&B runs of sweep or run folders with wandb's own `wandb sync`.

Runs log to W&B offline unless you are logged in (attnx.track.loggers), each into its run folder's
`wandb/offline-run-*`; a run continued with `resume=auto` has one such folder per start, all with the
same run id, which `wandb sync` uploads in order as one W&B run. Checked first, each as one line: the
folders exist and hold offline runs (exit 2), you are logged in (exit 2), the server answers (exit 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from attnx.cli import ArgumentParser

TIMEOUT = 10  # seconds for the W&B server to answer before the upload is called off


def offline_runs(folders: list[Path]) -> list[Path]:
    """Every offline W&B run under `folders` (searched recursively), in path order."""
    return sorted({run for folder in folders for run in folder.rglob("offline-run-*") if run.is_dir()})


def unreachable(url: str) -> str | None:
    """Why the W&B server at `url` cannot be reached, or None when it answers (any HTTP status does:
    an error status is the server's own word, which `wandb sync` then reports)."""
    try:
        urllib.request.urlopen(url, timeout=TIMEOUT).close()
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as error:  # URLError, a timeout, a malformed URL
        return str(getattr(error, "reason", error))
    return None


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="attnx sync", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep or run folders, searched recursively")
    parser.add_argument(
        "--dry-run", action="store_true", help="list what wandb sync would upload; needs no login or network"
    )
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"attnx sync: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    runs = offline_runs(args.dirs)
    if not runs:
        print(
            f"attnx sync: no offline W&B runs under {', '.join(map(str, args.dirs))} "
            "(runs log to W&B with logger=wandb or logger=many)",
            file=sys.stderr,
        )
        return 2

    from attnx.track.loggers import WANDB_HOST, wandb_logged_in

    if not args.dry_run:
        if not wandb_logged_in():
            print(
                "attnx sync: not logged in to W&B: run `wandb login` (or set WANDB_API_KEY), then sync "
                f"again; {len(runs)} offline run(s) wait under {', '.join(map(str, args.dirs))}",
                file=sys.stderr,
            )
            return 2
        url = os.environ.get("WANDB_BASE_URL", WANDB_HOST)
        reason = unreachable(url)
        if reason is not None:
            print(f"attnx sync: cannot reach the W&B server at {url}: {reason}", file=sys.stderr)
            return 1
    # the wandb installed with attnx, whose run files these are
    command = [
        sys.executable,
        "-m",
        "wandb",
        "sync",
        *(["--dry-run"] if args.dry_run else []),
        *map(str, runs),
    ]
    return subprocess.run(command).returncode
