"""Every acknowledged metric survives ``kill -9`` of the server during ingest."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mlbench_tui.errors import ServerError
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.store.api_models import RunCreate

from .conftest import ServerProcess

pytestmark = pytest.mark.slow

BATCH = 200


def test_sigkill_during_ingest_loses_no_acknowledged_metric(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    db = tmp_path / "durable.db"
    server = server_factory(db=db)
    created = server.admin().create_run(RunCreate(name="durable", workers=4))
    run_id, token = created.run.id, created.write_token
    acked: list[set[int]] = [set() for _ in range(4)]
    stop = threading.Event()

    def sender(rank: int) -> None:
        client = MlbenchClient(server.url, token, timeout=5)
        seq = 0
        while not stop.is_set():
            points = [{"name": "m", "value": float(i), "step": seq * BATCH + i} for i in range(BATCH)]
            try:
                client.post_metrics(run_id, points, rank=rank, seq=seq)
            except ServerError:
                return  # the server is gone: this batch was not acknowledged
            acked[rank].add(seq)
            seq += 1

    threads = [threading.Thread(target=sender, args=(r,), daemon=True) for r in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(len(a) for a in acked) < 40 and time.monotonic() < deadline:
        time.sleep(0.02)
    server.proc.send_signal(signal.SIGKILL)  # mid-ingest: senders are still posting
    server.proc.wait(10)
    stop.set()
    for t in threads:
        t.join(10)
    total_acked = sum(len(a) for a in acked)
    assert total_acked >= 40

    restarted = server_factory(db=db)
    page = restarted.admin().metrics(run_id, "m")
    stored: dict[int, set[int]] = {s.rank: {st for st in s.step if st is not None} for s in page.series}
    for rank in range(4):
        expected = {seq * BATCH + i for seq in acked[rank] for i in range(BATCH)}
        missing = expected - stored.get(rank, set())
        assert not missing, f"rank {rank}: {len(missing)} acknowledged points lost"
