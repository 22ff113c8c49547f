"""results.json: the one record every run leaves, read back by `attnx report` and sweep resumption."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = "results.json"


def write_results(output_dir: str | Path, record: dict[str, Any]) -> Path:
    """Write atomically, so a crash mid-write never leaves a half file for `attnx report` to trip on."""
    path = Path(output_dir) / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read_results(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def completed(output_dir: str | Path) -> dict[str, Any] | None:
    """The run's record if it finished successfully, else None."""
    path = Path(output_dir) / RESULTS
    if not path.exists():
        return None
    try:
        record = read_results(path)
    except json.JSONDecodeError:
        return None
    return record if record.get("status") == "completed" else None


def find_results(root: str | Path) -> list[Path]:
    return sorted(Path(root).rglob(RESULTS))
