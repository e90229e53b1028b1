"""Apply the SMART calibration's selection rule (docs/results.md: written before the runs,
amended on 2026-11-24 with an activity floor) to the finished records of
experiments/smart_calibration.yaml, and print each step.

    python scripts/select_calibrated_preset.py [--records results/smart_calibration]

1. Activity floor (the amendment): an arm qualifies if the median over its SciTail runs of
   each run's median logged λ_s·R_s ÷ task loss is at least 1% (a SMART that acts).
2. Stage B: plain and the 3 qualifying arms with the highest mean SciTail tuning accuracy
   run on RTE as well.
3. Preset: among those 3, the highest mean of the two per-task mean tuning accuracies; ties
   within 0.2 points go to the smaller ε, then the smaller λ_s. No winner is named until
   each of them has all its seeds on both tasks.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
FLOOR, STAGE_B_ARMS, TIE = 0.01, 3, 0.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=REPO / "results" / "smart_calibration")
    parser.add_argument("--config", type=Path,
                        default=REPO / "experiments" / "smart_calibration.yaml")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    seeds = config["seeds"]
    accuracy: dict[tuple[str, str], list[float]] = {}
    ratio: dict[str, list[float]] = {}
    for path in sorted(args.records.glob("*/*/*/seed*/result.json")):
        record = json.loads(path.read_text())
        arm, task = record["arm"], record["task"]
        accuracy.setdefault((arm, task), []).append(100 * record["metrics"][task]["accuracy"])
        terms = record.get("smart_terms") or {}
        if task == "scitail" and "adv_ratio" in terms:
            ratio.setdefault(arm, []).append(terms["adv_ratio"]["median"])

    def mean(arm: str, task: str) -> float:
        return float(np.mean(accuracy[(arm, task)])) if (arm, task) in accuracy else np.nan

    smart = {arm: spec["train"]["smart"] for arm, spec in config["arms"].items() if spec}
    print("Stage A (SciTail 1%): arm, mean tuning accuracy, logged ratio, qualifies")
    qualifying = []
    for arm in sorted(smart, key=lambda a: -mean(a, "scitail")):
        logged = float(np.median(ratio[arm])) if arm in ratio else 0.0
        print(f"  {arm}: {mean(arm, 'scitail'):.2f}, {logged:.2g}, {logged >= FLOOR}")
        if logged >= FLOOR:
            qualifying.append(arm)
    stage_b = qualifying[:STAGE_B_ARMS]
    print(f"Stage B arms (the {STAGE_B_ARMS} best qualifying): {', '.join(stage_b)}")
    rows = []
    for arm in stage_b:
        counts = [len(accuracy.get((arm, task), [])) for task in ("scitail", "rte")]
        both = (mean(arm, "scitail") + mean(arm, "rte")) / 2
        rows.append((both, smart[arm]["epsilon"], smart[arm]["adv_weight"], arm, counts))
        print(f"  {arm}: SciTail {mean(arm, 'scitail'):.2f} ({counts[0]} runs), RTE "
              f"{mean(arm, 'rte'):.2f} ({counts[1]} runs), mean {both:.2f}")
    print(f"  plain: SciTail {mean('plain', 'scitail'):.2f}, RTE {mean('plain', 'rte'):.2f} "
          f"({len(accuracy.get(('plain', 'rte'), []))} runs)")
    if any(count < len(seeds) for *_, counts in rows for count in counts):
        print("incomplete: a stage-B arm lacks some of its seeds; no winner yet")
        return
    best = max(row[0] for row in rows)
    tied = [row for row in rows if row[0] >= best - TIE]
    winner = min(tied, key=lambda row: (row[1], row[2]))
    print(f"best mean {best:.2f}; within {TIE}: {', '.join(row[3] for row in tied)}; winner: "
          f"{winner[3]} (epsilon {winner[1]:g}, adv_weight {winner[2]:g})")


if __name__ == "__main__":
    main()
