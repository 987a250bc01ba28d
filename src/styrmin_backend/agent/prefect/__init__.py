"""Actions on Prefect: a local Prefect server, and the runner that runs each action as a flow run."""

from styrmin_backend.agent.prefect.runner import ActionOutcome, ActionRunner
from styrmin_backend.agent.prefect.server import LocalPrefectServer, PrefectServerError

__all__ = ["ActionOutcome", "ActionRunner", "LocalPrefectServer", "PrefectServerError"]
