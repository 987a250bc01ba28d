"""Benchmark: the SQL statements the server sends for one example upgrade.

Starts the stack `styrmin up` runs (as bench/vs_helm.py does), deploys the example driver, upgrades it
once to warm up, then counts, over a second upgrade, every SQL statement the server's engine sends,
by the route (or else the service) that sent it. The counts
do not depend on the machine's speed, so they show what a change to the agent protocol or the
services saves where timing benchmarks cannot tell it from their spread. An SQL statement costs the
server about 0.35 ms of CPU on a python-svc machine (SQLAlchemy and SQLite together).

    uv run python bench/sql_per_upgrade.py [--route agent.end_task]

``--route`` prints, after the counts, each statement that route sent, in order, with the function
of the services that sent it.
"""

from __future__ import annotations

import argparse
import inspect
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from vs_helm import EXAMPLE, deploy, styrmin_upgrade, wait_for_a_full_pool

from styrmin_backend.testing import StyrminStack

_counting = threading.Event()
_by_caller: Counter[str] = Counter()
_by_statement: Counter[str] = Counter()
_of_route: list[tuple[str, str, str]] = []
"""Each statement with the route and the service function that sent it, in order (``--route``)."""


def _caller() -> tuple[str, str]:
    """The route (or else the service) whose code sent the statement being executed, and the
    innermost service function on the way."""
    service = "other"
    for frame in inspect.stack()[3:60]:
        where = frame.filename
        if "/api/routes/" in where:
            return f"{Path(where).stem}.{frame.function}", service
        if "/services/" in where and service == "other":
            service = f"{Path(where).stem}.{frame.function}"
    return service, service


@event.listens_for(Engine, "before_cursor_execute")
def _count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
    if _counting.is_set():
        route, service = _caller()
        shown = re.sub(r"\s+", " ", statement)[:100]
        _by_caller[route] += 1
        _by_statement[shown] += 1
        _of_route.append((route, service, shown))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--route", help="print each statement this route (or service) sent, in order")
    route = parser.parse_args().route
    tmp = Path(tempfile.mkdtemp(prefix="styrmin-bench-sql-"))
    try:
        with StyrminStack.start(tmp / "data", [EXAMPLE / "catalog"]) as stack:
            stack.client.drivers.push(EXAMPLE)
            deploy(stack, "shop")
            styrmin_upgrade(stack, "shop", "1.1.0")
            wait_for_a_full_pool()
            time.sleep(2)  # the first upgrade's reports are in
            _counting.set()
            styrmin_upgrade(stack, "shop", "1.2.0")
            _counting.clear()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"SQL statements for one example upgrade: {sum(_by_caller.values())}")
    print("by route (or service):")
    for caller, count in _by_caller.most_common():
        print(f"  {count:4d}  {caller}")
    print("most sent:")
    for statement, count in _by_statement.most_common(12):
        print(f"  {count:4d}  {statement}")
    if route:
        print(f"sent by {route}, in order:")
        for caller, service, statement in _of_route:
            if caller == route:
                print(f"  {service:40}  {statement}")


if __name__ == "__main__":
    main()
