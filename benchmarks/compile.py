"""`compile: true`: torch.compile's up-front cost and its steady-state training-step speed vs eager.

Two copies of the same model (as `attnx train` builds it), one compiled the way `compile: true`
does it (`nn.Module.compile()`, in place), train on the same batches; the compiled copy's first
steps (compilation, recompiles for new batch shapes) are timed alone, then both are timed
round-robin.

    python benchmarks/compile.py [--warm-steps 8]
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings

import common

from attnx.bench.measure import interleaved, ratios
from attnx.table import markdown_table

RUNS = {
    "reverse, rnn + additive (default)": [],
    "reverse, self_attn + multi_head": ["encoder=self_attn", "attention=multi_head"],
}
BATCHES = 8  # distinct batches (several lengths, so several shapes), cycled


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    args = p.parse_args()
    device = common.start(args)
    warnings.filterwarnings("ignore")
    rows = []
    for name, overrides in RUNS.items():
        steps, first = {}, {}
        with tempfile.TemporaryDirectory() as out:
            for mode in ("eager", "compiled"):
                task, module, trainer = common.assemble(overrides, out)
                if mode == "compiled":
                    module.model.compile()
                loop = common.PlainLoop(task, module, trainer.gradient_clip_val, 10**6, device)
                steps[mode] = common.cycling(loop, task, BATCHES)
                started = time.perf_counter()
                for _ in range(BATCHES):
                    steps[mode]()
                first[mode] = time.perf_counter() - started
        times = interleaved(steps, device, common.rounds(list(steps.values()), device, args.budget), warmup=1)
        ms = {mode: statistics.median(t) * 1e3 for mode, t in times.items()}
        speed = ratios(times, "eager")["compiled"]
        rows.append([name, first["eager"], first["compiled"], ms["eager"], ms["compiled"], speed])
    header = [
        "run",
        f"first {BATCHES} steps eager s",
        "compiled s",
        "eager ms/step",
        "compiled ms/step",
        "compiled speed",
    ]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
