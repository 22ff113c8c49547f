"""`python -m attnx.tasks` (`make data`): fetch every download and build each real-data task's
default config into the data cache, so later runs start at once (and need no network)."""

from attnx import registry

for name in ("sentiment_movies", "snippet_domain", "g2p", "dates"):
    task = registry.get("task", name)()
    task.setup()
    sizes = ", ".join(f"{split} {len(data)}" for split, data in task.splits.items())
    print(f"{name}: {sizes} -> {task.cache_path()}")
