"""The `purity` check: in eval mode a call is a pure function. Its output depends only on its inputs and on
the module's parameters and buffers as they were before it (not on the random generators, not on earlier
calls), and it changes nothing it was handed, nothing in the module and nothing in the process
(`attnx.registry.process`); importing the plugin changed nothing in the process either. In train mode,
with every nn.Dropout at p = 0, the output must not depend on the random generators: the kit compares
train-mode calls, and can switch off only the randomness that lives in nn.Dropout modules.

`module_state` and `module_changes` say what a call changed in a module; the `state` check uses them on
decoding too."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from attnx.nn.attention import Attention
from attnx.registry.process import changes, import_changes, process_state
from attnx.testing.base import ATOL, PURE, Check, registrar, require
from attnx.testing.calls import construct, max_gap, raw_call, seeded
from attnx.testing.cases import LONG, Case, Setting, Subject, prepared_for

CHECKS: list[Check] = []
check = registrar(CHECKS)

SEEDS = (1, 2)  # the generators' states two calls on the same inputs start from
_TORCH_OWN = frozenset(vars(nn.Module()))  # what every module holds for torch itself


def module_state(module: nn.Module) -> dict[str, Any]:
    """What `module` holds, by name: a copy of each parameter's and buffer's values, and every other
    attribute of each submodule (a tensor's values copied, a list's or dict's items, anything else itself)."""
    held: dict[str, Any] = {}
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        held[f"'{name}'"] = (tensor, tensor.detach().clone())
    for prefix, sub in module.named_modules():
        for key, value in vars(sub).items():
            if key in _TORCH_OWN and key not in ("_parameters", "_buffers", "_modules"):
                continue  # torch's own bookkeeping (hooks, flags), not the plugin's
            if key in ("_parameters", "_buffers", "_modules"):
                value = tuple(value)  # the names only: the tensors are above
            where = f"attribute '{prefix + '.' if prefix else ''}{key}'"
            if isinstance(value, torch.Tensor):
                held[where] = (value, value.detach().clone())
            elif isinstance(value, (list, dict)):
                held[where] = (value, list(value.items()) if isinstance(value, dict) else list(value))
            else:
                held[where] = (value, None)
    return held


def module_changes(before: dict[str, Any], module: nn.Module) -> list[str]:
    """What `module` holds now that it did not when `before = module_state(module)` was taken."""
    now = module_state(module)
    found = [f"{name} appeared" for name in now if name not in before]
    found += [f"{name} disappeared" for name in before if name not in now]
    for name, (value, copied) in before.items():
        if name not in now:
            continue
        current = now[name][0]
        if current is not value and not (_plain(value) and current == value):
            found.append(f"{name} was replaced")
        elif isinstance(copied, torch.Tensor) and not torch.equal(current, copied):
            found.append(f"{name} changed in place")
        elif isinstance(value, (list, dict)):
            items = list(value.items()) if isinstance(value, dict) else list(value)
            if len(items) != len(copied) or any(a is not b for a, b in zip(items, copied)):
                found.append(f"{name} ({type(value).__name__}) changed")
    return found


def _plain(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str, tuple, type(None)))


def _inputs(case: Case) -> list[tuple[str, torch.Tensor]]:
    tensors = [("query", case.query), ("keys", case.keys), ("values", case.values), ("mask", case.mask)]
    if case.positions is not None:
        tensors += [("query positions", case.positions.query), ("key positions", case.positions.key)]
    return tensors


@check("purity", PURE, settings=lambda setting: setting.lengths != LONG)
def _purity(subject: Subject, setting: Setting) -> None:
    """Eval mode: on a mechanism fresh from construction, a call changes nothing in the process, in its
    inputs or in the module, and gives the same output again after a call on other inputs from another
    state of the generators, as the mechanism every other check calls gives. Train mode: two calls from
    different generator states agree. Importing the plugin changed nothing in the process."""
    for cls in (subject.cls, subject.score_class()):
        found = [] if cls is None else import_changes(cls.__module__)
        require(
            not found,
            f"importing {cls.__module__ if cls else ''} changed the process: {'; '.join(found)}; a plugin "
            "that sets a seed, a default dtype or threads at import changes every run that loads it",
        )
    seen = set()
    for att, case in subject.cases(setting):
        if id(att) in seen:
            continue
        seen.add(id(att))
        options = (case.query.size(-1), case.keys.size(-1), case.values.size(-1))
        fresh = prepared_for(construct(subject.make, (options,))[0], setting)
        if setting.train:
            _deterministic(fresh, case)
        else:
            _pure(fresh, case, subject.output(att, case))


def _deterministic(att: Attention, case: Case) -> None:
    """Two train-mode calls on the same inputs from different generator states agree."""
    first, second = (_seeded_call(att, case, seed) for seed in SEEDS)
    gap = max_gap(first, second, case.real)
    require(
        gap < ATOL,
        f"({case.where()}): in train mode with every nn.Dropout at p = 0, two calls on the same inputs "
        f"differ (max diff {gap:.3g}): the output depends on the random generators outside nn.Dropout "
        "(F.dropout with a float p, a noise term), which the kit cannot switch off to compare train-mode "
        "calls; draw it through an nn.Dropout module",
    )


def _pure(att: Attention, case: Case, shared: Any) -> None:
    """One eval-mode call changes nothing, and its output is the same after a call on other inputs."""
    module, inputs = module_state(att), [(name, t.clone()) for name, t in _inputs(case)]
    process = process_state()
    first = raw_call(att, case)
    found = changes(process, process_state())
    require(
        not found,
        f"({case.where()}): the call changed the process: {'; '.join(found)}; an eval-mode call must "
        "leave the generators and torch's settings as it found them",
    )
    changed = [
        name for (name, copied), (_, now) in zip(inputs, _inputs(case)) if not torch.equal(copied, now)
    ]
    require(not changed, f"({case.where()}): the call changed its inputs in place: {', '.join(changed)}")
    found = module_changes(module, att)
    require(
        not found,
        f"({case.where()}): the call changed the module: {'; '.join(found)}; in eval mode the output must "
        "depend only on the inputs and on parameters and buffers as they were",
    )
    other = dataclasses.replace(
        case.mapped(lambda x: x.flip(0)), mask=case.mask.flip(0), real=case.real.flip(0)
    )
    _seeded_call(att, other, SEEDS[0])
    again = _seeded_call(att, case, SEEDS[1])
    for what, output in (
        ("again, after a call on other inputs and from another generator state", again),
        ("by the module that every other check has called", shared),
    ):
        gap = max_gap(first, output, case.real)
        require(
            gap < ATOL,
            f"({case.where()}): the same inputs give another output {what} (max diff {gap:.3g}): the output "
            "depends on the random generators or on earlier calls, not only on the inputs and parameters",
        )


def _seeded_call(att: Attention, case: Case, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    with seeded(seed):
        return raw_call(att, case)
