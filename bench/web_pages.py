"""Benchmark: the web UI's deployment page with 1,000 tasks of history and a latest task of 50 steps.

Seeds a database (SQLite by default, or a fresh PostgreSQL database that is dropped at the end) with
the example driver, one deployment, 1,000 tasks of history and a newest task of 50 steps (each with a
note, the last with 200 lines of output). Then runs the real server on loopback (`styrmin server`,
one process), logs in as a browser does (session cookie), warms up, and times the pages one request
at a time. Prints p50 and p99 per page beside the target (the deployment page renders in <= 100 ms).

    uv run python bench/web_pages.py [--database sqlite|postgresql] [--rounds 200] [--tasks 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
from _figures import BENCH_SECRET_KEY, percentile, styrmin_server

from styrmin_backend.drivers import DeploymentConfiguration, read_driver, validate_driver
from styrmin_backend.services import auth, changes, drivers, workflow
from styrmin_backend.services.users import ensure_admin
from styrmin_backend.store.db import make_engine, make_session_factory, transaction
from styrmin_backend.store.migrate import upgrade_database
from styrmin_backend.store.secret_box import SecretBox, use_secret_keys

EXAMPLE_DRIVER = Path(__file__).resolve().parents[1] / "examples" / "drivers" / "shop"
POSTGRES_DSN = os.environ.get("STYRMIN_BENCH_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
PASSWORD = "bench-password"  # noqa: S105 (the throwaway admin of a throwaway database)
TARGET_MS = 100.0
HISTORY_TASKS = 1000
STEPS = 50


def seed(url: str, data_dir: Path, history_tasks: int = HISTORY_TASKS) -> int:
    """The example driver, a deployment with ``history_tasks`` tasks, the newest of ``STEPS`` steps."""
    engine = make_engine(url)
    upgrade_database(engine)
    # The configuration below holds a secret: stored encrypted with the key the bench's server gets.
    use_secret_keys(engine, SecretBox([BENCH_SECRET_KEY]))
    factory = make_session_factory(engine)
    package = read_driver(EXAMPLE_DRIVER)
    with transaction(factory) as session:
        ensure_admin(session, PASSWORD, data_dir)
        drivers.push_driver(session, package, validate_driver(package), pushed_by="bench")
    with transaction(factory) as session:
        user = auth.login(session, "admin", PASSWORD)
        issued = auth.issue_token(session, user, auth.TokenKind.API, timedelta(hours=1), name="bench")
        admin = auth.authenticate(session, issued.token)
        configuration = DeploymentConfiguration(
            values={"extra": {"password": "x"}}, env={"server": {"LOG_LEVEL": "debug"}}
        )
        changes.create_deployment(
            session,
            by=admin,
            name="bench",
            namespace="bench",
            driver_name=package.name,
            driver_version=package.version,
            app_version=None,
            configuration=configuration,
        )
    for batch in range(0, history_tasks - 1, 100):
        with transaction(factory) as session:
            for number in range(batch, min(batch + 100, history_tasks - 1)):
                task = changes.upgrade_deployment(
                    session, "bench", by=admin, app_version=f"2.0.{number}", driver_version=None
                ).task
                assert task is not None
                if number < history_tasks - 2:  # history: ended tasks; the newest is the long one
                    workflow.start_task(session, task.id)
                    workflow.end_task(session, task.id, error=None)
    assert task is not None
    with transaction(factory) as session:
        workflow.start_task(session, task.id)
        for number in range(STEPS):
            step = workflow.add_step(session, task.id, f"Step {number}")
            workflow.add_step_note(
                session, step.id, f"Note of step {number}: Deleted Job bench-migrate-{number}."
            )
            if number == STEPS - 1:
                workflow.set_step_output(session, step.id, "migrating a table: ok\n" * 200, True)
                workflow.end_step(session, step.id, error="Command shop migrate failed with exit code 4.")
            else:
                workflow.end_step(session, step.id)
        workflow.end_task(session, task.id, error="Step Step 49 failed.")
    engine.dispose()
    return task.id


@contextmanager
def database(kind: str, folder: Path) -> Iterator[str]:
    """A fresh, empty database of ``kind``; a PostgreSQL one is dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'styrmin.db'}"
        return
    name = f"styrmin_bench_{uuid.uuid4().hex[:8]}"
    params = dict(part.split("=", 1) for part in POSTGRES_DSN.split())
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:{params.get('port', '5432')}/{name}"
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def timed(client: httpx.Client, path: str, rounds: int, expect: str) -> list[float]:
    """Milliseconds per GET of ``path`` after warm-up; each answer must contain ``expect``."""
    for _ in range(10):
        client.get(path).raise_for_status()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        assert expect in response.text, f"{path} did not show {expect!r}"
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--tasks", type=int, default=HISTORY_TASKS, help="tasks in the history (default 1,000)"
    )
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="styrmin-bench-") as scratch,
        database(args.database, Path(scratch)) as url,
    ):
        data_dir = Path(scratch) / "data"
        started = time.perf_counter()
        task_id = seed(url, data_dir, args.tasks)
        print(
            f"{args.database}: seeded {args.tasks:,} tasks and a task of {STEPS} steps in {time.perf_counter() - started:.1f} s"
        )
        with (
            styrmin_server({"STYRMIN_DATABASE_URL": url, "STYRMIN_DATA_DIR": str(data_dir)}) as base,
            httpx.Client(base_url=base) as client,
        ):
            opened = client.post("/api/v1/auth/session", json={"username": "admin", "password": PASSWORD})
            opened.raise_for_status()
            pages = [
                (
                    f"deployment page ({args.tasks:,} tasks, latest of {STEPS} steps)",
                    "/deployments/bench",
                    "Step 49",
                ),
                (f"task view ({STEPS} steps)", f"/tasks/{task_id}", "Earlier output was cut"),
                ("deployments list", "/deployments", "bench"),
                ("deployment state (polled every 3 s)", "/deployments/bench/state", "task-worker"),
            ]
            for label, path, expect in pages:
                samples = timed(client, path, args.rounds, expect)
                p50, p99 = statistics.median(samples), percentile(samples, 0.99)
                verdict = "met" if p50 <= TARGET_MS else "NOT met"
                print(
                    f"{label}: p50 {p50:.1f} ms, p99 {p99:.1f} ms   (target p50 <= {TARGET_MS:.0f} ms: {verdict})"
                )


if __name__ == "__main__":
    main()
