"""Export a checkpoint for use elsewhere: one task as a plain Hugging Face model of its
type's class (a sequence or token classifier), or every head with its task definitions and
a model card.

    python -m mtdnn.export --checkpoint RUN/best --task scitail --out DIR
    python -m mtdnn.export --checkpoint RUN/best --all-tasks --out DIR   # multi-head

A multi-head export is the checkpoint's model without its training state (``encoder/``,
``heads.safetensors``, ``task_defs.yaml``, ``config.yaml``, ``checkpoint.json``) plus a
model card (``README.md``: tasks, dev metrics, training data, caveats); ``Predictor(DIR)``
and ``mtdnn-predict --checkpoint DIR`` load it.

A one-task folder loads with ``AutoModelForSequenceClassification.from_pretrained(DIR)`` and
``pipeline("text-classification", model=DIR)`` (a token-labelling task: with
``AutoModelForTokenClassification`` and ``pipeline("token-classification")``), with the
task's label names. Where Hugging
Face's own head for the encoder family is ours (dropout → linear on the pooler output: BERT
and its relatives) it is that family's class; for any other family the folder carries
mtdnn's head as code (``modeling_mtdnn.py``), loaded with ``trust_remote_code=True``. The
export is checked before it is written: both models score the same probe inputs and must
agree, otherwise the error names the encoder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtdnn.commandline import add_debug_flag, command_parser
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_dir, check_output

if TYPE_CHECKING:  # torch and transformers load when a model does, not for --help
    from transformers import PreTrainedModel

    from mtdnn.modeling.model import MultiTaskModel

PROBES = (("A man is playing a guitar on stage.", "Someone is making music."),
          ("Cells divide.", "Mitosis is how a eukaryotic cell splits into two identical cells."))


def hf_model(model: MultiTaskModel, task_name: str, encoder_dir: Path) -> PreTrainedModel:
    """A Hugging Face model of the task type's export class (``TaskType.auto_class``:
    ``AutoModelForSequenceClassification``, ``AutoModelForTokenClassification``) holding
    ``model``'s encoder and the head of ``task_name``: the family's own class where its head
    is ours (dropout → linear on the pooler output, or on each token: BERT and its
    relatives), else, for a sequence head, the portable class shipped with the export
    (:mod:`mtdnn.inference.portable.modeling_mtdnn`, loaded with ``trust_remote_code=True``)."""
    import transformers
    from torch import nn
    from transformers import AutoConfig

    from mtdnn.modeling.model import quiet_transformers

    task = model.tasks[task_name]
    kind = task.task_type
    config = AutoConfig.from_pretrained(encoder_dir)
    labels = kind.hf_labels(task)
    for key, value in labels.items():
        setattr(config, key, value)
    with quiet_transformers():
        try:
            exported = getattr(transformers, kind.auto_class).from_config(config)
        except ValueError:  # a family without a class of that kind
            exported = None
    head = getattr(exported, kind.export_head, None)
    base = getattr(exported, "base_model", None)
    pooled = getattr(base, "pooler", None) is not None
    if isinstance(head, nn.Linear) and (pooled or not kind.export_reads_pooler):
        weights = model.encoder_state()
        if not pooled:  # a token classifier's encoder has no pooler
            weights = {k: v for k, v in weights.items() if not k.startswith("pooler.")}
        base.load_state_dict(weights)
        head.load_state_dict(model.heads[task_name].proj.state_dict())
        return exported.eval()
    if kind.auto_class != "AutoModelForSequenceClassification":
        raise MtdnnError(f"a '{config.model_type}' encoder has no {kind.auto_class} whose "
                         "head is dropout → linear", file=encoder_dir, key="--task",
                         allowed="export every head (--all-tasks) and load it with "
                                 "mtdnn.Predictor")
    return portable_classifier(model, task_name, config, labels)


def portable_classifier(model: MultiTaskModel, task_name: str, encoder_config: Any,
                        labels: dict[str, Any]) -> PreTrainedModel:
    """mtdnn's head on any encoder family, as a class whose code the export carries."""
    from mtdnn.inference.portable.modeling_mtdnn import (
        MtdnnClassifierConfig,
        MtdnnForSequenceClassification,
    )
    from mtdnn.modeling.model import quiet_transformers

    MtdnnClassifierConfig.register_for_auto_class()
    MtdnnForSequenceClassification.register_for_auto_class(
        "AutoModelForSequenceClassification")
    encoder = {k: v for k, v in encoder_config.to_dict().items()
               if k not in ("num_labels", "id2label", "label2id", "architectures")}
    config = MtdnnClassifierConfig(encoder=encoder,
                                   head_dropout=model.heads[task_name].dropout.p, **labels)
    with quiet_transformers():
        classifier = MtdnnForSequenceClassification(config)
    classifier.encoder.load_state_dict(model.encoder_state())
    classifier.classifier.load_state_dict(model.heads[task_name].proj.state_dict())
    return classifier.eval()


def check_same_outputs(model: MultiTaskModel, classifier: PreTrainedModel, task_name: str,
                       tokenizer, encoder_dir: Path) -> None:
    """Both models must give the same head outputs on the probe pairs."""
    import torch

    with torch.inference_mode():
        _check_same_outputs(model, classifier, task_name, tokenizer, encoder_dir)


def _check_same_outputs(model: MultiTaskModel, classifier: PreTrainedModel, task_name: str,
                        tokenizer, encoder_dir: Path) -> None:
    import torch

    firsts, seconds = zip(*PROBES, strict=True)
    pair = len(model.tasks[task_name].inputs) == 2
    batch = tokenizer(list(firsts), list(seconds) if pair else None, padding=True,
                      return_tensors="pt")
    was_training = model.training
    model.eval()
    ours = model(task_name, **batch)
    model.train(was_training)
    theirs = model.tasks[task_name].task_type.hf_outputs(classifier(**batch))
    if not torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4):
        gap = (ours - theirs).abs().max().item()
        raise MtdnnError(f"the exported model's outputs differ from the checkpoint's (max gap "
                         f"{gap:.2e})", file=encoder_dir,
                         allowed="an encoder whose forward takes input_ids, attention_mask "
                                 "(and token_type_ids)")


def export_task(checkpoint: Path, task_name: str, out: Path, overwrite: bool = False) -> Path:
    """Write ``task_name`` of ``checkpoint`` to ``out`` (atomically) as an HF classifier;
    an existing ``out`` is replaced only with ``overwrite``, and never the checkpoint."""
    from mtdnn.modeling.model import quiet_transformers
    from mtdnn.modeling.weights import ENCODER_DIR
    from mtdnn.runs.checkpoint import load_model

    check_output(out, [checkpoint], key="--out", overwrite=overwrite, folder=True)
    model, tokenizer = load_model(checkpoint)
    if task_name not in model.tasks:
        raise MtdnnError(f"task '{task_name}' is not in this checkpoint", file=checkpoint,
                         key="--task", allowed=", ".join(model.tasks))
    encoder_dir = checkpoint / ENCODER_DIR
    classifier = hf_model(model, task_name, encoder_dir)
    check_same_outputs(model, classifier, task_name, tokenizer, encoder_dir)
    card = model_card(checkpoint, task_name)
    with atomic_dir(out) as tmp, quiet_transformers():
        classifier.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out


def push_to_hub(folder: Path, repo_id: str, private: bool = False) -> str:
    """Upload an export to the Hugging Face Hub (the repository is created if need be);
    returns its address. Uses the token of ``huggingface-cli login`` or ``HF_TOKEN``."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:  # pragma: no cover - transformers depends on it
        raise MtdnnError("pushing needs huggingface_hub", key="--push-to-hub",
                         allowed="pip install huggingface_hub") from None
    api = HfApi()
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id,
                          commit_message="Upload a model exported by mtdnn")
    except (HfHubHTTPError, OSError, ValueError) as error:
        raise MtdnnError(f"cannot push to the Hub: {str(error).splitlines()[0]}",
                         file=folder, key="--push-to-hub",
                         allowed="a repository id you may write to (user/name), after "
                                 "`huggingface-cli login` or with HF_TOKEN set; the export "
                                 "itself is written") from None
    return str(url)


NLI_CAVEAT = ("all-MiniLM-L6-v2 was contrastively trained on data that includes SNLI and "
              "MNLI, so its NLI results (MNLI, RTE, SNLI, SciTail, ...) are not those of a "
              "plain BERT and not comparable to BERT rows in papers.")


# The hub model the packaged encoder's weights are (what a card's base_model names).
PACKAGED_BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def base_model(encoder: str | None) -> str | None:
    """The hub id a run's encoder came from, for a card's ``base_model`` (None for a local
    folder, which has none)."""
    from mtdnn.config.train_config import PACKAGED_ENCODER

    if encoder == PACKAGED_ENCODER:
        return PACKAGED_BASE_MODEL
    if encoder and not Path(encoder).exists() and encoder.count("/") <= 1:
        return encoder
    return None


def model_card(checkpoint: Path, task_name: str | None = None) -> str:
    """A model card from what the checkpoint records: its tasks (or the one exported), the
    dev metrics at the step it was saved, the data it was trained on and the encoder it
    started from. A one-task export is a transformers model; a multi-head one is mtdnn's."""
    from mtdnn.config.schema import load_yaml
    from mtdnn.config.train_config import PACKAGED_ENCODER
    from mtdnn.runs.checkpoint import load_checkpoint_tasks, read_info
    from mtdnn.runs.run_dir import CONFIG_FILE

    tasks = load_checkpoint_tasks(checkpoint)
    if task_name is not None:
        tasks = {task_name: tasks[task_name]}
    info = read_info(checkpoint)
    config = load_yaml(checkpoint / CONFIG_FILE) or {}
    base = base_model(config.get("encoder"))
    pipelines = list(dict.fromkeys(t.task_type.pipeline_tag for t in tasks.values()))
    front = ["---", f"library_name: {'transformers' if task_name else 'mtdnn'}",  # card data
             *([f"base_model: {base}"] if base else []),
             f"pipeline_tag: {pipelines[0]}",
             f"tags: [mtdnn, multi-task, smart, {', '.join(pipelines)}]", "---", ""]
    if task_name is not None:
        use = (f"Load it with `transformers.{tasks[task_name].task_type.auto_class}.from_pretrained"
               "(this_folder)` (add `trust_remote_code=True` if the folder holds "
               "`modeling_mtdnn.py`), or `mtdnn.Predictor`'s export of the whole checkpoint.")
        title = f"# {task_name}: one head of an mtdnn model"
    else:
        use = ("Load it with `mtdnn.Predictor(this_folder)` or `mtdnn-predict --checkpoint "
               "this_folder`.")
        title = f"# {checkpoint.parent.name or 'mtdnn'}: {len(tasks)} task head(s)"
    lines = [*front, title, "",
             "A shared encoder with one head per task, trained with mtdnn (multi-task "
             f"fine-tuning with SMART). {use}", "",
             "| task | type | labels | inputs | dev metrics |", "|---|---|---|---|---|"]
    metrics = info.get("metrics") or {}
    for name, task in tasks.items():
        shown = ", ".join(f"{k} {100 * v:.1f}" for k, v in metrics.get(name, {}).items())
        lines.append(f"| {name} | {task.type} | {', '.join(task.labels) or '—'} | "
                     f"{', '.join(task.inputs)} | {shown or 'not evaluated'} |")
    lines += ["", f"Dev metrics at step {info.get('step')} (epoch {info.get('epoch')}).", "",
              "## Training", "", f"- encoder: `{config.get('encoder')}`"
              + (f", first {config['encoder_layers']} layers" if config.get("encoder_layers")
                 else ""),
              f"- started from: `{config.get('init_checkpoint') or 'the pre-trained encoder'}`"]
    data_dir = config.get("data_dir", "data")
    sources = config.get("tasks") or {}
    if isinstance(sources, list):  # the shorthand tasks: [rte, mrpc]
        sources = {name: {} for name in sources}
    for name, spec in sources.items():
        if name not in tasks:
            continue
        spec = spec or {}
        train = spec.get("train") or f"{data_dir}/{name}/train.jsonl"
        dev = spec.get("dev") or f"{data_dir}/{name}/dev.jsonl"
        lines.append(f"- {name}: trained on `{train}`, scored on `{dev}`")
    smart = config.get("smart") or {}
    lines.append(f"- SMART: {'on' if smart.get('enabled') else 'off'}; seed "
                 f"{config.get('seed')}, precision {config.get('precision')}")
    if config.get("encoder") == PACKAGED_ENCODER:
        lines += ["", "## Caveat", "", NLI_CAVEAT]
    return "\n".join(lines) + "\n"


def export_all_tasks(checkpoint: Path, out: Path, overwrite: bool = False) -> Path:
    """Write every head of ``checkpoint`` with its task definitions and a model card."""
    import shutil

    from mtdnn.runs.checkpoint import REQUIRED, check_checkpoint, load_model

    check_output(out, [checkpoint], key="--out", overwrite=overwrite, folder=True)
    check_checkpoint(checkpoint)
    load_model(checkpoint)  # the encoder and every head load whole, as a single-task export's
    card = model_card(checkpoint)
    with atomic_dir(out) as tmp:
        for name in REQUIRED:  # a model loads from them; the training state stays behind
            source = checkpoint / name
            (shutil.copytree if source.is_dir() else shutil.copyfile)(source, tmp / name)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("mtdnn.export", __doc__)
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="checkpoint folder written by train.py (e.g. runs/rte/best)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", help="the task whose head is exported (a Hugging Face "
                                      "sequence or token classifier, by its type)")
    which.add_argument("--all-tasks", action="store_true",
                       help="every head, with the task definitions and a model card")
    parser.add_argument("--out", type=Path, required=True,
                        help="new folder for the Hugging Face model")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out folder (never the checkpoint)")
    parser.add_argument("--push-to-hub", metavar="REPO",
                        help="also upload the export to the Hugging Face Hub as REPO "
                             "(user/name; created if need be)")
    parser.add_argument("--private", action="store_true",
                        help="with --push-to-hub: create the repository private")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if args.all_tasks:
        out = export_all_tasks(args.checkpoint, args.out, args.overwrite)
    else:
        out = export_task(args.checkpoint, args.task, args.out, args.overwrite)
    print(f"exported: {out}")
    if args.push_to_hub:
        print(f"pushed: {push_to_hub(out, args.push_to_hub, args.private)}")

