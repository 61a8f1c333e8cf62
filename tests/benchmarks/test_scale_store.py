"""The 1,024-rank store generator makes what it promises: a registered run of 1,024 ranks whose
every rank has its training curves, phase totals, telemetry, log lines and states, a few
stragglers that stand out the way synchronous training shows them, the goal reached, and every
acknowledged row stored once."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlbench_worker import sysmetrics as sm

from benchmarks.scale_model import TELEMETRY
from benchmarks.scale_store import ScaleStore, build_scale_store
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer

pytestmark = pytest.mark.slow

RANKS = 1024


@pytest.fixture
def built(scale_store: ScaleStore) -> ScaleStore:
    """The session's 1,024-rank store (tests/conftest.py: 2 epochs, 3 windows, telemetry every 2)."""
    return scale_store


@pytest.fixture
def client(scale_server: EmbeddedServer) -> Iterator[MlbenchClient]:
    with MlbenchClient(scale_server.url, scale_server.info.read_token, timeout=60) as c:
        yield c


def _rows(path: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return list(conn.execute(sql, args))


def test_every_acknowledged_row_is_stored_once(built: ScaleStore) -> None:
    series = "SELECT id FROM series WHERE run_id = ?"
    ((metrics,),) = _rows(
        built.path, f"SELECT count(*) FROM metrics WHERE series IN ({series})", built.run_id
    )
    ((logs,),) = _rows(built.path, "SELECT count(*) FROM logs WHERE run_id = ?", built.run_id)
    ((events,),) = _rows(built.path, "SELECT count(*) FROM events WHERE run_id = ?", built.run_id)
    assert {"metrics": metrics, "logs": logs, "events": events} == built.rows
    per_rank = 4 * built.windows + 13 * built.epochs + len(TELEMETRY) * built.telemetry_samples
    assert metrics == RANKS * per_rank + 2 * built.epochs  # rank 0 adds the validation metrics


def test_the_run_is_a_finished_1024_rank_run_that_reached_its_goal(
    built: ScaleStore, client: MlbenchClient
) -> None:
    run = client.get_run(built.run_id)
    assert (run.name, run.workers, run.state, run.target_kind) == (
        built.run_name,
        RANKS,
        "succeeded",
        "kubernetes",
    )
    assert run.plan["workers"] == RANKS and run.spec_text.startswith("apiVersion: mlbench/v1")
    assert run.result is not None and run.result.reached is True
    assert run.result.time_to_accuracy_s is not None and run.result.time_to_accuracy_s > 0
    assert len(run.ranks) == RANKS
    assert {r.state for r in run.ranks} == {"succeeded"}
    assert run.ranks[517].host == "gpu-node-0064" and run.ranks[517].pod == f"{built.run_name}-517"
    kinds = Counter(e.kind for e in client.events(built.run_id, limit=5000).events)
    assert kinds == {
        "environment": RANKS,
        "init_start": 1,
        "run_start": 1,
        "epoch_start": 2,
        "eval_start": 2,
        "epoch_end": 2,
        "goal_reached": 1,
        "run_stop": 1,
    }


def test_every_rank_has_its_curves_totals_and_telemetry(built: ScaleStore, client: MlbenchClient) -> None:
    names = {n.name: n for n in client.metric_names(built.run_id)}
    for name in (
        "train_loss",
        "step_time",
        "time_compute",
        "time_communication",
        *(t.name for t in TELEMETRY),
    ):
        assert names[name].ranks == list(range(RANKS)), name
    assert names["val_global_Prec@1"].ranks == [0]
    assert {t.name for t in TELEMETRY} <= set(sm.BY_NAME)  # the worker's own names and units
    page = client.metrics(built.run_id, ["step_time", "sys/gpu_power_w"], rank=700)
    counts = {s.name: len(s.value) for s in page.series}
    assert counts == {"step_time": built.windows, "sys/gpu_power_w": built.telemetry_samples}


def test_stragglers_have_the_most_compute_and_the_least_communication(built: ScaleStore) -> None:
    assert len(built.stragglers) == RANKS // 256
    last = _rows(
        built.path,
        "SELECT s.name, m.rank, m.value FROM metrics m JOIN series s ON s.id = m.series "
        "WHERE s.run_id = ? AND s.name IN ('time_compute', 'time_communication') AND m.step = ?",
        built.run_id,
        built.windows * built.model.steps_per_window,
    )
    compute = {rank: value for name, rank, value in last if name == "time_compute"}
    comm = {rank: value for name, rank, value in last if name == "time_communication"}
    assert len(compute) == len(comm) == RANKS
    slowest = sorted(compute, key=lambda r: -compute[r])
    assert tuple(slowest[: len(built.stragglers)]) == built.stragglers
    share = {r: comm[r] / (comm[r] + compute[r]) for r in compute}
    assert set(sorted(share, key=share.__getitem__)[: len(built.stragglers)]) == set(built.stragglers)


def test_every_rank_logs_and_stragglers_warn(built: ScaleStore, client: MlbenchClient) -> None:
    per_rank = dict(
        _rows(built.path, "SELECT rank, count(*) FROM logs WHERE run_id = ? GROUP BY rank", built.run_id)
    )
    assert len(per_rank) == RANKS and min(per_rank.values()) >= 4  # start lines, epoch lines, stop line
    straggler = built.stragglers[0]
    warnings = client.logs(built.run_id, rank=straggler, stream="stderr").lines
    assert warnings and all("throttled" in ln.text for ln in warnings)
    assert not client.logs(built.run_id, rank=next(r for r in range(RANKS) if r not in built.stragglers),
                           stream="stderr").lines  # fmt: skip


def test_an_unfinished_run_is_live_its_last_report_just_now(tmp_path: Path) -> None:
    built_at = time.time()
    built = build_scale_store(tmp_path / "live.db", ranks=8, finished=False)
    server = EmbeddedServer(built.path, record=False).start()
    try:
        with MlbenchClient(server.url, server.info.read_token) as c:
            run = c.get_run(built.run_id)
            assert run.state == "running" and run.finished is None and run.result is None
            assert {r.state for r in run.ranks} == {"running"} and len(run.ranks) == 8
            kinds = {e.kind for e in c.events(built.run_id).events}
            assert "run_start" in kinds and not kinds & {"goal_reached", "run_stop"}
            last = max(s.t[-1] for s in c.metrics(built.run_id, "step_time").series)
            # the run's clock ends as the store is built (less the model's last few seconds): a
            # bound on the clock, not on how long building took
            assert built_at - 60 <= last <= time.time()
    finally:
        server.stop()
