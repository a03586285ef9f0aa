"""``creditgym eval``: run an agent through an env (or the SWE tasks) and report its accuracy / resolve rate."""

from __future__ import annotations

import argparse

from creditgym.commands.common import add_ray_flags, key_values


def _cmd_eval(args: argparse.Namespace) -> int:
    from creditgym.agents.eval.evaluate import evaluate, make_agent, write_report
    from creditgym.envs import env_accepts

    env_kwargs = key_values(args.env_kw, "--env-kw")
    if args.tasks is not None or args.env == "creditgym/SWEBench-v0":
        return _eval_tasks(args, env_kwargs)
    if args.ray is not None:
        raise SystemExit(
            "creditgym eval: --ray runs multi-turn task instances (creditgym/SWEBench-v0, --tasks)"
        )
    try:  # a bad agent, model or env argument (a tokenizer unlike the model's, ...)
        if args.split and env_accepts(args.env, "split"):  # an env without splits plays all its tasks
            env_kwargs.setdefault("split", args.split)
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


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    add_ray_flags(ev, "task instance", " (multi-turn envs), on nodes that declare the docker resource")
    ev.set_defaults(func=_cmd_eval)
