"""The store file: where it lives, WAL mode, one writer process, and a file that is no store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlbench_tui.errors import StoreError
from mlbench_tui.store import queries
from mlbench_tui.store.engine import StoreLocked, default_db_path
from mlbench_tui.store.store import Store


def test_default_path_honours_home_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / "mlbench.db"
    monkeypatch.setenv("MLBENCH_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


def test_second_writer_on_same_file_is_refused(store: Store) -> None:
    with pytest.raises(StoreLocked):
        Store(store.path)
    reader = Store(store.path, write=False)
    try:
        assert reader.read(lambda c: queries.list_runs(c)) == []
    finally:
        reader.close()


def test_wal_mode_and_not_a_store(tmp_path: Path) -> None:
    s = Store(tmp_path / "w.db")
    s.close()
    assert sqlite3.connect(tmp_path / "w.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a database"):
        Store(bad)
