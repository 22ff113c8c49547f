"""Conformance kit: the properties every score and attention must have (ARCHITECTURE.md, Contracts), each
checked from first principles, without knowing the plugin.

A plugin author's test is one line:

    from attnx.testing import check_attention, check_score

    def test_gaussian():
        check_score(GaussianScore, bandwidth=0.5)

The checks, by name (`CHECKS`, in the order they run), with the property each holds the plugin to. A
failure is one line that starts with both, then names the call and setting it failed in (kind, lengths,
parameters, mode, dtype, need_weights) and the evidence (the largest difference, what changed):

  flags            the capability flags are consistent (a known placement and `weights_are`, causal only
                   with positions)
  shapes           outputs have the shapes of the contract: context [B, Tq, output_dim], weights
                   [B, ..., Tq, Tk]; a score's [..., Tq, Tk]
  single_key       one real key is enough: a sequence with a single valid key gets finite outputs
  purity           eval is a pure function: a call changes nothing in its inputs, the module or the
                   process (generators, torch's settings), and its output depends on the inputs and the
                   parameters alone (not on the generators, not on earlier calls); the plugin's import
                   changed nothing in the process; in train mode with every nn.Dropout at p = 0 the
                   output does not depend on the generators
  weights          weights are what they claim to be: finite, and what the mechanism declares
                   (`weights_are`: a distribution over the keys each query sees, non-negative, or signed)
  masking          masked keys are invisible: they get exactly 0 weight and changing them changes nothing
  fast_path        need_weights changes only whether weights are returned
  prepare          prepare then attend_at is forward
  batch            each sequence of a batch is computed alone
  queries          each query of a cross-attention call is computed alone among Tq = 3        (cross)
  padding          the padded length is invisible
  finiteness       finite inputs give finite outputs whatever the padding holds (NaN/inf there), with and
                   without weights
  causality        causal means prefix-invariant: the sequence cut after any position gives the same
                   outputs up to it, whatever followed (content, number of tokens, padding); later keys
                   get 0 weight                                                              (causal)
  permutation      position_free means permutation-equivariant     (position_free, position-free score)
  weights_used     weights are what they claim to be: the returned weights explain the context (per
                   query, its change under a shift of one key's value is Σ_h w_hij m_h, the same m_h for
                   every key: `fidelity.explained`)
  gradients        the gradient is the derivative of the forward pass: finite, and equal to central
                   finite differences in float64 along a random direction of every parameter and input
  parameters       every parameter does something: each gets a gradient from some call (in each head
                   when it is per head), also from calls at positions up to 28,699; its elements need not
  hyperparameters  every hyperparameter does something: each other value a config may give one changes
                   the parameters or the outputs (eval, or train with dropout on), unless the class
                   declares it `inert`, with why
  precision        lower precisions stay near float64: float32, and bfloat16 autocast, finite and close
                   on inputs of scale 1 and 30 (where exp of unshifted logits overflows)
  cached_decoding  decoding token by token is the full pass: one token at a time through
                   `AttentionSite.cache` equals a full causal pass over the prefix, with and without
                   weights (a step may return none when the state does not grow)            (causal)
  state            decoding state is state: decoding again on the same site, reordered as beam search
                   does (`KVCache.select`), gives each row what the first pass gave it; decoding leaves
                   the module as it was; the cache holds what `Attention.state_size(n)` declares, at n = 1
                   to 67                                                                      (causal)
  reference        forward is the plugin's own equation, `Attention.reference`, at lengths 1 to 67,
                   alone and padded                                          (a plugin that ships one)
  compiled         compiled is eager: `attend` traced whole by Dynamo in an rnn decoder's compiled call
                   (Tq = 1, no weights, training mode) gives eager's context and gradients; one that
                   cannot be traced passes, and `attnx plugins check` says why it runs eager
                                                                                  (cross, no positions)

Each check runs where the mechanism's capability flags say it applies, in every call the flags allow:
cross-attention for one decoder step (Tq = 1) and for Tq = 3 queries (`cross_attention`);
self-attention, query = keys = values (`self_attention`), also under a causal mask (`causal`). A score
that `uses_positions` is checked only inside mechanisms that take positions: with any other mechanism
it is not a legal combination, and nothing runs. Every check runs in float64 from fixed seeds in each
of three settings (`cases.SETTINGS`) where it can tell something (`Check.settings`): a batch of
sequences with 5, 3 and 1 valid tokens and the parameters as initialised, in eval mode; the same lengths
with perturbed parameters (as after training: a term initialised at zero shows) in train mode with every
nn.Dropout at p = 0; and 67 and 37 tokens (past any block of 8 to 64, ending in a partial one) with
perturbed parameters in eval mode. gradients and parameters judge perturbed parameters only (a gate
initialised at zero blocks them at step 0); weights_used, precision, reference and hyperparameters run
in the long setting, purity in the two short ones, cached_decoding and state in the eval ones.

The kit runs at the values it is given: a mechanism's and a score's hyperparameters (`check_attention(cls,
score, window=4)`, `attnx plugins check NAME attention.window=4`), and a run's dims (`check_site`, which
`attnx train` and `attnx compare` call on every plugin of a run, at its configured values and sizes,
through `check_run`; `runs.py`).

`check_attention(cls, score, checks=("causality",))` runs chosen checks alone; every check function
returns the names of the checks that ran and passed. `check_all(name)` runs the kit on what involves one
plugin (`attnx plugins check NAME`; `suite.py`), `compile_notes(name)` says whether each of its mechanisms
compiles. `projection_loss` is the loss the gradient checks backpropagate; a plugin's own gradient tests
can use it too.

The inputs (the subject, the settings, the calls) are in `cases.py`, calling and comparing in `calls.py`,
what a check is in `base.py`, the checks in `contract.py` (the 2015 contract), `purity.py`, `order.py`
(what a query may see), `fidelity.py` (whether what is returned is what is computed), `gradients.py`,
`hyperparameters.py`, `decoding.py` and `state.py` (what decoding computes and keeps) and `compiled.py`,
their order in `checks.py`, and running them in `run.py`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnx.nn.attention import Attention
from attnx.nn.scores import Score, ScoreFactory
from attnx.testing.calls import projection_loss
from attnx.testing.checks import CHECKS
from attnx.testing.run import attention_subject, run_checks
from attnx.testing.runs import check_run, check_site
from attnx.testing.suite import accepts, check_all, compile_notes, score_subject

__all__ = [
    "CHECKS",
    "accepts",
    "check_all",
    "check_attention",
    "check_attention_shapes",
    "check_score",
    "check_run",
    "check_score_shapes",
    "check_site",
    "compile_notes",
    "projection_loss",
]


def check_score(cls: type[Score], checks: Iterable[str] | None = None, **hyperparams: Any) -> list[str]:
    """Check a Score class at `hyperparams`: its [..., Tq, Tk] scores, then every check (or `checks`) with
    the score inside plain softmax attention, softmax(f(q, K)) V, which is causal and passes positions.
    Returns the checks that ran."""
    return run_checks(score_subject(cls, hyperparams), checks)


def check_score_shapes(cls: type[Score], **hyperparams: Any) -> None:
    """The kit's first, cheap check alone: a score's [..., Tq, Tk] for Tq = 1 and Tq > 1, and the shapes
    in softmax attention."""
    check_score(cls, checks=("shapes",), **hyperparams)


def check_attention(
    cls: type[Attention],
    score: str | ScoreFactory | None = None,
    checks: Iterable[str] | None = None,
    **hyperparams: Any,
) -> list[str]:
    """Check an Attention class with `score` (a registered name, a factory, or None for its default) at
    `hyperparams`: every check (or `checks`) that its capability flags make applicable. Returns the checks
    that ran: none when `score` uses positions and the mechanism takes none (not a legal combination)."""
    return run_checks(attention_subject(cls, score, hyperparams), checks)


def check_attention_shapes(
    cls: type[Attention], score: str | ScoreFactory | None = None, **hyperparams: Any
) -> None:
    """The kit's first, cheap check alone: the context [B, Tq, output_dim] and the weights [B, ..., Tq, Tk]
    in every setting the flags allow."""
    check_attention(cls, score, checks=("shapes",), **hyperparams)
