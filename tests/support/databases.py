"""A PostgreSQL database per test worker, brought back to the migrated template's state for each test.

``CREATE DATABASE ... TEMPLATE`` copies the whole template (system catalogs included, about 6 MB of
WAL, flushed) and took 0.1 s a test on a quiet machine, 1 to 2 s when other processes wrote to disk.
Emptying the worker's database writes a few kilobytes instead, in one transaction:

- every table is emptied with ``DELETE`` (children before parents; ``TRUNCATE`` makes new files
  for each table and index, and was as slow as the copy), then the rows the migrations wrote (the
  ``styrmin-actions`` user, Alembic's version) are put back as they were, ids included;
- every sequence is set back to where the template left it, so ids start the same in every test;
- before that, the database gets a name no earlier test knew, and every connection to it is ended
  (as ``DROP DATABASE ... WITH (FORCE)`` did): a server, pool or LISTEN connection a test left behind
  can neither reach the next test's data nor be counted by it;
- if a test changed the schema (a table, column, constraint, index, trigger, function or database
  setting more or less than the template), the database is dropped and copied from the template again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from graphlib import CycleError, TopologicalSorter
from typing import Any

import psycopg
from psycopg import sql

_USER_SCHEMAS = sql.SQL(
    "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
)

_SCHEMA_FINGERPRINT = sql.SQL("""
SELECT md5(coalesce(string_agg(item, E'\\n' ORDER BY item), '')) FROM (
    SELECT 'rel ' || c.oid::regclass::text || ' ' || c.relkind::text AS item
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {user_schemas}
    UNION ALL
    SELECT 'col ' || a.attrelid::regclass::text || '.' || a.attname || ' '
           || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
           || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attidentity::text
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE {user_schemas} AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'con ' || co.conrelid::regclass::text || ' ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
      FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace WHERE {user_schemas}
    UNION ALL
    SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {user_schemas}
    UNION ALL
    SELECT 'trg ' || t.tgrelid::regclass::text || ' ' || t.tgname FROM pg_trigger t WHERE NOT t.tgisinternal
    UNION ALL
    SELECT 'fun ' || p.oid::regprocedure::text
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {user_schemas}
    UNION ALL
    SELECT 'typ ' || t.oid::regtype::text
      FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE {user_schemas} AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0
    UNION ALL
    SELECT 'nsp ' || n.nspname FROM pg_namespace n WHERE {user_schemas}
    UNION ALL
    SELECT 'set ' || array_to_string(s.setconfig, ',')
      FROM pg_db_role_setting s JOIN pg_database db ON db.oid = s.setdatabase
     WHERE db.datname = current_database()
) AS schema_items
""").format(user_schemas=_USER_SCHEMAS)


class ReusedPostgresDatabase:
    """One test worker's PostgreSQL database, handed to each test in the template's state under a new name."""

    def __init__(
        self, admin: Callable[[], psycopg.Connection[Any]], conninfo: Callable[[str], str], template: str
    ):
        self._admin = admin
        self._conninfo = conninfo
        self._template = template
        self.name = self._copy_template()
        with psycopg.connect(conninfo(self.name)) as connection:
            self._fingerprint = _fingerprint(connection)
            self._tables = _tables_children_first(connection)
            contents = {table: _rows(connection, table) for table in self._tables}
            self._rows = {table: (columns, rows) for table, (columns, rows) in contents.items() if rows}
            self._sequences = connection.execute(
                "SELECT format('%I.%I', schemaname, sequencename), last_value, start_value FROM pg_sequences"
                " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()

    def fresh(self) -> str:
        """The name of the database, as the template left it, for the next test."""
        with psycopg.connect(self._conninfo(self.name)) as connection:
            if _fingerprint(connection) != self._fingerprint:
                connection.close()
                self._drop()
                self.name = self._copy_template()
                return self.name
            with connection.transaction():
                for table in self._tables:
                    connection.execute(sql.SQL("DELETE FROM {}").format(sql.SQL(table)))
                for table, (columns, rows) in self._rows.items():
                    insert = sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE VALUES ({})").format(
                        sql.SQL(table),
                        sql.SQL(", ").join(map(sql.Identifier, columns)),
                        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                    )
                    connection.cursor().executemany(insert, rows)
                for sequence, last_value, start_value in self._sequences:
                    connection.execute(
                        "SELECT setval(%s::regclass, %s, %s)",
                        (sequence, start_value if last_value is None else last_value, last_value is not None),
                    )
        return self.name

    def put_away(self) -> None:
        """End every connection to the database and rename it, so nothing a test left running reaches it."""
        new_name = f"styrmin_w_{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + 60
        with self._admin() as admin:
            while True:
                admin.execute(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (self.name,),
                )
                try:
                    admin.execute(
                        sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                            sql.Identifier(self.name), sql.Identifier(new_name)
                        )
                    )
                    break
                except psycopg.errors.ObjectInUse:  # a connection came back in between: end it too
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        self.name = new_name

    def close(self) -> None:
        self._drop()

    def _copy_template(self) -> str:
        name = f"styrmin_w_{uuid.uuid4().hex[:12]}"
        with self._admin() as admin:
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(self._template)
                )
            )
        return name

    def _drop(self) -> None:
        with self._admin() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )


def _fingerprint(connection: psycopg.Connection[Any]) -> str:
    row = connection.execute(_SCHEMA_FINGERPRINT).fetchone()
    connection.rollback()
    assert row is not None
    return str(row[0])


def _tables_children_first(connection: psycopg.Connection[Any]) -> list[str]:
    """Every table, each before the tables its foreign keys point to (so DELETEs never break a key)."""
    tables = [
        row[0]
        for row in connection.execute(
            sql.SQL(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND {user_schemas}"
            ).format(user_schemas=_USER_SCHEMAS)
        )
    ]
    parents: dict[str, set[str]] = {table: set() for table in tables}
    for child, parent in connection.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint WHERE contype = 'f'"
    ):
        if child != parent and child in parents:
            parents[child].add(parent)
    connection.rollback()
    try:
        parents_first = list(TopologicalSorter(parents).static_order())
    except CycleError as error:  # no such schema here; a TRUNCATE of all tables would be needed
        raise NotImplementedError(f"Foreign keys form a cycle: {error.args[1]}") from error
    return [table for table in reversed(parents_first) if table in parents]


def _rows(connection: psycopg.Connection[Any], table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    cursor = connection.execute(sql.SQL("SELECT * FROM {}").format(sql.SQL(table)))
    columns = [column.name for column in cursor.description or ()]
    rows = cursor.fetchall()
    connection.rollback()
    return columns, rows
