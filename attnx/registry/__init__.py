"""Plugin registries: one per kind (score, attention, encoder, decoder, task), in three parts.

- `names`: the registries, their `register_*` decorators, lookups with did-you-mean, aliases and
  deprecated names, and `upgrade` of a section saved by an older version;
- `configs`: each registered class's structured config in Hydra's ConfigStore, built from its
  constructor (`signatures`: its own arguments and those it passes up through `**kwargs`), so
  `score=cosine score.temperature=0.1` works with no YAML;
- `discovery`: finding and importing plugins (entry points, plugin folders); `SLOW_IMPORT_S`, the time
  after which a slow plugin import is named, is `attnx.registry.discovery.SLOW_IMPORT_S`.

`model_types` declares what a task trains (`ModelType`: its parts, metrics and pieces), once per model
type. `slots` (attention sites in a class) sits below them. This package re-exports their public names.
"""

from attnx.registry.configs import STRUCTURAL, Entry, config_class
from attnx.registry.discovery import (
    PluginImportError,
    PluginImportInterrupted,
    load_all,
    load_file,
    plugin_dirs,
)
from attnx.registry.model_types import Metric, ModelType, model_type, model_types, register_model_type
from attnx.registry.names import (
    KINDS,
    REGISTRIES,
    Registry,
    RegistryError,
    RenamedWarning,
    StaleArguments,
    available,
    build,
    get,
    register_attention,
    register_decoder,
    register_encoder,
    register_score,
    register_task,
    registry,
    slot_groups,
    unknown_message,
    upgrade,
    upgrade_plan,
)
from attnx.registry.signatures import init_parameters
from attnx.registry.slots import ROLES, Slot, slot_fields, slots_of

__all__ = [
    "KINDS",
    "REGISTRIES",
    "ROLES",
    "STRUCTURAL",
    "Entry",
    "Metric",
    "ModelType",
    "PluginImportError",
    "PluginImportInterrupted",
    "Registry",
    "RegistryError",
    "RenamedWarning",
    "Slot",
    "StaleArguments",
    "available",
    "build",
    "config_class",
    "get",
    "init_parameters",
    "load_all",
    "load_file",
    "model_type",
    "model_types",
    "plugin_dirs",
    "register_attention",
    "register_decoder",
    "register_encoder",
    "register_model_type",
    "register_score",
    "register_task",
    "registry",
    "slot_fields",
    "slot_groups",
    "slots_of",
    "unknown_message",
    "upgrade",
    "upgrade_plan",
]
