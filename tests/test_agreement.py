"""Figure 2's breakdown (accuracy and KL by annotator agreement) on a hand-made fixture."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


CHAOS = [  # two low-agreement pairs; the first tokenised differently from our dev file
    {"uid": "c1", "label_dist": [0.3, 0.7, 0.0], "example": {
        "premise": "A man, sitting.", "hypothesis": "A person sits."},
     "old_labels": ["neutral", "neutral", "neutral", "entailment", "entailment"]},
    {"uid": "c2", "label_dist": [0.5, 0.25, 0.25], "example": {
        "premise": "Dogs run.", "hypothesis": "Cats sleep."},
     "old_labels": ["entailment", "entailment", "entailment", "neutral", "contradiction"]},
]
DEV = [
    {"uid": "d1", "premise": "A man , sitting .", "hypothesis": "A person sits .",
     "label": "neutral"},
    {"uid": "d2", "premise": "Dogs run.", "hypothesis": "Cats sleep.", "label": "entailment"},
    {"uid": "d3", "premise": "It rains.", "hypothesis": "It is wet.", "label": "entailment"},
    {"uid": "d4", "premise": "It snows.", "hypothesis": "It is hot.", "label": "contradiction"},
]


def h(*q: float) -> float:
    """Entropy in nats, written out."""
    return -sum(x * math.log(x) for x in q if x > 0)


def prediction(uid: str, e: float, n: float, c: float) -> dict:
    names = {"entailment": e, "neutral": n, "contradiction": c}
    return {"uid": uid, "prediction": max(names, key=names.get), "probabilities": names}


PREDICTIONS = [prediction("d1", 0.2, 0.8, 0.0), prediction("d2", 0.1, 0.6, 0.3),
               prediction("d3", 0.9, 0.05, 0.05), prediction("d4", 0.6, 0.2, 0.2)]


def test_breakdown_by_agreement_level_by_hand(tmp_path: Path) -> None:
    from mtdnn.analysis.agreement import breakdown, load_chaosnli

    chaos = load_chaosnli(write_jsonl(tmp_path / "chaos.jsonl", CHAOS))
    result = breakdown(DEV, PREDICTIONS, chaos)
    assert [result[level]["pairs"] for level in ("3/2/0", "3/1/1", "rest of dev")] == [1, 1, 2]
    assert result["3/2/0"]["accuracy"] == 100.0  # neutral, as labelled
    assert result["3/1/1"]["accuracy"] == 0.0    # neutral, labelled entailment
    assert result["rest of dev"]["accuracy"] == 50.0
    # KL(human ‖ model) in nats, written out term by term
    assert result["3/2/0"]["kl_100"] == pytest.approx(0.3 * math.log(0.3 / 0.2) +
                                                      0.7 * math.log(0.7 / 0.8))
    assert result["3/1/1"]["kl_100"] == pytest.approx(
        0.5 * math.log(0.5 / 0.1) + 0.25 * math.log(0.25 / 0.6) + 0.25 * math.log(0.25 / 0.3))
    assert result["3/2/0"]["kl_5"] == pytest.approx(0.4 * math.log(0.4 / 0.2) +
                                                    0.6 * math.log(0.6 / 0.8))
    assert math.isnan(result["rest of dev"]["kl_100"])  # no annotations outside ChaosNLI

    # the prediction's own entropy, on every level
    assert result["3/2/0"]["entropy"] == pytest.approx(h(0.2, 0.8))
    assert result["rest of dev"]["entropy"] == pytest.approx((h(0.9, 0.05, 0.05) +
                                                              h(0.6, 0.2, 0.2)) / 2)


def test_a_cross_fitted_temperature_undoes_over_confidence() -> None:
    import numpy as np

    from mtdnn.analysis.agreement import cross_fitted_kl, kl_rows, tempered

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(400, 3))
    human = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    over_sure = tempered(human, 1 / 3)  # softmax(3 · logits)
    kls, temperature = cross_fitted_kl(human, over_sure)
    assert temperature == pytest.approx(3.0, rel=1e-3)
    assert kls.max() < 1e-6 < kl_rows(human, over_sure).mean()
    # a prediction already at the annotators' sureness keeps T = 1
    assert cross_fitted_kl(human, human)[1] == pytest.approx(1.0, rel=1e-3)


def test_the_runner_gives_each_arms_mean_and_std_and_differences_with_p(
        tmp_path: Path) -> None:
    from mtdnn.analysis.agreement import breakdown, load_chaosnli, uniform_breakdown
    from mtdnn.analysis.agreement_runs import agreement_section

    chaos = load_chaosnli(write_jsonl(tmp_path / "chaos.jsonl", CHAOS))
    other = [prediction("d1", 0.8, 0.2, 0.0), *PREDICTIONS[1:]]  # d1 now wrong
    records = [{"arm": arm, "task": "snli", "subset": "1pct", "seed": seed,
                "agreement": breakdown(DEV, predictions, chaos)} for arm, seed, predictions in
               (("a", 13, PREDICTIONS), ("a", 14, other), ("b", 13, PREDICTIONS),
                ("b", 14, PREDICTIONS))]
    reference = uniform_breakdown(DEV, chaos)
    section = agreement_section(records, "snli", "1pct", ["a", "b", "c"], tmp_path / "a.png",
                                baseline="b", reference=reference)
    assert "| model | 3/2/0 (1 pairs) | 3/1/1 (1 pairs) | rest of dev (2 pairs) |" in section
    # 3/2/0: 100 and 0
    assert "| a (n=2) | 50.0 ± 70.7 | 0.0 ± 0.0 | 50.0 ± 0.0 |" in section
    assert "c (n=" not in section  # an arm without runs has no row
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a − b: 3/2/0 accuracy 50 − 100, Welch's t = −50 / (70.7 / √2) = −1 on 1 df: p = 0.5;
    # KL to the 100 labels: half the gap between a's two runs' KL
    kl_right = 0.3 * math.log(0.3 / 0.2) + 0.7 * math.log(0.7 / 0.8)
    kl_wrong = 0.3 * math.log(0.3 / 0.8) + 0.7 * math.log(0.7 / 0.2)
    row = next(line for line in section.splitlines() if line.startswith("| a − b |"))
    cells = [cell.strip() for cell in row.split("|")[2:-1]]
    assert cells[:3] == ["-50.0 (p = 0.500)", "+0.0 (no p: no spread)",
                         "+0.0 (no p: no spread)"]
    assert cells[3].startswith(f"{(kl_wrong - kl_right) / 2:+.3f} (p = ")
    assert len(cells) == 7 and "7 comparisons" in section  # and KL at T per ChaosNLI level
    # the uniform reference: KL = ln 3 − H(human), entropy ln 3, no accuracy, no comparison
    kl_uniform = 0.3 * math.log(0.3 * 3) + 0.7 * math.log(0.7 * 3)
    assert reference["3/2/0"]["kl_100"] == pytest.approx(math.log(3) - h(0.3, 0.7))
    assert f"| uniform 1/3 (reference) | {kl_uniform:.3f} | " in section
    assert "| uniform 1/3 (reference) | — | — | — |" in section
    assert f"| uniform 1/3 (reference) | {math.log(3):.3f} | {math.log(3):.3f} | " in section
    assert "uniform 1/3 (reference) −" not in section
    # a run recorded before a measure existed: no mean and no difference, not a NaN
    del records[0]["agreement"]["3/2/0"]["kl_100_tempered"]
    section = agreement_section(records, "snli", "1pct", ["a", "b"], tmp_path / "a.png",
                                baseline="b")
    row = next(line for line in section.splitlines() if line.startswith("| a − b |"))
    assert row.split("|")[7].strip() == "—" and "nan" not in section


def test_report_and_exclude_commands(tmp_path: Path) -> None:
    chaos = write_jsonl(tmp_path / "chaos.jsonl", CHAOS)
    dev = write_jsonl(tmp_path / "dev.jsonl", DEV)
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    out = tmp_path / "report"
    report = subprocess.run([sys.executable, "-m", "mtdnn.agreement", "report", "--chaosnli",
                             str(chaos), "--dev", str(dev), "--predictions", f"m={preds}",
                             f"n={preds}", "--out", str(out)], cwd=REPO, text=True,
                            capture_output=True)
    assert report.returncode == 0, report.stderr[-3000:]
    lines = out.with_suffix(".md").read_text().splitlines()
    assert lines[0] == "| model | 3/2/0 (1 pairs) | 3/1/1 (1 pairs) | rest of dev (2 pairs) |"
    assert "| m | 100.0 | 0.0 | 50.0 |" in lines and "| n | 100.0 | 0.0 | 50.0 |" in lines
    assert "| uniform 1/3 (reference) | — | — | — |" in lines
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # valid JSON: the undefined means (the uniform reference's accuracy) are null, not NaN
    saved = json.loads(out.with_suffix(".json").read_text(),
                       parse_constant=lambda name: pytest.fail(f"{name} in the JSON report"))
    assert saved["uniform 1/3 (reference)"]["3/2/0"]["accuracy"] is None
    # a second report replaces the first only with --overwrite
    again = [sys.executable, "-m", "mtdnn.agreement", "report", "--chaosnli", str(chaos),
             "--dev", str(dev), "--predictions", f"m={preds}", "--out", str(out)]
    refused = subprocess.run(again, cwd=REPO, text=True, capture_output=True)
    assert refused.returncode == 2 and "already exists" in refused.stderr
    assert subprocess.run([*again, "--overwrite"], cwd=REPO).returncode == 0

    for command, kept in (("exclude", ["d3", "d4"]), ("select", ["d1", "d2"])):
        written = tmp_path / f"{command}.jsonl"
        ran = subprocess.run([sys.executable, "-m", "mtdnn.agreement", command, "--chaosnli",
                              str(chaos), "--input", str(dev), "--output", str(written)],
                             cwd=REPO, text=True, capture_output=True)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert [json.loads(line)["uid"] for line in written.read_text().splitlines()] == kept


def test_ptb_quotes_join_and_other_agreement_is_left_out(tmp_path: Path) -> None:
    from mtdnn.analysis.agreement import breakdown, load_chaosnli, pair_key

    assert pair_key("A banner reading `` Lotos . ''", "X .") == \
        pair_key('A banner reading "Lotos."', "X.")
    four = {"uid": "c3", "label_dist": [0.1, 0.1, 0.8], "example": {
        "premise": "It snows.", "hypothesis": "It is hot."},
        "old_labels": ["contradiction"] * 3 + ["neutral"]}
    chaos = load_chaosnli(write_jsonl(tmp_path / "chaos.jsonl", [*CHAOS, four]))
    result = breakdown(DEV, PREDICTIONS, chaos)
    assert result["other agreement (left out)"]["pairs"] == 1
    assert result["rest of dev"]["pairs"] == 1


def test_the_runner_breaks_each_run_down_by_agreement(prepared_data: Path,
                                                       tmp_path: Path) -> None:
    """After each run the record holds the breakdown of its final model; scored on the dev
    file, the levels' pooled accuracy is the run's own dev accuracy."""
    import yaml

    rows = [json.loads(line) for line in
            (prepared_data / "snli" / "dev.jsonl").read_text().splitlines()[:12]]
    train = write_jsonl(tmp_path / "train.jsonl", [json.loads(line) for line in (
        prepared_data / "snli" / "train.jsonl").read_text().splitlines()[:16]])
    dev = write_jsonl(tmp_path / "dev.jsonl", rows)
    chaos = write_jsonl(tmp_path / "chaos.jsonl", [  # dev rows 0-2 are low-agreement pairs
        {"uid": f"c{i}", "label_dist": [0.2, 0.5, 0.3],
         "example": {"premise": rows[i]["premise"], "hypothesis": rows[i]["hypothesis"]},
         "old_labels": old} for i, old in enumerate((
             ["neutral"] * 3 + ["entailment"] * 2, ["neutral"] * 3 + ["entailment"] * 2,
             ["neutral"] * 3 + ["entailment", "contradiction"]))])
    config = {"tasks": ["snli"], "task_files": {"snli": {"train": str(train), "dev": str(dev)}},
              "seeds": [1], "arms": {"plain": None}, "output_dir": str(tmp_path / "runs"),
              "publish_dir": str(tmp_path / "published"),
              "agreement": {"snli": {"chaosnli": str(chaos), "rows": [str(dev)]}},
              "train": {"encoder_layers": 2, "max_seq_len": 64, "batch_size": 8,
                        "max_steps": 2, "progress_bar": False,
                        "cache_dir": str(tmp_path / "cache")}}
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    ran = subprocess.run([sys.executable, "-m", "mtdnn.experiment", "--config", str(path),
                          "--publish"], cwd=REPO, text=True, capture_output=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = tmp_path / "runs"
    record = json.loads((out / "plain/snli/full/seed1/result.json").read_text())
    found = record["agreement"]
    assert [found[level]["pairs"] for level in ("3/2/0", "3/1/1", "rest of dev")] == [2, 1, 9]
    assert found["rest of dev"]["kl_100"] is None and found["3/2/0"]["kl_100"] > 0
    pooled = sum(found[level]["accuracy"] * found[level]["pairs"]
                 for level in ("3/2/0", "3/1/1", "rest of dev")) / 12
    assert pooled == pytest.approx(100 * record["metrics"]["snli"]["accuracy"])
    table = (out / "results.md").read_text()
    assert "### snli (full): accuracy and KL(human ‖ model) by annotator agreement" in table
    assert "| plain (n=1) | " in table
    assert "| uniform 1/3 (reference) | — | — | — |" in table  # the runner's reference row
    assert (out / "agreement_snli_full.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    published = tmp_path / "published"
    assert (published / "agreement_snli_full.png").read_bytes() == \
        (out / "agreement_snli_full.png").read_bytes()

    # a record made before the entropy measure existed: its table cell says so, and
    # --rescore-agreement recomputes the breakdown from the run's final model, nothing else
    path = out / "plain/snli/full/seed1/result.json"
    old = json.loads(path.read_text())
    for level in ("3/2/0", "3/1/1", "rest of dev"):
        del old["agreement"][level]["entropy"]
    path.write_text(json.dumps(old))
    ran = subprocess.run([sys.executable, "-m", "mtdnn.experiment", "--config",
                          str(tmp_path / "experiment.yaml"), "--report-only"], cwd=REPO,
                         text=True, capture_output=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    entropy_row = next(line for line in (out / "results.md").read_text().splitlines()
                       if line.startswith("| plain (n=1) | ") and line.endswith("| — | — | — |"))
    assert entropy_row

    def rescore() -> str:
        ran = subprocess.run([sys.executable, "-m", "mtdnn.experiment", "--config",
                              str(tmp_path / "experiment.yaml"), "--rescore-agreement"],
                             cwd=REPO, text=True, capture_output=True)
        assert ran.returncode == 0, ran.stderr[-3000:]
        return ran.stderr

    assert "rescored the agreement breakdown of 1 runs; 0 already" in rescore()
    assert json.loads(path.read_text()) == record
    assert not any(line.startswith("| plain (n=1) | ") and line.endswith("| — | — | — |")
                   for line in (out / "results.md").read_text().splitlines())
    # a record with every measure is left alone: an interrupted rescoring resumes
    assert "rescored the agreement breakdown of 0 runs; 1 already had every measure" \
        in rescore()
