"""The scale benchmark's loss-free property in the suite: 128 simulated ranks (each like the worker
reporter: one keep-alive connection, a batch per second, validation and a final flush of every
rank at once) against a real ``mlbench server`` process; every acknowledged row is in the store
exactly once, counted from the SQLite file after the server stopped, also for batches sent again
after their acknowledgement was lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scale import measure

pytestmark = pytest.mark.slow


def test_128_ranks_lose_nothing_and_store_retried_batches_once(tmp_path: Path) -> None:
    s = measure(128, 4.0, tmp_path, procs=2, retry_every=5, validation_every=1.5)
    st = s.stats
    assert st.lost == 0
    assert st.acked == s.stored  # per kind: metrics, logs, events
    assert s.ranks_stored == 128
    # Every rank sent its start and final batches, and training batches went too ...
    assert st.batches["events"] >= 128 and st.batches["logs"] >= 2 * 128 and st.batches["metrics"] > 128
    # ... and each fifth batch twice: the server said "already stored" to every one of them.
    assert st.forced_retries >= sum(st.batches.values()) // 5 - 128
    assert st.duplicates >= st.forced_retries
