"""Attention sites inside a registered class: the `slots` an encoder or decoder declares.

A slot is both a model concept (where a mechanism sits, and what it must support: `ROLES`) and a
config one (its fields become config sub-groups), so it sits below both the names and the configs.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("self", "causal", "cross")  # what an attention site asks of its mechanism (Attention's flags)


@dataclass(frozen=True)
class Slot:
    """An attention site inside a registered class (a self-attention encoder's layers, a decoder's self-
    attention). The class lists its slots in `slots = {"attention": Slot(...)}`; the slot's field and its
    `score` field become config sub-groups (`encoder/attention=dot encoder/score=general`, then
    `encoder.attention.*` hyperparameters), and the constructor receives, under the slot's name, a
    factory (query_dim, key_dim, value_dim) -> Attention with the score built in.

    role: "self" (bidirectional self-attention), "causal" (self-attention under a causal mask) or
    "cross"; `default`: the mechanism when the user names none. `plan`: a config field (`layers`) that may
    instead give each of the host's layers its own mechanism, a list of attention sections as an lm's
    `lm.layers` (`attnx.models.plan`); the constructor then receives, under that field's name, a list of
    factories, one per entry, and repeats it as a pattern over its layers.
    """

    default: str
    role: str
    score: str = "score"
    plan: str | None = None


def slots_of(cls: type) -> dict[str, Slot]:
    return dict(getattr(cls, "slots", {}))


def slot_fields(cls: type) -> list[str]:
    """The config fields of a class's slots: each slot's mechanism field, its score field, and its plan's."""
    return [
        name
        for slot_name, slot in slots_of(cls).items()
        for name in (slot_name, slot.score, *([slot.plan] if slot.plan else []))
    ]
