"""Tasks: datasets with vocabularies, deterministic splits and vectorised batching."""
