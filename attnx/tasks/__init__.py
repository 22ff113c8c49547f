"""Tasks: datasets with vocabularies, deterministic splits and vectorised batching.

Importing this package registers the built-in tasks.
"""

from attnx.tasks import listops, sentiment, synthetic  # noqa: F401  (each module registers its tasks)
