"""A Griffe extension for the API pages: a class whose docstring is completed when its module is imported
(`TrainConfig`'s ``Attributes`` section, built from its fields' help) is documented with that docstring."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

#: The classes whose docstrings are read from the imported class instead of the source.
RUNTIME = ("creditgym.agents.train.config.TrainConfig",)


class RuntimeDocstrings(griffe.Extension):
    def on_class(self, *, cls: griffe.Class, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if cls.path not in RUNTIME:
            return
        module, _, name = cls.path.rpartition(".")
        doc = inspect.getdoc(getattr(importlib.import_module(module), name)) or ""
        cls.docstring = griffe.Docstring(doc, parent=cls)
