"""The ``creditgym`` command: ``envs``, ``doctor``, ``eval``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Sequence


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


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def docker_status(timeout: float = 5.0) -> tuple[bool, str]:
    """Whether a Docker engine answers (``DOCKER_HOST`` or the default socket), and a line saying which."""
    try:
        import docker
    except ImportError:
        return False, "docker SDK not installed (pip install 'creditgym[swe]')"
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout)
        version = client.version().get("Version", "?")
        client.close()
    except Exception as e:  # the SDK raises several types for "no engine"
        return (
            False,
            f"no engine at {host} ({type(e).__name__}); start one with `make engine` or set DOCKER_HOST",
        )
    return True, f"engine {version} at {host}"


def _cmd_doctor(args: argparse.Namespace) -> int:
    rows = [
        ("creditgym", _version("creditgym")),
        ("python", f"{platform.python_version()} ({sys.executable})"),
    ]
    try:
        import torch

        gpu = (
            f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
            if torch.cuda.is_available()
            else "none"
        )
        rows += [("torch", torch.__version__), ("gpu", gpu)]
    except ImportError:
        rows += [("torch", "not installed"), ("gpu", "unknown (no torch)")]
    _ok, line = docker_status()
    rows.append(("docker", line))
    for dist in ("transformers", "gymnasium", "math-verify", "vllm", "swebench", "stable-baselines3"):
        rows.append((dist, _version(dist)))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _cmd_images(args: argparse.Namespace) -> int:
    """``images build|check|clean``: one line per task; a broken task is reported and the others go on."""
    from creditgym.verifiers.swebench import (
        SandboxError,
        SWETask,
        check_images,
        clean_images,
        ensure_image,
        run_parallel,
        scan_tasks,
        self_check,
    )

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
    from creditgym.agents.evaluate import evaluate, make_agent, write_report

    try:
        agent = make_agent(args.agent, base_url=args.base_url)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(str(e)) from e
    env_kwargs = _key_values(args.env_kw, "--env-kw")
    if args.tasks is not None or args.env == "creditgym/SWEBench-v0":
        return _eval_tasks(args, agent, env_kwargs)
    if args.split:
        env_kwargs.setdefault("split", args.split)
    report = evaluate(args.env, agent, args.episodes, seed=args.seed, env_kwargs=env_kwargs)
    print(
        f"{report.agent:<8} on {report.env_id}: accuracy {report.accuracy:.3f} over {report.episodes} episodes "
        f"(infra errors: {report.infra_errors}; statuses: {report.statuses})"
    )
    if args.out:
        print(f"report: {write_report(report, args.out)}")
    return 0


def _eval_tasks(args: argparse.Namespace, agent: object, env_kwargs: dict[str, object]) -> int:
    """Multi-turn agentic evaluation: one episode per task instance (``--tasks``, default the bundled set)."""
    from creditgym.agents.evaluate import evaluate_tasks
    from creditgym.verifiers.swebench import TaskFormatError

    try:
        report = evaluate_tasks(
            args.env,
            agent,  # type: ignore[arg-type]
            args.tasks or "bundled",
            out_dir=args.out,
            workers=args.workers,
            seed=args.seed,
            env_kwargs=env_kwargs,
        )
    except (TaskFormatError, FileNotFoundError) as e:
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
    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} expects KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


# flag -> TrainConfig field; the defaults shown in --help are read from TrainConfig, their only home
_TRAIN_FLAGS = {
    "--credit": ("credit", str, "credit module: grpo, rloo, gae, ..."),
    "--model": ("model", str, "creditgym/tiny, a local Hugging Face folder, or a cached hub id"),
    "--steps": ("steps", int, "optimizer steps"),
    "--seed": ("seed", int, "seeds everything"),
    "--prompts-per-step": ("prompts_per_step", int, "P tasks per step"),
    "--group-size": ("group_size", int, "G completions per task"),
    "--temperature": ("temperature", float, "sampling temperature during training"),
    "--top-p": ("top_p", float, "nucleus mass during training"),
    "--lr": ("lr", float, "actor learning rate"),
    "--critic-lr": ("critic_lr", float, "value-head learning rate"),
    "--epochs": ("epochs", int, "passes over each rollout batch"),
    "--minibatches": ("minibatches", int, "minibatches per epoch"),
    "--clip-low": ("clip_low", float, "ratio clipped below at 1 - clip_low"),
    "--clip-high": ("clip_high", float, "ratio clipped above at 1 + clip_high"),
    "--loss-agg": ("loss_agg", str, "token-mean | seq-mean-token-mean | seq-mean-token-sum"),
    "--kl-coef": ("kl_coef", float, "KL penalty to the initial model (0 = none)"),
    "--kl-kind": ("kl_kind", str, "k1 | k2 | k3"),
    "--entropy-coef": ("entropy_coef", float, "entropy bonus"),
    "--max-grad-norm": ("max_grad_norm", float, "gradient clipping"),
    "--eval-every": ("eval_every", int, "held-out evaluation every N steps"),
    "--eval-episodes": ("eval_episodes", int, "held-out episodes (greedy)"),
    "--checkpoint-every": ("checkpoint_every", int, "checkpoint every N steps"),
    "--device": ("device", str, "cpu | cuda (default: cuda when available)"),
    "--backend": ("backend", str, "hf | vllm: who samples the rollouts"),
}


def _cmd_train(args: argparse.Namespace) -> int:
    from creditgym.agents.config import TrainConfig
    from creditgym.agents.trainer import TrainingDiverged, train

    fields = TrainConfig.__dataclass_fields__
    kwargs: dict[str, object] = {"env_id": args.env}
    for flag, (name, _, _) in _TRAIN_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            kwargs[name] = value
    env_kwargs = dict(fields["env_kwargs"].default_factory())  # type: ignore[misc]
    if args.max_new_tokens is not None:
        env_kwargs["max_new_tokens"] = args.max_new_tokens
    if args.difficulty is not None:
        env_kwargs["difficulty"] = args.difficulty
    env_kwargs.update(_key_values(args.env_kw, "--env-kw"))
    kwargs["env_kwargs"] = env_kwargs
    kwargs["credit_kwargs"] = _key_values(args.credit_kw, "--credit-kw")
    try:
        cfg = TrainConfig(**kwargs)  # type: ignore[arg-type]
        summary = train(cfg, args.out, resume=args.resume)
    except (ValueError, KeyError, FileNotFoundError, TrainingDiverged) as e:
        raise SystemExit(f"creditgym train: {e.args[0] if e.args else e}") from e
    if not summary.get("is_main", True):
        return 0  # a secondary process of a multi-process run: process 0 reports
    before, after = summary["eval_before"], summary["eval_after"]
    print(
        f"held-out accuracy: before {before:.3f} -> after {after:.3f} ({cfg.credit}, {summary['steps']} steps)"
    )
    print(
        f"outputs in {args.out}: metrics.jsonl, tensorboard/, checkpoints/, final/, curves.png, credit.html"
    )
    return 0


# CompareConfig fields set from same-named flags when given (None keeps the default)
_COMPARE_OVERRIDES = ("workers", "steps", "eval_every", "eval_episodes", "prompts_per_step", "group_size")
_COMPARE_OVERRIDES += ("lr", "max_new_tokens", "model", "device")


def _cmd_compare(args: argparse.Namespace) -> int:
    from creditgym.agents.compare import (
        CompareConfig,
        load_config,
        parse_seeds,
        run_compare,
        split_entries,
        write_report,
    )

    try:
        if args.report_only and args.credit is None:
            cfg = load_config(args.out)  # the study an earlier `compare` wrote into --out
        elif args.credit is None:
            raise ValueError("--credit is required: a comma list such as grpo,cort,cort:normalize=false")
        else:
            overrides = {
                name: getattr(args, name) for name in _COMPARE_OVERRIDES if getattr(args, name) is not None
            }
            cfg = CompareConfig(
                env_id=args.env,
                entries=tuple(split_entries(args.credit)),
                seeds=parse_seeds(args.seeds),
                env_kwargs=_key_values(args.env_kw, "--env-kw"),
                **overrides,
            )
        results = write_report(cfg, args.out) if args.report_only else run_compare(cfg, args.out)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"creditgym compare: {e}") from e
    except KeyboardInterrupt as e:
        print(f"{e}", file=sys.stderr)
        return 130
    from creditgym.agents.compare import summary_markdown

    print(summary_markdown(results))
    print(f"outputs in {args.out}: results.json, summary.md, curves.png, runs/")
    bad = [r for r in results["runs"] if r["status"] != "ok"]
    for r in bad:
        print(f"run {r['entry']} seed {r['seed']}: {r['status']} ({r['error']}); log: {args.out}/{r['log']}")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="creditgym", description=__doc__)
    parser.add_argument("--version", action="version", version=f"creditgym {_version('creditgym')}")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("envs", help="list registered env ids, one line each").set_defaults(func=_cmd_envs)
    sub.add_parser("doctor", help="report Python, torch, GPU and Docker engine").set_defaults(
        func=_cmd_doctor
    )

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

    from creditgym.agents.config import TrainConfig

    fields = TrainConfig.__dataclass_fields__
    tr = sub.add_parser("train", help="train a policy with a credit module on an env")
    tr.add_argument(
        "--env", default=fields["env_id"].default, help="registered env id (default: %(default)s)"
    )
    tr.add_argument("--out", required=True, help="run folder (metrics, checkpoints, final model, plots)")
    for flag, (name, kind, text) in _TRAIN_FLAGS.items():
        tr.add_argument(flag, type=kind, default=None, help=f"{text} (default: {fields[name].default})")
    tr.add_argument(
        "--max-new-tokens", type=int, default=None, help="response token budget (env kwarg; default 48)"
    )
    tr.add_argument("--difficulty", type=int, default=None, help="procedural difficulty level (env kwarg)")
    tr.add_argument("--env-kw", action="append", metavar="KEY=VALUE", help="extra env kwarg (JSON value)")
    tr.add_argument(
        "--credit-kw", action="append", metavar="KEY=VALUE", help="credit config field (JSON value)"
    )
    tr.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
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
    ev.set_defaults(func=_cmd_eval)

    cmp = sub.add_parser(
        "compare",
        help="train several credit modules x seeds with one budget; table and curves of held-out scores",
    )
    cmp.add_argument(
        "--env", default=fields["env_id"].default, help="registered env id (default: %(default)s)"
    )
    cmp.add_argument(
        "--credit", default=None, help="comma list of modules or variants name:key=value[;key=value]"
    )
    cmp.add_argument("--seeds", default="3", help="a count (3 = seeds 0,1,2) or a list (0,4,7); default 3")
    cmp.add_argument(
        "--steps", type=int, default=None, help=f"steps of every run (default: {fields['steps'].default})"
    )
    cmp.add_argument("--out", required=True, help="study folder: runs/, results.json, summary.md, curves.png")
    cmp.add_argument("--workers", type=int, default=None, help="runs at a time (default: half the CPU cores)")
    for flag in ("--eval-every", "--eval-episodes", "--prompts-per-step", "--group-size", "--lr", "--model"):
        name, kind, text = _TRAIN_FLAGS[flag]
        cmp.add_argument(flag, type=kind, default=None, help=f"{text} (default: {fields[name].default})")
    cmp.add_argument("--device", default=None, help=_TRAIN_FLAGS["--device"][2])
    cmp.add_argument("--max-new-tokens", type=int, default=None, help="response token budget (env kwarg)")
    cmp.add_argument("--env-kw", action="append", metavar="KEY=VALUE", help="extra env kwarg (JSON value)")
    cmp.add_argument(
        "--report-only", action="store_true", help="rewrite results.json, summary.md, curves.png from runs/"
    )
    cmp.set_defaults(func=_cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "eval":
        import gymnasium as gym

        import creditgym  # noqa: F401  (registers the env ids)

        if args.env not in gym.registry:
            from creditgym.envs import registered_ids

            raise SystemExit(f"unknown env id {args.env!r}; registered ids: {registered_ids()}")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
