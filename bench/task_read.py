"""Benchmark: reads of a long history, 100,000 tasks and 500,000 steps of 100 deployments in PostgreSQL.

Sets up its own database (dropped at the end), loads it with COPY, runs the real server on loopback
(uvicorn, one process, as `styrmin server` does), warms up, then reads random tasks one at a time.
Prints p50, p99 and throughput beside the target (p99 <= 20 ms). Then lists the deployments
(``GET /api/v1/deployments``, whose statuses read each deployment's latest changes, and the web UI's
deployments page, which also shows each one's newest task) and prints p50 and p99 of each beside the
target of the lists (p99 <= 100 ms, issue 23's figure for 200 deployments): a list must not grow
slower as the deployments' histories grow.

    uv run python bench/task_read.py [--tasks 100000] [--requests 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
from _figures import percentile, styrmin_server

from styrmin_backend.store.db import make_engine
from styrmin_backend.store.migrate import upgrade_database

ADMIN_DSN = os.environ.get("STYRMIN_BENCH_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
TARGET_P99_MS = 20.0
LIST_TARGET_P99_MS = 100.0
LIST_REQUESTS = 200
STEP_NAMES = [
    "Run the upgrade pre-hook",
    "Apply the chart",
    "Run the upgrade hook",
    "Wait for components",
    "Run the upgrade post-hook",
]


def load(dsn: str, tasks: int, steps_per_task: int) -> None:
    now = datetime.now(UTC)
    with psycopg.connect(dsn) as connection:
        connection.execute(
            "INSERT INTO deployments (name, namespace, cluster, driver_name, driver_version, app_version, "
            "configuration, stopped_components, status, last_revision, created_at, updated_at) "
            "SELECT 'shop-' || g, 'shop-' || g, 'local', 'shop', '1.0.0', '1.0', '{}', '[]', 'running', 0, %s, %s "
            "FROM generate_series(1, 100) g",
            (now, now),
        )
        # The trigger that keeps each deployment's latest tasks would update the same 100 rows 100,000
        # times in this one transaction: filled once after the load instead.
        connection.execute("ALTER TABLE tasks DISABLE TRIGGER tasks_note_latest")
        with connection.cursor().copy(
            "COPY tasks (id, type, status, deployment_id, deployment_name, revision, requested_by, created_at, "
            "started_at, ended_at, error, result, parent_task_id, parent_step_id) FROM STDIN"
        ) as copy:
            for task_id in range(1, tasks + 1):
                deployment = task_id % 100 + 1
                created = now - timedelta(seconds=tasks - task_id)
                failed = task_id % 10 == 0
                parent = task_id - 1 if task_id % 7 == 0 else None
                copy.write_row(
                    (
                        task_id,
                        "upgrade",
                        "failed" if failed else "succeeded",
                        deployment,
                        f"shop-{deployment}",
                        task_id,
                        "admin",
                        created,
                        created,
                        created + timedelta(seconds=30),
                        "The upgrade hook failed." if failed else None,
                        json.dumps({"started_tasks": []}),
                        parent,
                        (parent - 1) * steps_per_task + 3 if parent else None,
                    )
                )
        connection.execute("ALTER TABLE tasks ENABLE TRIGGER tasks_note_latest")
        connection.execute(
            "INSERT INTO latest_tasks (deployment_id, type, task_id) SELECT deployment_id, type, max(id) "
            "FROM tasks WHERE parent_task_id IS NULL GROUP BY deployment_id, type"
        )
        tail = "\n".join(f"migration line {n}: applying change set" for n in range(200))
        with connection.cursor().copy(
            "COPY steps (id, task_id, position, name, status, started_at, ended_at, error, output_tail, "
            "output_truncated, notes, flow_run_id) FROM STDIN"
        ) as copy:
            step_id = 0
            for task_id in range(1, tasks + 1):
                created = now - timedelta(seconds=tasks - task_id)
                failed = task_id % 10 == 0
                for position in range(steps_per_task):
                    step_id += 1
                    broke = failed and position == 2
                    copy.write_row(
                        (
                            step_id,
                            task_id,
                            position,
                            STEP_NAMES[position % 5],
                            "failed" if broke else "succeeded",
                            created,
                            created + timedelta(seconds=5),
                            "Job shop-migrate failed with exit code 1." if broke else None,
                            tail if broke else None,
                            broke,
                            json.dumps(["Deleted Job shop-migrate-1."] if broke else []),
                            str(uuid.uuid4()),
                        )
                    )
        for table in ("tasks", "steps", "deployments"):
            connection.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"  # noqa: S608 - fixed table names
            )
        connection.execute("ANALYZE")


def _timed_gets(client: httpx.Client, path: str) -> list[float]:
    """Milliseconds of each of ``LIST_REQUESTS`` GETs of ``path``, after 20 that warm up."""
    timed = []
    for _ in range(LIST_REQUESTS + 20):
        t0 = time.perf_counter()
        response = client.get(path)
        timed.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, response.text[:300]
    return timed[20:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--steps-per-task", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()

    database = f"styrmin_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    params = dict(part.split("=", 1) for part in ADMIN_DSN.split())
    host, port, user = (
        params.get("host", "127.0.0.1"),
        params.get("port", "5432"),
        params.get("user", "postgres"),
    )
    url = f"postgresql+psycopg://{user}@{host}:{port}/{database}"
    try:
        engine = make_engine(url)
        upgrade_database(engine)
        engine.dispose()
        started = time.perf_counter()
        load(f"host={host} port={port} user={user} dbname={database}", args.tasks, args.steps_per_task)
        print(
            f"loaded {args.tasks:,} tasks and {args.tasks * args.steps_per_task:,} steps in {time.perf_counter() - started:.1f} s"
        )

        env = {
            "STYRMIN_DATABASE_URL": url,
            "STYRMIN_ADMIN_PASSWORD": "bench-password",
            "STYRMIN_DATA_DIR": tempfile.mkdtemp(prefix="styrmin-bench-"),
        }
        with styrmin_server(env) as base, httpx.Client(base_url=base) as client:
            token = client.post(
                "/api/v1/auth/login", json={"username": "admin", "password": "bench-password"}
            ).json()["token"]
            client.headers["Authorization"] = f"Bearer {token}"
            rng = random.Random(7)
            for _ in range(300):  # warm-up: connection pools, caches, JIT-free but lazy imports
                client.get(f"/api/v1/tasks/{rng.randint(1, args.tasks)}").raise_for_status()
            samples = []
            begun = time.perf_counter()
            for _ in range(args.requests):
                task_id = rng.randint(1, args.tasks)
                t0 = time.perf_counter()
                response = client.get(f"/api/v1/tasks/{task_id}")
                samples.append((time.perf_counter() - t0) * 1000)
                assert response.status_code == 200 and len(response.json()["steps"]) == args.steps_per_task
            elapsed = time.perf_counter() - begun
            listed = _timed_gets(client, "/api/v1/deployments")
            browser = httpx.Client(base_url=base)
            form = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
            assert form is not None, "no CSRF token in the login form"
            signed_in = browser.post(
                "/login",
                data={"username": "admin", "password": "bench-password", "csrf_token": form.group(1)},
            )
            assert signed_in.status_code in (200, 303), signed_in.text[:300]
            page = _timed_gets(browser, "/deployments")
        p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
        print(f"GET /api/v1/tasks/{{id}} p50: {p50:.2f} ms")
        print(
            f"GET /api/v1/tasks/{{id}} p99: {p99:.2f} ms   (target <= {TARGET_P99_MS:.0f} ms: {'met' if p99 <= TARGET_P99_MS else 'NOT met'})"
        )
        print(
            f"GET /api/v1/tasks/{{id}} mean: {statistics.fmean(samples):.2f} ms, throughput: {args.requests / elapsed:.0f} req/s (one client)"
        )
        for label, timed in (("GET /api/v1/deployments", listed), ("the deployments page", page)):
            p50, p99 = percentile(timed, 0.50), percentile(timed, 0.99)
            print(f"{label} (100, {args.tasks // 100:,} tasks each) p50: {p50:.2f} ms")
            print(
                f"{label} p99: {p99:.2f} ms   (target <= {LIST_TARGET_P99_MS:.0f} ms: {'met' if p99 <= LIST_TARGET_P99_MS else 'NOT met'})"
            )
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
