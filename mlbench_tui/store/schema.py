"""The store's schema from the table models: DDL to create it, and a check of a store against it.

``create`` writes the tables, indexes and views of ``tables.py`` into a store file; ``check``
compares a store's schema, as SQLite describes it, with one created from the models in memory, so
a store whose schema and models disagree is refused with the differences instead of failing
mid-write.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from mlbench_tui.errors import StoreError
from mlbench_tui.store.tables import TABLES, VIEWS

_DIALECT = sqlite.dialect()


def ddl() -> list[str]:
    """``CREATE`` statements of every table, index and view of the models."""
    statements = []
    for table in TABLES:
        statements.append(str(CreateTable(table).compile(dialect=_DIALECT)))
        indexes = sorted(table.indexes, key=lambda i: str(i.name))
        statements += [str(CreateIndex(index).compile(dialect=_DIALECT)) for index in indexes]
    statements += [f"CREATE VIEW {name} AS {select}" for name, select in VIEWS.items()]
    return statements


def create(conn: sqlite3.Connection) -> None:
    """Create the models' schema in ``conn``'s database (inside the caller's transaction)."""
    for statement in ddl():
        conn.execute(statement)


def describe(conn: sqlite3.Connection) -> dict[str, Any]:
    """The schema of ``conn``'s database as SQLite reports it, keyed by table, index and view name.

    Columns are compared by name (a migrated table may have them in another order), with their
    declared type, NOT NULL, default and place in the primary key.
    """
    out: dict[str, Any] = {}
    objects = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master"
        " WHERE name NOT LIKE 'sqlite_stat%' AND name != 'sqlite_sequence' ORDER BY name"
    ).fetchall()
    for kind, name, table, sql in objects:
        if kind in ("table", "view"):
            columns = {
                col: (decl.upper(), bool(notnull), default, pk)
                for _cid, col, decl, notnull, default, pk in conn.execute(f'PRAGMA table_info("{name}")')
            }
            without_rowid = kind == "table" and " ".join(sql.split()).upper().endswith("WITHOUT ROWID")
            out[f"{kind} {name}"] = {"columns": columns, "without rowid": without_rowid}
        elif kind == "index":
            unique = next(row[2] for row in conn.execute(f'PRAGMA index_list("{table}")') if row[1] == name)
            indexed = [row[2] for row in conn.execute(f'PRAGMA index_info("{name}")')]
            out[f"index {name}"] = {"table": table, "on": indexed, "unique": bool(unique)}
    return out


def differences(conn: sqlite3.Connection) -> list[str]:
    """How ``conn``'s schema differs from the models' (empty when it matches).

    Tables, indexes and views the models do not have are left alone (an index someone added for
    their own queries); every one the models have must be there exactly.
    """
    reference = sqlite3.connect(":memory:")
    try:
        create(reference)
        want = describe(reference)
    finally:
        reference.close()
    have = describe(conn)
    out = [f"{key} is missing" for key in want.keys() - have.keys()]
    for key in sorted(want.keys() & have.keys()):
        wanted, found = want[key], have[key]
        if wanted == found:
            continue
        if "columns" not in wanted:
            out.append(f"{key} is {found}, the models say {wanted}")
            continue
        w, f = wanted["columns"], found["columns"]
        out += [f"{key}: column {c} is missing" for c in w.keys() - f.keys()]
        out += [f"{key}: column {c} is not in the table models" for c in f.keys() - w.keys()]
        out += [
            f"{key}: column {c} is {f[c]}, the models say {w[c]}" for c in w.keys() & f.keys() if w[c] != f[c]
        ]
        if wanted["without rowid"] != found["without rowid"]:
            out.append(
                f"{key}: WITHOUT ROWID is {found['without rowid']}, the models say {wanted['without rowid']}"
            )
    return sorted(out)


def check(conn: sqlite3.Connection, path: str = "") -> None:
    """Refuse (``StoreError``) a store whose schema is not the models' schema."""
    found = differences(conn)
    if found:
        shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        raise StoreError(
            f"store {path or '(memory)'} does not have the schema this mlbench expects: {shown}",
            hint="it was changed outside mlbench; point --db / MLBENCH_DB at another store",
        )
