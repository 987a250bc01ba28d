"""``python -m styrmin_backend.agent <parent pid> <relay fd>``: the agent process of ``styrmin up`` and
the harness (``agent.process``), its settings on stdin."""

import sys

# httpx imports its command line client (click, rich, pygments: 80 modules, 4 MB) whenever they are
# installed, as they are here for styrmin's own CLI; the agent never runs it.
sys.modules["httpx._main"] = None  # type: ignore[assignment]

from styrmin_backend.agent.process import main  # noqa: E402

sys.exit(main(sys.argv))
