"""The attention sites of a model, checked once: `resolve_sites` gives every site its `Mechanism` (class,
score, hyperparameters) after checking it against the site: its role (self, causal or cross: the
mechanism's capability flags), whether the site has positions for a score that uses them, and whether the
mechanism passes them on.

Config validation computes a run's `Sites` before any data is built (`attnx.config.validation`); model
assembly builds from them, the results record takes the score they resolved, and the heatmaps name each
map's mechanism by them. No one resolves a site twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from attnx import registry
from attnx.models import plan
from attnx.models.spec import ModelSpec
from attnx.nn.attention import Mechanism
from attnx.nn.scores import ScoreFactory
from attnx.nn.transformer import refusal


@dataclass(frozen=True)
class Site:
    """One site's mechanism and the registered names it was configured by."""

    mechanism: Mechanism
    attention: str  # the mechanism's registered name
    score: str | None  # the score it uses (the configured one, else the mechanism's default), canonical

    def describe(self, role: str) -> str:
        """ "additive cross-attention", "dot pooling (general score)": the score named when it is not the
        mechanism's own."""
        name = f"{self.attention} {role}"
        own = self.score in (None, self.mechanism.cls.default_score)
        return name if own else f"{name} ({self.score} score)"


@dataclass(frozen=True)
class Sites(Mapping[str, Site]):
    """Every attention site of a model, by key: `encoder.<slot>`, `attention` (the run's own: a decoder's
    cross-attention, a classifier's pooling, an lm's causal self-attention), `decoder.<slot>`, and an lm
    plan's entries instead of `attention` (`lm.layers.<i>`)."""

    model_type: str
    found: dict[str, Site]

    def __getitem__(self, key: str) -> Site:
        return self.found[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.found)

    def __len__(self) -> int:
        return len(self.found)

    @classmethod
    def of(cls, spec: ModelSpec) -> Sites:
        """The sites of the model `spec` describes (a checkpoint's, which validation never saw)."""
        return resolve_sites(spec.model_type, spec.sections())

    @property
    def attention(self) -> Site:
        return self.found["attention"]

    def layers(self, num_layers: int) -> list[Site]:
        """An lm's site of each of its `num_layers` blocks: its plan's entries (repeated as a pattern),
        else the run's `attention` in every block."""
        if "attention" in self.found:
            return [self.attention] * num_layers
        return plan.per_layer(self.planned(), num_layers)

    def planned(self) -> list[Site]:
        """A plan's sites, one per entry of `lm.layers`, in order (none without a plan)."""
        return [site for key, site in self.found.items() if key.startswith(f"{plan.KEY}.")]

    def chosen(self) -> tuple[str, str | None]:
        """The run's mechanism and score as its record names them: the run's own site's, or a plan's
        label (`sliding_window+linear`), whose score is each entry's (`none` for a mechanism without one),
        or None when every entry keeps its mechanism's own."""
        planned = self.planned()
        if not planned:
            return self.attention.attention, self.attention.score
        own = all(s.score == s.mechanism.cls.default_score for s in planned)
        scores = None if own else plan.label([s.score or "none" for s in planned])
        return plan.label([s.attention for s in planned]), scores

    def slots(self, kind: str) -> dict[str, Site]:
        """The sites of `kind`'s slots (`encoder`, `decoder`), by slot name, in the class's order."""
        prefix = f"{kind}."
        return {key.removeprefix(prefix): site for key, site in self.found.items() if key.startswith(prefix)}

    def mechanisms(self, kind: str) -> dict[str, Mechanism | list[Mechanism]]:
        """What `kind`'s class takes for its slots: a mechanism per slot, or under a slot's plan field
        (`layers`) the list of its entries' mechanisms."""
        found: dict[str, Any] = {}
        for name, site in self.slots(kind).items():
            field, _, entry = name.partition(".")
            if entry:
                found.setdefault(field, []).append(site.mechanism)
            else:
                found[name] = site.mechanism
        return found

    def slot_layer(self, kind: str, layer: int) -> Site:
        """The site of layer `layer` of `kind`'s (first) slot: its plan's entry, the plan repeated as a
        pattern, or the slot's one site."""
        sites = self.slots(kind)
        planned = [site for name, site in sites.items() if "." in name]
        return planned[layer % len(planned)] if planned else next(iter(sites.values()))


def resolve_score_name(attention_name: str, score_cfg: Mapping[str, Any] | None) -> str | None:
    """The score a run really uses: the user's, else the mechanism's default. The one place of the
    rule that a mechanism whose `default_score` is None takes no score."""
    default = registry.get("attention", attention_name).default_score
    if score_cfg is None:
        return default
    if default is None:
        raise ValueError(
            f"attention={attention_name} uses no score function; remove score={score_cfg['name']}"
        )
    return registry.registry("score").canonical(score_cfg["name"])


def score_factory(score_cfg: Mapping[str, Any]) -> ScoreFactory:
    """The score class with the config's hyperparameters bound: (query_dim, key_dim) -> Score. A mechanism
    builds it through `build_score`, which also passes `num_heads` to a score that takes it."""
    params = {k: v for k, v in score_cfg.items() if k != "name"}
    return partial(registry.get("score", score_cfg["name"]), **params)


def site(
    where: tuple[str, str],
    attention: Mapping[str, Any],
    score: Mapping[str, Any] | None,
    role: str,
    has_positions: bool,
) -> Site:
    """The site's mechanism, or a ValueError naming the config keys (`where`: the attention and score
    keys, e.g. ("encoder.attention", "encoder.score")) and the reason."""
    attention_key, score_key = where
    cls = registry.get("attention", attention["name"])
    why = refusal(cls, role)
    if why is not None:
        raise ValueError(f"{attention_key}={attention['name']}: {why}")
    try:
        score_name = resolve_score_name(attention["name"], score)
    except ValueError:  # a score given to a mechanism that takes none
        given = (score or {}).get("name")
        raise ValueError(
            f"{attention_key}={attention['name']} uses no score function; remove {score_key}={given}"
        ) from None
    if score_name is not None and registry.get("score", score_name).uses_positions:
        if not has_positions:
            raise ValueError(
                f"{score_key}={score_name} uses positions, and this site ({attention_key}) has none"
            )
        if not cls.takes_positions:
            raise ValueError(
                f"{score_key}={score_name} uses positions, and {attention_key}={attention['name']} does "
                "not pass them on (takes_positions = False)"
            )
    factory = None if score_name is None else score_factory(score or {"name": score_name})
    hyperparams = {k: v for k, v in attention.items() if k != "name"}
    return Site(Mechanism(cls, factory, hyperparams), attention["name"], score_name)


def slot_sites(kind: str, section: Mapping[str, Any]) -> dict[str, Site]:
    """A site per slot of a registered class (`registry.Slot`), from its section's sub-sections; a slot
    given a plan (its `plan` field, `encoder.layers`) a site per entry instead, `<field>.<i>`."""
    found: dict[str, Site] = {}
    for name, slot in registry.slots_of(registry.get(kind, section["name"])).items():
        key = f"{kind}.{slot.plan}"
        layers = plan.plan_of(section, key) if slot.plan else None
        if layers is not None:
            if section.get(slot.score) is not None:
                raise ValueError(
                    f"{kind}.{slot.score}={section[slot.score]['name']}: {key} takes each layer's score from "
                    f"its entry ({key}.<i>.score)"
                )
            found |= {
                f"{slot.plan}.{i}": planned_site(layer, plan.where(i, key), slot.role)
                for i, layer in enumerate(layers)
            }
            continue
        attention = section.get(name) or {"name": slot.default}
        where = (f"{kind}.{name}", f"{kind}.{slot.score}")
        found[name] = site(where, attention, section.get(slot.score), slot.role, has_positions=True)
    return found


def planned_site(layer: Mapping[str, Any], key: str, role: str) -> Site:
    """A plan's entry (`lm.layers.1`) as a site of `role`, with the entry's own score."""
    attention = {k: v for k, v in layer.items() if k != "score"}
    return site((f"{key}.name", f"{key}.score"), attention, layer.get("score"), role, has_positions=True)


def resolve_sites(model_type: str, sections: Mapping[str, Any]) -> Sites:
    """Every attention site of the model that a model type's `sections` (`attention`, `score`, and its
    parts': `ModelSpec.sections`) describe, checked: the model type's own `sites` piece says which."""
    return Sites(model_type, registry.model_type(model_type).piece("sites")(sections))


RUN = ("attention", "score")  # the config keys of the run's own site


def lm_sites(sections: Mapping[str, Any]) -> dict[str, Site]:
    """An lm's: the run's `attention` as every block's causal self-attention, or each entry of its plan
    (`lm.layers.<i>`, with the entry's own score)."""
    layers = plan.plan_of(sections.get("lm"))
    if layers is None:
        return {
            "attention": site(RUN, sections["attention"], sections.get("score"), "causal", has_positions=True)
        }
    if sections.get("score") is not None:
        raise ValueError(
            f"score={sections['score']['name']}: an lm with {plan.KEY} takes each layer's score from its "
            f"entry ({plan.KEY}.<i>.score), not the run's score"
        )
    return {plan.where(i): planned_site(layer, plan.where(i), "causal") for i, layer in enumerate(layers)}


def encoder_sites(sections: Mapping[str, Any]) -> dict[str, Site]:
    """The encoder's slots, `encoder.<slot>`."""
    if sections.get("encoder") is None:
        raise ValueError("a model with an encoder needs an encoder section")
    return {f"encoder.{k}": s for k, s in slot_sites("encoder", sections["encoder"]).items()}


def classifier_sites(sections: Mapping[str, Any]) -> dict[str, Site]:
    """A classifier's: the encoder's slots, and the run's `attention` as the pooling over its states
    (a cross-attention from learned queries, without positions)."""
    found = encoder_sites(sections)
    found["attention"] = site(RUN, sections["attention"], sections.get("score"), "cross", has_positions=False)
    return found


def seq2seq_sites(sections: Mapping[str, Any]) -> dict[str, Site]:
    """An encoder-decoder's: the encoder's slots, the run's `attention` as the decoder's cross-attention
    (with positions when the decoder gives them), and the decoder's slots."""
    found = encoder_sites(sections)
    decoder = sections.get("decoder")
    if decoder is None:
        raise ValueError("a seq2seq model needs a decoder section")
    positions = registry.get("decoder", decoder["name"]).cross_positions
    found["attention"] = site(RUN, sections["attention"], sections.get("score"), "cross", positions)
    found |= {f"decoder.{k}": s for k, s in slot_sites("decoder", decoder).items()}
    return found
