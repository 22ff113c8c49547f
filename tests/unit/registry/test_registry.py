"""Registry: duplicate names, base classes, did-you-mean lookups, ConfigStore entries, Hydra overrides."""

import inspect
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ValidationError

import attnx.contrib
from attnx import Score, available
from attnx.nn.scores import DotScore
from attnx.registry import Registry, RegistryError, StaleArguments, build, get, registry, upgrade

from helpers.plugins import imported


def test_available_lists_builtins() -> None:
    assert {"dot", "scaled_dot", "general", "additive", "cosine"} <= set(available("score"))
    assert {"none", "fixed_c", "additive", "dot", "multi_head"} <= set(available("attention"))


def test_duplicate_name_names_both_places() -> None:
    scores = Registry("score", "attnx.nn.scores:Score")

    class First(Score):
        pass

    class Second(Score):
        pass

    scores.register("_test_duplicate")(First)
    scores.register("_test_duplicate")(First)  # re-registering the same class is harmless
    with pytest.raises(RegistryError, match="registered twice") as error:
        scores.register("_test_duplicate")(Second)
    for cls in (First, Second):
        assert f"{__file__}:{inspect.getsourcelines(cls)[1]}" in str(error.value)


@pytest.mark.usefixtures("isolated_registries")
def test_a_plugin_imported_twice_is_named_as_such(tmp_path: Path) -> None:
    """One file, two module names (attnx imports a plugin folder's file, a test imports it again): not
    "at FILE:10 and at FILE:10", but what happened and what to do instead."""
    plugin = tmp_path / "twice.py"
    plugin.write_text(
        "from attnx import Score, register_score\n\n\n@register_score('_test_twice')\nclass Twice(Score):\n"
        "    pass\n"
    )
    first = imported(plugin)
    with pytest.raises(RegistryError) as error:
        imported(plugin)
    message = str(error.value)
    assert message.startswith(
        f"score '_test_twice' is registered twice by one class, {plugin}:4, imported as "
    )
    assert (
        f"({first.__name__} and imported_twice_" in message
        and "attnx.registry.get('score', '_test_twice')" in message
    )


def test_base_class_is_enforced() -> None:
    class NotAScore:
        pass

    with pytest.raises(RegistryError, match=r"must subclass attnx\.nn\.scores\.Score"):
        Registry("score", "attnx.nn.scores:Score").register("_test_bad")(NotAScore)
    with pytest.raises(RegistryError, match=r"must subclass attnx\.nn\.attention\.Attention"):
        Registry("attention", "attnx.nn.attention:Attention").register("_test_bad")(DotScore)


def test_unknown_name_suggests_the_closest_and_lists_all() -> None:
    with pytest.raises(RegistryError) as error:
        get("score", "scaled-dot")
    message = str(error.value)
    assert "unknown score 'scaled-dot'; did you mean 'scaled_dot'?" in message
    assert all(name in message.split("available:")[1] for name in available("score"))
    with pytest.raises(RegistryError, match="unknown registry kind 'scores'; did you mean 'score'"):
        registry("scores")


def test_every_shipped_plugin_is_registered_by_an_entry_point_of_attnx() -> None:
    """One `attnx.plugins` entry point per file of attnx/contrib (pyproject.toml): a file without one
    would work only where something imports it by hand. The unknown-name message lists them."""
    files = {p.stem for p in Path(attnx.contrib.__file__).parent.glob("*.py") if not p.stem.startswith("_")}
    shipped = {ep.name: ep.value for ep in entry_points(group="attnx.plugins") if ep.dist.name == "attnx"}
    assert shipped == {name: f"attnx.contrib.{name}" for name in files}
    with pytest.raises(RegistryError) as error:
        get("attention", "lineer")
    assert "unknown attention 'lineer'; did you mean 'linear'?" in str(error.value)
    listed = str(error.value).split("available:")[1]
    assert {"linear", "local_window", "sliding_window"} <= {n.strip() for n in listed.split(",")}
    origins = {
        name: registry(kind).entry(name).origin for kind in ("score", "attention") for name in available(kind)
    }
    assert {origins[name] for name in files} == {f"dist attnx (attnx.contrib.{name})" for name in files}


def test_config_store_nodes_are_typed() -> None:
    cosine = ConfigStore.instance().load("score/cosine.yaml").node
    assert OmegaConf.to_container(cosine) == {
        "name": "cosine",
        "temperature": 0.1,
        "learn_temperature": False,
    }
    with pytest.raises(ValidationError):
        cosine.temperature = "abc"
    cosine.learn_temperature = "true"  # OmegaConf converts what it can
    assert cosine.learn_temperature is True
    additive = ConfigStore.instance().load("score/additive.yaml").node
    additive.hidden_dim = None  # Optional[int]
    with pytest.raises(ValidationError):
        additive.hidden_dim = "wide"
    # structural arguments are supplied by the model, not the user
    mha = ConfigStore.instance().load("attention/multi_head.yaml").node
    assert set(mha) == {"name", "num_heads", "dropout"}
    assert registry("attention").entry("dot").hyperparams() == {"input_feeding": True}


def test_required_hyperparams_are_missing() -> None:
    class Needs(Score):
        def __init__(self, query_dim: int, key_dim: int, width: int, tag: str = "x") -> None:
            super().__init__(query_dim, key_dim)

    scores = Registry("score", "attnx.nn.scores:Score")
    scores.register("_test_required")(Needs)
    assert scores.entry("_test_required").hyperparams() == {"width": MISSING, "tag": "x"}


def test_build_from_config() -> None:
    score = build("score", {"name": "cosine", "temperature": 0.5}, query_dim=4, key_dim=4)
    assert score.log_tau.exp().item() == pytest.approx(0.5)


def test_hydra_compose_overrides(tmp_path: Path) -> None:
    (tmp_path / "train.yaml").write_text("defaults:\n  - score: null\n  - _self_\n")
    with initialize_config_dir(version_base=None, config_dir=str(tmp_path)):
        cfg = compose("train", overrides=["score=cosine", "score.temperature=0.1"])
        assert cfg.score == {"name": "cosine", "temperature": 0.1, "learn_temperature": False}
        assert compose("train", overrides=["score=cosine", "score.temperature=0.5"]).score.temperature == 0.5
        with pytest.raises(ConfigCompositionException, match=r"score\.temperature") as error:
            compose("train", overrides=["score=cosine", "score.temperature=abc"])
        assert "float" in str(error.value.__cause__).lower()


def test_aliases_resolve_to_the_registered_name_everywhere(tmp_path: Path) -> None:
    assert registry("attention").get("bahdanau") is registry("attention").get("additive")
    assert registry("attention").aliases("dot") == ["luong"]
    assert "luong" in registry("attention") and "luong" not in available("attention")
    with pytest.raises(RegistryError, match="did you mean 'bahdanau'"):
        get("attention", "bahdanou")
    with initialize_config_dir(version_base=None, config_dir=str(tmp_path)):
        (tmp_path / "train.yaml").write_text("defaults:\n  - attention: null\n  - _self_\n")
        assert compose("train", overrides=["attention=luong"]).attention.name == "dot"


def test_a_renamed_plugin_keeps_its_old_name_with_a_warning() -> None:
    scores = Registry("score", "attnx.nn.scores:Score")

    class Renamed(Score):
        def __init__(self, query_dim: int, key_dim: int, width: int = 3) -> None:
            super().__init__(query_dim, key_dim)

    scores.register("_test_new_name")(Renamed)
    scores.deprecate("_test_old_name", "_test_new_name")
    with pytest.warns(FutureWarning, match="'_test_old_name' was renamed '_test_new_name'"):
        assert scores.get("_test_old_name") is Renamed
    assert ConfigStore.instance().load("score/_test_old_name.yaml").node.name == "_test_new_name"
    with pytest.raises(RegistryError, match="unknown score '_test_nowhere'"):
        scores.deprecate("_test_older", "_test_nowhere")
    with pytest.raises(RegistryError, match="'_test_old_name' already names _test_new_name"):
        scores.register("_test_other", aliases=("_test_old_name",))(DotScore)


def test_upgrade_makes_a_saved_section_buildable() -> None:
    saved = {"name": "luong", "input_feeding": False, "dropped_since": 0.5}
    with pytest.raises(StaleArguments, match="^attention 'dot' no longer takes dropped_since=0.5, saved"):
        upgrade("attention", saved)
    dropped: list[str] = []
    assert upgrade("attention", saved, dropped) == {"name": "dot", "input_feeding": False}
    assert dropped == ["attention 'dot' dropped_since=0.5"]
    assert upgrade("score", {"name": "cosine"}) == {"name": "cosine"}  # new arguments take defaults


def test_a_results_record_chooses_one_name_of_each_kind() -> None:
    from attnx.registry import KINDS
    from attnx.track.results import CHOICES

    assert sorted(CHOICES) == sorted(KINDS)
