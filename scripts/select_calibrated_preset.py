"""Apply the SMART calibration's selection rule (docs/results.md, written before the runs)
to the finished records of experiments/smart_calibration.yaml, and print the ranking.

    python scripts/select_calibrated_preset.py [--records results/smart_calibration]

Rule: among the stage-B arms (those run on both tasks), the highest mean of the two
per-task mean tuning accuracies; ties within 0.2 points go to the smaller ε, then the
smaller λ_s. An arm with fewer than all its seeds on a task is reported as incomplete and
no winner is named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
TIE = 0.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=REPO / "results" / "smart_calibration")
    parser.add_argument("--config", type=Path,
                        default=REPO / "experiments" / "smart_calibration.yaml")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    tasks, seeds = config["tasks"], config["seeds"]
    found: dict[str, dict[str, list[float]]] = {}
    for path in sorted(args.records.glob("*/*/*/seed*/result.json")):
        record = json.loads(path.read_text())
        task = record["task"]
        found.setdefault(record["arm"], {}).setdefault(task, []).append(
            100 * record["metrics"][task]["accuracy"])
    rows, complete = [], True
    for arm, spec in config["arms"].items():
        if (spec or {}).get("tasks") or arm == "plain":
            continue  # stage A only, or the baseline
        smart = spec["train"]["smart"]
        counts = {t: len(found.get(arm, {}).get(t, [])) for t in tasks}
        complete &= all(n == len(seeds) for n in counts.values())
        means = {t: float(np.mean(found[arm][t])) if counts[t] else float("nan") for t in tasks}
        rows.append((float(np.mean(list(means.values()))), smart["epsilon"],
                     smart["adv_weight"], arm, means, counts))
    plain = {t: float(np.mean(found["plain"][t])) for t in tasks if found.get("plain", {}).get(t)}
    print("arm | " + " | ".join(f"{t} mean (runs)" for t in tasks) + " | mean of tasks")
    for mean, _, _, arm, means, counts in sorted(rows, key=lambda r: -r[0]):
        print(f"{arm} | " + " | ".join(f"{means[t]:.2f} ({counts[t]})" for t in tasks)
              + f" | {mean:.2f}")
    print("plain | " + " | ".join(f"{plain.get(t, float('nan')):.2f}" for t in tasks)
          + f" | {np.mean(list(plain.values())):.2f}")
    if not complete:
        print("incomplete: not every stage-B arm has all its seeds on both tasks; no winner")
        return
    best = max(r[0] for r in rows)
    tied = [r for r in rows if r[0] >= best - TIE]
    winner = min(tied, key=lambda r: (r[1], r[2]))
    print(f"best mean {best:.2f}; within {TIE}: {', '.join(r[3] for r in tied)}; "
          f"winner by the rule: {winner[3]} (epsilon {winner[1]:g}, adv_weight {winner[2]:g})")


if __name__ == "__main__":
    main()
