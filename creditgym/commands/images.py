"""``creditgym images build|check|clean``: the Docker images of SWE tasks."""

from __future__ import annotations

import argparse
import sys


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


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
