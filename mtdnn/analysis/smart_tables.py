"""SMART's tables: the logged size of each regulariser beside the loss, the teacher's share of
the start weights, and the resolved settings each arm ran with."""

from __future__ import annotations

from typing import Any

import numpy as np

from mtdnn.analysis.selection import Record
from mtdnn.analysis.statistics import table_head


def smart_terms_table(arms: list[str], records: list[Record]) -> str:
    """The evidence that SMART acted: per arm and task, the median over runs of each run's
    median logged λ_s·R_s ÷ task loss, ‖δ‖∞ and μ·D_Breg ÷ task loss; where the records
    have them, the share of the start weights left in the teacher at the end and the mean
    entropy of the dev predictions (plain's too: a SMART whose entropy stays near a uniform
    guess has not freed its student), then each arm's resolved SMART settings."""
    extra = any("dev_entropy" in r for r in records)
    logged = [r for r in records if r.get("smart_terms") or (extra and r.get("dev_entropy"))]
    if not logged:
        return ""
    heads = [label for _, label in TERMS] + (
        ["teacher's start share at the end", "dev entropy (nats)"] if extra else [])
    what = ("Logged SMART terms, and the mean entropy of each arm's dev predictions (median "
            "over runs of each run's median; plain's entropy, where logged, is the level of a "
            "student nothing holds back):" if extra else
            "Logged SMART terms (median over runs of each run's median):")
    lines = ["", what, "",
             *table_head(["task", *heads], first="arm")]
    marked = unlogged = False
    for arm in arms:
        for task in dict.fromkeys(r["task"] for r in logged if r["arm"] == arm):
            mine = [r for r in logged if r["arm"] == arm and r["task"] == task]
            cells = terms_cells(mine)
            if extra:
                share, entropy = start_share_cell(mine), entropy_cell(mine, task)
                cells += [share, entropy]
                marked = marked or share.endswith("*")
                unlogged = unlogged or entropy == "not logged"
            lines.append(f"| {arm} | {task} | " + " | ".join(cells) + " |")
    if marked:
        lines += ["", "*: records from before the share was logged: computed from the arm's "
                      "teacher schedule and the run's steps."]
    if unlogged:
        lines += ["", "not logged: records from before the dev entropy was (a ChaosNLI "
                      "breakdown, where there is one, has the entropy per agreement level)."]
    return "\n".join(lines) + "\n" + smart_settings_table(arms, records)


TERMS = (("adv_ratio", "λ_s·R_s ÷ loss"), ("delta_linf", "‖δ‖∞"),
         ("bregman_ratio", "μ·D_Breg ÷ loss"))


def terms_cells(records: list[Record]) -> list[str]:
    """Each logged SMART term's median over ``records`` of each one's median."""
    terms = [r.get("smart_terms") or {} for r in records]
    return [f"{np.median([t[n]['median'] for t in terms if n in t]):.2g}"
            if any(n in t for t in terms) else "—" for n, _ in TERMS]


def stage_terms_table(stages: dict[str, list[Record]]) -> str:
    """The multi-task stages with SMART: their logged terms (over all the stage's tasks;
    median over stage seeds of each seed's median) and the teacher's share of the start
    weights at the end, then their settings; the stage is where MT-DNN-SMART's own SMART
    acts, before any fine-tuning."""
    rows = {f"stage {name}": [{**r, "arm": f"stage {name}"} for r in found]
            for name, found in stages.items() if found and resolved_smart(found[0])}
    if not rows:
        return ""
    lines = ["", "SMART in the multi-task stages (all their tasks; median over stage seeds "
             "of each seed's median):", "",
             *table_head([label for _, label in TERMS]
                         + ["teacher's start share at the end"], first="stage")]
    marked = False
    for label, found in rows.items():
        share = start_share_cell(found)
        marked = marked or share.endswith("*")
        lines.append(f"| {label} | " + " | ".join([*terms_cells(found), share]) + " |")
    if marked:
        lines += ["", "*: records from before the share was logged: computed from the "
                      "stage's teacher schedule and steps."]
    return "\n".join(lines) + "\n" + smart_settings_table(
        list(rows), [r for found in rows.values() for r in found], first="stage")


def resolved_smart(record: Record) -> dict[str, Any] | None:
    """A SMART record's settings, every key after the preset; for a record from before
    records kept them, its keys resolved as this version resolves them (the presets have
    kept their values since those runs). ``None`` for a run without SMART."""
    if record.get("smart_settings"):
        return record["smart_settings"]
    smart = (record.get("train_keys") or {}).get("smart")
    if not (isinstance(smart, dict) and smart.get("enabled")):
        return None
    from mtdnn.config.resolve import resolve_config
    from mtdnn.config.schema import to_dict

    return to_dict(resolve_config({"smart": smart}, tasks_later=True).smart)


def start_share_cell(records: list[Record]) -> str:
    """The median over ``records`` of the teacher's share of the start weights at the end:
    logged, or for a record from before it was logged computed from the schedule, and then
    marked * (a cell over both kinds still counts every run); "—" without a teacher."""
    logged = [r["teacher_start_share"] for r in records
              if r.get("teacher_start_share") is not None]
    computed = [share for r in records if r.get("teacher_start_share") is None
                for share in [schedule_start_share(r)] if share is not None]
    if not logged and not computed:
        return "—"
    return f"{np.median(logged + computed):.2g}" + ("*" if computed else "")


def entropy_cell(records: list[Record], task: str) -> str:
    """The median over ``records`` of the mean entropy of their dev predictions, and how many
    of them logged it when not all did."""
    entropies = [r["dev_entropy"][task] for r in records
                 if task in (r.get("dev_entropy") or {})]
    if not entropies:
        return "not logged"
    part = f" ({len(entropies)} of {len(records)} runs)" if len(entropies) < len(records) else ""
    return f"{np.median(entropies):.3f}{part}"


def schedule_start_share(record: Record) -> float | None:
    """The teacher's share of the start weights at the run's end, from its schedule and its
    steps (the run's only update count a record from before the logged share keeps; for a
    run that stopped early, whose schedule was laid over more updates, it is an upper
    bound); ``None`` for a run without a teacher."""
    from mtdnn.modeling.smart import teacher_start_share

    settings = resolved_smart(record)
    if not settings or not settings.get("bregman_weight") or not record.get("steps"):
        return None
    every = settings["teacher_update_every"]
    updates = record["steps"] // every
    return teacher_start_share(updates, updates, settings["teacher_beta_early"],
                               settings["teacher_beta_late"],
                               settings["teacher_early_fraction"],
                               settings["teacher_schedule"], settings["teacher_lag_fraction"])


SETTINGS = (("epsilon", "ε"), ("adv_weight", "λ_s"), ("bregman_weight", "μ"),
            ("teacher_schedule", "teacher"), ("teacher_lag_fraction", "lag ÷ run"),
            ("preset", "preset"))


def smart_settings_table(arms: list[str], records: list[Record], first: str = "arm") -> str:
    """Each SMART arm's settings as its records resolved them (every key after the preset),
    so that a row says what ran without the preset table of its day. An arm whose records
    predate resolved settings (marked *) shows its keys resolved as this version resolves
    them (the presets have kept their values since those runs). The teacher's cells are
    empty where μ = 0 (no teacher), the lag's where the schedule is not ``scaled``."""
    found = {r["arm"]: r["smart_settings"] for r in records if r.get("smart_settings")}
    named: dict[str, dict[str, Any]] = {}
    for r in records:  # one resolution per arm: its runs share their keys
        if r["arm"] not in found and r["arm"] not in named:
            settings = resolved_smart(r)
            if settings:
                named[r["arm"]] = settings
    if not found and not named:
        return ""

    def cells(settings: dict[str, Any]) -> str:
        shown = dict(settings)
        if not shown.get("bregman_weight"):
            shown["teacher_schedule"] = None
        if shown.get("teacher_schedule") != "scaled":
            shown["teacher_lag_fraction"] = None
        return " | ".join("—" if shown.get(key) is None else f"{shown[key]:g}"
                          if isinstance(shown[key], float) else str(shown[key])
                          for key, _ in SETTINGS)

    lines = ["", f"SMART settings of each {first} (as its records resolved them; *: records "
             "from before they kept them, their keys resolved by this version):", "",
             *table_head([label for _, label in SETTINGS], first=first)]
    for arm in arms:
        if arm in found:
            lines.append(f"| {arm} | {cells(found[arm])} |")
        elif arm in named:
            lines.append(f"| {arm} * | {cells(named[arm])} |")
    return "\n".join(lines) + "\n"
