"""``creditgym compare``: train several credit modules x seeds with one budget; tables and curves of held-out
scores."""

from __future__ import annotations

import argparse
import sys

from creditgym.commands.common import add_ray_flags, add_train_flags, train_overrides


def _runner(args: argparse.Namespace) -> object:
    """Where `compare` sends its runs: Ray tasks with ``--ray``, else ``--workers`` local subprocesses."""
    from creditgym.agents.study.compare import default_workers
    from creditgym.agents.study.scheduler import LocalRunner

    if args.ray is None:
        return LocalRunner(args.workers or default_workers())
    if args.workers is not None:
        raise ValueError(
            "--workers sizes the local pool; with --ray, --run-cpus and --run-gpus size each run"
        )
    from creditgym.agents.study.ray_jobs import RayRunner

    return RayRunner(args.ray, cpus=args.run_cpus, gpus=args.run_gpus, retries=args.ray_retries)


def _cmd_compare(args: argparse.Namespace) -> int:
    from creditgym.agents.study.compare import (
        PER_RUN,
        CompareConfig,
        load_config,
        parse_seeds,
        run_compare,
        split_entries,
        summary_markdown,
        upgrade_results,
        write_report,
    )
    from creditgym.agents.study.ray_jobs import RayError

    try:
        if args.report_only and args.credit is None:
            cfg = load_config(args.out)  # the study an earlier `compare` wrote into --out
        elif args.credit is None:
            raise ValueError("--credit is required: a comma list such as grpo,cort,cort:normalize=false")
        else:
            cfg = CompareConfig(
                entries=tuple(split_entries(args.credit)),
                seeds=parse_seeds(args.seeds),
                train=train_overrides(args, exclude=PER_RUN),
                pilot=args.pilot,
            )
        if args.report_only:
            results = write_report(cfg, args.out)
        else:
            results = run_compare(cfg, args.out, runner=_runner(args))  # type: ignore[arg-type]
    except (ValueError, FileNotFoundError, RayError) as e:
        raise SystemExit(f"creditgym compare: {e}") from e
    except KeyboardInterrupt as e:
        print(f"{e}", file=sys.stderr)
        return 130
    print(summary_markdown(results))
    print(f"outputs in {args.out}: results.json, summary.md, curves.png, runs/")
    bad = [r for r in upgrade_results(results)["runs"] if r["status"] != "finished"]
    for r in bad:
        print(f"run {r['entry']} seed {r['seed']}: {r['status']} ({r['error']}); log: {args.out}/{r['log']}")
    return 1 if bad else 0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cmp = sub.add_parser(
        "compare",
        help="train several credit modules x seeds with one budget; table and curves of held-out scores",
        description="Every train flag below is passed to each run (default: the train default).",
    )
    cmp.add_argument("--env", default=None, help="env id: registered, or module:EnvId (default: Math-v0)")
    cmp.add_argument(
        "--credit", default=None, help="comma list of modules or variants name:key=value[;key=value]"
    )
    cmp.add_argument("--seeds", default="3", help="3 (default) = seeds 0,1,2; a list 0,4,7; one seed 5,")
    cmp.add_argument("--out", required=True, help="study folder: runs/, results.json, summary.md, curves.png")
    cmp.add_argument(
        "--workers", type=int, default=None, help="runs at a time without --ray (default: half the CPU cores)"
    )
    add_ray_flags(cmp, "training run")
    cmp.add_argument("--run-gpus", type=float, default=0.0, help="--ray: GPUs each run holds (default: 0)")
    cmp.add_argument(
        "--ray-retries",
        type=int,
        default=2,
        help="--ray: times a run whose worker or node died is started again (default: %(default)s)",
    )
    from creditgym.agents.study.compare import PER_RUN

    add_train_flags(cmp, exclude=PER_RUN)  # every train knob but the run's own module and seed
    cmp.add_argument("--env-kw", action="append", metavar="KEY=VALUE", help="extra env kwarg (JSON value)")
    cmp.add_argument(
        "--eval-env-kw", action="append", metavar="KEY=VALUE", help="held-out env kwarg (JSON value)"
    )
    cmp.add_argument(
        "--report-only", action="store_true", help="rewrite results.json, summary.md, curves.png from runs/"
    )
    cmp.add_argument("--pilot", action="store_true", help="a pilot that sizes a study: its table says so")
    cmp.set_defaults(func=_cmd_compare)
