"""Measuring a callable on CPU or CUDA: median time, peak memory and FLOPs.

The tools behind `attnx bench` and the scripts in benchmarks/. Times are medians after warm-up
(CUDA events on a GPU); `interleaved` runs competing candidates round-robin so that load from other
processes hits each of them alike and cancels in their ratio.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds one call of `fn` takes, measured on the device (CUDA events) or the host clock."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def interleaved(
    candidates: Mapping[str, Callable[[], object]], device: torch.device, repeats: int = 5, warmup: int = 1
) -> dict[str, list[float]]:
    """Times of each candidate over `repeats` rounds; every round runs all of them, in an order
    rotated by one each round so no candidate always follows the same neighbour."""
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_once(candidates[name], device))
    return times


def median_time(fn: Callable[[], object], device: torch.device, repeats: int = 5, warmup: int = 1) -> float:
    """Median seconds per call of `fn` after `warmup` calls."""
    return statistics.median(interleaved({"fn": fn}, device, repeats, warmup)["fn"])


def ratios(times: Mapping[str, list[float]], reference: str) -> dict[str, float]:
    """Median over rounds of time(reference) / time(candidate): > 1 means faster than the reference.
    Ratios are taken per round, where both ran under the same load."""
    return {
        name: statistics.median(r / t for r, t in zip(times[reference], series))
        for name, series in times.items()
    }


def peak_memory(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated by torch during one call of `fn`, above what was allocated before it.

    CUDA: `max_memory_allocated`. CPU: torch keeps no allocator statistics and tracemalloc does
    not see torch's allocations, so this replays the allocations and frees that torch.profiler
    records with `profile_memory=True` and takes the running maximum. Both count tensor memory
    only, not the allocator's cache, the Python heap or the code.
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # kineto_results holds every allocation (+bytes) and free (-bytes) with its timestamp
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2: the profiler's C++ side logs start/stop lines and warnings there
    that Python cannot filter. Python exceptions still propagate and print afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _sdpa_cpu(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_cpu_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# FlopCounterMode knows the CUDA SDPA kernels but counts 0 for the fused CPU one; count it as what it
# computes (QKᵀ and weights·V), exactly as the CUDA kernels are counted.
SDPA_CPU_FLOPS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward,
}


def count_flops(fn: Callable[[], object]) -> dict[str, int]:
    """FLOPs of one call of `fn` per module ("Global" = all), as FlopCounterMode counts them:
    matrix products and attention kernels only (2 per multiply-add); elementwise work is free."""
    with FlopCounterMode(display=False, custom_mapping=SDPA_CPU_FLOPS) as counter:
        fn()
    return {module: sum(ops.values()) for module, ops in counter.get_flop_counts().items()}
