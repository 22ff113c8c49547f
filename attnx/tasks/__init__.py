"""Tasks: datasets with vocabularies, deterministic splits and vectorised batching.

Importing this package registers the built-in tasks.
"""

from attnx.tasks import synthetic  # noqa: F401  (registers copy, reverse, sort, addition)
