"""Fixtures: a store on a real SQLite file, open for writing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlbench_tui.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "m.db")
    yield s
    s.close()
