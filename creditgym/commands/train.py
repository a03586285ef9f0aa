"""``creditgym train``: train a policy with a credit module on an env (flags generated from ``TrainConfig``)."""

from __future__ import annotations

import argparse
import sys

from creditgym.commands.common import add_train_flags, train_overrides


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
        summary = train(cfg, args.out, resume=args.resume, overwrite=args.overwrite, wandb=args.wandb)
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


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.wandb_log import FLAG as WANDB_FLAG

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
    tr.add_argument("--wandb", **WANDB_FLAG)
    tr.set_defaults(func=_cmd_train)
