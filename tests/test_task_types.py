"""The task types beyond sentence classification: token classification (NER) and pairwise
ranking (QNLI). Featurization, loss, SMART's divergence, decoding and metrics against
hand-computed values; IOB1 → IOB2 on CoNLL-2003's own file; resume mid-epoch; one
extension point."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mtdnn.tasks.divergences import masked_symmetric_kl, symmetric_kl
from mtdnn.tasks.heads import ABSENT_SCORE
from mtdnn.tasks.iob import entities, iob1_to_iob2, iob2_problem, repair_iob2
from mtdnn.tasks.task_def import load_task_defs
from mtdnn.tasks.task_type import IGNORED
from mtdnn.tasks.types.token_classification import UNSEEN
from tests.test_crash_safety import whole_and_stopped

REPO = Path(__file__).resolve().parent.parent
TASKS = load_task_defs()
NER, RANK = TASKS["conll2003"], TASKS["qnli_ranking"]


# ---- token classification -----------------------------------------------------------------
def test_a_words_tag_is_on_its_first_sub_word_and_the_others_get_minus_100(tiny_tokenizer
                                                                            ) -> None:
    words = ["Blackburn", "visited", "1996-08-22", "Brussels"]
    tags = ["B-PER", "O", "O", "B-LOC"]
    columns = {"uid": ["s"], "tokens": [words], "labels": [[NER.labels.index(t) for t in tags]]}
    out, truncated = NER.task_type.featurize(NER, columns, tiny_tokenizer, 128)
    ids, labels, starts = out["input_ids"][0], out["labels"][0], out["word_starts"][0]
    pieces = tiny_tokenizer.convert_ids_to_tokens(ids)
    # the date is several sub-words; each word's first one carries its tag, no other does
    assert sum(label != IGNORED for label in labels) == len(words)
    assert [labels[s] for s in starts] == [NER.labels.index(t) for t in tags]
    date = starts[2]
    assert pieces[date] == "1996" and pieces[date + 1].startswith("-")
    assert labels[date + 1] == IGNORED
    assert pieces[0] == "[CLS]" and labels[0] == IGNORED and truncated == 0


def test_label_all_subwords_puts_the_i_tag_on_a_b_words_later_sub_words(tiny_tokenizer) -> None:
    from dataclasses import replace

    task = replace(NER, options={"label_all_subwords": True})
    columns = {"uid": ["s"], "tokens": [["Urdu-speaking"]],
               "labels": [[NER.labels.index("B-MISC")]]}
    out, _ = task.task_type.featurize(task, columns, tiny_tokenizer, 128)
    pieces = tiny_tokenizer.convert_ids_to_tokens(out["input_ids"][0])
    labelled = [NER.labels[x] for x in out["labels"][0] if x != IGNORED]
    assert pieces[1:-1] == ["urdu", "-", "speaking"]
    assert labelled == ["B-MISC", "I-MISC", "I-MISC"]


def test_truncation_tags_the_unseen_words_o_and_counts_the_sentence(tiny_tokenizer) -> None:
    words = ["word"] * 20
    columns = {"uid": ["s"], "tokens": [words]}
    out, truncated = NER.task_type.featurize(NER, columns, tiny_tokenizer, 8)
    assert truncated == 1
    assert out["word_starts"][0][:6] == [1, 2, 3, 4, 5, 6]
    assert set(out["word_starts"][0][6:]) == {UNSEEN}
    batch = NER.task_type.collate({k: out[k] for k in ("input_ids", "word_starts")}, 0)
    logits = torch.zeros(1, 8, len(NER.labels))
    logits[:, :, NER.labels.index("B-PER")] = 5.0
    (sentence,) = NER.task_type.predict(logits, batch)
    assert NER.task_type.tags(NER, sentence) == ["B-PER"] * 6 + ["O"] * 14


def test_token_loss_is_cross_entropy_over_the_labelled_tokens_only() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 4, len(NER.labels))
    labels = torch.tensor([[IGNORED, 1, IGNORED, 0], [IGNORED, 3, 4, IGNORED]])
    kept = [(0, 1), (0, 3), (1, 1), (1, 2)]
    by_hand = -np.mean([torch.log_softmax(logits[b, t], -1)[labels[b, t]].item()
                        for b, t in kept])
    assert NER.task_type.loss(logits, labels).item() == pytest.approx(by_hand, rel=1e-5)


def test_the_token_divergence_averages_over_labelled_tokens_and_ignores_the_rest() -> None:
    torch.manual_seed(0)
    p, q = torch.randn(2, 5, 9), torch.randn(2, 5, 9)
    keep = torch.tensor([[0, 1, 1, 0, 0], [0, 1, 0, 0, 0]], dtype=torch.bool)
    by_hand = np.mean([symmetric_kl(p[b, t][None], q[b, t][None]).item()
                       for b, t in ((0, 1), (0, 2), (1, 1))])
    assert masked_symmetric_kl(p, q, keep).item() == pytest.approx(by_hand, rel=1e-5)
    moved = p.clone()
    moved[~keep] += 10.0  # padding and unlabelled sub-words do not count
    assert masked_symmetric_kl(moved, q, keep).item() == pytest.approx(by_hand, rel=1e-5)
    divergence = NER.task_type.divergence("symmetric_kl", {"label_mask": keep})
    assert divergence(p, q).item() == pytest.approx(by_hand, rel=1e-5)


def test_iob_conversions_and_entities() -> None:
    # IOB1: an entity begins with I- unless it follows one of its type (then B-)
    assert iob1_to_iob2(["I-ORG", "O", "I-PER", "I-PER", "B-PER", "I-LOC", "B-MISC"]) == \
        ["B-ORG", "O", "B-PER", "I-PER", "B-PER", "B-LOC", "B-MISC"]
    assert iob2_problem(["O", "I-LOC"]) == (1, "tag 'I-LOC' at word 2 continues an entity, "
                                               "but it follows 'O'")
    assert iob2_problem(["B-LOC", "I-LOC", "O"]) is None
    assert repair_iob2(["I-PER", "I-PER", "I-ORG"]) == ["B-PER", "I-PER", "B-ORG"]
    words = ["Peter", "Blackburn", "in", "New", "York", "City"]
    assert entities(["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "B-LOC"], words) == [
        {"type": "PER", "start": 0, "end": 1, "text": "Peter Blackburn"},
        {"type": "LOC", "start": 3, "end": 4, "text": "New York"},
        {"type": "LOC", "start": 5, "end": 5, "text": "City"}]


def test_entity_metrics_match_a_hand_count() -> None:
    """Gold: PER(0-1), LOC(3). Predicted: PER(0-1) right, LOC(3) as ORG, a spurious MISC(5):
    precision 1/3, recall 1/2, F1 0.4 (seqeval, strict IOB2)."""
    tags = NER.labels
    gold = ["B-PER", "I-PER", "O", "B-LOC", "O", "O"]
    guess = ["B-PER", "I-PER", "O", "B-ORG", "O", "B-MISC"]
    sentence = np.eye(len(tags))[[tags.index(t) for t in guess]]
    dataset = {"labels": [[IGNORED] + [tags.index(t) for t in gold] + [IGNORED]],
               "word_starts": [[1, 2, 3, 4, 5, 6]]}
    scores = NER.task_type.score(NER, [sentence], dataset)
    assert scores == pytest.approx({"entity_f1": 0.4, "entity_precision": 1 / 3,
                                    "entity_recall": 0.5})


def test_conll2003_iob1_becomes_iob2_on_the_files_own_quirks(shared_data: Path) -> None:
    """The whole train file: every entity begins with B-, the entity counts are those of the
    CoNLL-2003 paper (Tjong Kim Sang and De Meulder 2003, Table 2), and the two B-MISC that
    follow another tag (lines 152,428 and 175,436) stay B-MISC."""
    from mtdnn.data_prep.conll import LAYOUTS, read_sentences

    path = shared_data / "conll2003/eng.train"
    counts: dict[str, int] = {}
    quirks = {}
    raw_i_starts = 0
    for lines, words, tags in read_sentences(path, LAYOUTS["conll2003"]):
        converted = iob1_to_iob2(tags)
        assert iob2_problem(converted) is None
        raw_i_starts += sum(t.startswith("I-") and c.startswith("B-")
                            for t, c in zip(tags, converted, strict=True))
        for tag in converted:
            if tag.startswith("B-"):
                counts[tag[2:]] = counts.get(tag[2:], 0) + 1
        for line, word, tag in zip(lines, words, converted, strict=True):
            if line in (152428, 175436):
                quirks[line] = (word, tag)
    assert counts == {"PER": 6600, "ORG": 6321, "LOC": 7140, "MISC": 3438}
    assert quirks == {152428: ("Atlanta", "B-MISC"), 175436: ("Urdu-speaking", "B-MISC")}
    assert raw_i_starts > 20000  # nearly every entity began with I- in the file


# ---- ranking --------------------------------------------------------------------------------
def rank_columns() -> dict[str, list]:
    return {"uid": ["a", "b", "c", "d", "e"], "question": ["Q1?", "Q1?", "Q2?", "Q2?", "Q2?"],
            "sentence": ["A1.", "A2.", "B1.", "B2.", "B3."],
            "group": ["g1", "g1", "g2", "g2", "g2"],
            "labels": [1, 0, 1, 1, 0]}


def test_ranking_groups_candidates_and_pads_a_smaller_group_with_masked_copies(tiny_tokenizer
                                                                                 ) -> None:
    out, _ = RANK.task_type.featurize(RANK, rank_columns(), tiny_tokenizer, 64)
    assert out["uid"] == ["g1", "g2"]
    assert out["candidate_uids"] == [["a", "b"], ["c", "d", "e"]]
    assert out["labels"] == [1, 2]  # the positive's place in its group
    batch = RANK.task_type.collate(out, tiny_tokenizer.pad_token_id)
    assert batch["input_ids"].shape[0] == 6  # 2 groups x 3 candidates
    assert batch["candidate_mask"].tolist() == [[True, True, False], [True, True, True]]
    assert batch["input_ids"][2].tolist() == batch["input_ids"][0].tolist()  # a copy


def test_ranking_loss_and_divergence_are_over_each_groups_softmax() -> None:
    scores = torch.tensor([[1.0, 2.0, ABSENT_SCORE], [0.5, -1.0, 3.0]])
    labels = torch.tensor([0, 2])
    by_hand = -(math.log(math.exp(1) / (math.exp(1) + math.exp(2))) +
                math.log(math.exp(3) / (math.exp(0.5) + math.exp(-1) + math.exp(3)))) / 2
    assert RANK.task_type.loss(scores, labels).item() == pytest.approx(by_hand, rel=1e-5)
    perturbed = scores + torch.tensor([[0.1, -0.2, 0.0], [0.0, 0.3, -0.1]])
    divergence = RANK.task_type.divergence("symmetric_kl", {})
    two = symmetric_kl(scores[:1, :2], perturbed[:1, :2]).item()
    three = symmetric_kl(scores[1:], perturbed[1:]).item()
    # the padded candidate has no probability in either softmax: it adds nothing
    assert divergence(scores, perturbed).item() == pytest.approx((two + three) / 2, rel=1e-4)


def test_ranking_decodes_the_top_candidate_and_scores_both_metrics_by_hand() -> None:
    predictions = [np.array([0.2, 0.9]), np.array([1.0, 0.0, 0.5]), np.array([0.1, 0.3])]
    dataset = {"labels": [1, 0, 0], "uid": ["g1", "g2", "g3"],
               "candidate_uids": [["a", "b"], ["c", "d", "e"], ["f", "g"]]}
    # groups 1 and 2 ranked right (all 5 candidates right), group 3 wrong (both wrong)
    assert RANK.task_type.score(RANK, predictions, dataset) == \
        pytest.approx({"accuracy": 5 / 7, "top1": 2 / 3})
    records = RANK.task_type.records(RANK, predictions, dataset)
    assert [(r["uid"], r["rank"], r["prediction"]) for r in records[:2]] == \
        [("a", 2, "not_entailment"), ("b", 1, "entailment")]
    assert sum(r["probability"] for r in records[2:5]) == pytest.approx(1, abs=1e-5)


# ---- one extension point --------------------------------------------------------------------
def test_outside_the_type_modules_nothing_asks_which_type_a_task_is() -> None:
    """No comparison of a task's type with a type's name anywhere else in the package."""
    asks = re.compile(r"""\.type\s*(==|!=|in\b)|["'](classification|regression|ranking|"""
                      r"""token_classification|span_extraction)["']""")
    found = []
    for path in sorted((REPO / "mtdnn").rglob("*.py")):
        if "tasks/types" in str(path):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if asks.search(line) and "device" not in line:
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


# ---- resume mid-epoch ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def typed_rows(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.conftest import SHARED_DATA, head_jsonl, run_module

    root = tmp_path_factory.mktemp("typed")
    run_module("mtdnn.data_prep", "groups", "--data-dir", str(prepared_data), "--task", "qnli",
               "--key", "question", "--dev-groups", "20", "--out-dir", str(root / "groups"))
    run_module("mtdnn.data_prep", "squad", "--raw-dir", str(SHARED_DATA),
               "--out-dir", str(root / "squad_data"))
    return {"conll2003": head_jsonl(prepared_data / "conll2003/train.jsonl",
                                    root / "ner.jsonl", 40),
            # 12 questions, each context cut into two or more windows at max_seq_len 128
            "squad": head_jsonl(root / "squad_data/squad/dev.jsonl", root / "squad.jsonl", 12),
            "qnli_ranking": head_jsonl(root / "groups/train.jsonl", root / "rank.jsonl", 40)}


@pytest.mark.parametrize("task", ["conll2003", "qnli_ranking", "squad"])
def test_a_run_stopped_mid_epoch_resumes_to_the_same_metrics(
        task: str, typed_rows: dict[str, Path], tiny_encoder_dir: Path, tmp_path: Path) -> None:
    rows = typed_rows[task]
    common = [f"tasks=[{task}]", f"tasks.{task}.train={rows}", f"tasks.{task}.dev={rows}",
              f"encoder={tiny_encoder_dir}", "batch_size=4", "max_steps=4", "smart.enabled=true",
              "smart.teacher_schedule=paper", "save_every_steps=1", "progress_bar=false",
              f"cache_dir={tmp_path / 'cache'}", "precision=fp32"]
    whole, run, _ = whole_and_stopped(common, tmp_path)
    if task == "squad":  # the log counts windows, not examples, and says what was cut
        assert "12 contexts cut into several windows" in (whole / "train.log").read_text()
    resumed = subprocess.run([sys.executable, "train.py", f"resume={run}"], cwd=REPO,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "at step 2" in resumed.stderr  # mid-epoch: an epoch is more than 4 batches of 4
    assert (run / "metrics.jsonl").read_text() == (whole / "metrics.jsonl").read_text()
    entries = [json.loads(x) for x in (whole / "metrics.jsonl").read_text().splitlines()]
    smart = [e for e in entries if e["kind"] == "train"]
    assert smart and all(e["adv_loss"] > 0 for e in smart)  # the divergence acted


def test_four_types_train_in_one_smart_stage_and_answer_in_one_predictor_call(
        typed_rows: dict[str, Path], prepared_data: Path, tiny_encoder_dir: Path,
        tmp_path: Path) -> None:
    """A whole epoch of a stage with a sentence, a ranking, a token and a span task, SMART on
    each: every step holds one task's minibatch (a span task's batch is of windows), each
    task's loss and divergence are logged, and every head answers."""
    from mtdnn import Predictor
    from mtdnn.config.resolve import resolve_config
    from mtdnn.training.trainer import train
    from tests.conftest import head_jsonl

    rte = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 16)
    tasks = ("rte", "qnli_ranking", "conll2003", "squad")
    overrides = [f"tasks=[{','.join(tasks)}]", f"encoder={tiny_encoder_dir}", "epochs=1",
                 "batch_size=4", "smart.enabled=true", "log_every_steps=1",
                 "progress_bar=false", "precision=fp32", f"cache_dir={tmp_path / 'cache'}",
                 f"output_dir={tmp_path / 'run'}"]
    for task, rows in (("rte", rte), *((t, typed_rows[t]) for t in tasks[1:])):
        overrides += [f"tasks.{task}.train={rows}", f"tasks.{task}.dev={rows}"]
    summary = train(resolve_config(None, overrides))
    logged = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    steps = [e for e in logged if e["kind"] == "train"]
    assert len(steps) == summary["steps"]  # one task per step: one line per step
    assert {e["task"] for e in steps} == set(tasks)
    assert all(e["adv_loss"] > 0 for e in steps)
    assert set(summary["last"]["metrics"]) == set(tasks)
    assert set(summary["last"]["metrics"]["squad"]) == {"exact_match", "f1"}
    predictor = Predictor(tmp_path / "run/last")
    (answer,) = predictor.predict([{"sentence1": "A man sleeps.", "sentence2": "He rests.",
                                    "question": "Who sleeps?", "sentence": "A man sleeps.",
                                    "tokens": ["Peter", "Blackburn", "sleeps"],
                                    "context": "A man sleeps in the park."}])
    assert set(answer) == set(tasks)
    assert answer["squad"]["answer"] in "A man sleeps in the park."
    assert answer["rte"]["prediction"] in ("entailment", "not_entailment")
    assert answer["qnli_ranking"]["rank"] == 1  # a pair alone is its own group
    assert len(answer["conll2003"]["tags"]) == 3
    out = tmp_path / "ranked.jsonl"
    result = predictor.predict_file(typed_rows["qnli_ranking"], out, tasks="qnli_ranking")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 40 and set(result["metrics"]) == {"accuracy", "top1"}
    groups: dict[str, list[int]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row["rank"])
    assert all(sorted(ranks) == list(range(1, len(ranks) + 1)) for ranks in groups.values())


def test_tags_may_be_given_by_position_as_a_hub_dataset_stores_them() -> None:
    parse = NER.task_type.labels.parse
    assert parse([1, 2, 0], NER.labels) == parse(["B-PER", "I-PER", "O"], NER.labels)
    from mtdnn.tasks.task_type import LabelError

    with pytest.raises(LabelError, match="not a list of tags") as error:
        parse([1, 99], NER.labels)
    assert "by name or by position (0-8)" in error.value.allowed


# ---- span extraction ------------------------------------------------------------------------
SQUAD = TASKS["squad"]


def span_columns(context: str, question: str, answer: str) -> dict[str, list]:
    start = context.index(answer)
    return {"uid": ["q1"], "question": [question], "context": [context],
            "labels": [[{"text": answer, "start": start}]]}


def windows(task, columns: dict, tokenizer, length: int) -> dict[str, list]:
    out, _ = task.task_type.featurize(task, columns, tokenizer, length)
    return out


def test_a_long_context_is_cut_in_overlapping_windows_and_each_points_at_its_answer(
        tiny_tokenizer) -> None:
    from dataclasses import replace

    from mtdnn.tasks.types.span_extraction import OUTSIDE

    task = replace(SQUAD, options={"doc_stride": 8})
    filler = " ".join(f"word{i}" for i in range(40))
    context = f"{filler} The capital is Paris today. {filler}"
    out = windows(task, span_columns(context, "What is the capital?", "Paris"),
                  tiny_tokenizer, 48)
    assert len(out["uid"]) > 2 and set(out["uid"]) == {"q1"}
    holding = [labels for labels in out["labels"] if labels != [0, 0]]
    assert holding  # the windows holding "Paris" point at it, the others at [CLS]
    for offsets, labels in zip(out["offsets"], out["labels"], strict=True):
        if labels != [0, 0]:
            start, end = offsets[labels[0]][0], offsets[labels[1]][1]
            assert context[start:end] == "Paris"
        assert offsets[0] == [OUTSIDE, OUTSIDE]  # [CLS] is not the context's


def test_an_answer_across_two_windows_and_one_in_the_last_window(tiny_tokenizer) -> None:
    from dataclasses import replace

    from mtdnn.tasks.types.span_extraction import OUTSIDE

    task = replace(SQUAD, options={"doc_stride": 8})
    words = [f"w{i}" for i in range(60)]
    context = " ".join(words) + " the end is near"
    out = windows(task, span_columns(context, "Where?", "end is near"), tiny_tokenizer, 32)
    assert out["labels"][-1] != [0, 0]  # the last window holds the answer
    straddled = 0
    for i in range(len(words) - 3):
        answer = " ".join(words[i:i + 3])
        start = context.index(answer + " ")
        out = windows(task, {**span_columns(context, "Where?", answer),
                             "labels": [[{"text": answer, "start": start}]]}, tiny_tokenizer, 32)
        for offsets, labels in zip(out["offsets"], out["labels"], strict=True):
            spans = [span for span in offsets if span[0] != OUTSIDE]
            holds_start = spans[0][0] <= start < spans[-1][1]
            holds_end = spans[0][0] < start + len(answer) <= spans[-1][1]
            if holds_start != holds_end:  # the window cuts the answer: it points at [CLS]
                straddled += 1
                assert labels == [0, 0]
            elif holds_start:
                s, e = offsets[labels[0]][0], offsets[labels[1]][1]
                assert context[s:e] == answer
        assert any(labels != [0, 0] for labels in out["labels"])  # another window holds it
    assert straddled > 0


def test_offsets_recover_the_original_text_with_unicode_and_extra_spaces(tiny_tokenizer
                                                                        ) -> None:
    context = "Zürich   is  in Switzerland — the café «Odéon» opened in 1911."
    answer = "café «Odéon»"
    out = windows(SQUAD, span_columns(context, "Which café?", answer), tiny_tokenizer, 192)
    (offsets,), ((first, last),) = out["offsets"], out["labels"]
    assert context[offsets[first][0]:offsets[last][1]] == answer


def test_decoding_picks_the_best_span_across_windows_within_the_length_limit() -> None:
    from dataclasses import replace

    import datasets

    task = replace(SQUAD, options={"max_answer_length": 2})
    context = "alpha beta gamma delta"
    offsets = [[-1, -1], [0, 5], [6, 10], [11, 16], [17, 22]]
    weak, strong = np.full((5, 2), -5.0), np.full((5, 2), -5.0)
    weak[1, 0], weak[2, 1] = 1.0, 1.0          # "alpha beta": score 2
    strong[3, 0], strong[4, 1] = 3.0, 3.0       # "gamma delta": score 6
    strong[1, 0] = 9.0                          # a start whose best end is too far: 3 tokens
    strong[:, 1][0] = 9.0                       # an end on [CLS] (not the context)
    row = {"uid": "q", "offsets": offsets, "context": context, "answers": ["gamma delta"]}
    dataset = datasets.Dataset.from_list([row, row])  # two windows of one question
    found = SQUAD.task_type.answers(task, [weak, strong], dataset)["q"]
    assert (found["answer"], found["start"], found["end"]) == ("gamma delta", 11, 22)
    assert SQUAD.task_type.score(task, [weak, strong], dataset) == {"exact_match": 1.0,
                                                                   "f1": 1.0}


@pytest.mark.parametrize(("prediction", "golds", "em", "f1"), [
    ("the Denver Broncos", ["Denver Broncos"], 1.0, 1.0),          # articles dropped
    ("Denver Broncos!", ["denver  broncos"], 1.0, 1.0),            # punctuation, case, spaces
    ("Broncos", ["Denver Broncos", "the Broncos"], 1.0, 1.0),      # the best gold counts
    ("Denver", ["Denver Broncos"], 0.0, 2 / 3),                    # P 1, R 1/2
    ("24–10", ["24-10"], 0.0, 0.0),                                # an en dash is not ASCII
    ("«Odéon»", ["Odéon"], 0.0, 0.0),                              # nor are guillemets
    ("an apple a day", ["apple day"], 1.0, 1.0),
])
def test_exact_match_and_f1_are_the_official_script_s(prediction: str, golds: list[str],
                                                      em: float, f1: float) -> None:
    """The values SQuAD v1.1's evaluate-v1.1.py gives (it strips ASCII punctuation only)."""
    from mtdnn.tasks.types.span_extraction import best_over_golds, exact_match, token_f1

    assert best_over_golds(exact_match, prediction, golds) == em
    assert best_over_golds(token_f1, prediction, golds) == pytest.approx(f1)


def test_the_span_loss_and_divergence() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 2)
    labels = torch.tensor([[1, 3], [0, 0]])
    by_hand = np.mean([-torch.log_softmax(logits[b, :, k], -1)[labels[b, k]].item()
                       for b in range(2) for k in range(2)])
    assert SQUAD.task_type.loss(logits, labels).item() == pytest.approx(by_hand, rel=1e-5)
    context = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    divergence = SQUAD.task_type.divergence("symmetric_kl", {"context_mask": context})
    moved = logits.clone()
    moved[~context] += 5.0  # the question and padding do not count
    assert divergence(logits, moved).item() == pytest.approx(0.0, abs=1e-6)
    assert divergence(logits, logits + torch.randn(2, 6, 2)).item() > 0
