"""Tasks: datasets with vocabularies, deterministic splits and vectorised batching.

Importing this package registers the built-in tasks.
"""

from attnx.tasks import (  # noqa: F401  (each registers its tasks)
    compression,
    copying,
    dates,
    files,
    g2p,
    induction,
    listops,
    memorization,
    mqar,
    recall,
    sentiment,
    synthetic,
    vader,
)
