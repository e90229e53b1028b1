"""Every run config key with its type, default and meaning: the source of ``mtdnn-train
--help`` and of the README's key table (a test holds the README equal to it)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from mtdnn.schema import _type_name, to_dict

MEANINGS = {
    "tasks": "the tasks to train: a list of names, or name -> where its data is",
    "tasks.<task>.train": "train data: .jsonl/.csv/.tsv/.parquet, or {dataset, config, split}",
    "tasks.<task>.dev": "dev data, as train (default <data_dir>/<task>/dev.jsonl if present)",
    "tasks.<task>.columns": "task field -> source column, for files with other column names",
    "tasks.<task>.definition": "the task's definition inline, as in task_defs/*.yaml",
    "tasks.<task>.loss_weight": "this task's loss is multiplied by it in training",
    "encoder": "a Hugging Face encoder: hub name, local folder, or the packaged alias",
    "encoder_layers": "keep only the first N encoder layers (smaller, faster)",
    "encoder_dropout": "override the encoder's hidden and attention dropout",
    "task_defs": "task definition files or folders; packaged: the shipped ones",
    "data_dir": "where data_prep wrote canonical JSONL (<data_dir>/<task>/...)",
    "output_dir": "the run folder: config, metrics, tensorboard, checkpoints",
    "init_checkpoint": "start from this checkpoint (encoder and matching heads)",
    "resume": "continue this interrupted run (its folder or its last checkpoint) exactly",
    "overwrite": "replace an existing run in output_dir",
    "keep_last_n": "also keep checkpoints/step-<N> of the last n evaluations",
    "pcgrad": "gradient surgery when a step holds several tasks",
    "freeze_encoder_steps": "train only the heads for this many first steps",
    "epochs": "passes over the sampler's epoch plan",
    "max_steps": "stop after this many optimizer steps (overrides epochs)",
    "min_steps": "at least this many optimizer steps (tiny training sets)",
    "batch_size": "examples per minibatch (one task per minibatch)",
    "eval_batch_size": "examples per batch when evaluating",
    "max_seq_len": "tokens per example; longer pairs are truncated longest-first",
    "label_smoothing": "classification targets smoothed towards uniform by this much",
    "gradient_checkpointing": "recompute encoder activations in backward: less memory",
    "seed": "seeds Python, numpy and torch (sampling, dropout, heads)",
    "precision": "auto (bf16 where native, else fp32), fp32, bf16 or fp16",
    "compile": "torch.compile the encoder",
    "device": "auto (CUDA when present), cpu or cuda",
    "eval_every_steps": "also evaluate and save every N steps",
    "save_every_steps": "save a resumable last checkpoint every N steps",
    "eval_every_epoch": "evaluate and save at every epoch's end",
    "log_every_steps": "log training losses every N steps",
    "best_metric": "what picks the best checkpoint: mean, or <task>.<metric>",
    "early_stopping_patience": "stop after N evaluations without a better best_metric",
    "report_to": "where scalars go besides metrics.jsonl: tensorboard, wandb, mlflow",
    "cache_dir": "converted and tokenized data cache (default $MTDNN_CACHE or ~/.cache/mtdnn)",
    "progress_bar": "show a progress bar",
    "optimizer.lr": "peak learning rate (AdamW)",
    "optimizer.weight_decay": "decoupled weight decay (none on biases and LayerNorm)",
    "optimizer.adam_betas": "AdamW's two betas",
    "optimizer.adam_eps": "AdamW's epsilon",
    "optimizer.schedule": "linear, cosine, constant or slanted_triangular",
    "optimizer.warmup_ratio": "fraction of the steps spent warming up",
    "optimizer.warmup_steps": "warm-up in steps; when set, replaces warmup_ratio",
    "optimizer.stlr_ratio": "slanted triangular: decay to lr / stlr_ratio",
    "optimizer.layer_lr_decay": "layer l of L gets lr · decay^(L - l)",
    "optimizer.max_grad_norm": "clip the gradient norm to this",
    "optimizer.grad_accum_steps": "minibatches summed per optimizer step",
    "sampler.kind": "how tasks are mixed across minibatches (proportional, smart, ...)",
    "sampler.temperature": "temperature sampling: p ∝ size^(1/T)",
    "sampler.steps_per_epoch": "fix an epoch's length in steps",
    "sampler.group_by_length": "batch examples of similar length (less padding)",
    "smart.enabled": "SMART fine-tuning (Jiang et al. 2020)",
    "smart.preset": "fill the keys of a named recipe: paper, reference or calibrated",
    "smart.adv_weight": "λ_s, the weight of the adversarial regulariser R_s (0: off)",
    "smart.epsilon": "ε, the radius of the perturbation's ℓ∞ ball",
    "smart.noise_std": "σ, the initial perturbation's standard deviation",
    "smart.step_size": "η, the ascent's step (null: step_ratio × ε)",
    "smart.step_ratio": "η ÷ ε when step_size is null (the paper's 100)",
    "smart.ascent_steps": "T_x̃, ascent steps per minibatch",
    "smart.ascent": "paper (projected ℓ∞ step) or reference (normalised, no projection)",
    "smart.guard": "the reference ascent's division guard (mt-dnn's adv_epsilon)",
    "smart.perturb": "word_embeddings or embedding_output (after LayerNorm)",
    "smart.share_dropout": "adversarial passes reuse the clean pass's dropout masks",
    "smart.bregman_weight": "μ, the weight of the Bregman proximal term (0: no teacher)",
    "smart.teacher_dropout": "shared: teacher uses the student's masks; off: no dropout",
    "smart.teacher_beta_early": "the mean teacher's EMA β early in training",
    "smart.teacher_beta_late": "the mean teacher's EMA β after the early fraction",
    "smart.teacher_early_fraction": "fraction of the steps that use the early β",
    "smart.teacher_update_every": "update the teacher every N steps",
    "smart.teacher_schedule": "paper (β as written), ramp (Mean Teacher's running mean "
                              "first) or scaled (ramp, then a lag of a fraction of the run)",
    "smart.teacher_lag_fraction": "scaled schedule: the teacher's lag 1/(1-β) as a fraction "
                                  "of the run's updates",
}


def config_keys() -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) of every run config key, nested keys dotted."""
    from mtdnn.config import TaskData, TrainConfig

    rows: list[tuple[str, str, str, str]] = []

    def walk(cls: Any, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            tp, key = hints[item.name], prefix + item.name
            if dataclasses.is_dataclass(tp):
                walk(tp, key + ".")
                continue
            if item.default is not dataclasses.MISSING:
                default = to_dict(item.default)
            elif item.default_factory is not dataclasses.MISSING:
                default = to_dict(item.default_factory())
            else:
                default = "required"
            kind = "a list of task names, or a mapping" if key == "tasks" else _type_name(tp)
            rows.append((key, kind, yaml_text(default), MEANINGS.get(key, "")))
            if key == "tasks":
                walk(TaskData, "tasks.<task>.")

    walk(TrainConfig, "")
    return rows


def yaml_text(value: Any) -> str:
    """A default as it would be written in a config file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    return str(value)


def help_epilog() -> str:
    """The keys as ``--help`` lists them."""
    width = max(len(key) for key, *_ in config_keys())
    lines = ["config keys (key=value; nested keys dotted):"]
    for key, kind, default, meaning in config_keys():
        lines.append(f"  {key:<{width}}  {meaning}")
        lines.append(f"  {'':<{width}}    {kind}; default {default}")
    return "\n".join(lines)


def markdown_table() -> str:
    """The keys as the README's table."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, meaning in config_keys():
        lines.append(f"| `{key}` | {kind} | `{default}` | {meaning} |")
    return "\n".join(lines) + "\n"
