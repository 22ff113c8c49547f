"""Config classes follow `**kwargs` up the class hierarchy: a subclass lists only what it adds, and its
config still has its parent's hyperparameters, typed, checked by Hydra's merge, and passed on by `build`."""

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from attnx import MultiHeadAttention, Task
from attnx.registry import Entry, Registry, config_class, init_parameters


class Windowed(MultiHeadAttention):
    """What a plugin writes to add one argument to `multi_head`."""

    def __init__(self, *args: Any, window: int = 16, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window = window


class WindowedByName(MultiHeadAttention):
    """The same, with the structural arguments spelled out: the inherited ones follow `window`."""

    def __init__(
        self, query_dim: int, key_dim: int, value_dim: int, score: Any = None, window: int = 16, **kwargs: Any
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score, **kwargs)
        self.window = window


class MoreHeads(Windowed):
    """Two levels up, one inherited default changed: it keeps its place, with the new default."""

    def __init__(self, num_heads: int = 8, **kwargs: Any) -> None:
        super().__init__(num_heads=num_heads, **kwargs)


class Sized(Task):
    model_type = "classification"

    def __init__(self, size: int = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size


def fields(cls: type, kind: str = "attention") -> list[tuple[str, Any, Any]]:
    conf = config_class(Entry(kind, f"_test_{cls.__name__}", cls, "test"))
    return [(f.name, f.type, f.default) for f in dataclasses.fields(conf)][1:]  # past `name`


def test_a_subclass_adding_one_argument_gets_the_parents_fields_with_their_types_and_defaults() -> None:
    assert fields(Windowed) == [("num_heads", int, 4), ("dropout", float, 0.0), ("window", int, 16)]
    assert fields(WindowedByName) == [("window", int, 16), ("num_heads", int, 4), ("dropout", float, 0.0)]
    assert fields(MoreHeads) == [("num_heads", int, 8), ("dropout", float, 0.0), ("window", int, 16)]
    assert fields(Sized, "task") == [("size", int, 10), ("batch_size", int, 64), ("seed", int, 0)]


def test_the_parameters_end_where_a_constructor_takes_no_kwargs() -> None:
    names = [p.name for p in init_parameters(MoreHeads)]
    assert names == ["query_dim", "key_dim", "value_dim", "score", "num_heads", "dropout", "window"]


def test_build_passes_the_inherited_arguments_through() -> None:
    attention = Registry("attention", "attnx.nn.attention:Attention")
    attention.register("_test_windowed")(Windowed)
    built = attention.get("_test_windowed")(8, 8, 8, None, **{"num_heads": 2, "dropout": 0.5, "window": 3})
    assert (built.num_heads, built.dropout.p, built.window) == (2, 0.5, 3)


def test_a_structured_merge_names_an_unknown_key_and_a_wrong_type_of_an_inherited_field() -> None:
    conf = OmegaConf.structured(config_class(Entry("attention", "_test_windowed", Windowed, "test")))
    with pytest.raises(ConfigKeyError, match="windw"):
        OmegaConf.merge(conf, {"windw": 3})
    with pytest.raises(ValidationError, match="window"):
        OmegaConf.merge(conf, {"window": "wide"})
    with pytest.raises(ValidationError, match="num_heads"):
        OmegaConf.merge(conf, {"num_heads": "many"})


def test_hydra_composes_and_checks_the_inherited_fields(tmp_path: Path) -> None:
    Registry("attention", "attnx.nn.attention:Attention").register("_test_windowed_hydra")(Windowed)
    (tmp_path / "train.yaml").write_text("defaults:\n  - attention: null\n  - _self_\n")
    chosen = ["attention=_test_windowed_hydra"]
    with initialize_config_dir(version_base=None, config_dir=str(tmp_path)):
        cfg = compose("train", overrides=[*chosen, "attention.num_heads=2", "attention.window=3"])
        assert cfg.attention == {"name": "_test_windowed_hydra", "num_heads": 2, "dropout": 0.0, "window": 3}
        for override, named in (
            ("windw=3", "windw"),
            ("window=wide", "window"),
            ("num_heads=many", "num_heads"),
        ):
            with pytest.raises(ConfigCompositionException, match=rf"attention\.{named}"):
                compose("train", overrides=[*chosen, f"attention.{override}"])


class Sliced(Task):
    """A required argument and a tuple default: the two kinds of field a pickle round trip can break."""

    model_type = "classification"

    def __init__(self, width: int, slices: tuple[int, ...] = (2, 4), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.width, self.slices = width, slices


def test_a_config_class_survives_a_joblib_sweeps_pickle_round_trip_in_this_process() -> None:
    """A joblib sweep's cloudpickle sends the class by value and, unpickling the jobs' returns here, resets
    the original with copies of `dataclasses.MISSING`: the registry must hand out a sound class again."""
    import cloudpickle

    entry = Entry("task", "_test_sliced", Sliced, "test")
    cloudpickle.loads(cloudpickle.dumps(config_class(entry)))
    assert entry.hyperparams() == {"width": "???", "slices": (2, 4), "batch_size": 64, "seed": 0}
    config = OmegaConf.structured(config_class(entry))
    assert OmegaConf.is_missing(config, "width") and list(config.slices) == [2, 4]
