"""Lazy re-exports of a built-in plugin's names from a core module, behind its extra.

:mod:`memory_adapters.pydantic_ai` and :mod:`memory_adapters.langchain` are the import paths
users find under ``memory_adapters.``; the adapters themselves live in the plugin packages
(``memory_adapters_pydantic_ai``, ``memory_adapters_langchain``). :class:`LazyExports` loads
the plugin on the first attribute access, after checking that the extra's packages import, so
a missing extra is a :class:`~memory_adapters.errors.MissingExtra` naming the
``pip install`` that fixes it, and importing the core module itself never imports a framework.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import MissingExtra


@dataclass
class LazyExports:
    """The names ``module`` re-exports from ``plugin``, which need ``extra``'s ``packages``."""

    module: str
    plugin: str
    names: Sequence[str]
    extra: str
    packages: Sequence[str]
    """Importable top-level packages the extra installs (``langchain_core``, ...)."""
    described: str
    """The extra's distributions as the error names them (``"pydantic-ai-slim"``)."""
    _ready: bool = field(default=False, init=False)

    def get(self, name: str) -> Any:
        """The plugin's ``name``; ``MissingExtra`` when the extra is not installed."""
        if name not in self.names:
            raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
        if not self._ready:
            for package in self.packages:
                try:
                    importlib.import_module(package)
                except ImportError as exc:
                    raise MissingExtra(self.extra, self.described) from exc
            self._ready = True
        return getattr(importlib.import_module(self.plugin), name)
