"""The package's plan, checked: its layers import one way (foundation <- nn, tasks <- models, testing,
contrib <- config, lit, track <- commands), and no module imports itself back, within a layer either.

Checked statically on every `import attnx...` in a module's source (function-level imports included):
each names its own layer or a lower one, and the graph of module imports has no cycle. At run time,
importing every module of the two bottom layers in a fresh interpreter loads nothing from a higher one.
"""

from __future__ import annotations

import subprocess
import sys

from helpers.architecture import layer_of, modules


def test_bottom_layers_load_nothing_above_them_at_run_time() -> None:
    bottom = [m for m in modules() if layer_of(m)[0] <= 1 and not m.endswith("__main__")]  # __main__ runs
    code = (
        "import importlib, sys\n"
        f"for name in {bottom!r}: importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'attnx')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    above = [m for m in loaded.split() if layer_of(m)[0] > 1]
    assert not above, f"importing nn and tasks loaded {above}"
