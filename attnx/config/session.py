"""One Hydra initialisation for many compositions, sharing what they load.

Hydra's `compose` builds a fresh `CachingConfigRepository` for every call (`ConfigLoaderImpl.
_parse_overrides_and_create_caching_repo`): a deep copy of the ConfigStore, every plugin's structured config
in every slot group among it, then each config file and store entry loaded again. Within one search path the
cache is valid across calls: it is what one composition already reuses for each of its defaults, and it is
keyed by the config's path. Inside `session()`, every composition of the same search path shares one, so
`attnx compare`'s checks compose a suite's (task, arm) pairs, and a sweep's preflight its jobs, at half the
cost each (benchmarks/preflight.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_active: ContextVar[bool] = ContextVar("attnx_hydra_session", default=False)


def active() -> bool:
    """Whether a `session()` is open: a composition then joins it rather than initialising Hydra again."""
    return _active.get()


@contextmanager
def session(config_dir: str) -> Iterator[None]:
    """Hydra initialised over `config_dir` (version_base 1.3), its loader keeping one repository cache
    per search path for every `hydra.compose` until the block ends. Nested, the outer session is kept."""
    if _active.get():
        yield
        return
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    with hydra.initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        _share_repositories(GlobalHydra.instance().config_loader())
        token = _active.set(True)
        try:
            yield
        finally:
            _active.reset(token)


def _share_repositories(loader: Any) -> None:
    """`loader` (this session's own ConfigLoaderImpl) reuses one caching repository per search path (the
    `hydra.searchpath` override, where a composition gives one) instead of building one per call."""
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.core.override_parser.overrides_parser import OverridesParser

    repositories: dict[str | None, CachingConfigRepository] = {}

    def parse_and_share(config_name: str | None, overrides: list[str]) -> tuple[list[Any], Any]:
        parsed = OverridesParser.create().parse_overrides(overrides=overrides)
        path = next((o.input_line for o in parsed if o.get_key_element() == "hydra.searchpath"), None)
        if path not in repositories:
            repositories[path] = CachingConfigRepository(loader.repository)
        loader._process_config_searchpath(config_name, parsed, repositories[path])
        return parsed, repositories[path]

    loader._parse_overrides_and_create_caching_repo = parse_and_share
