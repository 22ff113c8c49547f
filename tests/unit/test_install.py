"""The configs and the shipped plugins are part of the package: a non-editable install works from any
folder, finds a user's own configs in `./conf` and ATTNX_CONFIG_PATH, and has every plugin the README
uses (attnx/contrib, registered by attnx's own entry points)."""

from __future__ import annotations

import tomllib

from helpers.paths import REPO as ROOT


def listed_packages() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_folder_ships() -> None:
    """setuptools ships only listed packages: a folder of attnx/ left out (a new command's) would be missing
    from every wheel while an editable install, as in a checkout, still has it."""
    folders = {p.parent.relative_to(ROOT) for p in (ROOT / "attnx").rglob("__init__.py")}
    missing = {".".join(f.parts) for f in folders} - listed_packages()
    assert not missing, f"add to pyproject.toml's packages: {sorted(missing)}"


def test_every_config_folder_ships_with_the_package() -> None:
    """setuptools ships only listed packages; each folder of conf/ must be one (pyproject.toml)."""
    packages = listed_packages()
    folders = {p.parent for p in (ROOT / "conf").rglob("*.yaml")}
    expected = {".".join(["attnx", *f.relative_to(ROOT).parts]) for f in folders}
    assert expected <= packages, f"add to pyproject.toml's packages: {sorted(expected - packages)}"
