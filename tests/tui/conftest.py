"""Fixtures for TUI tests: a real server on 127.0.0.1 over a copy of the recorded fixture store."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlbench_tui.server.serve import EmbeddedServer

FIXTURE_STORE = Path(__file__).parent.parent / "fixtures" / "tui" / "store.sqlite3"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store_copy(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    shutil.copyfile(FIXTURE_STORE, path)
    return path


@pytest.fixture
def server(store_copy: Path) -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer(store_copy, record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def empty_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer(tmp_path / "empty.db", record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


GPU_STORES = Path(__file__).parent.parent / "fixtures" / "stores" / "h200-2026-11-27"


def gpu_store_copy(tmp_path: Path, which: str) -> Path:
    """A copy of a real H200 store (``suite`` or ``holdout``): its database with its WAL."""
    dest = tmp_path / which
    dest.mkdir()
    for suffix in ("", "-wal", "-shm"):
        source = GPU_STORES / which / f"mlbench.db{suffix}"
        if source.exists():
            shutil.copyfile(source, dest / f"mlbench.db{suffix}")
    return dest / "mlbench.db"


@pytest.fixture
def holdout_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A real server over a copy of the H200 holdout store (one-rank 0a runs, a bf16 1a GPU run)."""
    srv = EmbeddedServer(gpu_store_copy(tmp_path, "holdout"), record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def suite_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A real server over a copy of the H200 suite store (tasks 0a-4b, eager and CUDA graphs)."""
    srv = EmbeddedServer(gpu_store_copy(tmp_path, "suite"), record=False).start()
    try:
        yield srv
    finally:
        srv.stop()
