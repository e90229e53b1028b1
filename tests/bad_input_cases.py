"""Every bad-input case we check: what the user did, and what the error must say.

``tests/test_bad_input.py`` runs each case through the real CLI entry point (in process)
and asserts exit code 2, the expected words and no traceback; it also checks that
``docs/robustness.md`` holds exactly the messages the cases produce. To regenerate it:

    MTDNN_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_input.py -k doc
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROW = "0\tA man sleeps.\tA person sleeps.\tentailment\n"
GOOD_TASK = ("rte:\n  type: classification\n  labels: [entailment, not_entailment]\n"
             "  inputs: [sentence1, sentence2]\n  metrics: [accuracy]\n")
GOOD_EXAMPLE = '{"uid": "a", "sentence1": "P.", "sentence2": "H.", "label": "entailment"}\n'


@dataclass(frozen=True)
class Case:
    kind: str  # data file | task definition | run config | CLI argument | checkpoint
    what: str
    command: str  # data_prep | train | predict | sweep | compare | export
    setup: Callable[[Path, dict], list[str]]  # (tmp folder, context) -> argv
    expect: str


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def raw_glue(tmp: Path, name: str, text: str) -> list[str]:
    write(tmp / "raw/glue" / name, text)
    return ["glue", "--raw-dir", str(tmp / "raw"), "--out-dir", str(tmp / "out")]


def raw_rte(tmp: Path, text: str) -> list[str]:
    return raw_glue(tmp, "RTE/train.tsv", text)


def train_args(tmp: Path, ctx: dict, *extra: str, train_text: str = GOOD_EXAMPLE * 4) -> list[str]:
    train_file = write(tmp / "train.jsonl", train_text)
    return ["tasks=[rte]", f"tasks.rte.train={train_file}", f"tasks.rte.dev={train_file}",
            f"encoder={ctx['encoder']}", f"output_dir={tmp / 'run'}", "progress_bar=false",
            f"cache_dir={tmp / 'cache'}", "max_steps=2", "batch_size=2", *extra]


def task_def_args(tmp: Path, ctx: dict, text: str) -> list[str]:
    path = write(tmp / "tasks.yaml", text)
    return train_args(tmp, ctx, f"task_defs=[{path}]")


def sweep_args(tmp: Path, ctx: dict, start_points: dict) -> list[str]:
    """A sweep over one real SciTail subset (nothing trains: the error comes first)."""
    import json

    subsets = write(tmp / "data/scitail/subsets/seed13/manifest.json", json.dumps(
        {"files": {"n8": {"file": "n8.jsonl", "size": 8, "available": True}}}))
    config = {"tasks": ["scitail"], "subsets": ["n8"], "data_dir": str(subsets.parents[3]),
              "output_dir": str(tmp / "sweep"), "start_points": start_points}
    return ["--config", str(write(tmp / "sweep.yaml", json.dumps(config)))]


def compare_args(tmp: Path, ctx: dict, arms: dict) -> list[str]:
    import json

    config = {"output_dir": str(tmp / "cmp"), "train": {"tasks": ["rte"]}, "arms": arms}
    return ["--config", str(write(tmp / "compare.yaml", json.dumps(config)))]


def predict_args(tmp: Path, ctx: dict, *, task: str = "rte", checkpoint: str | None = None,
                 text: str = GOOD_EXAMPLE) -> list[str]:
    return ["--checkpoint", checkpoint or ctx["checkpoint"], "--task", task, "--input",
            str(write(tmp / "input.jsonl", text)), "--output", str(tmp / "out.jsonl"),
            "--no-progress"]


CASES = [
    Case("data file", "GLUE row with a missing field", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW + "1\tonly two\tentailment\n"),
         "train.tsv:3: found 3 tab-separated fields, expected 4"),
    Case("data file", "label outside the task's labels", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW + "1\tA.\tB.\tmaybe\n"),
         "train.tsv:3: task 'rte': label 'maybe' is not in the task's labels"),
    Case("data file", "empty text", "data_prep",
         lambda t, c: raw_rte(t, RTE_HEADER + RTE_ROW + "1\t \tB.\tentailment\n"),
         "train.tsv:3: task 'rte': empty text in field 'sentence1'"),
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
         "the loss of task 'rte' is"),
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
    Case("CLI argument", "predict input with a label the checkpoint does not know", "predict",
         lambda t, c: predict_args(t, c, text=GOOD_EXAMPLE.replace("entailment", "maybe")),
         "input.jsonl:1: task 'rte': label 'maybe' is not one of the task's labels"),
    Case("run config", "sweep start point with an unknown training key", "sweep",
         lambda t, c: sweep_args(t, c, {"smart": {"train": {"smart": {"enabeld": True}}}}),
         "sweep.yaml (train + start_points.smart.train): key 'smart.enabeld': unknown key"),
    Case("run config", "sweep start point that does not exist", "sweep",
         lambda t, c: sweep_args(t, c, {"mt": str(t / "nope")}),
         "key 'start_points.mt': start point 'mt' not found"),
    Case("run config", "comparison file that is a list, not a mapping", "compare",
         lambda t, c: ["--config", str(write(t / "compare.yaml", "- plain\n- smart\n"))],
         "compare.yaml: expected a mapping of config keys, found list"),
    Case("run config", "comparison arm with a value not allowed", "compare",
         lambda t, c: compare_args(t, c, {"plain": {}, "odd": {"sampler": {"kind": "rr"}}}),
         "(train + arms.odd): key 'sampler.kind': unknown value 'rr' (allowed: proportional,"),
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
         "not a complete checkpoint: encoder, heads.safetensors, task_defs.yaml missing"),
    Case("checkpoint", "init_checkpoint that is not a checkpoint", "train",
         lambda t, c: train_args(t, c, f"init_checkpoint={t}"), "not a complete checkpoint"),
    Case("checkpoint", "resume with a different config", "train",
         lambda t, c: train_args(t, c, f"output_dir={c['run']}", f"resume={c['run']}",
                                 "optimizer.lr=1e-3"),
         "the run to resume has"),
    Case("checkpoint", "resume from a checkpoint without resume state", "train",
         lambda t, c: train_args(t, c, f"resume={c['checkpoint']}"),
         "the checkpoint has no training_state.pt to resume from"),
]


def run_case(case: Case, tmp: Path, context: dict) -> tuple[int, str]:
    """Run one case in process; return (exit code, stderr)."""
    from mtdnn.errors import run_cli

    if case.command == "data_prep":
        from data_prep.__main__ import main
    elif case.command == "train":
        from train import main
    elif case.command == "sweep":
        from mtdnn.sweep import main
    elif case.command == "compare":
        from mtdnn.compare import main
    elif case.command == "export":
        from mtdnn.export import main
    else:
        from predict import main
    argv = case.setup(tmp, context)
    stderr = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            run_cli(main, argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, stderr.getvalue()


def last_error_line(stderr: str) -> str:
    return next(line for line in reversed(stderr.splitlines()) if line.startswith("error: "))


def shorten_paths(text: str, tmp_root: Path) -> str:
    """Temporary folders differ from run to run; the table shows them as ``<tmp>``."""
    text = text.replace(str(tmp_root), "<tmp>")
    return re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/\s']+", "<tmp>", text)


def write_table(path: Path, context: dict, tmp_root: Path) -> None:
    lines = ["# What mtdnn says to bad input", "",
             "Every case below exits with code 2, prints one paragraph (no traceback unless "
             "`--debug` is given) and writes nothing partial. Generated by "
             "`MTDNN_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_input.py -k doc`; "
             "each row is also a case of `tests/test_bad_input.py::test_bad_input` "
             "(temporary paths shortened to `<tmp>`).", "",
             "| # | input | case | command | exact message |", "|---|---|---|---|---|"]
    for number, case in enumerate(CASES, start=1):
        tmp = tmp_root / f"case{number}"
        tmp.mkdir(parents=True, exist_ok=True)
        code, stderr = run_case(case, tmp, context)
        message = shorten_paths(last_error_line(stderr), tmp_root).replace("|", "\\|")
        assert code == 2 and case.expect in stderr, (case.what, stderr)
        lines.append(f"| {number} | {case.kind} | {case.what} | `{case.command}` | "
                     f"`{message}` |")
    path.write_text("\n".join(lines) + "\n")

