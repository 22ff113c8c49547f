"""Checks of the backward pass: the gradient is the derivative of the forward pass (`gradients`: finite,
and equal to central finite differences in float64 along a random direction of every parameter and input),
and every parameter does something (`parameters`: each takes part in some call the kit makes, and a
per-head one reaches every head or none).

A parameter element that no call reaches (a relative-position bucket beyond the kit's distances, a ReLU
unit that never fires there, a table entry a window masks) is no failure: its zero gradient is the
derivative. Both judge parameters moved from their initialisation (a gate initialised at zero, ReZero's α,
rightly blocks every gradient beneath it at step 0), from every call of the setting and from calls whose
positions run to 28,699 (`SPREAD`), so that a table indexed by relative position is reached wherever it
has entries."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.testing.base import DERIVATIVE, Check, registrar, require
from attnx.testing.calls import call, projection_loss, with_grad
from attnx.testing.cases import LONG, Case, Setting, Subject

# positions 0..23, then every 1.25-fold step up to 28,699: relative distances from 0 to beyond any table
# of relative positions (T5's buckets end at 128 by default)
SPREAD = sorted(set(range(24)) | {round(1.25**k) for k in range(47)})
EPSILON = 1e-6  # central differences' step, relative to each tensor's scale: below any kink's reach
AGREE = 1e-5  # |finite difference − autograd| allowed, relative to the sum of |∂L/∂θ_i · u_i|

CHECKS: list[Check] = []
check = registrar(CHECKS)


@dataclass
class Backward:
    """One mechanism's calls in a setting, backpropagated once: the cases (leaves that require grad), their
    inputs by name, how many of them are the setting's own (the spread calls follow), and each parameter's
    gradient (zero where none arrived) from the setting's own calls and from all of them: the losses of
    the two are backpropagated apart, so that `gradients` can check the first alone."""

    att: Attention
    cases: list[Case]
    inputs: list[dict[str, torch.Tensor]]
    own: int
    grads: dict[str, torch.Tensor]  # from the setting's own calls
    reached: dict[str, torch.Tensor]  # from every call, spread ones included
    unused: set[str]  # the parameters no call's graph reached (their .grad stayed None)


def backward(subject: Subject, setting: Setting) -> list[Backward]:
    """`projection_loss` of every call of the setting and of the spread calls, backpropagated once per
    mechanism (made once: both checks read it)."""
    key = ("backward", setting)
    if key not in subject.memo:
        by_mechanism: dict[int, tuple[Attention, list[Case]]] = {}
        own: dict[int, int] = {}
        for att, case in subject.cases(setting):
            by_mechanism.setdefault(id(att), (att, []))[1].append(case)
            own[id(att)] = own.get(id(att), 0) + 1
        for att, case in spread_cases(subject, setting):
            by_mechanism.setdefault(id(att), (att, []))[1].append(case)
        found = []
        for att, cases in by_mechanism.values():
            att.zero_grad(set_to_none=True)
            leaves = [with_grad(case) for case in cases]
            n = own.get(id(att), 0)
            grads = {}
            for part, seed in ((leaves[:n], 2), (leaves[n:], 3)):  # own calls first: what `gradients` checks
                if part:
                    projection_loss(*(call(att, case)[0] for case, _ in part), seed=seed).backward()
                grads[seed] = {
                    name: torch.zeros_like(p) if p.grad is None else p.grad.clone()
                    for name, p in att.named_parameters()
                }
            unused = {name for name, p in att.named_parameters() if p.grad is None}
            att.zero_grad(set_to_none=True)
            cases, inputs = [case for case, _ in leaves], [inputs for _, inputs in leaves]
            found.append(Backward(att, cases, inputs, n, grads[2], grads[3], unused))
        subject.memo[key] = found
    return subject.memo[key]


@check("gradients", DERIVATIVE, settings=lambda setting: setting.perturbed)
def _gradients(subject: Subject, setting: Setting) -> None:
    """Every gradient is finite, and along a random direction u of every parameter and input the autograd
    derivative Σ ∂L/∂θ_i u_i equals the central difference (L(θ + εu) − L(θ − εu)) / 2ε of the same loss."""
    for found in backward(subject, setting):
        for case, inputs in zip(found.cases, found.inputs):
            for name, x in inputs.items():
                require(
                    x.grad is None or torch.isfinite(x.grad).all(),
                    f"({case.name}): NaN/inf gradient w.r.t. the {name}",
                )
        for name, grad in found.reached.items():
            require(torch.isfinite(grad).all(), f"({setting}): parameter '{name}' gets a NaN/inf gradient")
        own = list(zip(found.cases, found.inputs))[: found.own]
        if not own or setting.lengths != LONG:  # differences where a fast path runs in blocks, past 64
            continue
        autograd, difference, scale = _directional(found.att, own, found.grads)
        require(
            abs(autograd - difference) <= AGREE * scale,
            f"({setting}): along a random direction of every parameter and input, autograd's derivative of a "
            f"loss of the outputs is {autograd:.6g} and central finite differences give {difference:.6g} "
            f"(difference {abs(autograd - difference) / max(scale, 1e-300):.3g} of the terms' size): the "
            "backward pass is not the derivative of the forward (a detached term, a custom backward, a "
            "straight-through estimate)",
        )


def _directional(
    att: Attention, calls: list[tuple[Case, dict[str, torch.Tensor]]], grads: dict[str, torch.Tensor]
) -> tuple[float, float, float]:
    """(Σ_i ∂L/∂θ_i u_i by autograd, the central difference along u, Σ_i |∂L/∂θ_i u_i|) over the
    parameters and the calls' inputs, for a fixed random u scaled to each tensor's size."""
    g = torch.Generator().manual_seed(12)

    def direction(x: torch.Tensor) -> torch.Tensor:
        size = x.detach().pow(2).mean().sqrt().item() if x.numel() else 0.0
        return torch.randn(x.shape, generator=g, dtype=x.dtype) * (size if size > 0 else 1.0)

    params = dict(att.named_parameters())
    du = {name: direction(p) for name, p in params.items()}
    dx = [{name: direction(x) for name, x in inputs.items()} for _, inputs in calls]
    terms = [(grads[name] * du[name]).sum() for name in params]
    terms += [
        (x.grad * d[name]).sum()
        for (_, inputs), d in zip(calls, dx)
        for name, x in inputs.items()
        if x.grad is not None
    ]
    autograd = float(sum(t.item() for t in terms))
    scale = float(sum(abs(t.item()) for t in terms))
    saved = {name: p.detach().clone() for name, p in params.items()}

    def loss(sign: float) -> float:
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved[name] + sign * EPSILON * du[name])
            outputs = [
                call(att, moved(case, inputs, d, sign * EPSILON))[0] for (case, inputs), d in zip(calls, dx)
            ]
            return projection_loss(*outputs, seed=2).item()

    try:
        difference = (loss(1.0) - loss(-1.0)) / (2 * EPSILON)
    finally:
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved[name])
    return autograd, difference, scale


def moved(case: Case, inputs: dict[str, torch.Tensor], d: dict[str, torch.Tensor], step: float) -> Case:
    """The case with each input x (by `with_grad`'s names) moved to x + step·d."""
    shifted = {name: x.detach() + step * d[name] for name, x in inputs.items()}
    if "inputs" in shifted:  # self-attention: one tensor
        x = shifted["inputs"]
        return dataclasses.replace(case, query=x, keys=x, values=x)
    return dataclasses.replace(case, query=shifted["query"], keys=shifted["keys"], values=shifted["values"])


@check("parameters", "every parameter does something", settings=lambda setting: setting.perturbed)
def _parameters(subject: Subject, setting: Setting) -> None:
    """Each parameter takes part in some call's computation (its gradient is defined), and a per-head one
    (a dim the size of its module's heads) gets a non-zero gradient in every head or in none: some heads
    without one is one head's slice serving all. A zero gradient is otherwise the derivative: an element no
    call reaches (a table entry beyond the kit's distances, a ReLU unit that never fires there), or a
    term its host ignores (a bias every key shares, under softmax), does nothing wrong."""
    for found in backward(subject, setting):
        heads = heads_of(found.att)
        for name, grad in found.reached.items():
            shape = tuple(grad.shape)
            require(
                name not in found.unused,
                f"({setting}): parameter '{name}' {shape} takes part in no call's computation (positions up "
                f"to "
                f"{SPREAD[-1]:,} included): nothing the mechanism computes uses it",
            )
            reached = per_head(grad != 0, heads.get(name, 1))
            dead = (~reached).nonzero().flatten().tolist()
            require(
                not dead or len(dead) == len(reached),
                f"({setting}): parameter '{name}' {shape} is per head, and heads {', '.join(map(str, dead))} "
                f"of {len(reached)} receive no gradient from any call while the others do: one head's slice "
                "serves every head, or some heads' are unused",
            )


def heads_of(module: nn.Module) -> dict[str, int]:
    """Each parameter's heads: the `num_heads` of the nearest module above it that has one (a hosted
    score, or the mechanism itself); 1 when none has."""
    found = {}
    for prefix, sub in module.named_modules():
        heads = getattr(sub, "num_heads", None)
        if not isinstance(heads, int):
            continue
        for name, _ in sub.named_parameters():
            found[f"{prefix}.{name}" if prefix else name] = heads  # deeper modules come later and win
    return found


def per_head(reached: torch.Tensor, heads: int) -> torch.Tensor:
    """Whether each head's slice of a parameter got a gradient, along the one dim of size `heads` (any
    shape, [H] included); the whole parameter as one when no dim, or more than one, has that size."""
    dims = [d for d, size in enumerate(reached.shape) if size == heads]
    if heads == 1 or len(dims) != 1:
        return reached.any().reshape(1)
    return reached.movedim(dims[0], 0).reshape(heads, -1).any(1)


def spread_cases(subject: Subject, setting: Setting) -> Iterator[tuple[Attention, Case]]:
    """Unpadded calls at the positions `SPREAD` (a mechanism that takes positions), bidirectional and, for a
    causal mechanism, causal: T queries attending to T keys (cross-attention) and self-attention."""
    if not subject.cls.takes_positions:
        return
    at = torch.tensor(SPREAD)[None]
    t = at.size(1)
    g = torch.Generator().manual_seed(7)
    mask = torch.ones(1, t, dtype=torch.bool)
    for causal in (False, True) if subject.cls.causal else (False,):
        kind = f"T={t} at positions 0..{SPREAD[-1]}{', causal' if causal else ''}"
        if subject.cls.cross_attention:
            att, dims = subject.build(subject.cross_dims, setting)
            q, k, v = (torch.randn(1, t, d, generator=g, dtype=torch.float64) for d in dims)
            yield (
                att,
                Case(f"cross-attention, {kind}", setting, q, k, v, mask, mask, Positions(at, at, causal)),
            )
        if subject.cls.self_attention:
            att, _ = subject.build(((subject.self_dim,) * 3,), setting)
            x = torch.randn(1, t, subject.self_dim, generator=g, dtype=torch.float64)
            case = Case(
                f"self-attention, {kind}", setting, x, x, x, mask, mask, Positions(at, at, causal), True
            )
            yield att, case
