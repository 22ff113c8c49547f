"""The typed schema of `attnx train`'s config, in Hydra's ConfigStore (Hydra's structured-config schema
pattern, as fairseq's FairseqConfig): conf/train.yaml's defaults list starts with `train_schema`, and
each conf/optim/*.yaml and conf/optim/scheduler/*.yaml extends its `*_schema`. The YAML files hold the
values, commented; these dataclasses hold the keys and types, so a wrong type (`optim.lr=abc`) or an
unknown key (`classifier.hiden_dim=8` in a YAML file) fails in Hydra's own merge, naming the key.

Every field but the optional groups is MISSING here: its default lives in one place, the YAML. Bounds
that types cannot express (optim.lr > 0, ...) are `attnx.config.validation.validate`'s. The task, encoder,
decoder, attention and score groups are typed by the registry, from their constructors (`attnx.registry`).
Storing the schema imports Hydra and OmegaConf only, never torch or Lightning.
"""

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING


@dataclass
class ClassifierConfig:
    """The classification head (encoder and decoder have their own groups); the `model` group before."""

    dropout: float = MISSING


@dataclass
class LMConfig:
    """The `lm` model kind (attnx.models.lm.CausalLM): its causal self-attention is the run's
    `attention` and `score`, or each block's entry of the plan `layers` (attnx.models.plan)."""

    d_model: int = MISSING
    num_layers: int = MISSING
    ff_dim: int = MISSING
    ff: str = MISSING  # gelu | swiglu (attnx.nn.transformer.FEED_FORWARDS)
    dropout: float = MISSING
    positions: str = MISSING
    max_len: int = MISSING
    conv: int = MISSING  # short causal convolution's kernel size before each mechanism; 0 = none
    init: str = MISSING  # torch | normal (attnx.nn.init.INITS)
    tie_embeddings: bool = MISSING  # the read-out is the embedding table
    # a plan: an attention section per block (or a pattern of them); each typed by attnx.models.plan, not
    # here, since the sections of different mechanisms have no one schema. null: the run's `attention`
    layers: Optional[list[Any]] = MISSING  # noqa: UP045


@dataclass
class DecodeConfig:
    """How val/test/predict decode seq2seq outputs: greedy when beam_size = 1, else beam search ranked by
    log p(y) / lp(y), lp(y) = ((5 + |y|) / 6)^length_penalty (GNMT); at most
    max_len_ratio · source length + 5 tokens."""

    beam_size: int = MISSING
    length_penalty: float = MISSING
    max_len_ratio: float = MISSING


@dataclass
class OptimizerConfig:
    """A torch.optim optimiser as a `_partial_` `_target_`; configure_optimizers passes it the parameter
    groups. `lr` interpolates `${optim.lr}`."""

    _target_: str = MISSING
    _partial_: bool = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING


@dataclass
class AdamWConfig(OptimizerConfig):
    """torch.optim.AdamW: m ← β₁m + (1-β₁)g, v ← β₂v + (1-β₂)g², θ ← θ - lr·(m̂/(√v̂ + ε) + λθ)."""

    betas: list[float] = MISSING


@dataclass
class SGDConfig(OptimizerConfig):
    """torch.optim.SGD; with nesterov, b ← μb + g + λθ, θ ← θ - lr·(g + λθ + μb)."""

    momentum: float = MISSING
    nesterov: bool = MISSING


@dataclass
class SchedulerConfig:
    """A learning-rate schedule as a `_partial_` `_target_`: called with (optimizer, total_steps)."""

    _target_: str = MISSING
    _partial_: bool = MISSING


@dataclass
class WarmupConfig(SchedulerConfig):
    """attnx.lit.optim.warmup_schedule: linear warm-up, then cosine decay to zero or constant."""

    warmup_steps: int = MISSING
    cosine: bool = MISSING


@dataclass
class OptimConfig:
    """The optimiser and its schedule. `lr` is the peak learning rate, the one knob to tune: the optimiser's
    lr interpolates it and the schedule scales it."""

    lr: float = MISSING
    optimizer: OptimizerConfig = MISSING
    scheduler: SchedulerConfig = MISSING


@dataclass
class ConvergenceConfig:
    """When a run's validation curve has converged (attnx.track.convergence: the metric's ceiling reached, or
    the last quarter's mean within `tolerance` of the quarter's before), and whether training stops then."""

    metric: Optional[str] = MISSING  # noqa: UP045 - null: the model type's headline validation metric
    tolerance: float = MISSING
    ceiling: Optional[float] = MISSING  # noqa: UP045 - null: the metric's natural ceiling, if it has one
    min_validations: int = MISSING
    stop: bool = MISSING


@dataclass
class TrainConfig:
    """`attnx train`'s whole config. Groups typed elsewhere (by the registry, or by their `_target_`'s
    signature when instantiated) are Any here; `score`, `logger` and `callbacks` may be null."""

    task: Any = MISSING
    encoder: Any = MISSING
    decoder: Any = MISSING
    attention: Any = MISSING
    score: Any = None
    classifier: ClassifierConfig = MISSING
    # its old name, in a user's config file: folded into `classifier` (attnx.config.compose.renamed_sections)
    model: Optional[ClassifierConfig] = None  # noqa: UP045
    lm: LMConfig = MISSING
    optim: OptimConfig = MISSING
    trainer: Any = MISSING
    logger: Any = None
    callbacks: Any = None
    paths: Any = MISSING
    seed: int = MISSING
    threads: int = MISSING
    bucketing: bool = MISSING
    compile: Any = MISSING  # true | false | auto (attnx.config.validation checks which)
    compile_cache: Optional[str] = MISSING  # noqa: UP045
    paired_embeddings: bool = MISSING
    resume: Optional[str] = MISSING  # noqa: UP045 - OmegaConf needs typing.Optional
    summary: bool = MISSING
    store: Optional[str] = MISSING  # noqa: UP045
    ckpt_path: Optional[str] = MISSING  # noqa: UP045
    test: bool = MISSING
    optimized_metric: str = MISSING
    decode: DecodeConfig = MISSING
    convergence: ConvergenceConfig = MISSING


@dataclass
class SuiteTask:
    """One task of an `attnx compare` suite: the `attnx train` overrides that set it up (the task, its
    sizes, its training budget), the test metric compared, the width keys `protocol.match_params` and
    `protocol.match_state` scale together, the capability it is a setting of (MAD's tasks, Poli et al.
    2024: a capability's score is the mean over its settings; null: the task is its own), and the
    attention site the arms fill (null: the run's `attention`; encoder or decoder: that slot's
    `encoder/attention`, `encoder/score`)."""

    overrides: list[str] = MISSING
    metric: str = MISSING
    width: list[str] = MISSING
    capability: Optional[str] = None  # noqa: UP045
    site: Optional[str] = None  # noqa: UP045
    ceiling: Optional[float] = None  # noqa: UP045 - the best value; null: the metric's natural one
    baseline: Optional[str] = None  # noqa: UP045 - the arm the others are paired against here; null: compare's


@dataclass
class GridConfig:
    """MAD's protocol (Poli et al. 2024): every run at each (lr, weight_decay) of the grid; each (task, arm,
    seed) read at one point, chosen by `select` (attnx.compare.scores: validation, or MAD's test)."""

    enabled: bool = MISSING
    lr: list[float] = MISSING
    weight_decay: list[float] = MISSING
    select: str = MISSING  # validation | test ("optimistic (as MAD)")


@dataclass
class ProtocolConfig:
    """How `attnx compare` makes the comparison fair beyond shared seeds, data order and embeddings."""

    lr_search: bool = MISSING  # each mechanism and task gets the same lr_grid; the best on validation is used
    lr_grid: list[float] = MISSING
    match_params: bool = MISSING  # widths scaled to the baseline's parameter count ± param_tolerance
    param_tolerance: float = MISSING
    match_state: bool = MISSING  # widths scaled to the baseline's decoding state ± state_tolerance (MAD)
    state_tolerance: float = MISSING
    grid: GridConfig = MISSING


@dataclass
class CompareBenchConfig:
    """The `attnx bench` point whose forward time is the inference cost: N tokens of width dim."""

    n: int = MISSING
    dim: int = MISSING
    heads: int = MISSING


@dataclass
class DiscriminationConfig:
    """When a suite task discriminates (`attnx.compare.discrimination`): a settled classic arm that hosts
    attention reaches `ceiling_fraction` of the metric's ceiling, and two of them are told apart (a win or
    a loss) by a mean difference of at least `spread`."""

    ceiling_fraction: float = MISSING
    spread: float = MISSING


@dataclass
class CompareConfig:
    """`attnx compare`'s config (conf/compare.yaml and a suite from conf/suite/)."""

    seeds: Any = MISSING  # a count n (seeds 0..n-1) or a list of distinct seeds: attnx.compare.keys
    mechanisms: list[str] = MISSING
    baseline: str = MISSING
    score_host: str = MISSING
    launcher: str = MISSING
    tasks: dict[str, SuiteTask] = MISSING
    protocol: ProtocolConfig = MISSING
    bench: CompareBenchConfig = MISSING
    pareto: str = MISSING  # the Pareto view's cost beside params and training time: time | state
    out: Optional[str] = MISSING  # noqa: UP045
    discrimination: DiscriminationConfig = MISSING
    alpha: float = MISSING  # the verdicts' level (attnx.report.verdicts)
    family: str = MISSING  # where Holm's family ends: task | suite
    store: Optional[str] = MISSING  # noqa: UP045 - the run store: auto | DIR | null (attnx.store.runs)
    verify: int = MISSING  # stored runs trained again to check the store (attnx.compare.verify)
    plan: bool = MISSING  # print what would run (attnx.compare.preview), train nothing
    budget_cap: int = MISSING  # the most budgets a run still improving trains for (attnx.compare.budget)


def store() -> None:
    """Put the schema into Hydra's ConfigStore under the names the YAML files' defaults lists use."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="compare_schema", node=CompareConfig)
    cs.store(group="optim", name="adamw_schema", node=OptimConfig(optimizer=AdamWConfig()))
    cs.store(group="optim", name="sgd_schema", node=OptimConfig(optimizer=SGDConfig()))
    cs.store(group="optim/scheduler", name="warmup_schema", node=WarmupConfig)
