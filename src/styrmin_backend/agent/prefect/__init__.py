"""Actions on Prefect: a local Prefect server, and the runner that runs each action as a flow run.

The names below load on first use: a runner process (``python -m
styrmin_backend.agent.prefect._process``) imports this package too, and needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from styrmin_backend.agent.prefect.runner import ActionOutcome, ActionRunner
    from styrmin_backend.agent.prefect.server import LocalPrefectServer, PrefectServerError

__all__ = ["ActionOutcome", "ActionRunner", "LocalPrefectServer", "PrefectServerError"]

_MODULE_OF = {
    "ActionOutcome": "runner",
    "ActionRunner": "runner",
    "LocalPrefectServer": "server",
    "PrefectServerError": "server",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
