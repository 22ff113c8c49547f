"""Tasks: datasets with vocabularies, deterministic splits and vectorised batching.

Importing this package registers the built-in tasks.
"""

from attnx.tasks import dates, files, g2p, induction, listops, mqar, sentiment, synthetic, vader  # noqa: F401  (each registers its tasks)
