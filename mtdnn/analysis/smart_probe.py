"""How strong is SMART's adversarial term on this model? R_s against ε, before training.

    python -m mtdnn.smart_probe --task rte [--checkpoint DIR] \\
        --epsilon 1e-5 1e-4 1e-3 1e-2 1e-1 [--batches 8] [key=value ...]

For each radius ε, over ``--batches`` batches of the task's train file: R_s, its ratio to
the task loss and ‖δ‖∞, in eval mode (no dropout) and in training mode (dropout, with the
run's ``smart.share_dropout``). The model is ``--checkpoint``'s, or the configured encoder
with a fresh head; nothing is trained. ``key=value`` overrides set the SMART keys and the
rest of the run config (e.g. ``smart.ascent=reference``, ``smart.step_ratio=10``,
``encoder_layers=6``, ``precision=bf16``). The step η follows ε (``smart.step_ratio``, η/ε =
100 by default) unless ``smart.step_size`` is given. Each ε sees the same batches and
the same random start, so the rows compare like with like.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mtdnn.commandline import add_debug_flag, command_parser
from mtdnn.config.resolve import resolve_config
from mtdnn.config.train_config import TrainConfig
from mtdnn.errors import MtdnnError

if TYPE_CHECKING:  # torch loads with the model, after the arguments are read
    import torch

    from mtdnn.data.tokenized import TaskSplits
    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.tasks.task_def import TaskDef


@dataclass
class Probed:
    """The model and the task data the probe measures, loaded once for all its measures."""

    config: TrainConfig
    task: TaskDef
    model: MultiTaskModel
    data: TaskSplits
    device: torch.device


def load_probed(config: TrainConfig, task_name: str, checkpoint: Path | None = None) -> Probed:
    """``checkpoint``'s model (or the encoder with a fresh head) and the task's train data."""
    from mtdnn.data.sources import canonical_files
    from mtdnn.data.tokenized import load_task_data
    from mtdnn.modeling.model import build_model
    from mtdnn.runs.randomness import seed_everything
    from mtdnn.tasks.task_def import select_tasks
    from mtdnn.training.distributed import choose_device
    from mtdnn.training.resume import start_checkpoint

    if checkpoint is not None:
        config = dataclasses.replace(config, init_checkpoint=str(checkpoint))
    tasks = select_tasks(config)
    start = start_checkpoint(config, tasks)
    seed_everything(config.seed)  # a fresh head is drawn from the run's seed: same table twice
    model, tokenizer = build_model(tasks, encoder_dir=start.encoder_dir, heads=start.heads,
                                   config=config)
    data = load_task_data(config, tasks, tokenizer, canonical_files(config, tasks))[task_name]
    device, _ = choose_device(config)
    return Probed(config, tasks[task_name], model.to(device), data, device)


def probe(probed: Probed, epsilons: list[float], batches: int) -> list[dict]:
    """One row per ε: R_s, R_s ÷ task loss and ‖δ‖∞ in eval and in training mode."""
    import torch  # noqa: F811 - at run time (the module-level import is for type hints)

    from mtdnn.data.tokenized import get_batch
    from mtdnn.modeling.objective import batch_loss
    from mtdnn.modeling.precision import AMP_DTYPES, autocast_context
    from mtdnn.training.distributed import choose_device

    config, model, data, device = probed.config, probed.model, probed.data, probed.device
    rng = np.random.default_rng(config.seed)
    size = min(config.batch_size, len(data.train))
    chosen = [rng.choice(len(data.train), size, replace=False) for _ in range(batches)]
    rows = []
    for epsilon in epsilons:
        smart = dataclasses.replace(config.smart, enabled=True, epsilon=epsilon,
                                    bregman_weight=0.0)
        # what a run at this ε would use (auto: fp32 below bf16's floor)
        _, precision = choose_device(dataclasses.replace(config, smart=smart))
        row = {"epsilon": epsilon, "eta": smart.eta, "precision": precision}
        for mode in ("eval", "train"):
            model.train(mode == "train")
            adv, ratio, linf = [], [], []
            for number, indices in enumerate(chosen):
                batch = {k: v.to(device) for k, v in
                         get_batch(data.train, indices, data.collator).items()}
                labels = batch.pop("labels")
                torch.manual_seed(config.seed + number)  # same noise and masks for every ε
                with autocast_context(device, AMP_DTYPES[precision]):
                    step = batch_loss(model, probed.task, batch, labels, smart, 1.0)
                if step.adv_skipped:
                    continue
                adv.append(step.terms["adv_loss"].item())
                ratio.append(step.terms["adv_ratio"].item())
                linf.append(step.terms["delta_linf"].item())
                model.zero_grad(set_to_none=True)
            row[mode] = {"r_s": float(np.mean(adv)), "ratio": float(np.mean(ratio)),
                         "delta_linf": float(np.max(linf)), "batches": len(adv)}
        rows.append(row)
    return rows


def dropout_bregman(probed: Probed, batches: int) -> dict[str, float]:
    """D_Breg(θ, θ) in training mode: 0 with the student's dropout masks (``shared``); with a
    teacher run without dropout (``off``) it is the dropout noise alone, the floor under
    every D_Breg such a run logs."""
    import torch  # noqa: F811 - at run time (the module-level import is for type hints)

    from mtdnn.data.tokenized import get_batch
    from mtdnn.modeling.objective import batch_loss
    from mtdnn.modeling.smart import MeanTeacher

    config, model, data = probed.config, probed.model, probed.data
    model.train()
    rng = np.random.default_rng(config.seed)
    size = min(config.batch_size, len(data.train))
    found = {}
    for mode in ("shared", "off"):
        smart = dataclasses.replace(config.smart, enabled=True, adv_weight=0.0,
                                    bregman_weight=1.0, teacher_dropout=mode)
        teacher = MeanTeacher(model, 1, dropout=mode == "shared")
        values, ratios = [], []
        for number in range(batches):
            batch = {k: v.to(probed.device) for k, v in get_batch(
                data.train, rng.choice(len(data.train), size, replace=False),
                data.collator).items()}
            labels = batch.pop("labels")
            torch.manual_seed(config.seed + number)
            with torch.no_grad():
                step = batch_loss(model, probed.task, batch, labels, smart, 0.0, teacher)
            values.append(step.terms["bregman_loss"].item())
            ratios.append(step.terms["bregman_ratio"].item())
        found[mode] = float(np.mean(values))
        found[f"{mode}_ratio"] = float(np.mean(ratios))
    return found


def table(rows: list[dict]) -> str:
    lines = ["| ε | η | precision | R_s (eval) | R_s ÷ task loss (eval) | ‖δ‖∞ (eval) "
             "| R_s (train) | R_s ÷ task loss (train) | ‖δ‖∞ (train) |", "|---" * 9 + "|"]
    for row in rows:
        cells = [f"{row['epsilon']:g}", f"{row['eta']:g}", row["precision"]]
        for mode in ("eval", "train"):
            cells += [f"{row[mode]['r_s']:.3g}", f"{row[mode]['ratio']:.3g}",
                      f"{row[mode]['delta_linf']:.3g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def probe_config(path: str | None, task: str, overrides: list[str]) -> TrainConfig:
    """The run config with its tasks narrowed to ``task``, as training reads them: a task
    the config defines (its files, columns, inline definition) keeps its entry; another
    is looked up in the task definitions."""
    # a probe without a config takes batches of 16 (quick); a config's own batch size, or
    # one given on the command line, is the probe's
    batch = [] if path or any(o.startswith("batch_size=") for o in overrides) \
        else ["batch_size=16"]
    config = resolve_config(path, [*batch, *overrides]) if path or any(
        o.startswith("tasks") for o in overrides) else None
    if config is not None and task in config.tasks:
        return dataclasses.replace(config, tasks={task: config.tasks[task]})
    return resolve_config(path, [f"tasks=[{task}]", *batch, *overrides])


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("mtdnn.smart_probe", __doc__)
    parser.add_argument("--task", required=True, help="the task whose train file is probed")
    parser.add_argument("--checkpoint", type=Path,
                        help="a checkpoint to probe (default: the encoder, a fresh head)")
    parser.add_argument("--epsilon", type=float, nargs="+", required=True,
                        help="radii ε to probe, e.g. 1e-5 1e-4 1e-3 1e-2 1e-1")
    parser.add_argument("--batches", type=int, default=8, help="batches per ε (default 8)")
    parser.add_argument("--config", help="a run config YAML to start from")
    add_debug_flag(parser)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    # key=value overrides may follow --epsilon's list, which would otherwise swallow them
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    args = parser.parse_args(overrides + [a for a in argv if a not in overrides])
    if args.batches <= 0 or any(not e > 0 for e in args.epsilon):
        raise MtdnnError("--batches and every --epsilon must be positive",
                         key="--batches" if args.batches <= 0 else "--epsilon",
                         allowed="numbers > 0")
    logging.basicConfig(level=logging.WARNING)
    config = probe_config(args.config, args.task, args.overrides)
    probed = load_probed(config, args.task, args.checkpoint)
    rows = probe(probed, args.epsilon, args.batches)
    print(f"SMART probe: task {args.task}, {args.batches} batches of "
          f"{config.batch_size}, ascent {config.smart.ascent}, perturb "
          f"{config.smart.perturb}, share_dropout {config.smart.share_dropout}")
    print(table(rows))
    floor = dropout_bregman(probed, args.batches)
    print(f"D_Breg(θ, θ) in training mode (teacher = student): {floor['shared']:.3g} with "
          f"teacher_dropout=shared; {floor['off']:.3g} (÷ task loss {floor['off_ratio']:.3g}) "
          "with teacher_dropout=off, all of it dropout noise")

