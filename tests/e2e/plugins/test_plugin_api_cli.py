"""The plugin API stays light: `import attnx` in a fresh interpreter loads no torch (so `attnx --help` and
`attnx plugins` start fast), and a torch-backed name is imported when a plugin first asks for it."""

import subprocess
import sys


def test_import_attnx_loads_no_torch_until_a_plugin_asks_for_a_class() -> None:
    code = (
        "import sys, attnx\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
        "print(attnx.MultiHeadAttention.__module__, 'torch' in sys.modules)"
    )
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert lines.splitlines() == ["[]", "attnx.nn.multihead True"]
