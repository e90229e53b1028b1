"""The results page is what the records say, and the docs speak of what the code does."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

from conftest import REPO, SHARED_DATA


def summary_script():
    spec = importlib.util.spec_from_file_location("results_summary",
                                                  REPO / "scripts" / "results_summary.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_results_page_opens_with_the_verdicts_the_records_give() -> None:
    script = summary_script()
    page = (REPO / "docs" / "results.md").read_text()
    assert page.index(script.START) < page.index("## Table 3")  # the verdicts come first
    assert script.TEACHER_START in page and script.TEACHER_END in page
    assert script.SEPARATION_START in page and script.SEPARATION_END in page
    assert page == script.page_with_summary(page), \
        "docs/results.md is stale: python scripts/results_summary.py --write"
    assert (REPO / "docs" / "history.md").is_file()


def test_the_figure_2_confound_counts_are_what_the_data_holds(prepared_data: Path) -> None:
    from mtdnn.analysis.agreement import load_chaosnli, pair_key

    chaos_file = SHARED_DATA / "chaosnli" / "chaosNLI_mnli_m.jsonl"
    chaos = load_chaosnli(chaos_file)
    rows = [json.loads(line) for line in
            (prepared_data / "mnli" / "dev_matched.jsonl").read_text().split("\n") if line]
    training = [r for r in rows if pair_key(r["premise"], r["hypothesis"]) not in chaos]

    def premise(text: str) -> str:
        return pair_key(text, "").split("\t")[0]

    chaos_premises = {premise(json.loads(line)["example"]["premise"])
                      for line in chaos_file.read_text().split("\n") if line}
    seen = {premise(r["premise"]) for r in training}
    page = (REPO / "docs" / "results.md").read_text()
    counts = (len(chaos), sum(p in seen for p in chaos_premises), len(chaos_premises))
    assert f"none of ChaosNLI's {counts[0]:,} MNLI pairs" in page
    assert "{:,} of ChaosNLI's {:,} distinct MNLI premises".format(*counts[1:]) in page


def test_the_docs_speak_of_the_schedulers_the_code_uses() -> None:
    """The home-made scheduler is gone from the code and the docs (history excepted)."""
    found = []
    files = [*(REPO / "mtdnn").rglob("*.py"), *(REPO / "scripts").iterdir(),
             REPO / "README.md", *(REPO / "docs").glob("*.md")]
    for path in files:
        if path.name == "history.md" or not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"claim|stop_by|stop-by|work_queue", line):  # the grep
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_separating_arm_splits_the_gap_between_the_two_rows_into_parts_that_add_up() -> None:
    """Table 5's two MT-DNN-SMART rows differ in ε and in the teacher schedule; the
    separating arm's two paired differences add up to the rows' (within rounding)."""
    block = summary_script().separation_table()
    split = re.findall(r"SNLI ([0-9.]+%): ([+-][0-9.]*[0-9]) points, of which the radius "
                       r"([+-][0-9.]*[0-9]) and the teacher schedule ([+-][0-9.]*[0-9])", block)
    assert [subset for subset, *_ in split] == ["0.1%", "1%"], block
    for _, both, radius, teacher in split:
        assert abs(float(both) - float(radius) - float(teacher)) <= 0.15, split
    assert "6 tests" in block and "after Holm's correction over these 6" in block


def test_the_teacher_tuning_verdict_on_the_results_page_is_what_its_records_give() -> None:
    """The selection rule's output, quoted under "SMART's mean teacher at short budgets",
    is recomputed from results/smart_teacher_tuning by the script that applies the rule."""
    import subprocess
    import sys

    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "select_teacher_schedule.py")],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
    page = (REPO / "docs" / "results.md").read_text()
    quoted = page.split("<!-- select_teacher_schedule -->")[1].split("```")[1]
    assert quoted.removeprefix("text\n").strip() == printed.strip(), \
        "docs/results.md quotes another verdict: python scripts/select_teacher_schedule.py"


def test_a_finding_whose_runs_are_not_all_in_has_no_verdict_yet(tmp_path: Path) -> None:
    """Part of a grid gives no ✓ or ✗: the column says how many runs are in."""
    import yaml

    from mtdnn.experiment.config import load_experiment

    cell = summary_script().cell
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump({
        "tasks": ["rte"], "seeds": [1, 2, 3],
        "arms": {"plain": None, "smart": None, "staged": {"init": "stage:mt", "seeds": [1]}},
        "stages": {"mt": {"seeds": [7, 8], "train": {"tasks": ["rte"]}}},
        "paper": {"plain": {"rte accuracy": 60.0}, "smart": {"rte accuracy": 65.0},
                  "staged": {"rte accuracy": 70.0}}}))
    config = load_experiment(path, [])

    def run(arm: str, seed: int, value: float, stage: int | None = None) -> dict:
        return {"arm": arm, "subset": "full", "seed": seed, "stage_seed": stage,
                "metrics": {"rte": {"accuracy": value}}}

    plain = [run("plain", s, v) for s, v in ((1, 0.60), (2, 0.61), (3, 0.59))]
    smart = [run("smart", s, v) for s, v in ((1, 0.64), (2, 0.66))]
    found = cell(config, plain + smart, "smart", "plain", "rte accuracy")
    assert found.verdict == "untested" and "smart 2 of 3 runs" in found.text
    smart.append(run("smart", 3, 0.65))
    found = cell(config, plain + smart, "smart", "plain", "rte accuracy")
    # the arms share seeds 1-3: the paired t-test over the gaps 4, 5 and 6 points
    from scipy import stats

    p = stats.ttest_1samp([4.0, 5.0, 6.0], 0.0).pvalue
    assert found.verdict == "✓" and found.text == (
        f"rte accuracy: +5.0 → +5.0 (p = {p:.3f}, paired, n = 3) ✓")
    staged = [run("staged", 1, 0.7, 7)]
    assert "staged 1 of 2 runs" in cell(config, plain + staged, "staged", "plain",
                                        "rte accuracy").text
    staged.append(run("staged", 1, 0.71, 8))
    found = cell(config, plain + staged, "staged", "plain", "rte accuracy")
    # no shared keys (the staged runs have stage seeds): Welch, a stage seed counting once
    assert found.verdict == "✓" and "Welch" in found.text


def test_the_tally_counts_sign_significance_and_holm_apart_and_repeats_once() -> None:
    script = summary_script()
    tested = [script.Tested("a", "✓", 0.001), script.Tested("b", "✓", 0.03),
              script.Tested("c", "✗", 0.04), script.Tested("d", "✓", 0.001, repeats="a"),
              script.Tested("e", "untested"), script.Tested("f", "no sign", 0.5)]
    # Holm over a, b, c and f (d repeats a): 0.001 < 0.05/4 passes; 0.03 > 0.05/3 stops
    assert script.tally(tested).startswith(
        "Of 3 column comparisons with a sign to match, 2 have the paper's sign (✓); 2 of them "
        "are significant at p < 0.05, and 1 after Holm's correction over the page's 4 tests. "
        "1 have the other sign (✗), 1 of them significantly at p < 0.05. 1 repeat another "
        "row's runs and are not counted again; 1 are untested")


def test_the_results_page_prose_is_the_generated_text(tmp_path: Path) -> None:
    """The page's "In short" is generated from the tally: editing one of its numbers by
    hand makes the page stale."""
    script = summary_script()
    page = (REPO / "docs" / "results.md").read_text()
    short = page.split(script.SHORT_START)[1].split(script.SHORT_END)[0]
    assert "same sign in" in short and "after Holm in" in short
    edited = page.replace(short, short.replace("after Holm in 0", "after Holm in 1", 1))
    assert edited != page and script.page_with_summary(edited) == page


def test_a_finding_with_columns_still_running_gets_counts_not_a_verdict() -> None:
    verdict = summary_script().finding_verdict
    assert verdict(["✓", "✓", "no sign"]) == "✓"
    assert verdict(["✗", "no sign"]) == "✗"
    assert verdict(["✓", "✗", "✓"]) == "2 ✓, 1 ✗"
    assert verdict(["✓", "untested", "untested"]) == "1 ✓, 2 untested"
    assert verdict(["untested", "no sign"]) == "untested"


def test_the_architecture_page_names_modules_that_exist() -> None:
    """Every file and folder docs/architecture.md names is in the repository, and every
    subpackage of mtdnn is on the page."""
    import re

    page = (REPO / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:mtdnn|data_prep|task_defs|tests)/[\w/]*(?:\.py)?)`", page))
    assert len(named) > 20
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert missing == []
    subpackages = {p.parent.name for p in (REPO / "mtdnn").glob("*/__init__.py")} - {"configs"}
    assert {s for s in subpackages if f"`mtdnn/{s}/`" not in page} == set()


def test_the_task_types_section_is_what_the_records_give() -> None:
    spec = importlib.util.spec_from_file_location("task_type_results",
                                                  REPO / "scripts" / "task_type_results.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = (REPO / "docs" / "results.md").read_text()
    assert script.START in page and script.END in page
    assert page == script.page_with_block(page), \
        "docs/results.md is stale: python scripts/task_type_results.py --write"
