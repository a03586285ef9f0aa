"""Module paths of creditgym 0.1 that moved when ``agents/`` and ``verifiers/`` were split by job.

``import creditgym`` installs a finder, so a script written against an old path (``from
creditgym.agents.trainer import train``) keeps working: the old name gives the module at its new place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

#: old module -> its new place
MOVED: dict[str, str] = {
    **{
        f"creditgym.agents.{old}": f"creditgym.agents.{new}"
        for old, new in {
            "trainer": "train.trainer",
            "config": "train.config",
            "train_flags": "train.flags",
            "policy": "train.policy",
            "backends": "train.backends",
            "rollout": "train.rollout",
            "loss": "train.loss",
            "checkpoint": "train.checkpoint",
            "plots": "train.plots",
            "progress": "train.progress",
            "interrupts": "train.interrupts",
            "signals": "providers",
            "teachers": "providers.teachers",
            "critics": "providers.critics",
            "critic_model": "providers.critic_model",
            "mc": "providers.mc",
            "probe_report": "probe.report",
            "compare": "study.compare",
            "results": "study.results",
            "stats": "study.stats",
            "scheduler": "study.scheduler",
            "ray_jobs": "study.ray_jobs",
            "evaluate": "eval.evaluate",
            "remote": "eval.remote",
            "scripted": "eval.scripted",
        }.items()
    },
    **{
        f"creditgym.verifiers.{old}": f"creditgym.verifiers.{new}"
        for old, new in {
            "sandbox": "swe.sandbox",
            "docker_sandbox": "swe.docker_sandbox",
            "swebench": "swe.grading",
            "swe_images": "swe.images",
            "chat_client": "rubric.chat_client",
        }.items()
    },
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of `MOVED` and loads it as the module at its new place (the same object)."""

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _Alias(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["_target"] = importlib.import_module(MOVED[module.__name__])


class _Alias(ModuleType):
    """The old name of a moved module: every attribute is read from the module at its new place."""

    def __getattr__(self, name: str) -> object:
        if "_target" not in self.__dict__:  # still being set up by the import system
            raise AttributeError(name)
        return getattr(self.__dict__["_target"], name)

    def __dir__(self) -> list[str]:
        return dir(self.__dict__["_target"])


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
