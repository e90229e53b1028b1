"""Every bad-input case we check: what the user did, and what the error must say.

``tests/test_bad_input.py`` runs each case through the real CLI entry point (in process)
and asserts exit code 2, the expected words and no traceback; it also checks that
``docs/robustness.md`` holds exactly the messages the cases produce. To regenerate it:

    MTDNN_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_input.py -k doc
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROW = "0\tA man sleeps.\tA person sleeps.\tentailment\n"
GOOD_TASK = ("rte:\n  type: classification\n  labels: [entailment, not_entailment]\n"
             "  inputs: [sentence1, sentence2]\n  metrics: [accuracy]\n")
GOOD_EXAMPLE = '{"uid": "a", "sentence1": "P.", "sentence2": "H.", "label": "entailment"}\n'


@dataclass(frozen=True)
class Case:
    kind: str  # one of KINDS
    what: str
    command: str  # data_prep | train | predict | experiment | export | agreement
    setup: Callable[[Path, dict], list[str]]  # (tmp folder, context) -> argv
    expect: str
    code: int = 2  # 130 for Ctrl-C
    # Ctrl-C: a context manager that makes the command meet a KeyboardInterrupt
    interrupt: Callable[[], contextlib.AbstractContextManager] | None = None
    file_size_limit: int | None = None  # full disk: run in a process with RLIMIT_FSIZE
    allowed_new: tuple[str, ...] = ()  # folders under tmp a failed run may leave (a run dir)
    check: Callable[[Path], None] | None = None  # more assertions on what is left


KINDS = ("data file", "task definition", "run config", "CLI argument", "checkpoint",
         "data loss", "encoding", "output path", "full disk", "interrupt")


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


LATIN1 = "Caf\u00e9 au lait.".encode("latin-1")  # a byte (0xe9) that is not UTF-8
NOT_UTF8 = b"not UTF-8 text: byte 0xe9 at byte offset"


def latin1_line(text: str) -> bytes:
    """``text`` with its 'P.' replaced by a Latin-1 'Café au lait.'."""
    return text.encode().replace(b"P.", LATIN1)


def copy_checkpoint(tmp: Path, ctx: dict, name: str = "ck") -> Path:
    """A copy of the context's checkpoint, for cases that damage it."""
    target = tmp / name
    shutil.copytree(ctx["checkpoint"], target)
    return target


def damaged_checkpoint(tmp: Path, ctx: dict, damage: Callable[[Path], object]) -> Path:
    """A copy of the context's checkpoint with ``damage(copy)`` done to it."""
    checkpoint = copy_checkpoint(tmp, ctx)
    damage(checkpoint)
    return checkpoint


def truncated(relative: str, keep: int = 100) -> Callable[[Path], object]:
    return lambda ck: (ck / relative).write_bytes((ck / relative).read_bytes()[:keep])


def replaced(relative: str, content: bytes) -> Callable[[Path], object]:
    return lambda ck: (ck / relative).write_bytes(content)


def interrupt_at(target: str, calls: int = 1) -> Callable[[], contextlib.AbstractContextManager]:
    """Patch ``target`` so that its ``calls``-th call meets Ctrl-C (a KeyboardInterrupt,
    which is what Python's SIGINT handler raises)."""

    def patcher() -> contextlib.AbstractContextManager:
        module, _, name = target.rpartition(".")
        original = getattr(__import__(module, fromlist=[name]), name)
        count = {"n": 0}

        def wrapped(*args, **kwargs):
            count["n"] += 1
            if count["n"] >= calls:
                raise KeyboardInterrupt
            return original(*args, **kwargs)

        return mock.patch(target, wrapped)

    return patcher


def last_is_complete(tmp: Path) -> None:
    from mtdnn.runs.checkpoint import check_checkpoint, load_model

    check_checkpoint(tmp / "run" / "last")
    load_model(tmp / "run" / "last")


def raw_glue(tmp: Path, name: str, text: str) -> list[str]:
    write(tmp / "raw/glue" / name, text)
    return ["glue", "--raw-dir", str(tmp / "raw"), "--out-dir", str(tmp / "out")]


def raw_rte(tmp: Path, text: str) -> list[str]:
    return raw_glue(tmp, "RTE/train.tsv", text)


def train_args(tmp: Path, ctx: dict, *extra: str,
               train_text: str | bytes = GOOD_EXAMPLE * 4) -> list[str]:
    train_file = write(tmp / "train.jsonl", train_text)
    return ["tasks=[rte]", f"tasks.rte.train={train_file}", f"tasks.rte.dev={train_file}",
            f"encoder={ctx['encoder']}", f"output_dir={tmp / 'run'}", "progress_bar=false",
            f"cache_dir={tmp / 'cache'}", "max_steps=2", "batch_size=2", *extra]


SQUAD_ROW = {"uid": "q1", "question": "Where is the Eiffel Tower?",
             "context": "The Eiffel Tower is in Paris.",
             "label": [{"text": "Paris", "start": 23}]}
SQUAD_DEF = ("squad:\n  type: span_extraction\n  inputs: [question, context]\n"
             "  options: {max_answer_length: 30}\n")


def typed_train_args(tmp: Path, ctx: dict, task: str, rows: list[dict],
                     *extra: str) -> list[str]:
    """A run of packaged task ``task`` on a canonical file of ``rows``."""
    train_file = write(tmp / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    return [f"tasks=[{task}]", f"tasks.{task}.train={train_file}", f"tasks.{task}.dev={train_file}",
            f"encoder={ctx['encoder']}", f"output_dir={tmp / 'run'}", "progress_bar=false",
            f"cache_dir={tmp / 'cache'}", "max_steps=2", "batch_size=2", *extra]


def sentence(uid: str, words: list[str], tags: list[str]) -> dict:
    return {"uid": uid, "tokens": words, "label": tags}


def candidate(uid: str, group: str | None, label: str) -> dict:
    row = {"uid": uid, "question": "Who?", "sentence": f"Answer {uid}.", "label": label}
    return row if group is None else {**row, "group": group}


GOOD_SENTENCE = sentence("s0", ["Peter", "Blackburn", "spoke"], ["B-PER", "I-PER", "O"])
GOOD_GROUP = [candidate("c0", "g0", "entailment"), candidate("c1", "g0", "not_entailment")]


def raw_tagging(tmp: Path, name: str, text: str) -> list[str]:
    write(tmp / "raw" / name, text)
    return ["ner", "--raw-dir", str(tmp / "raw"), "--out-dir", str(tmp / "out")]


def task_def_args(tmp: Path, ctx: dict, text: str | bytes) -> list[str]:
    path = write(tmp / "tasks.yaml", text)
    return train_args(tmp, ctx, f"task_defs=[{path}]")


def sweep_args(tmp: Path, ctx: dict, arms: dict, **extra: object) -> list[str]:
    """An experiment over one SciTail subset (nothing trains: the error comes first)."""
    import json

    subsets = write(tmp / "data/scitail/subsets/seed13/manifest.json", json.dumps(
        {"files": {"n8": {"file": "n8.jsonl", "size": 8, "available": True}}}))
    config = {"tasks": ["scitail"], "subsets": ["n8"], "data_dir": str(subsets.parents[3]),
              "output_dir": str(tmp / "sweep"), "arms": arms, **extra}
    return ["--config", str(write(tmp / "sweep.yaml", json.dumps(config)))]


def compare_args(tmp: Path, ctx: dict, arms: dict) -> list[str]:
    """An experiment of multi-task runs (no tasks: each run trains train.tasks)."""
    import json

    config = {"output_dir": str(tmp / "cmp"), "train": {"tasks": ["rte"]}, "arms": arms}
    return ["--config", str(write(tmp / "compare.yaml", json.dumps(config)))]


def predict_args(tmp: Path, ctx: dict, *extra: str, task: str = "rte",
                 checkpoint: str | Path | None = None, text: str | bytes = GOOD_EXAMPLE,
                 output: str | Path | None = None) -> list[str]:
    return ["--checkpoint", str(checkpoint or ctx["checkpoint"]), "--task", task, "--input",
            str(write(tmp / "input.jsonl", text)), "--output", str(output or tmp / "out.jsonl"),
            "--no-progress", *extra]


def dataset_predict_args(tmp: Path, ctx: dict) -> list[str]:
    """Prediction on a local dataset's test split, written over its own test.csv."""
    test = write(tmp / "my_data/test.csv", "sentence1,sentence2\nA man sleeps.,A person.\n")
    return ["--checkpoint", str(ctx["checkpoint"]), "--task", "rte", "--input",
            f"{{dataset: {test.parent}, split: test}}", "--output", str(test), "--overwrite",
            "--no-progress"]


def export_args(tmp: Path, ctx: dict, out: Path | str, *extra: str,
                checkpoint: str | Path | None = None) -> list[str]:
    return ["--checkpoint", str(checkpoint or ctx["checkpoint"]), "--task", "rte", "--out",
            str(out), *extra]


def raw_snli(tmp: Path, text: bytes) -> list[str]:
    write(tmp / "raw/snli/snli_1.0_dev.jsonl", text)
    return ["snli", "--raw-dir", str(tmp / "raw"), "--out-dir", str(tmp / "out")]


def subsets_args(tmp: Path, *extra: str, text: str | bytes = GOOD_EXAMPLE * 4) -> list[str]:
    write(tmp / "data/rte/train.jsonl", text)
    return ["subsets", "--data-dir", str(tmp / "data"), "--task", "rte", *extra]


def sweep_cell_result(tmp: Path, ctx: dict, text: str) -> list[str]:
    """An experiment whose one finished run's result.json holds ``text``."""
    argv = sweep_args(tmp, ctx, {"plain": None})
    write(tmp / "sweep/plain/scitail/n8/seed13/result.json", text)
    return argv


# -- issue 48: users' own files, the newer commands -------------------------------------------

NLI_CHAOS = json.dumps({"uid": "c1", "label_dist": [0.3, 0.7, 0.0],
                        "example": {"premise": "A.", "hypothesis": "B."},
                        "old_labels": ["neutral"] * 3 + ["entailment"] * 2}) + "\n"
NLI_DEV = json.dumps({"uid": "d1", "premise": "A.", "hypothesis": "B.",
                      "label": "neutral"}) + "\n"
NLI_PREDICTION = json.dumps({"uid": "d1", "prediction": "neutral", "probabilities": {
    "entailment": 0.2, "neutral": 0.7, "contradiction": 0.1}}) + "\n"


def source_args(tmp: Path, ctx: dict, source: str | Path, *extra: str) -> list[str]:
    """A training run on the user's own ``source`` (a good JSONL dev file)."""
    dev = write(tmp / "dev.jsonl", GOOD_EXAMPLE * 4)
    return ["tasks=[rte]", f"tasks.rte.train={source}", f"tasks.rte.dev={dev}",
            f"encoder={ctx['encoder']}", f"output_dir={tmp / 'run'}", "progress_bar=false",
            f"cache_dir={tmp / 'cache'}", "max_steps=2", "batch_size=2", *extra]


def csv_args(tmp: Path, ctx: dict, text: str | bytes, *extra: str,
             name: str = "mine.csv") -> list[str]:
    return source_args(tmp, ctx, write(tmp / name, text), *extra)


def parquet_file(path: Path, columns: dict[str, list]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def parquet_args(tmp: Path, ctx: dict, columns: dict[str, list], *extra: str) -> list[str]:
    return source_args(tmp, ctx, parquet_file(tmp / "mine.parquet", columns), *extra)


def truncated_parquet_args(tmp: Path, ctx: dict) -> list[str]:
    path = parquet_file(tmp / "mine.parquet", {"sentence1": ["A."] * 50,
                                               "sentence2": ["B."] * 50,
                                               "label": ["entailment"] * 50})
    path.write_bytes(path.read_bytes()[:-40])
    return source_args(tmp, ctx, path)


def class_label_folder(tmp: Path, names: list[str]) -> Path:
    import datasets

    features = datasets.Features({"sentence1": datasets.Value("string"),
                                  "sentence2": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=names)})
    folder = tmp / "my_dataset"
    folder.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict({"sentence1": ["A.", "C."], "sentence2": ["B.", "D."],
                                "label": [0, 1]}, features=features).to_parquet(
        str(folder / "train.parquet"))
    return folder


def mixed_header_folder(tmp: Path) -> Path:
    folder = tmp / "my_dataset"
    write(folder / "train-00000-of-00002.csv", "sentence1,sentence2,label\nA.,B.,entailment\n")
    write(folder / "train-00001-of-00002.csv", "text,label\nA.,entailment\n")
    return folder


def unlabelled_row_folder(tmp: Path) -> Path:
    return write(tmp / "ds/train.csv",
                 "sentence1,sentence2,label\nA.,B.,entailment\nC.,D.,\n").parent


def agreement_args(tmp: Path, *, chaos: str = NLI_CHAOS, dev: str = NLI_DEV,
                   predictions: str = NLI_PREDICTION, out: str | None = None,
                   extra: tuple[str, ...] = ()) -> list[str]:
    preds = write(tmp / "model.json", predictions)
    return ["report", "--chaosnli", str(write(tmp / "chaos.jsonl", chaos)),
            "--dev", str(write(tmp / "dev.jsonl", dev)), "--predictions", f"model={preds}",
            "--out", str(out or tmp / "report"), *extra]


def earlier_report(tmp: Path, ctx: dict) -> list[str]:
    write(tmp / "report.md", "an earlier report\n")
    return agreement_args(tmp)


def sweep_missing_train(tmp: Path, ctx: dict) -> list[str]:
    """An experiment whose full train file is missing: it must fail before making folders."""
    config = {"tasks": ["rte"], "data_dir": str(tmp / "data"),
              "task_files": {"rte": {"train": str(tmp / "data/rte/mine.jsonl"),
                                     "dev": str(write(tmp / "data/rte/dev.jsonl",
                                                      GOOD_EXAMPLE))}},
              "output_dir": str(tmp / "sweep"), "arms": {"plain": None}}
    return ["--config", str(write(tmp / "sweep.yaml", json.dumps(config)))]


def export_all_args(tmp: Path, ctx: dict, damage: Callable[[Path], object]) -> list[str]:
    return ["--checkpoint", str(damaged_checkpoint(tmp, ctx, damage)), "--all-tasks",
            "--out", str(tmp / "hf")]



CASES = [
    Case("data file", "GLUE row with a missing field", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW + "1\tonly two\tentailment\n"),
         "train.tsv:3: found 3 tab-separated fields, expected 4"),
    Case("data file", "label outside the task's labels", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW + "1\tA.\tB.\tmaybe\n"),
         "train.tsv:3: task 'rte': label 'maybe' is not one of the task's labels"),
    Case("data file", "empty text", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW + "1\t \tB.\tentailment\n"),
         "train.tsv:3: task 'rte': field 'sentence1' is missing or empty"),
    Case("data file", "non-numeric regression score", "data_prep",
         lambda t, c: raw_glue(t, "STS-B/train.tsv",
                               "index\tsentence1\tsentence2\tscore\n0\tA.\tB.\thigh\n"),
         "train.tsv:2: task 'stsb': regression score 'high' is not a number"),
    Case("data file", "GLUE file without a needed column", "data_prep",
         lambda t, c: raw_rte(t, "index\tsentence1\tlabel\n0\tP.\tentailment\n"),
         "train.tsv:1: missing column 'sentence2'"),
    Case("data file", "raw data folder does not exist", "data_prep",
         lambda t, c: ["all", "--raw-dir", str(t / "nowhere")], "raw data folder not found"),
    Case("data file", "training file is not JSON lines", "train",
         lambda t, c: train_args(t, c, train_text=GOOD_EXAMPLE + "{oops\n"),
         "train.jsonl:2: invalid JSON"),
    Case("data file", "empty training file", "train",
         lambda t, c: train_args(t, c, train_text=""), "task 'rte': the file has no examples"),
    Case("data file", "training example without a label", "train",
         lambda t, c: train_args(t, c, train_text=GOOD_EXAMPLE.replace(
             ', "label": "entailment"', "")), "train.jsonl:1: task 'rte': example has no label"),
    Case("data file", "training file not found", "train",
         lambda t, c: train_args(t, c, "tasks.rte.train=/nonexistent/train.jsonl"),
         "/nonexistent/train.jsonl: task 'rte': data file not found"),
    Case("data file", "words and tags of different lengths", "train",
         lambda t, c: typed_train_args(t, c, "conll2003", [
             GOOD_SENTENCE, sentence("s1", ["A", "b"], ["O"])]),
         "train.jsonl:2: task 'conll2003': 2 words but 1 tags"),
    Case("data file", "a tag outside the task's tags", "train",
         lambda t, c: typed_train_args(t, c, "conll2003", [
             GOOD_SENTENCE, sentence("s1", ["Paris"], ["B-CITY"])]),
         "train.jsonl:2: task 'conll2003': tag 'B-CITY' at word 1 is not one of the task's tags"),
    Case("data file", "an empty sentence", "train",
         lambda t, c: typed_train_args(t, c, "conll2003", [GOOD_SENTENCE, sentence("s1", [], [])]),
         "train.jsonl:2: task 'conll2003': the sentence has no words"),
    Case("data file", "an I- tag that IOB2 does not allow (an error: data_prep converts IOB1 "
         "files, canonical rows must be IOB2)", "train",
         lambda t, c: typed_train_args(t, c, "conll2003", [
             GOOD_SENTENCE, sentence("s1", ["in", "Paris"], ["O", "I-LOC"])]),
         "train.jsonl:2: task 'conll2003': tag 'I-LOC' at word 2 continues an entity, but it "
         "follows 'O'"),
    Case("data file", "a WNUT-17 tag that IOB2 does not allow", "data_prep",
         lambda t, c: raw_tagging(t, "wnut17/wnut17train.conll",
                                  "I\tO\nsaw\tO\nParis\tI-location\n\n"),
         "wnut17train.conll:3: task 'wnut17': tag 'I-location' at word 3 continues an entity, "
         "but it follows 'O'"),
    Case("data file", "a CoNLL-2003 tag outside the task's tags", "data_prep",
         lambda t, c: raw_tagging(t, "conll2003/eng.train", "-DOCSTART- -X- O O\n\n"
                                  "EU NNP I-NP I-ORG\nrules VBZ I-VP I-VERB\n"),
         "eng.train:4: task 'conll2003': tag 'I-VERB' is not one of the task's tags"),
    Case("data file", "a CoNLL-2003 line without its four columns", "data_prep",
         lambda t, c: raw_tagging(t, "conll2003/eng.train", "EU NNP I-NP I-ORG\nrules\n"),
         "eng.train:2: expected 4 columns, found 1"),
    Case("data file", "a ranking group with no positive", "train",
         lambda t, c: typed_train_args(t, c, "qnli_ranking", [
             *GOOD_GROUP, candidate("c2", "g1", "not_entailment"),
             candidate("c3", "g1", "not_entailment")]),
         "train.jsonl:3: task 'qnli_ranking': group 'g1' has no positive ('entailment'); this "
         "is its first row"),
    Case("data file", "a ranking group with two positives", "train",
         lambda t, c: typed_train_args(t, c, "qnli_ranking", [
             *GOOD_GROUP, candidate("c2", "g0", "entailment")]),
         "train.jsonl:3: task 'qnli_ranking': group 'g0' has a second positive ('entailment') "
         "here"),
    Case("data file", "a ranking row without its group key", "train",
         lambda t, c: typed_train_args(t, c, "qnli_ranking", [
             *GOOD_GROUP, candidate("c2", None, "entailment")]),
         "train.jsonl:3: task 'qnli_ranking': the row has no 'group' key"),
    Case("data file", "an answer outside its context", "train",
         lambda t, c: typed_train_args(t, c, "squad", [
             {**SQUAD_ROW, "uid": "q2", "label": [{"text": "Paris", "start": 40}]}]),
         "train.jsonl:1: task 'squad': question 'q2': answer 'Paris' does not start at "
         "character 40 of its context"),
    Case("data file", "an empty question", "train",
         lambda t, c: typed_train_args(t, c, "squad", [SQUAD_ROW, {**SQUAD_ROW, "uid": "q3",
                                                                   "question": "  "}]),
         "train.jsonl:2: task 'squad': question 'q3': field 'question' is missing or empty"),
    Case("run config", "a span task whose windows cannot hold its context "
         "(doc_stride >= max_seq_len)", "train",
         lambda t, c: typed_train_args(t, c, "squad", [SQUAD_ROW], "max_seq_len=64"),
         "train.jsonl: key 'squad.options.doc_stride': task 'squad': cannot cut the contexts "
         "into windows of 64 tokens overlapping by 64"),
    Case("task definition", "a span task's max_answer_length of 0", "train",
         lambda t, c: task_def_args(t, c, SQUAD_DEF.replace("30", "0")),
         "key 'squad.options.max_answer_length': task 'squad': options.max_answer_length is 0"),
    Case("task definition", "unknown key", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK + "  labelz: [a, b]\n"),
         "key 'rte.labelz': unknown key 'labelz'"),
    Case("task definition", "unknown metric", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.replace("[accuracy]", "[bleu]")),
         "key 'rte.metrics': task 'rte': unknown metric 'bleu'"),
    Case("task definition", "metric that does not fit the task type", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.replace("[accuracy]", "[pearson]")),
         "metric 'pearson' does not fit a classification task"),
    Case("task definition", "duplicate labels", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.replace("not_entailment]", "entailment]")),
         "key 'rte.labels': task 'rte': duplicate label 'entailment'"),
    Case("task definition", "regression task with labels", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.replace("classification", "regression")
                                    .replace("[accuracy]", "[pearson]")),
         "key 'rte.labels': task 'rte': a regression task has no labels"),
    Case("task definition", "YAML syntax error", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK + "  metrics: [accuracy\n"),
         "tasks.yaml:7: invalid YAML"),
    Case("run config", "unknown key", "train",
         lambda t, c: train_args(t, c, "learning_rate=1e-5"),
         "key 'learning_rate': unknown key 'learning_rate'"),
    Case("run config", "wrong type", "train", lambda t, c: train_args(t, c, "epochs=two"),
         "key 'epochs': found 'two' (str), expected an integer"),
    Case("run config", "value out of range", "train",
         lambda t, c: train_args(t, c, "smart.adv_weight=20"),
         "key 'smart.adv_weight': value 20.0 is out of range (allowed: 0 (off) or 1 <= "
         "lambda_s <= 5)"),
    Case("run config", "unknown task", "train", lambda t, c: train_args(t, c, "tasks=[qqp]"),
         "key 'tasks': unknown task 'qqp'"),
    Case("run config", "best metric the run does not have", "train",
         lambda t, c: train_args(t, c, "best_metric=rte/f1"),
         "key 'best_metric': no dev metric 'rte/f1' (allowed: mean, rte/accuracy)"),
    Case("run config", "encoder name that is not local while offline", "train",
         lambda t, c: train_args(t, c, "encoder=no-such-org/no-such-model"),
         "key 'encoder': cannot load encoder 'no-such-org/no-such-model'"),
    Case("run config", "output folder already holds a run", "train",
         lambda t, c: train_args(t, c, f"output_dir={c['run']}"),
         "the output folder already holds a run"),
    Case("run config", "a loss that becomes NaN", "train",
         lambda t, c: train_args(t, c, "optimizer.lr=1e30", "max_steps=6",
                                 "optimizer.max_grad_norm=1e30"),
         "the loss of task 'rte' is", allowed_new=("run",)),
    Case("CLI argument", "override that is not key=value", "train",
         lambda t, c: train_args(t, c, "epochs"), "override 'epochs' is not key=value"),
    Case("CLI argument", "subset percent out of range", "data_prep",
         lambda t, c: ["subsets", "--data-dir", c["data"], "--task", "rte", "--percent", "150"],
         "key '--percent': percent 150 is out of range (allowed: numbers in (0, 100])"),
    Case("CLI argument", "subsets of a task with no prepared file", "data_prep",
         lambda t, c: ["subsets", "--data-dir", str(t), "--task", "rte", "--count", "5"],
         "no prepared train file for task 'rte'"),
    Case("CLI argument", "predict input without the task's fields", "predict",
         lambda t, c: predict_args(t, c, text='{"uid": "a", "premise": "P."}\n'),
         "input.jsonl:1: task 'rte': field 'sentence1' is missing or empty"),
    Case("CLI argument", "a raw GLUE test.tsv as a GLUE submission without its index column",
         "predict",
         lambda t, c: ["--checkpoint", c["checkpoint"], "--task", "rte", "--input",
                       str(write(t / "test.tsv", "index\tsentence1\tsentence2\n"
                                                 "0\tA man sleeps.\tA person sleeps.\n")),
                       "--output", str(t / "rte.tsv"), "--format", "glue", "--no-progress"],
         "test.tsv:2: uid 'row2' does not end in a GLUE index (allowed: uids written by "
         "data_prep (e.g. rte-test-17), or a GLUE test.tsv read with --columns '{uid: "
         "index}')"),
    Case("CLI argument", "predict input with a label the checkpoint does not know", "predict",
         lambda t, c: predict_args(t, c, text=GOOD_EXAMPLE.replace("entailment", "maybe")),
         "input.jsonl:1: task 'rte': label 'maybe' is not one of the task's labels"),
    Case("run config", "experiment arm with an unknown training key", "experiment",
         lambda t, c: sweep_args(t, c, {"smart": {"train": {"smart": {"enabeld": True}}}}),
         "sweep.yaml (train + arms.smart.train): key 'smart.enabeld': unknown key"),
    Case("run config", "experiment arm whose checkpoint does not exist", "experiment",
         lambda t, c: sweep_args(t, c, {"mt": str(t / "nope")}),
         "key 'arms.mt.init': arm 'mt' starts from a checkpoint that is not there"),
    Case("run config", "experiment arm from a stage that is not declared", "experiment",
         lambda t, c: sweep_args(t, c, {"mt": "stage:mt-dnn"}),
         "key 'arms.mt.init': arm 'mt' starts from unknown stage 'mt-dnn'"),
    Case("run config", "Trainer-backend arm with a key it would ignore", "experiment",
         lambda t, c: sweep_args(t, c, {"hf": {"backend": "hf_trainer",
                                               "train": {"smart": {"enabled": True}}}}),
         "key 'arms.hf.train': the hf_trainer backend does not read 'smart.enabled'"),
    Case("run config", "experiment baseline that is not an arm", "experiment",
         lambda t, c: sweep_args(t, c, {"plain": None}, baseline="plian"),
         "key 'baseline': baseline 'plian' is not an arm (allowed: plain)"),
    Case("run config", "finished-run record in an older runner's format", "experiment",
         lambda t, c: sweep_cell_result(t, c, '{"start_point": "plain", "metrics": '
                                              '{"accuracy": 0.5}}'),
         "result.json: a result record in an older format"),
    Case("run config", "comparison file that is a list, not a mapping", "experiment",
         lambda t, c: ["--config", str(write(t / "compare.yaml", "- plain\n- smart\n"))],
         "compare.yaml: expected a mapping of config keys, found list"),
    Case("run config", "comparison arm with a value not allowed", "experiment",
         lambda t, c: compare_args(t, c, {"plain": {},
                                          "odd": {"train": {"sampler": {"kind": "rr"}}}}),
         "(train + arms.odd.train): key 'sampler.kind': unknown value 'rr' "
         "(allowed: proportional,"),
    Case("checkpoint", "export of a task the checkpoint does not have", "export",
         lambda t, c: ["--checkpoint", c["checkpoint"], "--task", "cola", "--out",
                       str(t / "exported")],
         "key '--task': task 'cola' is not in this checkpoint (allowed: rte)"),
    Case("checkpoint", "checkpoint of another task set passed to predict.py", "predict",
         lambda t, c: predict_args(t, c, task="scitail"),
         "key '--task': task 'scitail' is not in this checkpoint (allowed: rte)"),
    Case("checkpoint", "checkpoint folder that does not exist", "predict",
         lambda t, c: predict_args(t, c, checkpoint=str(t / "nope")),
         "checkpoint folder not found"),
    Case("checkpoint", "incomplete checkpoint folder", "predict",
         lambda t, c: predict_args(t, c, checkpoint=str(write(t / "ck/checkpoint.json", "{}")
                                                        .parent)),
         "not a complete checkpoint: encoder, heads.safetensors, task_defs.yaml, config.yaml "
         "missing"),
    Case("checkpoint", "init_checkpoint that is not a checkpoint", "train",
         lambda t, c: train_args(t, c, f"init_checkpoint={t}"), "not a complete checkpoint"),
    Case("checkpoint", "resume with a different config", "train",
         lambda t, c: train_args(t, c, f"output_dir={c['run']}", f"resume={c['run']}",
                                 "optimizer.lr=1e-3"),
         "the run to resume has"),
    Case("checkpoint", "resume from a checkpoint without resume state", "train",
         lambda t, c: train_args(t, c, f"resume={c['checkpoint']}"),
         "the checkpoint has no training_state.pt to resume from"),
    # -- data loss: never overwrite an input or what the command did not create ----------
    Case("data loss", "export over the checkpoint it reads", "export",
         lambda t, c: export_args(t, c, copy_checkpoint(t, c), checkpoint=t / "ck"),
         "key '--out': the output would overwrite an input"),
    Case("data loss", "export into a folder holding other files", "export",
         lambda t, c: export_args(t, c, write(t / "mine/notes.txt", "keep me").parent),
         "key '--out': the output folder already exists (allowed: a new path, or --overwrite"),
    Case("data loss", "export into the run folder around the checkpoint", "export",
         lambda t, c: export_args(t, c, t / "run2", checkpoint=copy_checkpoint(t, c, "run2/best")),
         "key '--out': the output would overwrite an input"),
    Case("data loss", "export --overwrite still never replaces the checkpoint", "export",
         lambda t, c: export_args(t, c, copy_checkpoint(t, c), "--overwrite",
                                  checkpoint=t / "ck"),
         "key '--out': the output would overwrite an input"),
    Case("data loss", "predict with --output equal to --input", "predict",
         lambda t, c: predict_args(t, c, output=t / "input.jsonl"),
         "key '--output': the output would overwrite an input"),
    Case("data loss", "predict --overwrite into a local dataset's own files", "predict",
         lambda t, c: dataset_predict_args(t, c), "key '--output': the output would "
         "overwrite an input"),
    Case("run config", "dropping a task the run does not have", "train",
         lambda t, c: train_args(t, c, "tasks.rtee=null"),
         "key 'tasks.rtee': tasks.rtee=null drops a task the run does not have (did you mean "
         "'rte'?)"),
    Case("data loss", "predict over a file it did not write", "predict",
         lambda t, c: predict_args(t, c, output=write(t / "mine.jsonl", "keep me\n")),
         "key '--output': the output file already exists (allowed: a new path, or --overwrite"),
    Case("data loss", "predict --output inside the checkpoint", "predict",
         lambda t, c: predict_args(t, c, "--overwrite", checkpoint=copy_checkpoint(t, c),
                                   output=t / "ck" / "config.yaml"),
         "key '--output': the output would overwrite an input"),
    Case("data loss", "predict whose metrics file would replace an existing file", "predict",
         lambda t, c: [*predict_args(t, c, output=t / "p.jsonl"),
                       *([] if write(t / "p.jsonl.metrics.json", "{}") else [])],
         "p.jsonl.metrics.json: key '--output': the output file already exists"),
    Case("data loss", "overwrite=true over the run that holds init_checkpoint", "train",
         lambda t, c: train_args(t, c, f"output_dir={copy_checkpoint(t, c, 'old/best').parent}",
                                 f"init_checkpoint={t / 'old' / 'best'}", "overwrite=true"),
         "key 'init_checkpoint': overwrite=true would delete init_checkpoint"),
    Case("data loss", "output_dir holding a config.yaml of the user's", "train",
         lambda t, c: train_args(t, c, "output_dir=" + str(write(t / "mine/config.yaml",
                                                                  "a: 1").parent)),
         "key 'output_dir': the output folder already holds a run"),
    Case("data loss", "data_prep --out-dir equal to --raw-dir", "data_prep",
         lambda t, c: [*raw_rte(t, RTE_HEADER + RTE_ROW)[:3], "--out-dir", str(t / "raw")],
         "key '--out-dir': the output folder is the raw data folder"),
    # -- encoding: every file we read names the file and line of a byte that is not UTF-8 --
    Case("encoding", "training JSONL with a Latin-1 byte", "train",
         lambda t, c: train_args(t, c, train_text=GOOD_EXAMPLE.encode() +
                                 latin1_line(GOOD_EXAMPLE)),
         "train.jsonl:2: not UTF-8 text: byte 0xe9 at byte offset"),
    Case("encoding", "dev JSONL with a Latin-1 byte", "train",
         lambda t, c: train_args(t, c, "tasks.rte.dev=" + str(write(
             t / "dev.jsonl", latin1_line(GOOD_EXAMPLE)))),
         "dev.jsonl:1: not UTF-8 text: byte 0xe9 at byte offset"),
    Case("encoding", "UTF-16 training file (a spreadsheet export)", "train",
         lambda t, c: train_args(t, c, train_text=GOOD_EXAMPLE.encode("utf-16")),
         "train.jsonl: the file is UTF-16 text, not UTF-8"),
    Case("encoding", "task definition YAML with a Latin-1 byte", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.encode() + b"  description: " + LATIN1),
         "tasks.yaml:6: not UTF-8 text: byte 0xe9 at byte offset"),
    Case("encoding", "run config YAML with a Latin-1 byte", "train",
         lambda t, c: ["--config", str(write(t / "run.yaml", b"tasks: [rte]\n# " + LATIN1)),
                       *train_args(t, c)],
         "run.yaml:2: not UTF-8 text: byte 0xe9 at byte offset"),
    Case("encoding", "GLUE tsv with a Latin-1 byte", "data_prep",
         lambda t, c: raw_rte(t, (RTE_HEADER + RTE_ROW).encode() + b"1\t" + LATIN1 +
                              b"\tB.\tentailment\n"),
         "train.tsv:3: not UTF-8 text: byte 0xe9 at byte offset"),
    Case("encoding", "SNLI jsonl with a Latin-1 byte", "data_prep",
         lambda t, c: raw_snli(t, b'{"gold_label": "entailment", "sentence1": "' + LATIN1 +
                               b'", "sentence2": "H."}\n'),
         "snli_1.0_dev.jsonl:1: not UTF-8 text: byte 0xe9 at byte offset 46"),
    Case("encoding", "SciTail tsv with a Latin-1 byte", "data_prep",
         lambda t, c: [*([] if write(t / "raw/scitail/tsv_format/scitail_1.0_dev.tsv",
                                     b"P.\tH.\tentails\n" + LATIN1 + b"\tH.\tneutral\n")
                          else []), "scitail", "--raw-dir", str(t / "raw"), "--out-dir",
                       str(t / "out")],
         "scitail_1.0_dev.tsv:2: not UTF-8 text: byte 0xe9 at byte offset 17"),
    Case("encoding", "predict input with a Latin-1 byte", "predict",
         lambda t, c: predict_args(t, c, text=latin1_line(GOOD_EXAMPLE)),
         "input.jsonl:1: not UTF-8 text: byte 0xe9 at byte offset"),
    Case("encoding", "experiment config with a Latin-1 byte", "experiment",
         lambda t, c: ["--config", str(write(t / "sweep.yaml", b"seeds: [13]\n# " + LATIN1))],
         "sweep.yaml:2: not UTF-8 text"),
    Case("encoding", "comparison config with a Latin-1 byte", "experiment",
         lambda t, c: ["--config", str(write(t / "compare.yaml", b"seeds: [13]\n# " + LATIN1))],
         "compare.yaml:2: not UTF-8 text"),
    Case("encoding", "subsets manifest with a Latin-1 byte", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}),
                       *([] if write(t / "data/scitail/subsets/seed13/manifest.json",
                                     b'{"files": "' + LATIN1 + b'"}') else [])],
         "manifest.json:1: not UTF-8 text: byte 0xe9 at byte offset 14"),
    Case("encoding", "checkpoint config.yaml with a Latin-1 byte", "predict",
         lambda t, c: predict_args(t, c, checkpoint=damaged_checkpoint(
             t, c, replaced("config.yaml", b"seed: 13\n# " + LATIN1))),
         "config.yaml:2: not UTF-8 text"),
    Case("encoding", "checkpoint task_defs.yaml with a Latin-1 byte", "predict",
         lambda t, c: predict_args(t, c, checkpoint=damaged_checkpoint(
             t, c, replaced("task_defs.yaml", b"# " + LATIN1))),
         "task_defs.yaml:1: not UTF-8 text"),
    Case("encoding", "subsets source file with a Latin-1 byte", "data_prep",
         lambda t, c: subsets_args(t, "--count", "1", text=latin1_line(GOOD_EXAMPLE)),
         "train.jsonl:1: not UTF-8 text: byte 0xe9 at byte offset"),
    # -- output path: a file in the way, a folder where a file goes -------------------------
    Case("output path", "output_dir that is a file", "train",
         lambda t, c: train_args(t, c, f"output_dir={write(t / 'afile', 'x')}"),
         "afile: key 'output_dir': the output folder is a file"),
    Case("output path", "output_dir that runs through a file", "train",
         lambda t, c: train_args(t, c, f"output_dir={write(t / 'afile', 'x')}/run"),
         "cannot write here: " ),
    Case("output path", "cache_dir that is a file", "train",
         lambda t, c: train_args(t, c, f"cache_dir={write(t / 'afile', 'x')}"),
         "is a file, not a folder"),
    Case("output path", "predict --output that is a folder", "predict",
         lambda t, c: predict_args(t, c, output=(t / "adir").mkdir() or t / "adir"),
         "adir: key '--output': the output is a folder"),
    Case("output path", "predict --output through a file", "predict",
         lambda t, c: predict_args(t, c, output=write(t / "afile", "x") / "out.jsonl"),
         "afile is a file, not a folder"),
    Case("output path", "export --out that is a file", "export",
         lambda t, c: export_args(t, c, write(t / "afile", "x"), "--overwrite"),
         "afile: key '--out': the output folder is a file"),
    Case("output path", "export --out through a file", "export",
         lambda t, c: export_args(t, c, write(t / "afile", "x") / "hf"),
         "afile is a file, not a folder"),
    Case("output path", "data_prep --out-dir that is a file", "data_prep",
         lambda t, c: [*raw_rte(t, RTE_HEADER + RTE_ROW)[:3], "--out-dir",
                       str(write(t / "afile", "x"))],
         "afile is a file, not a folder"),
    Case("output path", "subsets --out-dir that is a file", "data_prep",
         lambda t, c: subsets_args(t, "--count", "1", "--out-dir", str(write(t / "afile", "x"))),
         "afile is a file, not a folder"),
    Case("output path", "experiment output_dir that is a file", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), f"output_dir={write(t / 'afile', 'x')}"],
         "afile: key 'output_dir': the output folder is a file"),
    Case("output path", "comparison output_dir that is a file", "experiment",
         lambda t, c: [*compare_args(t, c, {"plain": {}}), f"output_dir={write(t / 'afile', 'x')}"],
         "afile: key 'output_dir': the output folder is a file"),
    # -- full disk: a file-size limit (RLIMIT_FSIZE) makes every write past it fail (EFBIG) --
    Case("full disk", "predictions that do not fit", "predict",
         lambda t, c: predict_args(t, c, text=GOOD_EXAMPLE * 50), file_size_limit=2_000,
         expect="out.jsonl: cannot write: the disk is full"),
    Case("full disk", "canonical files that do not fit", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + "".join(RTE_ROW.replace("0", str(i), 1)
                                                      for i in range(200))),
         file_size_limit=2_000,
         expect="out: cannot write: the disk is full"),
    Case("full disk", "a checkpoint that does not fit", "train",
         lambda t, c: train_args(t, c), file_size_limit=200_000, allowed_new=("run",),
         expect="last: cannot write: the disk is full"),
    Case("full disk", "an export that does not fit", "export",
         lambda t, c: export_args(t, c, t / "hf"), file_size_limit=200_000,
         expect="hf: cannot write: the disk is full"),
    # -- config values the schema must refuse before they fail deep inside -----------------
    Case("run config", "adam_betas of the wrong length", "train",
         lambda t, c: train_args(t, c, "optimizer.adam_betas=[0.9]"),
         "key 'optimizer.adam_betas': value (0.9,) is out of range (allowed: two numbers in "
         "[0, 1)"),
    Case("run config", "adam_betas outside [0, 1)", "train",
         lambda t, c: train_args(t, c, "optimizer.adam_betas=[0.9, 1.5]"),
         "key 'optimizer.adam_betas': value (0.9, 1.5) is out of range"),
    Case("run config", "negative seed", "train", lambda t, c: train_args(t, c, "seed=-1"),
         "key 'seed': value -1 is out of range (allowed: a whole number in [0, 2**32))"),
    Case("run config", "negative weight decay", "train",
         lambda t, c: train_args(t, c, "optimizer.weight_decay=-0.01"),
         "key 'optimizer.weight_decay': value -0.01 is out of range"),
    Case("run config", "zero adam_eps", "train",
         lambda t, c: train_args(t, c, "optimizer.adam_eps=0"),
         "key 'optimizer.adam_eps': value 0.0 is out of range"),
    Case("run config", "max_seq_len beyond the encoder's position embeddings", "train",
         lambda t, c: train_args(t, c, "max_seq_len=512"),
         "key 'max_seq_len': max_seq_len 512 is longer than the encoder's 128 position "
         "embeddings"),
    Case("run config", "gradient surgery with gradient accumulation", "train",
         lambda t, c: train_args(t, c, "pcgrad=true", "optimizer.grad_accum_steps=2"),
         "key 'pcgrad': pcgrad projects each step's task gradients; it cannot be combined "
         "with gradient accumulation"),
    Case("run config", "max_seq_len too short to truncate to", "train",
         lambda t, c: train_args(t, c, "max_seq_len=3"),
         "key 'max_seq_len': max_seq_len 3 leaves no room for task 'rte''s text"),
    Case("run config", "encoder_layers beyond the encoder's layers", "train",
         lambda t, c: train_args(t, c, "encoder_layers=5"),
         "key 'encoder_layers': encoder_layers=5, but"),
    Case("run config", "tasks=rte without brackets", "train",
         lambda t, c: train_args(t, c)[1:3] + ["tasks=rte"] + train_args(t, c)[3:],
         "key 'tasks': found the single name 'rte', expected a list (allowed: a list, even of "
         "one task: tasks=[rte]"),
    Case("run config", "misspelt key", "train",
         lambda t, c: train_args(t, c, "optimizer.lrr=1e-5"),
         "unknown key 'lrr' (did you mean 'lr'?)"),
    Case("run config", "misspelt task", "train", lambda t, c: train_args(t, c, "tasks=[rtee]"),
         "unknown task 'rtee' (did you mean 'rte'?)"),
    Case("run config", "misspelt value", "train",
         lambda t, c: train_args(t, c, "precision=bfloat16"),
         "unknown value 'bfloat16' (did you mean 'bf16'?)"),
    Case("run config", "experiment whose train: is a list", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), "train=[epochs, 3]"],
         "key 'train': found ['epochs', 3] (list), expected a mapping of training keys"),
    Case("run config", "experiment with a truncated subsets manifest", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}),
                       *([] if write(t / "data/scitail/subsets/seed13/manifest.json",
                                     '{"files": {"n8": {"fi') else [])],
         "manifest.json:1: invalid JSON"),
    Case("run config", "experiment with a truncated finished-run record", "experiment",
         lambda t, c: sweep_cell_result(t, c, '{"start_point": "pla'),
         "seed13/result.json:1: invalid JSON"),
    Case("CLI argument", "experiment with --jobs 0", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), "--jobs", "0"],
         "key '--jobs': --jobs 0: a job count and a thread count are at least 1"),
    Case("run config", "misspelt experiment key", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), "seed=[13]"],
         "unknown key 'seed' (did you mean 'seeds'?)"),
    Case("run config", "experiment breakdown for a task it does not run", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}),
                       "agreement={snli: {chaosnli: chaos.jsonl, rows: [dev.jsonl]}}"],
         "key 'agreement.snli': agreement names task 'snli', which the experiment does not run"),
    Case("run config", "experiment with the paper's number for a column it lacks",
         "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), "paper={plain: {scitail 2pct: 80}}"],
         "key 'paper.plain.scitail 2pct': paper.plain names column 'scitail 2pct', which the "
         "table does not have"),
    Case("run config", "comparison whose arms are a list", "experiment",
         lambda t, c: ["--config", str(write(t / "compare.yaml",
                                             "arms: [plain, smart]\ntrain: {tasks: [rte]}\n"))],
         "key 'arms': found ['plain', 'smart'] (list), expected a mapping"),
    Case("data file", "CSV train file without a column the task reads", "train",
         lambda t, c: train_args(t, c, "tasks.rte.train=" + str(write(
             t / "mine.csv", "premise,hypothesis,label\nA.,B.,entailment\n"))),
         "mine.csv:2: key 'columns.sentence1': no column 'sentence1' for task 'rte'"),
    Case("run config", "Hugging Face dataset source offline", "train",
         lambda t, c: train_args(t, c, "tasks.rte.train={dataset: glue, config: rte}"),
         "glue: key 'dataset': cannot load dataset glue/rte split train"),
    Case("CLI argument", "agreement predictions that are not NAME=FILE", "agreement",
         lambda t, c: ["report", "--chaosnli", str(write(t / "chaos.jsonl", json.dumps(
             {"example": {"premise": "A.", "hypothesis": "B."}, "old_labels": ["neutral"] * 5,
              "label_dist": [0, 1, 0]}) + "\n")), "--dev", str(write(t / "dev.jsonl", "")),
                       "--predictions", "preds.jsonl", "--out", str(t / "report")],
         "key '--predictions': 'preds.jsonl' is not NAME=FILE"),
    Case("task definition", "labels yes/no that YAML reads as booleans", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.replace("[entailment, not_entailment]",
                                                            "[yes, no]")),
         "key 'rte.labels[0]': found True (a boolean: YAML reads unquoted yes/no/on/off/true/"
         "false as booleans), expected a string (allowed: quote it"),
    Case("task definition", "misspelt key", "train",
         lambda t, c: task_def_args(t, c, GOOD_TASK.replace("labels:", "label:")),
         "unknown key 'label' (did you mean 'labels'?)"),
    # -- command-line values -------------------------------------------------------------------
    Case("CLI argument", "predict --batch-size 0", "predict",
         lambda t, c: predict_args(t, c, "--batch-size", "0"),
         "key '--batch-size': batch size 0 is not positive"),
    Case("CLI argument", "predict --batch-size -3", "predict",
         lambda t, c: predict_args(t, c, "--batch-size", "-3"),
         "key '--batch-size': batch size -3 is not positive"),
    Case("CLI argument", "subsets --percent nan", "data_prep",
         lambda t, c: subsets_args(t, "--percent", "nan"),
         "key '--percent': percent nan is out of range"),
    Case("CLI argument", "subsets --percent inf", "data_prep",
         lambda t, c: subsets_args(t, "--percent", "inf"),
         "key '--percent': percent inf is out of range"),
    Case("CLI argument", "subsets with a negative --seed", "data_prep",
         lambda t, c: subsets_args(t, "--count", "1", "--seed", "-1"),
         "key '--seed': seed -1 is negative"),
    Case("CLI argument", "subsets percent that is 0 rows", "data_prep",
         lambda t, c: subsets_args(t, "--percent", "1"),
         "key '--percent': 1% of 4 rows is 0 rows"),
    Case("CLI argument", "subsets with a negative --reference-size", "data_prep",
         lambda t, c: subsets_args(t, "--percent", "10", "--reference-size", "-10"),
         "key '--reference-size': reference size -10 is not positive"),
    Case("CLI argument", "subsets --count 0", "data_prep",
         lambda t, c: subsets_args(t, "--count", "0"), "key '--count': count 0 is not positive"),
    # -- damaged checkpoints -------------------------------------------------------------------
    Case("checkpoint", "checkpoint without its config.yaml", "predict",
         lambda t, c: predict_args(t, c, checkpoint=damaged_checkpoint(
             t, c, lambda ck: (ck / "config.yaml").unlink())),
         "not a complete checkpoint: config.yaml missing"),
    Case("checkpoint", "truncated head weights", "predict",
         lambda t, c: predict_args(t, c, checkpoint=damaged_checkpoint(
             t, c, truncated("heads.safetensors"))),
         "heads.safetensors: cannot read the head weights (a truncated or corrupt file?)"),
    Case("checkpoint", "truncated encoder weights", "predict",
         lambda t, c: predict_args(t, c, checkpoint=damaged_checkpoint(
             t, c, truncated("encoder/model.safetensors"))),
         "key 'encoder': cannot load the encoder in this folder (a truncated or corrupt file?)"),
    Case("checkpoint", "init_checkpoint with truncated head weights", "train",
         lambda t, c: train_args(t, c, "init_checkpoint=" + str(damaged_checkpoint(
             t, c, truncated("heads.safetensors")))),
         "cannot read the head weights"),
    # the starting checkpoint is read whole before an encoder loads: its heads are reported
    Case("checkpoint", "init_checkpoint with truncated head and encoder weights", "train",
         lambda t, c: train_args(t, c, "init_checkpoint=" + str(damaged_checkpoint(
             t, c, lambda ck: (truncated("heads.safetensors")(ck),
                               truncated("encoder/model.safetensors")(ck))))),
         "cannot read the head weights"),
    Case("checkpoint", "export of a checkpoint with truncated encoder weights", "export",
         lambda t, c: export_args(t, c, t / "hf", checkpoint=damaged_checkpoint(
             t, c, truncated("encoder/model.safetensors"))),
         "cannot load the encoder in this folder"),
    # -- Ctrl-C: one line, exit 130, `last` whole -------------------------------------------
    Case("interrupt", "Ctrl-C in training after two saved steps", "train",
         lambda t, c: train_args(t, c, "max_steps=4", "save_every_steps=1"),
         "the last checkpoint holds step 2: continue with mtdnn-train resume=", code=130,
         interrupt=interrupt_at("torch.nn.utils.clip_grad_norm_", calls=3),
         allowed_new=("run",), check=last_is_complete),
    Case("interrupt", "Ctrl-C in training before the first checkpoint", "train",
         lambda t, c: train_args(t, c, "max_steps=4", "save_every_steps=2"),
         "interrupted before the first checkpoint; nothing to resume", code=130,
         interrupt=interrupt_at("torch.nn.utils.clip_grad_norm_"), allowed_new=("run",)),
    Case("interrupt", "Ctrl-C in prediction", "predict", lambda t, c: predict_args(t, c),
         "out.jsonl: interrupted; no predictions were written", code=130,
         interrupt=interrupt_at("mtdnn.inference.batched.predict_heads")),
    Case("interrupt", "Ctrl-C in data preparation", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW * 3),
         "out: interrupted; the output folder is as it was", code=130,
         interrupt=interrupt_at("mtdnn.data_prep.canonical.canonical_record", calls=2)),
    # -- issue 48: users' own files -----------------------------------------------------------
    Case("data file", "dataset ClassLabel names that are not the task's labels", "train",
         lambda t, c: source_args(t, c, f"{{dataset: {class_label_folder(t, ['yes', 'no'])}, "
                                        "split: train}"),
         "label names ['yes', 'no'] are not task 'rte''s labels ['entailment', "
         "'not_entailment']"),
    Case("data file", "Parquet from datasets whose ClassLabel names differ", "train",
         lambda t, c: source_args(t, c, class_label_folder(t, ["pos", "neg"])
                                  / "train.parquet"),
         "train.parquet: key 'label': its label names ['pos', 'neg']"),
    Case("data file", "CSV label 0.5 in a classification task", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence2,label\nA.,B.,0\nC.,D.,0.5\n"),
         "mine.csv:3: key 'label': label 0.5 is not a whole number"),
    Case("data file", "Parquet float label 1.5 in a classification task", "train",
         lambda t, c: parquet_args(t, c, {"sentence1": ["A.", "C."], "sentence2": ["B.", "D."],
                                          "label": [1.0, 1.5]}),
         "mine.parquet: key 'label': row 2: label 1.5 is not a whole number"),
    Case("data file", "CSV row with more fields than the header", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence2,label\nA.,B.,entailment\n"
                                     "A, b.,C.,entailment\n"),
         "mine.csv:3: the row has 4 fields, the header 3"),
    Case("data file", "TSV row with a tab inside a text", "train",
         lambda t, c: csv_args(t, c, "sentence1\tsentence2\tlabel\nA.\tB.\tentailment\n"
                                     "A\tb.\tC.\tentailment\n", name="mine.tsv"),
         "mine.tsv:3: the row has 4 fields, the header 3 (allowed: one field per column "
         "(sentence1, sentence2, label); in a TSV, no tab inside a text)"),
    Case("data file", "CSV with a quote never closed", "train",
         lambda t, c: csv_args(t, c, 'sentence1,sentence2,label\nA.,"B. and on,entailment\n'),
         "mine.csv:2: cannot read it as CSV: unexpected end of data"),
    Case("encoding", "CSV saved in Latin-1", "train",
         lambda t, c: csv_args(t, c, b"sentence1,sentence2,label\n" + LATIN1
                               + b",B.,entailment\n"),
         "mine.csv: not UTF-8 text: byte 0xe9"),
    Case("data file", "CSV whose header names a column twice", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence1,label\nA.,B.,entailment\n"),
         "mine.csv:1: the header names column 'sentence1' twice"),
    Case("data file", "empty CSV file", "train", lambda t, c: csv_args(t, c, ""),
         "mine.csv:1: the file has no header row"),
    Case("data file", "columns.label naming a column the CSV lacks", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence2,gold\nA.,B.,entailment\n",
                               "tasks.rte.columns={label: answer}"),
         "mine.csv:2: key 'columns.label': no column 'answer' for task 'rte' field 'label' "
         "(allowed: its columns: sentence1, sentence2, gold)"),
    Case("run config", "columns mapping a field the task does not have", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence2,label\nA.,B.,entailment\n",
                               "tasks.rte.columns={premise: sentence1}"),
         "key 'columns.premise': task 'rte' has no field 'premise'"),
    Case("data file", "truncated Parquet file", "train", truncated_parquet_args,
         "mine.parquet: cannot read this Parquet file"),
    Case("data file", "dataset folder whose files have different columns", "train",
         lambda t, c: source_args(t, c, f"{{dataset: {mixed_header_folder(t)}, split: train}}"),
         "train-00001-of-00002.csv: key 'dataset': its columns ['text', 'label'] differ from "
         "those of"),
    Case("data file", "Parquet text that is a number", "train",
         lambda t, c: parquet_args(t, c, {"sentence1": ["A.", "C."], "sentence2": [7, 8],
                                          "label": ["entailment"] * 2}),
         "mine.parquet: row 1: task 'rte': field 'sentence2' holds 7 (int), not text"),
    Case("data file", "Parquet text that is null", "train",
         lambda t, c: parquet_args(t, c, {"sentence1": ["A.", None], "sentence2": ["B.", "D."],
                                          "label": ["entailment"] * 2}),
         "mine.parquet: row 2: task 'rte': field 'sentence1' is missing or empty"),
    Case("data file", "CSV label outside the task's labels names the CSV line", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence2,label\nA.,B.,entailment\n"
                                     "C.,D.,maybe\n"),
         "mine.csv:3: task 'rte': label 'maybe' is not one of the task's labels"),
    Case("data file", "CSV with an empty text names the CSV line", "train",
         lambda t, c: csv_args(t, c, "sentence1,sentence2,label\nA.,B.,entailment\n"
                                     "C.,  ,entailment\n"),
         "mine.csv:3: task 'rte': field 'sentence2' is missing or empty"),
    Case("data file", "dataset split with an unlabelled example in training", "train",
         lambda t, c: source_args(t, c, f"{{dataset: {unlabelled_row_folder(t)}, split: train}}"),
         "split train: index 1: task 'rte': example has no label"),
    Case("data file", "JSONL with a columns map and a bad label names the JSONL line",
         "train",
         lambda t, c: source_args(t, c, write(t / "mine.jsonl", GOOD_EXAMPLE.replace(
             '"sentence1"', '"premise"') + GOOD_EXAMPLE.replace('"sentence1"', '"premise"')
             .replace("entailment", "maybe")), "tasks.rte.columns={sentence1: premise}"),
         "mine.jsonl:2: task 'rte': label 'maybe' is not one of the task's labels"),
    # -- issue 48: agreement ------------------------------------------------------------------
    Case("data loss", "agreement report --out onto a predictions file", "agreement",
         lambda t, c: agreement_args(t, out=str(t / "model")),
         "model.json: key '--out': the output would overwrite an input"),
    Case("output path", "agreement report over an earlier report", "agreement",
         earlier_report, "report.md: key '--out': the output file already exists (allowed: "
                         "a new path, or --overwrite to replace it)"),
    Case("data file", "agreement on ChaosNLI's alphaNLI part", "agreement",
         lambda t, c: agreement_args(t, chaos=json.dumps(
             {"uid": "a1", "label_dist": [0.4, 0.6], "old_label": 1, "example": {
                 "obs1": "A.", "obs2": "B.", "hyp1": "C.", "hyp2": "D."}}) + "\n"),
         "chaos.jsonl:1: not a ChaosNLI SNLI/MNLI row"),
    Case("data file", "agreement --dev with raw SNLI columns", "agreement",
         lambda t, c: agreement_args(t, dev=json.dumps(
             {"pairID": "1", "sentence1": "A.", "sentence2": "B.", "gold_label": "neutral"})
             + "\n"),
         "dev.jsonl:1: key '--dev': the row has no 'uid'"),
    Case("data file", "agreement on predictions of a two-label task", "agreement",
         lambda t, c: agreement_args(t, predictions=json.dumps(
             {"uid": "d1", "prediction": "entailment", "probabilities": {
                 "entailment": 0.6, "not_entailment": 0.4}}) + "\n"),
         "model.json:1: key '--predictions': probabilities over ['entailment', "
         "'not_entailment'], not the three NLI labels"),
    Case("data file", "ChaosNLI row whose label_dist has two labels", "agreement",
         lambda t, c: agreement_args(t, chaos=NLI_CHAOS.replace("[0.3, 0.7, 0.0]",
                                                                "[0.3, 0.7]")),
         "chaos.jsonl:1: label_dist [0.3, 0.7] is not a distribution over 3 NLI labels"),
    # -- issue 48: the experiment runner ------------------------------------------------------
    Case("run config", "experiment with an empty seed list", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), "seeds=[]"],
         "key 'seeds': the seed list is empty: nothing would run"),
    Case("run config", "experiment stage with no seeds", "experiment",
         lambda t, c: [*sweep_args(t, c, {"mt": {"init": "stage:mt"}}),
                       "stages={mt: {train: {tasks: [rte]}, seeds: []}}"],
         "key 'stages.mt.seeds': stage 'mt' has no seeds"),
    Case("run config", "experiment arm with an empty seed list", "experiment",
         lambda t, c: sweep_args(t, c, {"plain": {"seeds": []}}),
         "key 'arms.plain.seeds': arm 'plain' has an empty seed list"),
    Case("data file", "experiment whose train file is missing leaves no folder", "experiment",
         sweep_missing_train, "mine.jsonl: key 'task_files.rte.train': task 'rte': train file "
                              "not found"),
    Case("output path", "experiment publish_dir equal to output_dir", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), f"publish_dir={t / 'sweep'}"],
         "key 'publish_dir': publish_dir is output_dir"),
    Case("run config", "experiment agreement block on a two-label task", "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}),
                       "agreement={scitail: {chaosnli: chaos.jsonl, rows: [dev.jsonl]}}"],
         "key 'agreement.scitail': task 'scitail' has labels ['entails', 'neutral']"),
    # -- issue 48: export --all-tasks ---------------------------------------------------------
    Case("checkpoint", "export --all-tasks with truncated head weights", "export",
         lambda t, c: export_all_args(t, c, truncated("heads.safetensors")),
         "cannot read the head weights"),
    Case("checkpoint", "export --all-tasks with a damaged checkpoint.json", "export",
         lambda t, c: export_all_args(t, c, replaced("checkpoint.json", b'{"step": 2,')),
         "checkpoint.json: cannot read it"),
    Case("checkpoint", "export --all-tasks with a checkpoint.json whose step is not a number",
         "export", lambda t, c: export_all_args(t, c, replaced("checkpoint.json",
                                                                b'{"step": "two"}')),
         "checkpoint.json: key 'step': its step is 'two', not a whole number"),
    Case("CLI argument", "experiment with --stage-seeds where no arm starts from a stage",
         "experiment",
         lambda t, c: [*sweep_args(t, c, {"plain": None}), "--stage-seeds", "13"],
         "key '--stage-seeds': --stage-seeds 13: not seeds of the stages the arms start from"),
]


def main_of(command: str) -> Callable[[list[str] | None], object]:
    """The ``main`` of a command, as its CLI runs it."""
    if command == "data_prep":
        from mtdnn.data_prep.__main__ import main
    elif command == "train":
        from mtdnn.cli import train_main as main
    elif command == "experiment":
        from mtdnn.experiment import main
    elif command == "export":
        from mtdnn.inference.export import main
    elif command == "agreement":
        from mtdnn.analysis.agreement import main
    else:
        from mtdnn.cli import predict_main as main
    return main


def snapshot(*roots: Path) -> dict[Path, str]:
    """sha256 of every file under ``roots``."""
    return {path: hashlib.sha256(path.read_bytes()).hexdigest()
            for root in roots for path in sorted(root.rglob("*")) if path.is_file()}


# A full disk, for real: the child process gets a file-size limit, so every write past it
# fails with EFBIG in whatever library makes it (Python, safetensors, torch, Arrow).
LIMITED_CHILD = """
import sys
sys.path[:0] = [{tests!r}]
from bad_input_cases import main_of
from mtdnn.commandline import run_cli
run_cli(main_of(sys.argv[1]), sys.argv[2:])
"""


def run_limited(case: Case, argv: list[str]) -> tuple[int, str]:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (case.file_size_limit, resource.RLIM_INFINITY))

    script = LIMITED_CHILD.format(tests=str(Path(__file__).resolve().parent))
    child = subprocess.run([sys.executable, "-c", script, case.command, *argv], text=True,
                           capture_output=True, preexec_fn=limit, cwd=REPO)
    return child.returncode, child.stderr


def run_case(case: Case, tmp: Path, context: dict) -> tuple[int, str, list[str]]:
    """Run one case (in process, or in a child for a file-size limit); return the exit
    code, stderr and what it broke: earlier files changed or deleted under ``tmp`` or the
    context run, and new files outside the case's ``allowed_new`` folders."""
    from mtdnn.commandline import run_cli

    argv = case.setup(tmp, context)
    watched = (tmp, Path(context["run"]).parent)
    before = snapshot(*watched)
    if case.file_size_limit is not None:
        code, stderr = run_limited(case, argv)
    else:
        err = io.StringIO()
        code = 0
        interrupt = case.interrupt() if case.interrupt else contextlib.nullcontext()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                interrupt:
            try:
                run_cli(main_of(case.command), argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
        stderr = err.getvalue()
    after = snapshot(*watched)
    allowed = [tmp / name for name in ("cache", *case.allowed_new)]
    broken = [f"changed or deleted: {path}" for path, digest in before.items()
              if after.get(path) != digest]
    broken += [f"new: {path}" for path in after if path not in before
               and not any(path.is_relative_to(folder) for folder in allowed)]
    return code, stderr, broken


def last_error_line(stderr: str) -> str:
    return next(line for line in reversed(stderr.splitlines()) if line.startswith("error: "))


def shorten_paths(text: str) -> str:
    """Temporary folders differ from run to run; the table shows them as ``<tmp>``."""
    # a pytest-xdist worker's folders sit one level deeper (popen-gw0/...)
    return re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/(?:popen-gw\d+/)?[^/\s']+", "<tmp>", text)


def case_message(number: int, stderr: str, tmp: Path) -> str:
    """A case's one-line message as the table shows it: its own folder as ``<tmp>/case<n>``,
    other temporary folders as ``<tmp>``."""
    return shorten_paths(last_error_line(stderr).replace(str(tmp), f"<tmp>/case{number}"))


def case_messages(context: dict, tmp_root: Path) -> dict[int, str]:
    """Run every case; its table message by case number (from 1)."""
    messages = {}
    for number, case in enumerate(CASES, start=1):
        tmp = tmp_root / f"case{number}"
        tmp.mkdir(parents=True, exist_ok=True)
        code, stderr, broken = run_case(case, tmp, context)
        assert code == case.code and case.expect in stderr and not broken, (case.what, stderr)
        messages[number] = case_message(number, stderr, tmp)
    return messages


def write_table(path: Path, messages: dict[int, str]) -> None:
    lines = ["# What mtdnn says to bad input", "",
             "Every case below exits with code 2 (130 for Ctrl-C), prints one paragraph (no "
             "traceback unless `--debug` is given), writes nothing partial and leaves every "
             "file that existed before byte-identical. Generated by "
             "`MTDNN_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_input.py -k doc`; "
             "each row is also a case of `tests/test_bad_input.py::test_bad_input` "
             "(temporary paths shortened to `<tmp>`).", "",
             "| # | input | case | command | exact message |", "|---|---|---|---|---|"]
    for number, case in enumerate(CASES, start=1):
        message = messages[number].replace("|", "\\|")
        lines.append(f"| {number} | {case.kind} | {case.what} | `{case.command}` | "
                     f"`{message}` |")
    path.write_text("\n".join(lines) + "\n")
