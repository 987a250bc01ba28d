"""What the process of `styrmin agent` loads: the agent's code, not the server's."""

from __future__ import annotations

from tests.support.processes import python_prints

SERVER_ONLY = ("fastapi", "sqlalchemy", "styrmin_backend.server_app", "styrmin_backend.store.models")


def test_the_agent_command_loads_neither_the_servers_app_nor_its_database_code() -> None:
    """An agent reaches the server over HTTP only: the server's app (FastAPI, its routes and pages),
    SQLAlchemy and the store would stay in its memory unused (about 50 MB together)."""
    printed = python_prints(
        "import sys\n"
        "from styrmin_backend.cli import app\n"
        "from styrmin_backend.agent.loop import Agent\n"
        "from styrmin_backend.agent.wiring import build_parts\n"
        "from styrmin_backend.metrics import AGENT_REGISTRY\n"
        f"print(sorted(name for name in {SERVER_ONLY!r} if name in sys.modules))\n"
    )
    assert printed.splitlines()[-1] == "[]"
