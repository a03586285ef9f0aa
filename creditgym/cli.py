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


def _cmd_eval(args: argparse.Namespace) -> int:
    from creditgym.agents.evaluate import evaluate, make_agent, write_report

    try:
        agent = make_agent(args.agent)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(str(e)) from e
    env_kwargs = {"split": args.split} if args.split else {}
    report = evaluate(args.env, agent, args.episodes, seed=args.seed, env_kwargs=env_kwargs)
    print(
        f"{report.agent:<8} on {report.env_id}: accuracy {report.accuracy:.3f} over {report.episodes} episodes "
        f"(infra errors: {report.infra_errors}; statuses: {report.statuses})"
    )
    if args.out:
        print(f"report: {write_report(report, args.out)}")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="creditgym", description=__doc__)
    parser.add_argument("--version", action="version", version=f"creditgym {_version('creditgym')}")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("envs", help="list registered env ids, one line each").set_defaults(func=_cmd_envs)
    sub.add_parser("doctor", help="report Python, torch, GPU and Docker engine").set_defaults(
        func=_cmd_doctor
    )

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
        help="oracle | random | hf:PATH (a model folder or creditgym/tiny; default: %(default)s)",
    )
    ev.add_argument("--episodes", type=int, default=50, help="number of episodes (default: %(default)s)")
    ev.add_argument(
        "--seed", type=int, default=0, help="episode i is reset with seed+i (default: %(default)s)"
    )
    ev.add_argument("--split", default="test", help="task split (default: %(default)s)")
    ev.add_argument("--out", default=None, help="folder for report.json and report.md")
    ev.set_defaults(func=_cmd_eval)
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
