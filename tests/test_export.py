"""Export a task as a Hugging Face sequence classifier; pipeline() agrees with predict.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, head_jsonl
from mtdnn.inference.predictor import predict_file


def test_exported_task_scores_like_predict(stage_one: Path, small_tasks: list[str],
                                           tmp_path: Path) -> None:
    from transformers import pipeline

    dev = Path(next(o for o in small_tasks if o.startswith("tasks.rte.dev=")).split("=", 1)[1])
    sample = head_jsonl(dev, tmp_path / "dev.jsonl", 24)
    out = tmp_path / "rte-hf"
    result = subprocess.run([sys.executable, "-m", "mtdnn.export", "--checkpoint",
                             str(stage_one / "best"), "--task", "rte", "--out", str(out)],
                            cwd=REPO, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr[-3000:]

    # fp32 on both sides (pipeline runs fp32; predict's auto may pick bf16 on this CPU)
    predict_file([stage_one / "best"], "rte", sample, tmp_path / "ours.jsonl", progress=False,
                 precision="fp32")
    ours = [json.loads(line) for line in (tmp_path / "ours.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in sample.read_text().splitlines()]
    classifier = pipeline("text-classification", model=str(out), device="cpu")
    theirs = classifier([{"text": r["sentence1"], "text_pair": r["sentence2"]} for r in rows],
                        top_k=None, batch_size=8)
    labels = list(ours[0]["probabilities"])
    assert set(labels) == {"entailment", "not_entailment"}
    for mine, scored in zip(ours, theirs, strict=True):
        probabilities = {s["label"]: s["score"] for s in scored}
        assert max(probabilities, key=probabilities.get) == mine["prediction"]
        np.testing.assert_allclose([probabilities[k] for k in labels],
                                   [mine["probabilities"][k] for k in labels], atol=1e-4)


def test_export_of_an_unknown_task_fails_and_writes_nothing(stage_one: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "nope"
    result = subprocess.run([sys.executable, "-m", "mtdnn.export", "--checkpoint",
                             str(stage_one / "best"), "--task", "cola", "--out", str(out)],
                            cwd=REPO, text=True, capture_output=True)
    assert result.returncode == 2
    assert "task 'cola' is not in this checkpoint" in result.stderr
    assert "rte" in result.stderr and str(stage_one / "best") in result.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_all_tasks_export_has_every_head_a_model_card_and_no_training_state(
        stage_one: Path, tmp_path: Path) -> None:
    from mtdnn import Predictor

    out = tmp_path / "multi"
    result = subprocess.run([sys.executable, "-m", "mtdnn.export", "--checkpoint",
                             str(stage_one / "best"), "--all-tasks", "--out", str(out)],
                            cwd=REPO, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "checkpoint.json", "config.yaml", "encoder", "heads.safetensors",
        "task_defs.yaml"]
    card = (out / "README.md").read_text()
    logged = json.loads((stage_one / "best" / "checkpoint.json").read_text())["metrics"]
    for task, metrics in logged.items():
        row = next(line for line in card.splitlines() if line.startswith(f"| {task} |"))
        assert f"accuracy {100 * metrics['accuracy']:.1f}" in row
    assert "contrastively trained on data that includes SNLI and MNLI" in card
    pairs = [("A man plays.", "Someone makes music."), ("Cells divide.", "Dogs bark.")]
    exported = Predictor(out, precision="fp32").predict(pairs)
    original = Predictor(stage_one / "best", precision="fp32").predict(pairs)
    assert exported == original and set(exported[0]) == {"rte", "mrpc", "scitail"}


def test_an_encoder_without_bert_s_head_exports_with_portable_code(
        tiny_tokenizer, tmp_path: Path) -> None:
    """ELECTRA has no pooler and its own two-layer head: the export carries mtdnn's head
    as code, and the loaded model scores as the checkpoint does."""
    import torch
    from transformers import AutoModelForSequenceClassification, ElectraConfig, ElectraModel

    from mtdnn.inference.export import export_task
    from mtdnn.modeling.model import MultiTaskModel
    from mtdnn.runs.checkpoint import save_checkpoint
    from mtdnn.tasks.task_def import load_task_defs

    torch.manual_seed(0)
    encoder = ElectraModel(ElectraConfig(
        vocab_size=tiny_tokenizer.vocab_size, embedding_size=32, hidden_size=32,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128))
    model = MultiTaskModel(encoder, {"rte": load_task_defs()["rte"]})
    checkpoint = tmp_path / "checkpoint"
    save_checkpoint(checkpoint, model, tiny_tokenizer, "tasks: [rte]\n",
                    {"step": 1, "epoch": 0, "metrics": None})
    out = export_task(checkpoint, "rte", tmp_path / "exported")
    assert (out / "modeling_mtdnn.py").is_file()
    loaded = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    batch = tiny_tokenizer(["A man plays."], ["Someone makes music."], return_tensors="pt")
    model.eval()
    with torch.inference_mode():
        assert torch.allclose(loaded.eval()(**batch).logits, model("rte", **batch), atol=1e-5)
    assert loaded.config.id2label == {0: "entailment", 1: "not_entailment"}


def test_a_single_task_export_has_a_model_card_and_pushes_to_the_hub(
        stage_one: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The card names the base model, the library that loads the folder, the task's dev
    metrics and data; --push-to-hub uploads the folder (the Hub call is checked, offline)."""
    import huggingface_hub

    from mtdnn.inference.export import main

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, private=False, exist_ok=False):
            calls.append(("create", repo_id, private, exist_ok))
            return f"hub repository {repo_id}"

        def upload_folder(self, folder_path, repo_id, commit_message):
            calls.append(("upload", sorted(p.name for p in Path(folder_path).iterdir()),
                          repo_id))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    out = tmp_path / "rte"
    main(["--checkpoint", str(stage_one / "best"), "--task", "rte", "--out", str(out),
          "--push-to-hub", "someone/mtdnn-rte", "--private"])
    card = (out / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: transformers" in front
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in front
    logged = json.loads((stage_one / "best" / "checkpoint.json").read_text())["metrics"]
    row = next(line for line in card.splitlines() if line.startswith("| rte |"))
    assert f"accuracy {100 * logged['rte']['accuracy']:.1f}" in row
    assert "| mrpc |" not in card and "- rte: trained on" in card
    assert calls[0] == ("create", "someone/mtdnn-rte", True, True)
    assert calls[1][0] == "upload" and "README.md" in calls[1][1] and \
        "config.json" in calls[1][1] and calls[1][2] == "someone/mtdnn-rte"
    multi = tmp_path / "multi"
    main(["--checkpoint", str(stage_one / "best"), "--all-tasks", "--out", str(multi)])
    assert "library_name: mtdnn" in (multi / "README.md").read_text().split("---")[1]


@pytest.fixture(scope="module")
def ner_run(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short CoNLL-2003 run on the 2-layer packaged encoder: enough to tag some words."""
    from mtdnn.config.resolve import resolve_config
    from mtdnn.training.trainer import train
    from tests.conftest import head_jsonl

    root = tmp_path_factory.mktemp("ner")
    rows = head_jsonl(prepared_data / "conll2003/train.jsonl", root / "train.jsonl", 256)
    dev = head_jsonl(prepared_data / "conll2003/dev.jsonl", root / "dev.jsonl", 50)
    train(resolve_config(None, [
        "tasks=[conll2003]", f"tasks.conll2003.train={rows}", f"tasks.conll2003.dev={dev}",
        "encoder_layers=2", "batch_size=16", "max_steps=24", "optimizer.lr=1e-3",
        "progress_bar=false", f"cache_dir={root / 'cache'}", f"output_dir={root / 'run'}"]))
    return root


def test_the_ner_export_s_pipeline_finds_predictor_s_entities(ner_run: Path) -> None:
    """``pipeline("token-classification", aggregation_strategy="first")`` on the export and
    ``Predictor`` on the checkpoint give the same entities (type, characters, text) on 50 dev
    sentences given as texts (their words joined by spaces)."""
    from transformers import pipeline

    from mtdnn import Predictor
    from mtdnn.inference.export import export_task

    out = export_task(ner_run / "run/last", "conll2003", ner_run / "export")
    sentences = [json.loads(line)["tokens"]
                 for line in (ner_run / "dev.jsonl").read_text().splitlines()]
    texts = [" ".join(words) for words in sentences]
    ours = Predictor(ner_run / "run/last", precision="fp32").predict(texts, tasks=["conll2003"])
    tagger = pipeline("token-classification", model=str(out), aggregation_strategy="first",
                      device="cpu")
    found = 0
    for text, prediction in zip(texts, ours, strict=True):
        mine = [(e["type"], e["start_char"], e["end_char"], e["text"])
                for e in prediction["conll2003"]["entities"]]
        theirs = [(e["entity_group"], e["start"], e["end"], text[e["start"]:e["end"]])
                  for e in tagger(text)]
        assert mine == theirs, text
        found += len(mine)
    assert found >= 20  # the comparison covered entities, not only empty sentences


def test_the_span_export_answers_as_predictor_does(tmp_path: Path) -> None:
    """The export of a short SQuAD run, loaded by ``AutoModelForQuestionAnswering`` and run
    on Hugging Face's QA windows (``return_overflowing_tokens``, the same stride), decoded by
    an exhaustive search over every start and end, gives ``Predictor``'s answers (text and
    characters) to 50 questions. (transformers 5 removed the question-answering pipeline.)"""
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from mtdnn import Predictor
    from mtdnn.config.resolve import resolve_config
    from mtdnn.inference.export import export_task
    from mtdnn.training.trainer import train
    from tests.conftest import SHARED_DATA, run_module

    run_module("mtdnn.data_prep", "squad", "--raw-dir", str(SHARED_DATA),
               "--out-dir", str(tmp_path / "data"))
    rows = [json.loads(line) for line in
            (tmp_path / "data/squad/dev.jsonl").read_text().splitlines()]
    train_rows = tmp_path / "train.jsonl"
    train_rows.write_text("".join(json.dumps(r) + "\n" for r in rows[:64]))
    definition = ("{type: span_extraction, inputs: [question, context], "
                  "options: {doc_stride: 32, max_answer_length: 15, n_best: 1000}}")
    train(resolve_config(None, [
        "tasks=[qa]", f"tasks.qa.definition={definition}", f"tasks.qa.train={train_rows}",
        "encoder_layers=2", "batch_size=8", "max_steps=6", "max_seq_len=128",
        "optimizer.lr=1e-3", "eval_every_epoch=false", "progress_bar=false",
        f"cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}"]))
    out = export_task(tmp_path / "run/last", "qa", tmp_path / "export")
    questions = rows[2000:2050]
    ours = Predictor(tmp_path / "run/last", precision="fp32").predict(
        [(r["question"], r["context"]) for r in questions], tasks=["qa"])
    model = AutoModelForQuestionAnswering.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    several = 0
    for row, answer in zip(questions, ours, strict=True):
        windows = tokenizer(row["question"], row["context"], truncation="only_second",
                            max_length=128, stride=32, return_overflowing_tokens=True,
                            return_offsets_mapping=True, padding=True, return_tensors="pt")
        offsets = windows.pop("offset_mapping")
        windows.pop("overflow_to_sample_mapping")
        with torch.inference_mode():
            logits = model(**windows)
        best = None
        for w in range(len(offsets)):
            context = [i for i, part in enumerate(windows.sequence_ids(w)) if part == 1]
            for s in context:
                for e in context:
                    if s <= e < s + 15:
                        score = float(logits.start_logits[w, s] + logits.end_logits[w, e])
                        if best is None or score > best[0]:
                            best = (score, int(offsets[w, s, 0]), int(offsets[w, e, 1]))
        several += len(offsets) > 1
        _, start, end = best
        assert (answer["qa"]["answer"], answer["qa"]["start"], answer["qa"]["end"]) == \
            (row["context"][start:end], start, end), row["uid"]
    assert several >= 10  # many contexts took several windows
