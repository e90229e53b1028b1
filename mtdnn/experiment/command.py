"""Run a grid of arms × tasks × subsets × seeds from an experiment YAML, and write its tables.

    mtdnn-experiment --config experiments/domain_adaptation.yaml [key=value ...]
    mtdnn-experiment --config ... --report-only   # tables from finished runs only
    mtdnn-experiment --config ... --publish       # also copy records and tables into
                                                  # publish_dir (tracked)
    mtdnn-experiment --config ... --jobs 4        # 4 jobs at once on this machine
    mtdnn-experiment --config ... --launcher slurm   # or: --launcher ray
    mtdnn-experiment --config ... --arms smart,mt-dnn  # train these arms' runs only
    mtdnn-experiment --config ... --stage-seeds 14     # only the runs from stage seed 14

Each finished run leaves a result.json (its record); a run with a record is skipped and an
interrupted one resumes from its last checkpoint. Results: results.csv, results.md and
results.png in output_dir. The YAML's keys: README, "Experiments: many runs, one table".
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtdnn.commandline import add_debug_flag, command_parser, parsed_with_logging
from mtdnn.errors import MtdnnError
from mtdnn.experiment.config import ExperimentConfig, load_experiment, stage_of
from mtdnn.files import make_output_dir


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("mtdnn.experiment", __doc__)
    parser.add_argument("--config", help="experiment YAML, or the name of a packaged one "
                                         "(--list-configs), e.g. demo")
    parser.add_argument("--list-configs", action="store_true",
                        help="list the packaged experiments and exit")
    parser.add_argument("--report-only", action="store_true",
                        help="write the results files from the finished runs and print "
                             "what is left (runs and stages); train nothing")
    parser.add_argument("--publish", action="store_true",
                        help="copy the records and results files into publish_dir")
    parser.add_argument("--rescore-agreement", action="store_true",
                        help="recompute the agreement breakdown of the finished runs whose "
                             "final model is still in output_dir, then report as "
                             "--report-only does; trains nothing")
    changed = parser.add_mutually_exclusive_group()
    changed.add_argument("--rerun-changed", action="store_true",
                         help="train again the finished runs whose data files or task "
                              "definitions changed since they ran (their old records are "
                              "kept as result-inputs-changed.json); without this or "
                              "--keep-changed such runs stop the grid")
    changed.add_argument("--keep-changed", action="store_true",
                         help="keep the results of finished runs whose inputs changed "
                              "since they ran; the tables mark them stale")
    parser.add_argument("--stages-only", action="store_true",
                        help="train the stages the arms start from, and nothing else")
    parser.add_argument("--arms", metavar="A,B",
                        help="train only these arms' runs (and their stages), e.g. to add "
                             "one row to a finished grid; the tables still show every arm")
    parser.add_argument("--stage-seeds", metavar="S,T",
                        help="train only the runs that start from these stage seeds (and "
                             "those stages), e.g. to train a grid one stage at a time; which "
                             "runs the grid holds stays the config's")
    parser.add_argument("--launcher", choices=("local", "slurm", "ray"),
                        help="where the jobs run (default: the config's launcher.kind, "
                             "else local): local processes, Slurm through submitit, or Ray")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="local launcher: N jobs at once (launcher.jobs)")
    parser.add_argument("--threads-per-job", type=int, metavar="N",
                        help="torch threads of each job (launcher.threads_per_job)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override a config key, e.g. seeds=[13,14] train.epochs=2")
    add_debug_flag(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parsed_with_logging(build_parser(), argv)
    if args.list_configs:
        print(list_experiments())
        return
    config = load_experiment(args.config, [*args.overrides, *launcher_overrides(args)])
    # after the config is read: --help and a bad key answer before torch loads
    from mtdnn.analysis.agreement_runs import AgreementAnalysis

    analyses = (AgreementAnalysis(),)  # what the runner measures of each run's model
    for analysis in analyses:
        analysis.check(config, args.config)
    from mtdnn.experiment.grid import all_sizes, cells
    from mtdnn.experiment.jobs import work_left
    from mtdnn.experiment.records import input_status
    from mtdnn.experiment.results import publish, write_report
    from mtdnn.experiment.runner import rescore, run_experiment

    arms = chosen_arms(config, args.arms)
    stage_seeds = chosen_stage_seeds(config, arms, args.stage_seeds)
    changed = "rerun" if args.rerun_changed else "keep" if args.keep_changed else "refuse"
    if args.stages_only:
        run_experiment(config, stages_only=True, arms=arms, changed=changed,
                       analyses=analyses, stage_seeds=stage_seeds)
        if args.publish:
            publish(config)
        return
    sizes = all_sizes(config)
    if args.report_only or args.rescore_agreement:
        make_output_dir(Path(config.output_dir))
        if args.rescore_agreement:
            rescore(config, sizes, analyses)
        records = write_report(config, sizes, analyses)
    else:
        records = run_experiment(config, arms=arms, changed=changed, analyses=analyses,
                                 stage_seeds=stage_seeds)
    if args.publish:
        publish(config)
    out = Path(config.output_dir)
    print((out / "results.md").read_text())
    print(f"{len(records)} of {len(cells(config, sizes))} runs finished; "
          f"results: {out / 'results.csv'}, {out / 'results.md'}, {out / 'results.png'}")
    print(work_left(config))
    print(input_status(config, sizes).summary())


def list_experiments() -> str:
    """The packaged experiments, each with the first sentence of its header comment."""
    from mtdnn.config.resolve import first_sentence, packaged_experiments

    found = packaged_experiments()
    return "\n".join(f"{name:<24} {first_sentence(path.read_text())}"
                     for name, path in found.items()) + \
        f"\n(in {next(iter(found.values())).parent})"


def launcher_overrides(args: argparse.Namespace) -> list[str]:
    """The launcher flags as config overrides; a flag's value that the config's key would
    refuse is refused naming the flag the user typed."""
    for flag, value in (("--jobs", args.jobs), ("--threads-per-job", args.threads_per_job)):
        if value is not None and int(value) < 1:
            raise MtdnnError(f"{flag} {value}: a job count and a thread count are at least 1",
                             key=flag, allowed="a whole number >= 1")
    flags = {"launcher.kind": args.launcher, "launcher.jobs": args.jobs,
             "launcher.threads_per_job": args.threads_per_job}
    return [f"{key}={value}" for key, value in flags.items() if value is not None]


def chosen_arms(config: ExperimentConfig, text: str | None) -> tuple[str, ...] | None:
    """``--arms a,b`` as arm names of the config (None: every arm)."""
    if text is None:
        return None
    arms = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in arms if name not in config.arms]
    if unknown or not arms:
        raise MtdnnError(f"no arm '{unknown[0]}'" if unknown else "names no arm",
                         key="--arms", allowed=", ".join(config.arms))
    return arms


def chosen_stage_seeds(config: ExperimentConfig, arms: tuple[str, ...] | None,
                       text: str | None) -> tuple[int, ...] | None:
    """``--stage-seeds 13,14`` as seeds of the stages the chosen arms start from (None:
    every seed)."""
    if text is None:
        return None
    stages = {stage_of(config, arm) for arm in arms or config.arms} - {None}
    known = sorted({seed for stage in stages for seed in config.stages[stage].seeds})
    words = [word.strip() for word in text.split(",") if word.strip()]
    seeds = tuple(int(word) for word in words if word.lstrip("-").isdigit())
    if not words or len(seeds) != len(words) or not set(seeds) <= set(known):
        raise MtdnnError(f"--stage-seeds {text}: not seeds of the stages "
                         f"{'the chosen arms start' if arms else 'the arms start'} from",
                         key="--stage-seeds",
                         allowed=", ".join(map(str, known)) or "none: no arm starts from a stage")
    return seeds
