"""``creditgym probe``: score credit modules' per-token advantages against Monte-Carlo ground truth on one batch."""

from __future__ import annotations

import argparse

from creditgym.commands.common import key_values


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
        given["env_kwargs"] = key_values(args.env_kw, "--env-kw")
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


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
