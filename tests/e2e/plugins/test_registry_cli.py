"""Registry: duplicate names, base classes, did-you-mean lookups, ConfigStore entries, Hydra overrides."""

import subprocess
import sys
from pathlib import Path


def test_plugin_module_names_are_the_same_in_every_process(tmp_path: Path) -> None:
    plugin = tmp_path / "same_name.py"
    plugin.write_text("")
    code = (
        "import sys; from pathlib import Path; from attnx.registry import load_file\n"
        f"load_file(Path({str(plugin)!r})); print([m for m in sys.modules if 'same_name' in m][0])"
    )
    names = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(names) == 1 and names.pop().startswith("attnx_plugins.same_name_")


def test_a_shipped_plugin_imported_before_discovery_keeps_its_entry_point_origin() -> None:
    """A test or script that imports `attnx.contrib.linear` itself registers it before `load_all`, which then
    imports nothing: the listing must still say where it comes from, in any order."""
    code = (
        "import attnx.contrib.linear\n"
        "from attnx.registry import load_all, registry\n"
        "load_all()\n"
        "print(registry('attention').entry('linear').origin)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "dist attnx (attnx.contrib.linear)", out.stderr
