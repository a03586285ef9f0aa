"""The SWE task record the grader reads (:class:`SWETask`), and its format error.

Loading tasks (folders in swebench's task-repo format, the bundled set, instance files) is an env's job:
``creditgym.envs.swe_tasks``. Nothing here touches Docker or the file system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DIFF_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$", re.M)


class TaskFormatError(ValueError):
    """A task folder or instance record that cannot be loaded; the message names the file or field at fault."""


@dataclass(frozen=True)
class SWETask:
    """One SWE-bench-style task, from a local task folder or an official-schema instance.

    Attributes:
        instance_id: ``owner__repo-N``.
        repo: ``owner/repo``.
        base_commit: The commit ``/testbed`` is checked out at in the image.
        problem_statement: The issue text the agent sees.
        gold_patch: The reference fix (a ``git diff``).
        test_patch: The tests that grade it; applied after the agent's patch, on reset test files.
        fail_to_pass: Tests that must go from failing to passing.
        pass_to_pass: Tests that must keep passing.
        image: Local tasks: ``sweb.eval.x86_64.<id>:<hash>``, a tag derived from the hash of the folder's build
            inputs, so an edited task gets a fresh image. Official tasks: the instance's ``image`` field, or
            swebench's Docker Hub name for the instance.
        eval_script: The script that prints the test output between swebench's start/end markers.
        log_parser: A key of ``swebench.harness.log_parsers.PARSER_REGISTRY``.
        eval_type: ``"pass_and_fail"`` or ``"fail_only"``.
        version: The repo version the instance belongs to.
        test_files: Every path the test patch touches: reset to ``HEAD`` (or deleted, when the patch creates
            them) before the test patch is applied, so a patch that edits the tests cannot grade itself.
        build_dir: The folder to ``docker build`` (local tasks); ``None`` for official images.
        workdir: The repo inside the container.
    """

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    gold_patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    image: str
    eval_script: str
    log_parser: str
    eval_type: str
    version: str
    test_files: tuple[str, ...]
    build_dir: Path | None
    workdir: str = "/testbed"

    @property
    def is_local(self) -> bool:
        """Whether the image is built from a task folder (rather than pulled)."""
        return self.build_dir is not None

    def instance(self) -> dict[str, Any]:
        """The swebench instance dict (``make_test_spec`` reads it)."""
        return {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "version": self.version,
            "patch": self.gold_patch,
            "test_patch": self.test_patch,
            "problem_statement": self.problem_statement,
            "FAIL_TO_PASS": list(self.fail_to_pass),
            "PASS_TO_PASS": list(self.pass_to_pass),
            "image": self.image,
            "eval_script": self.eval_script,
            "log_parser": self.log_parser,
            "eval_type": self.eval_type,
        }


def patch_files(diff: str) -> tuple[str, ...]:
    """The paths a ``git diff`` touches (both sides of a rename), in order of appearance."""
    seen: dict[str, None] = {}
    for match in _DIFF_HEADER.finditer(diff):
        for path in match.groups():
            seen.setdefault(path.strip().strip('"'), None)
    return tuple(seen)
