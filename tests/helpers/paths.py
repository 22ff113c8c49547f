"""Where things are, wherever a test file sits in the folders."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
PACKAGE = REPO / "attnx"
