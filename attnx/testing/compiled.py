"""Whether a mechanism compiles: its `attend` traced whole by Dynamo, as the rnn decoder's compiled region
(attnx.nn.fusion) traces it, and then equal to eager in values and gradients.

Tracing is what a plugin decides (a branch on a tensor's value, a call Dynamo cannot follow, a NumPy
detour are graph breaks, and code that asks `torch.compiler.is_compiling()` computes something else
traced); generating code from the traced graph is Inductor's job, not the plugin's. So the kit runs the
graph Dynamo captures with torch's own kernels (the `eager` backend), in a twentieth of a second rather
than the seconds of code generation. A mechanism that cannot be traced is not at fault (training runs
it eager, and says why); one whose traced graph computes something else than its eager code is, and
fails `compiled`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from attnx.nn.attention import Attention
from attnx.nn.fusion import reason
from attnx.testing.base import CACHE_ATOL, Check, cross, registrar, require
from attnx.testing.calls import projection_loss, with_grad
from attnx.testing.cases import SETTINGS, Case, Setting, Subject

CHECKS: list[Check] = []
check = registrar(CHECKS)

# why each subject cannot be traced (None: it can), by `_key`: the check traces it, and
# `attnx plugins check`'s compile line reads the answer instead of tracing it again
_traced: dict[tuple[Any, ...], str | None] = {}


def _key(subject: Subject) -> tuple[Any, ...]:
    """The subject by its mechanism, its score's class and bound values, its hyperparameters and dims."""
    score: Any = subject.score
    bound: dict[str, Any] = {}
    while isinstance(score, partial):
        score, bound = score.func, {**score.keywords, **bound}
    values = repr(sorted(subject.hyperparams.items())), repr(sorted(bound.items()))
    return subject.cls, score, *values, subject.dims


def _decoder_call(subject: Subject) -> bool:
    """Cross-attention without positions: the call the rnn decoder's compiled region makes."""
    return cross(subject) and not subject.uses_positions


def traced(att: Attention, case: Case) -> tuple[torch.Tensor | None, str | None]:
    """(the context of `att.attend(query, prepared, need_weights=False)`, traced whole, with gradients
    flowing to the case's inputs and `att`'s parameters, and None; or None and why it cannot be traced)."""
    from torch._dynamo.exc import TorchDynamoException

    torch._dynamo.reset()  # a fresh trace for each mechanism: its guards would pile up to the recompile limit
    attend = torch.compile(att.attend, backend="eager", fullgraph=True)
    prepared = att.prepare(case.keys, case.values, case.mask)
    try:
        return attend(case.query, prepared, False)[0], None
    except TorchDynamoException as error:
        return None, reason(error)


def compile_note(subject: Subject) -> str | None:
    """'compiles', or 'runs eager under compile: <why>', for a mechanism the rnn decoder would compile;
    None for one it never hosts (self-attention only, or with a score that needs positions)."""
    if not _decoder_call(subject):
        return None
    if _key(subject) not in _traced:
        setting = next(s for s in SETTINGS if s.train)
        att, case = subject.case(setting, _decoder_step)
        _traced[_key(subject)] = traced(att, case)[1]
    why = _traced[_key(subject)]
    return "compiles" if why is None else f"runs eager under compile: {why}"


@check("compiled", "compiled is eager", applies=_decoder_call, settings=lambda setting: setting.train)
def _compiled(subject: Subject, setting: Setting) -> None:
    """Traced whole, `attend` gives eager's context, and the same gradients with respect to the query,
    keys, values and every parameter, in the call an rnn decoder's compiled step makes: one query
    (Tq = 1), no weights, training mode. A mechanism that cannot be traced passes: training runs it eager."""
    att, case = subject.case(setting, _decoder_step)
    eager, eager_grads = _with_grads(att, case, lambda c: _eager(att, c))
    if eager is None:
        return
    why: list[str | None] = []
    traced_context, grads = _with_grads(att, case, lambda c: _remembered(traced(att, c), why))
    _traced[_key(subject)] = why[0]
    if traced_context is None:  # why it cannot be traced: compile_note says
        return
    gap = (eager - traced_context).abs().max().item()
    require(
        gap < CACHE_ATOL,
        f"({case.where(False)}): traced, attend returns another context (max diff {gap:.3g})",
    )
    for name, grad in eager_grads.items():
        other = grads[name]
        if grad is None or other is None:
            same = grad is None and other is None
        else:
            same = (grad - other).abs().max().item() < CACHE_ATOL
        require(same, f"({case.where(False)}): traced, the gradient w.r.t. {name} differs")


def _remembered(result: tuple[torch.Tensor | None, str | None], why: list[str | None]) -> torch.Tensor | None:
    """The traced context of `traced`'s result, its reason kept in `why`."""
    why.append(result[1])
    return result[0]


def _eager(att: Attention, case: Case) -> torch.Tensor | None:
    """The context of the rnn decoder's call, eager; None from a mechanism that needs positions, which an
    rnn decoder never gives: it never serves one, compiled or not."""
    try:
        return att.attend(case.query, att.prepare(case.keys, case.values, case.mask), False)[0]
    except Exception:
        if att.takes_positions:
            return None
        raise


def _with_grads(
    att: Attention, case: Case, context_of: Callable[[Case], torch.Tensor | None]
) -> tuple[Any, dict[str, torch.Tensor | None]]:
    """`context_of` the case on fresh leaf inputs, and the gradients of `projection_loss` of it with
    respect to the query, keys, values and every parameter of `att` (none when there is no context)."""
    att.zero_grad(set_to_none=True)
    leaf, inputs = with_grad(case)
    context = context_of(leaf)
    if context is None:
        return None, {}
    projection_loss(context, seed=4).backward()
    grads = {name: x.grad for name, x in inputs.items()}
    return context, grads | {f"parameter '{name}'": p.grad for name, p in att.named_parameters()}


def _decoder_step(case: Case) -> bool:
    return not case.self_attention and not case.many_queries
