"""The read gate on a real SQLite file: slow reads stop when their client leaves or at their
deadline, and reads beyond the pool wait, then are refused, instead of piling up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection

from mlbench_tui.server.reads import ReadAborted, ReadGate
from mlbench_tui.store.engine import make_engine

pytestmark = pytest.mark.anyio

SLOW = (  # never ends on its own: only an interrupt stops it
    "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def slow(conn: Connection) -> Any:
    return conn.exec_driver_sql(SLOW).scalar()


class Client:
    """The part of a Starlette request the gate watches: gone after ``after`` seconds."""

    def __init__(self, after: float) -> None:
        self.gone_at = time.monotonic() + after

    async def is_disconnected(self) -> bool:
        return time.monotonic() >= self.gone_at


async def test_a_read_whose_client_left_is_interrupted(tmp_path: Path) -> None:
    # a deadline no test reaches: the endless query can only stop because its client left
    gate = ReadGate(make_engine(tmp_path / "s.db"), deadline=3600)
    with pytest.raises(ReadAborted) as err:
        await gate.run(Client(after=0.3), slow)  # type: ignore[arg-type]
    assert err.value.reason == "client_gone"
    assert gate.running == 0 and gate.aborted == 1
    assert await gate.run(None, lambda c: c.exec_driver_sql("SELECT 42").scalar()) == 42  # pool reusable
    gate.close()


async def test_a_read_past_its_deadline_is_stopped_and_a_full_pool_refuses(tmp_path: Path) -> None:
    gate = ReadGate(make_engine(tmp_path / "s.db"), workers=1, deadline=0.5, queue_wait=0.2)
    first = asyncio.ensure_future(gate.run(None, slow))
    await asyncio.sleep(0.05)
    with pytest.raises(ReadAborted) as busy:
        await gate.run(None, lambda c: c.exec_driver_sql("SELECT 1").scalar())
    assert busy.value.reason == "server_busy"
    with pytest.raises(ReadAborted) as late:
        await first
    assert late.value.reason == "read_timeout" and "0.5 s" in late.value.message
    assert await gate.run(None, lambda c: c.exec_driver_sql("SELECT 1").scalar()) == 1
    gate.close()
