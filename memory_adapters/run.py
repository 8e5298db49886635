"""A run: one invocation of an agent under a scope, as the lifecycle hooks see it."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .scope import Scope


@dataclass(slots=True)
class Run:
    """An agent run. Adapters create it; hooks receive it.

    ``state`` is free for plugins to carry data from ``run_started`` to ``run_finished``.
    ``parent`` is the run that started this one (a sub-agent's parent).
    """

    scope: Scope
    framework: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    model: str | None = None
    agent: str | None = None
    parent: Run | None = None
    started_at: float = field(default_factory=time.time)
    state: dict[str, Any] = field(default_factory=dict)
