"""The ``creditgym`` command.

Subcommands:
    train     train a policy with a credit module on an env (flags generated from ``TrainConfig``)
    eval      run an agent through an env (or the SWE tasks) and report its accuracy / resolve rate
    compare   train several credit modules x seeds with one budget; tables and curves of held-out scores
    probe     score credit modules' per-token advantages against Monte-Carlo ground truth on one batch
    envs      list the registered env ids
    images    build, check or clean the Docker images of SWE tasks
    doctor    report Python, torch, GPU and the Docker engine
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from creditgym import installation

# Nothing here imports the rest of the package at module level: `main` checks first that it is this package.


def _cmd_envs(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from creditgym.envs import registered_ids

    for env_id in registered_ids():
        spec = gym.spec(env_id)
        entry = (
            spec.entry_point
            if isinstance(spec.entry_point, str)
            else getattr(spec.entry_point, "__name__", "?")
        )
        doc = ""
        if isinstance(spec.entry_point, str):
            module, _, attr = spec.entry_point.partition(":")
            doc = (getattr(importlib.import_module(module), attr).__doc__ or "").strip().splitlines()[0]
        print(f"{env_id:<28} {doc}  [{entry}]")
    return 0


def _cmd_images(args: argparse.Namespace) -> int:
    """``images build|check|clean``: one line per task; a broken task is reported and the others go on."""
    from creditgym.envs.swe_tasks import SWETask, scan_tasks
    from creditgym.verifiers.swe.grading import run_parallel, self_check
    from creditgym.verifiers.swe.images import check_images, clean_images, ensure_image
    from creditgym.verifiers.swe.sandbox import SandboxError

    try:
        tasks, errors = scan_tasks(args.tasks, args.ids)
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        if args.action == "clean":
            removed = clean_images(tasks, stale_only=args.stale)
            for ref in removed:
                print(f"removed {ref}")
            print(f"{len(removed)} image(s) removed")
            return 0
        status = check_images(tasks)
    except (ValueError, SandboxError) as e:  # TaskFormatError is a ValueError
        raise SystemExit(f"creditgym images {args.action}: {e}") from e

    def one(task: SWETask) -> tuple[str, bool]:
        line, ok = status[task.instance_id], status[task.instance_id] == "present"
        if args.action == "build" and not ok:
            try:
                ensure_image(task, pull_timeout=args.pull_timeout)
                line, ok = ("built" if task.is_local else "pulled"), True
            except SandboxError as e:
                print(f"{task.instance_id}: {e}", file=sys.stderr)
                line = f"FAILED ({e.kind}): {str(e).splitlines()[0]}"
        if ok and args.self_check:
            gold, empty = self_check(task, timeout=args.timeout)
            sound = gold.status == "correct" and empty.status == "wrong"
            ok = sound
            line += (
                f"; self-check {'ok' if sound else 'FAILED'}: gold {gold.status} "
                f"({gold.details.get('resolution') or gold.details.get('error')}), "
                f"empty {empty.status} ({empty.details.get('resolution') or empty.details.get('error')})"
            )
        return f"{task.instance_id:<32} {task.image}  {line}", ok

    results = run_parallel(one, tasks, jobs=args.jobs)
    for line, _ in results:
        print(line)
    good = sum(ok for _, ok in results)
    print(f"{good}/{len(results) + len(errors)} task(s) ok")
    return 0 if good == len(results) and not errors else 1


def _cmd_eval(args: argparse.Namespace) -> int:
    from creditgym.agents.eval.evaluate import evaluate, make_agent, write_report

    env_kwargs = _key_values(args.env_kw, "--env-kw")
    if args.tasks is not None or args.env == "creditgym/SWEBench-v0":
        return _eval_tasks(args, env_kwargs)
    if args.ray is not None:
        raise SystemExit(
            "creditgym eval: --ray runs multi-turn task instances (creditgym/SWEBench-v0, --tasks)"
        )
    if args.split:
        env_kwargs.setdefault("split", args.split)
    try:  # a bad agent, model or env argument (a tokenizer unlike the model's, ...)
        agent = make_agent(args.agent, base_url=args.base_url)
        report = evaluate(args.env, agent, args.episodes, seed=args.seed, env_kwargs=env_kwargs)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"creditgym eval: {e}") from e
    print(
        f"{report.agent:<8} on {report.env_id}: {report.score_name} {report.accuracy:.3f} over "
        f"{report.episodes} episodes (infra errors: {report.infra_errors}; statuses: {report.statuses})"
    )
    if args.out:
        print(f"report: {write_report(report, args.out)}")
    return 0


def _eval_tasks(args: argparse.Namespace, env_kwargs: dict[str, object]) -> int:
    """Multi-turn agentic evaluation: one episode per task instance (``--tasks``, default the bundled set)."""
    from creditgym.agents.eval.evaluate import evaluate_tasks, make_agent
    from creditgym.agents.study.ray_jobs import RayError
    from creditgym.verifiers.swe.grading import TaskFormatError

    try:  # with --ray each node makes the agent; the spec is checked here all the same
        agent = args.agent if args.ray is not None else make_agent(args.agent, base_url=args.base_url)
        if args.ray is not None:
            make_agent(args.agent, base_url=args.base_url, check_only=True)
        report = evaluate_tasks(
            args.env,
            agent,  # type: ignore[arg-type]
            args.tasks or "bundled",
            out_dir=args.out,
            workers=args.workers,
            seed=args.seed,
            env_kwargs=env_kwargs,
            ray=args.ray,
            base_url=args.base_url,
            run_cpus=args.run_cpus,
        )
    except (TaskFormatError, FileNotFoundError, ValueError, RayError) as e:
        raise SystemExit(f"creditgym eval: {e}") from e
    rate = report["resolve_rate"]
    print(
        f"{report['agent']} on {report['env_id']}: resolved {report['resolved']}/{report['total']} "
        f"(rate {'n/a' if rate is None else f'{rate:.3f}'}; infra errors: {report['infra_errors']}; "
        f"{report['seconds']:.1f}s)"
    )
    if args.out:
        print(f"report: {args.out}/report.json, {args.out}/report.md, {args.out}/trajectories/")
    return 0


def _key_values(pairs: Sequence[str] | None, flag: str) -> dict[str, object]:
    from creditgym.agents.train.flags import json_or_str

    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} expects KEY=VALUE, got {pair!r}")
        out[key] = json_or_str(raw)
    return out


def add_train_flags(
    parser: argparse.ArgumentParser, *, exclude: Sequence[str] = (), only: Sequence[str] | None = None
) -> None:
    """One flag per `TrainConfig` field (or per field in ``only``), help and default read from the config.

    Every flag defaults to None (= the field's default), so `train_overrides` keeps only what was given.
    """
    import dataclasses
    import typing

    from creditgym.agents.train.config import TrainConfig, config_help
    from creditgym.agents.train.flags import MAPPING_FLAGS as _MAPPING_FIELDS
    from creditgym.agents.train.flags import train_flag as _flag

    hints, helps = typing.get_type_hints(TrainConfig), config_help(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        if f.name in _MAPPING_FIELDS or f.name in exclude or (only is not None and f.name not in only):
            continue
        kinds = [k for k in typing.get_args(hints[f.name]) or (hints[f.name],) if k is not type(None)]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        text = helps[f.name].replace("``", "").replace("%", "%%")
        parser.add_argument(_flag(f.name), type=kinds[0], default=None, help=f"{text} (default: {default})")


def train_overrides(args: argparse.Namespace, *, exclude: Sequence[str] = ()) -> dict[str, object]:
    """The `TrainConfig` fields given on the command line (flags of `add_train_flags`, --*-kw pairs)."""
    import dataclasses

    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.flags import MAPPING_FLAGS as _MAPPING_FIELDS
    from creditgym.agents.train.flags import train_flag as _flag

    out: dict[str, object] = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in exclude:
            continue
        dest = _MAPPING_FIELDS.get(f.name, _flag(f.name))[2:].replace("-", "_")
        value = getattr(args, dest, None)
        if f.name in _MAPPING_FIELDS and f.name != "env_id" and value is not None:
            value = _key_values(value, _MAPPING_FIELDS[f.name])
        if value is not None:
            out[f.name] = value
    return out


def _cmd_train(args: argparse.Namespace) -> int:
    from creditgym.agents.train.checkpoint import CorruptCheckpointError
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.config_file import load_config_file
    from creditgym.agents.train.run_folder import RunFolderError, resume_settings
    from creditgym.agents.train.trainer import TrainingDiverged, train

    refused = (ValueError, TypeError, KeyError, FileNotFoundError, TrainingDiverged, CorruptCheckpointError)
    try:  # the model's defaults (smollm2-135m: its lr); on --resume, a flag left out keeps the run's value
        given = {**(load_config_file(args.config) if args.config else {}), **train_overrides(args)}
        cfg = TrainConfig.for_model(**resume_settings(args.out, given, args.resume))
        summary = train(cfg, args.out, resume=args.resume, overwrite=args.overwrite)
    except (RunFolderError, KeyboardInterrupt) as e:  # a folder refused or unwritable: 2; a stop signal: 130
        print(f"creditgym train: {e or 'interrupted'}", file=sys.stderr)
        return 2 if isinstance(e, RunFolderError) else 130
    except refused as e:
        raise SystemExit(f"creditgym train: {e.args[0] if e.args else e}") from e
    if not summary.get("is_main", True):
        return 0  # a secondary process of a multi-process run: process 0 reports
    before, after, name = summary["eval_before"], summary["eval_after"], summary["score_name"]
    print(
        f"held-out {name}: before {before:.3f} -> after {after:.3f} ({cfg.credit}, {summary['steps']} steps)"
    )
    print(
        f"outputs in {args.out}: metrics.jsonl, tensorboard/, checkpoints/, final/, curves.png, credit.html"
    )
    return 0


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


def _cmd_probe(args: argparse.Namespace) -> int:
    from creditgym.agents.probe.run import ProbeConfig, run_probe
    from creditgym.agents.study.compare import split_entries
    from creditgym.agents.train.checkpoint import CorruptCheckpointError
    from creditgym.agents.train.interrupts import RaiseOnSignals
    from creditgym.envs import UnknownEnvError, resolve_env_id

    given = {name: getattr(args, name) for name in _PROBE_OPTIONS if getattr(args, name) is not None}
    if args.every is not None:
        words = {"steps": None, "newline": None}
        given["every"] = _probe_value(args.every, "--every", words, int, "an int >= 1, 'steps' or 'newline'")
        if args.every == "newline":
            given["delimiter"] = "\n"
    if args.target is not None:
        what = "a reliability in (0, 1) (the lower bound K must reach) or 'none' (a fixed K)"
        given["target"] = _probe_value(args.target, "--target", {"none": None}, float, what)
    if args.env_kw:
        given["env_kwargs"] = _key_values(args.env_kw, "--env-kw")
    if args.warm:
        given["warm"] = tuple(args.warm)
    try:
        if args.env is not None:
            given["env_id"] = args.env
            resolve_env_id(args.env)  # module:EnvId imports the module that registers it
        cfg = ProbeConfig(credit=tuple(split_entries(args.credit or "")), **given)
        with RaiseOnSignals():  # SIGTERM, and SIGINT in a background job too, leave the partial probe.json
            result = run_probe(cfg, args.out)
    except (ValueError, TypeError, FileNotFoundError, UnknownEnvError, CorruptCheckpointError) as e:
        raise SystemExit(f"creditgym probe: {e.args[0] if e.args else e}") from e
    except KeyboardInterrupt:
        print(f"creditgym probe: interrupted; {args.out}/probe.json holds the partial run (complete: false)")
        return 130
    from creditgym.agents.probe.report import probe_markdown

    print(probe_markdown(result))
    print(f"outputs in {args.out}: probe.json, probe.md, probe.png")
    return 0


def _probe_value(raw: str, flag: str, words: dict[str, None], kind: type, what: str) -> float | None:
    """A probe flag's value: one of ``words`` (None), or a ``kind`` number that `ProbeConfig` accepts."""
    if raw in words:
        return words[raw]
    try:
        value = kind(raw)
    except ValueError:
        value = None
    ok = value is not None and (value >= 1 if kind is int else 0.0 < value < 1.0)
    if not ok:
        raise SystemExit(f"creditgym probe: {flag} expects {what}, got {raw!r}")
    return value


# ProbeConfig fields set from same-named flags when given (None keeps the default)
_PROBE_OPTIONS = ("model", "prompts", "group", "k", "max_k", "delimiter", "temperature", "top_p")
_PROBE_OPTIONS += ("max_new_tokens", "max_turns", "seed", "checkpoint", "device")
_PROBE_OPTIONS += ("rows", "bootstrap", "shown", "reuse")


def _add_probe_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from creditgym.agents.probe.run import ProbeConfig
    from creditgym.agents.train.config import config_help

    helps = config_help(ProbeConfig)
    pr = sub.add_parser(
        "probe",
        help="score credit modules' per-token advantages against Monte-Carlo ground truth on one batch",
    )
    pr.add_argument("--env", default=None, help=helps["env_id"].replace("``", ""))
    pr.add_argument("--out", required=True, help="folder for probe.json, probe.md and probe.png")
    pr.add_argument("--credit", default=None, help=helps["credit"] + " A comma list: grpo,cort,vine:every=1")
    every = "probe every N response tokens, 'steps' (after each token holding --delimiter) or 'newline'"
    pr.add_argument("--every", default=None, help=f"{every} (default: steps)")
    target = helps["target"].replace("``", "")
    pr.add_argument(
        "--target", default=None, help=f"{target} 'none': a fixed K (default: {ProbeConfig.target})"
    )
    pr.add_argument(
        "--env-kw", action="append", metavar="KEY=VALUE", help="env constructor kwarg (JSON value)"
    )
    pr.add_argument(
        "--warm", action="append", metavar="CHECKPOINT", default=None, help=helps["warm"].replace("``", "")
    )
    types: dict[str, type] = dict.fromkeys(("model", "checkpoint", "device", "reuse", "delimiter"), str)
    types.update(temperature=float, top_p=float)
    for name in _PROBE_OPTIONS:
        default = ProbeConfig.__dataclass_fields__[name].default
        text = helps[name].replace("``", "").replace("%", "%%")
        pr.add_argument(
            "--" + name.replace("_", "-"),
            type=types.get(name, int),
            default=None,
            help=f"{text} (default: {default})",
        )
    pr.set_defaults(func=_cmd_probe)


def _add_ray_flags(parser: argparse.ArgumentParser, what: str, note: str = "") -> None:
    parser.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help=f"run each {what} as a Ray task{note}: HOST:PORT of a cluster's head, auto (the cluster `ray "
        "start` made on this machine) or local (a cluster in this process); needs the ray extra",
    )
    parser.add_argument(
        "--run-cpus", type=float, default=1.0, help=f"--ray: CPUs each {what} holds (default: %(default)s)"
    )


def build_parser() -> argparse.ArgumentParser:
    from creditgym import models

    parser = argparse.ArgumentParser(prog="creditgym", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"creditgym {installation.version('creditgym')}"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("envs", help="list registered env ids, one line each").set_defaults(func=_cmd_envs)
    models.add_command(sub)  # creditgym models
    installation.add_command(sub)  # creditgym doctor

    im = sub.add_parser("images", help="build, check or clean the Docker images of SWE tasks")
    im.add_argument(
        "action",
        choices=("build", "check", "clean"),
        help="build: build local task images / pull official ones; check: report present or missing; "
        "clean: remove task images built here (and dead sandboxes)",
    )
    im.add_argument(
        "--tasks",
        default="bundled",
        help="bundled, a task repo (holding tasks/<id>/) or a JSON/JSONL/parquet file of SWE-bench instances "
        "(default: %(default)s)",
    )
    im.add_argument("--ids", nargs="+", default=None, metavar="ID", help="only these instance ids")
    im.add_argument(
        "--self-check",
        action="store_true",
        help="build/check: also grade the gold patch (must resolve) and the empty patch (must not)",
    )
    im.add_argument("--stale", action="store_true", help="clean: only images no current task uses")
    im.add_argument("--jobs", type=int, default=2, help="tasks handled at once (default: %(default)s)")
    im.add_argument(
        "--timeout", type=float, default=300.0, help="self-check: seconds per test run (default: %(default)s)"
    )
    im.add_argument(
        "--pull-timeout",
        type=float,
        default=60.0,
        help="build: seconds a pull may take before the image counts as missing (default: %(default)s)",
    )
    im.set_defaults(func=_cmd_images)

    from creditgym.agents.train.config import TrainConfig

    fields = TrainConfig.__dataclass_fields__
    tr = sub.add_parser("train", help="train a policy with a credit module on an env")
    tr.add_argument(  # no default: the --config file's, else TrainConfig's
        "--env", help=f"env id: registered, or module:EnvId (default: {fields['env_id'].default})"
    )
    tr.add_argument("--out", required=True, help="run folder (metrics, checkpoints, final model, plots)")
    tr.add_argument(
        "--config",
        metavar="FILE",
        help="TrainConfig fields from a TOML or JSON file (a run's config.json is one); flags override it",
    )
    add_train_flags(tr)
    tr.add_argument(
        "--env-kw", action="append", metavar="KEY=VALUE", help="env constructor kwarg (JSON value)"
    )
    tr.add_argument(
        "--eval-env-kw", action="append", metavar="KEY=VALUE", help="held-out env kwarg (JSON value)"
    )
    tr.add_argument(
        "--credit-kw", action="append", metavar="KEY=VALUE", help="credit config field (JSON value)"
    )
    tr.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    tr.add_argument("--overwrite", action="store_true", help="delete the run in --out first (its files only)")
    tr.set_defaults(func=_cmd_train)

    ev = sub.add_parser("eval", help="run an agent through an env and report its accuracy")
    ev.add_argument("--env", default="creditgym/Math-v0", help="registered env id (default: %(default)s)")
    ev.add_argument(
        "--agent",
        default="oracle",
        help="oracle | empty | random | hf:PATH (a model folder or creditgym/tiny) | openai:MODEL "
        "(an OpenAI-compatible endpoint, see --base-url; default: %(default)s)",
    )
    ev.add_argument("--episodes", type=int, default=50, help="number of episodes (default: %(default)s)")
    ev.add_argument(
        "--seed", type=int, default=0, help="episode i is reset with seed+i (default: %(default)s)"
    )
    ev.add_argument("--split", default="test", help="task split (default: %(default)s)")
    ev.add_argument("--out", default=None, help="folder for report.json and report.md")
    ev.add_argument(
        "--tasks",
        default=None,
        help="multi-turn envs: a task repo (holding tasks/<id>/) or a JSON/JSONL/parquet file of SWE-bench "
        "instances; one episode per instance (default for creditgym/SWEBench-v0: the bundled tasks)",
    )
    ev.add_argument("--workers", type=int, default=1, help="instances played at once (default: %(default)s)")
    ev.add_argument(
        "--base-url",
        default=None,
        help="endpoint of openai:MODEL (default: $OPENAI_BASE_URL or localhost:8000)",
    )
    ev.add_argument("--env-kw", action="append", metavar="KEY=VALUE", help="extra env kwarg (JSON value)")
    _add_ray_flags(ev, "task instance", " (multi-turn envs), on nodes that declare the docker resource")
    ev.set_defaults(func=_cmd_eval)

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
    _add_ray_flags(cmp, "training run")
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
    _add_probe_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:  # before the parser: building it imports creditgym.envs, which a stray creditgym folder would shadow
        installation.check_package()
    except installation.ShadowedPackage as e:
        raise SystemExit(f"creditgym: {e}") from None
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "env", None) is not None and args.command in ("eval", "compare"):
            from creditgym.envs import UnknownEnvError, resolve_env_id

            try:  # module:EnvId imports the module here; compare's runs get the same string and do the same
                resolve_env_id(args.env)
            except UnknownEnvError as e:
                raise SystemExit(f"creditgym {args.command}: {e}") from e
        return int(args.func(args))
    except ModuleNotFoundError as e:  # an optional dependency: name the extra that installs it
        if (fix := installation.missing_extra(e)) is None:
            raise
        raise SystemExit(f"creditgym {args.command}: {fix}") from None


if __name__ == "__main__":
    code = main()
    # Under `python -m`, CPython exits by SIGINT (-2, not `code`) once a KeyboardInterrupt has ended any string
    # exec (a dataclass being made when Ctrl-C came), even one caught since; a string exec of its own clears that.
    exec("")
    sys.exit(code)
