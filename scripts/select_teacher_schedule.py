"""Apply the selection rule of "SMART's mean teacher at short budgets" (docs/results.md,
written before the first run) to the records of experiments/smart_teacher_tuning.yaml, and
print each step.

    python scripts/select_teacher_schedule.py [--records results/smart_teacher_tuning]

For an arm, d = SMART − plain tuning accuracy per (task, seed): 9 paired differences over
SciTail 1%, RTE 80% and MRPC 80% and seeds 13-15. Noise is SE = sd(d)/√n; "beyond noise"
is |mean d| > 2 SE.

1. Step (a): the schedule with the highest mean d (within 0.1 points the earlier of paper,
   ramp, scaled). It becomes the default only if it beats `paper` beyond noise on its own
   paired differences, schedule − paper.
2. An ε acts if, on every task, the median over its runs of each run's median logged
   λ_s·R_s ÷ task loss is at least 1e-3; it does not lose if its mean d > −2 SE.
3. Dev re-runs only if a selection moves SMART − plain beyond noise (mean d > 2 SE) or
   changes the default schedule.
No verdict is printed until every arm has every (task, seed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
SCHEDULES = ("paper", "ramp", "scaled")  # the order of "the least change"
TIE, ACTS = 0.1, 1e-3


def load(records: Path) -> tuple[dict[tuple[str, str, int], float], dict[str, dict]]:
    """Tuning accuracy (points) by (arm, task, seed), and each SMART arm's logged terms."""
    accuracy: dict[tuple[str, str, int], float] = {}
    logged: dict[str, dict] = {}
    for path in sorted(records.glob("*/*/*/seed*/result.json")):
        record = json.loads(path.read_text())
        arm, task, seed = record["arm"], record["task"], record["seed"]
        accuracy[(arm, task, seed)] = 100 * record["metrics"][task]["accuracy"]
        terms = record.get("smart_terms") or {}
        entry = logged.setdefault(arm, {}).setdefault(task, {"adv": [], "breg": [],
                                                             "share": [], "entropy": []})
        if "adv_ratio" in terms:
            entry["adv"].append(terms["adv_ratio"]["median"])
        if "bregman_ratio" in terms:
            entry["breg"].append(terms["bregman_ratio"]["median"])
        if record.get("teacher_start_share") is not None:
            entry["share"].append(record["teacher_start_share"])
        entry["entropy"].append((record.get("dev_entropy") or {}).get(task, np.nan))
    return accuracy, logged


def paired(accuracy: dict, arm: str, base: str, cells: list[tuple[str, int]]) -> np.ndarray:
    return np.array([accuracy[(arm, t, s)] - accuracy[(base, t, s)] for t, s in cells])


def describe(d: np.ndarray) -> tuple[float, float, str]:
    se = float(d.std(ddof=1) / np.sqrt(len(d)))
    mean = float(d.mean())
    verdict = ("beyond noise" if abs(mean) > 2 * se else "within noise")
    return mean, se, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path,
                        default=REPO / "results" / "smart_teacher_tuning")
    parser.add_argument("--config", type=Path,
                        default=REPO / "experiments" / "smart_teacher_tuning.yaml")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    tasks, seeds, baseline = config["tasks"], config["seeds"], config["baseline"]
    cells = [(t, s) for t in tasks for s in seeds]
    accuracy, logged = load(args.records)
    arms = {arm: (spec or {}).get("train", {}).get("smart", {})
            for arm, spec in config["arms"].items()}
    missing = {arm: sum((arm, t, s) not in accuracy for t, s in cells) for arm in arms}
    step_a_arms = [a for a, smart in arms.items() if a == baseline or "epsilon" not in smart]
    if any(missing[a] for a in step_a_arms):
        print(f"{sum(missing[a] for a in step_a_arms)} of {len(step_a_arms) * len(cells)} "
              "step (a) runs missing; no verdict yet")
        return
    print(f"SMART − {baseline}, {len(cells)} paired differences (task × seed), points:")
    step_a, eps_arms = {}, {}
    for arm, smart in arms.items():
        if arm == baseline:
            continue
        if missing[arm]:
            print(f"  {arm}: {missing[arm]} of {len(cells)} runs missing")
            continue
        mean, se, verdict = describe(paired(accuracy, arm, baseline, cells))
        adv = {t: float(np.median(logged[arm][t]["adv"])) for t in tasks}
        breg = {t: float(np.median(logged[arm][t]["breg"])) for t in tasks}
        share = {t: float(np.median(logged[arm][t]["share"])) for t in tasks}
        entropy = {t: float(np.nanmedian(logged[arm][t]["entropy"])) for t in tasks}
        acts = all(v >= ACTS for v in adv.values())
        print(f"  {arm}: mean d {mean:+.2f} ± {se:.2f} (SE; {verdict}); "
              f"ε {smart.get('epsilon', 'preset')}; R_s acts: {acts} "
              f"(median λ_s·R_s ÷ loss {', '.join(f'{t} {v:.1e}' for t, v in adv.items())}); "
              f"μ·D_Breg ÷ loss {', '.join(f'{t} {v:.2g}' for t, v in breg.items())}; "
              f"teacher start share {', '.join(f'{t} {v:.2f}' for t, v in share.items())}; "
              f"dev entropy {', '.join(f'{t} {v:.3f}' for t, v in entropy.items())}")
        if "epsilon" not in smart and smart.get("teacher_schedule") in SCHEDULES:
            step_a[smart["teacher_schedule"]] = (arm, mean, se)
        elif "epsilon" in smart:
            eps_arms[arm] = (acts, mean > -2 * se)
    print("dev entropy of plain: " + ", ".join(
        f"{t} {float(np.nanmedian(logged[baseline][t]['entropy'])):.3f}" for t in tasks))
    top = max(m for _, m, _ in step_a.values())
    best = next(s for s in SCHEDULES if s in step_a and step_a[s][1] >= top - TIE)
    best_arm = step_a[best][0]
    print(f"step (a): best schedule {best} (mean d {step_a[best][1]:+.2f}; "
          f"ties within {TIE} go to the earlier of {', '.join(SCHEDULES)})")
    default = "paper"
    if best != "paper":
        mean, se, verdict = describe(paired(accuracy, best_arm, step_a["paper"][0], cells))
        print(f"  {best} − paper: {mean:+.2f} ± {se:.2f} (SE; {verdict})")
        if mean > 2 * se:
            default = best
    print(f"default smart.teacher_schedule: {default}")
    moved = step_a[best][1] > 2 * step_a[best][2]
    print(f"SMART − plain moved beyond noise by step (a): {moved}")
    for arm, (acts, keeps) in eps_arms.items():
        print(f"{arm}: R_s acts {acts}, does not lose {keeps}: step (b) "
              f"{'runs at this ε' if acts and keeps else 'does not run at this ε'}")
    if any(missing.values()):
        print("dev re-runs: decided when every arm has every (task, seed)")
    elif any(acts and keeps for acts, keeps in eps_arms.values()):
        print("dev re-runs: after step (b), with its λ_s preset")
    elif default != "paper" or moved:
        print(f"dev re-runs: yes, at the paper's settings (ε = 1e-5, λ_s = 1, μ = 1) with "
              f"the {best} teacher schedule; step (b) does not run")
    else:
        print("dev re-runs: none; neither step moved SMART − plain beyond its noise: stop")


if __name__ == "__main__":
    main()
