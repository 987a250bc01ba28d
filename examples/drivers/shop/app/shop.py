"""The example shop application: a server, a task worker and a database migration, over SQLite.

    shop.py serve      run the web server (here: record the start, then idle until stopped)
    shop.py work       run the task worker (heartbeats while it runs, so migrate can see it)
    shop.py migrate    bring the database schema to this program's version (refused while task
                       workers run; waits SHOP_MIGRATE_WAIT_SECONDS, default 10, for them to stop;
                       refused to an older version: migrations only go forward)
    shop.py backup     copy the database into STYRMIN_BACKUP_DIR, with its schema version beside it
    shop.py restore    copy the database back from STYRMIN_BACKUP_DIR (refused unless the backup's schema
                       version is this program's: restore the version first, then the data)
    shop.py version    print this program's version
    shop.py status     print the database's schema version and the running workers

Its version is the tag of the image it runs from (LOCALCLUSTER_IMAGE on Styrmin's local cluster),
or SHOP_VERSION. The database is SHOP_DATABASE, relative to LOCALCLUSTER_DATA_DIR (the folder the
local cluster's pods share) when not absolute. Only the standard library is used: the local cluster
runs this file with its own Python.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

WORKER_HEARTBEAT_SECONDS = 1.0
WORKER_STALE_SECONDS = 5.0


def version() -> str:
    """The tag of this program's image (digest dropped, registry port kept out), else SHOP_VERSION."""
    image = os.environ.get("LOCALCLUSTER_IMAGE", "")
    name = image.split("@", 1)[0]
    _, separator, tag = name.rpartition(":")
    if separator and "/" not in tag and tag:
        return tag
    return os.environ.get("SHOP_VERSION", "0.0.0")


def database_path() -> Path:
    path = Path(os.environ.get("SHOP_DATABASE", "shop.sqlite3"))
    if not path.is_absolute():
        path = Path(os.environ.get("LOCALCLUSTER_DATA_DIR", ".")) / path
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def connect() -> sqlite3.Connection:
    connection = sqlite3.connect(database_path(), timeout=30, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    return connection


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def schema_version(connection: sqlite3.Connection) -> str | None:
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema" not in tables:
        return None
    row = connection.execute("SELECT version FROM schema WHERE id = 1").fetchone()
    return row[0] if row else None


def running_workers(connection: sqlite3.Connection) -> list[tuple[str, str]]:
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "workers" not in tables:
        return []
    cutoff = time.time() - WORKER_STALE_SECONDS
    rows = connection.execute("SELECT worker, version FROM workers WHERE last_seen >= ?", (cutoff,))
    return [(row[0], row[1]) for row in rows]


def version_key(text: str) -> tuple[int, ...]:
    """``"1.10.2"`` as ``(1, 10, 2)``, to compare versions; parts that are not numbers count as 0."""
    return tuple(int(part) if part.isdigit() else 0 for part in text.split("."))


def migrate() -> int:
    target = version()
    with closing(connect()) as connection:
        current = schema_version(connection)
        print(f"Database {database_path()}: schema {current or 'none'}, this program {target}.", flush=True)
        if current == target:
            print(f"The database {database_path()} is already at version {target}.")
            return 0
        if current is not None and version_key(target) < version_key(current):
            print(f"Checking migrations from {current} to {target}...", flush=True)
            print(
                f"Cannot migrate the database from {current} down to {target}: migrations only go forward. "
                f"Upgrade to {current} or later, or restore a backup taken before the upgrade to {current}.",
                file=sys.stderr,
            )
            return 4
        workers = running_workers(connection)
        # Stopped workers leave within a second or two; wait for them a little before refusing.
        deadline = time.monotonic() + float(os.environ.get("SHOP_MIGRATE_WAIT_SECONDS", "10"))
        while current is not None and workers and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = running_workers(connection)
        if current is not None and workers:
            names = ", ".join(f"{worker} (version {v})" for worker, v in workers)
            print(
                f"Cannot migrate {database_path()} from {current} to {target}: task workers are running: "
                f"{names}. Stop the task-worker component first.",
                file=sys.stderr,
            )
            return 3
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS schema (id INTEGER PRIMARY KEY CHECK (id = 1), version TEXT NOT NULL)"
        )
        connection.execute(
            "CREATE TABLE IF NOT EXISTS migrations (from_version TEXT, to_version TEXT NOT NULL, at TEXT NOT NULL)"
        )
        connection.execute(
            "CREATE TABLE IF NOT EXISTS workers (worker TEXT PRIMARY KEY, version TEXT, last_seen REAL)"
        )
        connection.execute("CREATE TABLE IF NOT EXISTS starts (program TEXT, version TEXT, at TEXT)")
        connection.execute("INSERT OR REPLACE INTO schema (id, version) VALUES (1, ?)", (target,))
        connection.execute("INSERT INTO migrations VALUES (?, ?, ?)", (current, target, now()))
        connection.execute("COMMIT")
    print(f"Migrated the database {database_path()} from {current or 'nothing'} to {target}.")
    return 0


def run_until_stopped(program: str, heartbeat: bool) -> int:
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = f"{os.uname().nodename}:{os.getpid()}"
    print(f"shop {program} {version()} started, database {database_path()}", flush=True)
    with closing(connect()) as connection:
        current = schema_version(connection)
        if current is not None:
            connection.execute("INSERT INTO starts VALUES (?, ?, ?)", (program, version(), now()))
        if current != version():
            print(
                f"The database schema is at {current or 'nothing'}, this {program} is {version()}: "
                "run `shop migrate`.",
                flush=True,
            )
        next_beat = 0.0
        while not stopping:
            if heartbeat and time.monotonic() >= next_beat and schema_version(connection) is not None:
                connection.execute(
                    "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)", (worker, version(), time.time())
                )
                next_beat = time.monotonic() + WORKER_HEARTBEAT_SECONDS
            time.sleep(0.1)  # notice a stop quickly, so the worker deregisters before it is killed
        if heartbeat and schema_version(connection) is not None:
            connection.execute("DELETE FROM workers WHERE worker = ?", (worker,))
    print(f"shop {program} stopped", flush=True)
    return 0


BACKUP_FILE = "shop.sqlite3"
SCHEMA_FILE = "schema-version"


def backup_dir() -> Path:
    folder = os.environ.get("STYRMIN_BACKUP_DIR", "")
    if not folder:
        print("STYRMIN_BACKUP_DIR is not set: run this in the backup or restore hook.", file=sys.stderr)
        raise SystemExit(2)
    return Path(folder)


def backup() -> int:
    folder = backup_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with closing(connect()) as connection:
        current = schema_version(connection)
        if current is None:
            print(f"The database {database_path()} has no schema: nothing to back up.", file=sys.stderr)
            return 5
        # SQLite's online backup: a consistent copy while the server and workers keep running.
        with closing(sqlite3.connect(folder / BACKUP_FILE)) as target:
            connection.backup(target)
    (folder / SCHEMA_FILE).write_text(current + "\n")
    print(f"Backed up {database_path()} (schema {current}) to {folder / BACKUP_FILE}.")
    return 0


def restore() -> int:
    folder = backup_dir()
    source_path = folder / BACKUP_FILE
    if not source_path.is_file():
        print(f"The backup has no {BACKUP_FILE} in {folder}.", file=sys.stderr)
        return 5
    saved = (folder / SCHEMA_FILE).read_text().strip() if (folder / SCHEMA_FILE).is_file() else "unknown"
    if saved != version():
        print(
            f"The backup's database is at schema {saved}, this program is {version()}: restore it with "
            f"shop {saved}.",
            file=sys.stderr,
        )
        return 6
    with closing(sqlite3.connect(source_path)) as source, closing(connect()) as connection:
        source.backup(connection)
        restored = schema_version(connection)
    print(f"Restored {database_path()} from {source_path} (schema {restored}).")
    return 0


def status() -> int:
    with closing(connect()) as connection:
        print(f"schema: {schema_version(connection) or 'none'}")
        for worker, worker_version in running_workers(connection):
            print(f"worker: {worker} {worker_version}")
    return 0


def idle() -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> int:
    # Accept both `shop migrate` as a whole command and `migrate` as arguments to the entrypoint.
    if argv and argv[0] == "shop":
        argv = argv[1:]
    command = argv[0] if argv else "serve"
    commands = {
        "serve": lambda: run_until_stopped("server", heartbeat=False),
        "work": lambda: run_until_stopped("task-worker", heartbeat=True),
        "migrate": migrate,
        "status": status,
        "backup": backup,
        "restore": restore,
        "idle": idle,
        "version": lambda: print(version()) or 0,
    }
    if command not in commands:
        print(f"Unknown command {command!r}; use one of: {', '.join(commands)}.", file=sys.stderr)
        return 2
    return commands[command]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
