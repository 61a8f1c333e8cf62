"""The worker reporter against a real server: batching, spool-and-resend, flush on exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker.reporting.reporter import Reporter
from mlbench_worker.reporting.spool import Spool

from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _new_run(db: Path) -> tuple[str, str]:
    with Store(db) as store:
        run, token = store.create_run(RunCreate(name="reporter", workers=2))
    return run.id, token


def _points(db: Path, run_id: str) -> list[tuple[int, str, int | None, float | None]]:
    with Store(db, write=False) as store:
        page = store.read(lambda c: queries.metrics(c, run_id))
    return sorted((s.rank, s.name, st, v) for s in page.series for st, v in zip(s.step, s.value, strict=True))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(tmp_path / "store.db", record=False) as srv:
        yield srv


def test_reports_metrics_logs_events_with_nan_as_null(server: EmbeddedServer) -> None:
    admin = server.info.client()
    created = admin.create_run(RunCreate(name="r", workers=2))
    run_id = created.run.id
    with Reporter(server.url, run_id, created.write_token, 1) as rep:
        for i in range(2500):  # more than one batch
            rep.metric("train_loss", 1.0 / (i + 1), step=i, epoch=i / 100)
        rep.metric("train_loss", float("nan"), step=2500)
        rep.metric("lr", float("inf"), step=0)
        rep.log("epoch 1 done")
        rep.log("warning", stream="stderr")
        rep.event("epoch_end", {"epoch": 1, "train_time_s": 1.5, "val_time_s": float("nan")})
        assert rep.flush(10) is True
    page = admin.metrics(run_id, "train_loss", rank=1)
    assert len(page.series[0].value) == 2501 and page.series[0].value[-1] is None
    assert admin.metrics(run_id, "lr").series[0].value == [None]
    lines = admin.logs(run_id, rank=1).lines
    assert [(ln.text, ln.stream, ln.seq) for ln in lines] == [
        ("epoch 1 done", "stdout", 0),
        ("warning", "stderr", 0),
    ]
    (event,) = admin.events(run_id).events
    assert event.kind == "epoch_end" and event.payload == {
        "epoch": 1,
        "train_time_s": 1.5,
        "val_time_s": None,
    }


def test_ranks_started_together_post_at_their_own_times() -> None:
    """1,024 ranks start their reporters at once; each waits its own draw so they do not post in lockstep."""
    reporters = [Reporter(None, "run", "", rank, interval=2.0) for rank in range(4)]
    try:
        waits = [[r.next_wait() for _ in range(50)] for r in reporters]
    finally:
        for r in reporters:
            r.close()
    assert all(1.0 <= w <= 3.0 for per_rank in waits for w in per_rank)  # interval 2 s on average
    assert len({per_rank[0] for per_rank in waits}) == len(reporters)
    assert all(len(set(per_rank)) > 1 for per_rank in waits)  # drawn anew: no fixed phase to fall back into


def test_training_thread_never_waits_for_the_network(tmp_path: Path) -> None:
    # A server that takes connections and requests but never answers: the sender thread, which
    # posts the first full batch at once, is stuck in that request until the socket closes.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        rep = Reporter(url, "r-000000000000", "tok", 0, spool_dir=str(tmp_path), timeout=600)
        training = threading.Thread(target=lambda: [rep.metric("x", float(i), step=i) for i in range(20_000)])
        training.start()
        training.join(120)  # a hang guard only: metric() waiting on the request would never return
        assert not training.is_alive(), "metric() waited for the network"
    assert rep.flush(10) is False  # could not deliver: spooled
    rep.close(timeout=5)
    assert Spool(tmp_path, 0, "x").pending() >= 20


def test_spools_while_server_is_down_and_resends_on_recovery(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_id, token = _new_run(db)
    port = _free_port()
    spool_dir = tmp_path / "spool"
    rep = Reporter(f"http://127.0.0.1:{port}", run_id, token, 0, spool_dir=str(spool_dir))
    for i in range(1500):
        rep.metric("loss", float(i), step=i)
    rep.event("run_start", {})
    assert rep.flush(10) is False
    files = list(spool_dir.glob("rank0-*.jsonl"))
    assert files and Spool.read(files[0])
    with EmbeddedServer(db, port=port, record=False):
        for i in range(1500, 1600):
            rep.metric("loss", float(i), step=i)
        assert rep.flush(10) is True
        rep.close()
    points = _points(db, run_id)
    assert [p[2] for p in points] == list(range(1600))  # every point once, none lost
    assert not list(spool_dir.glob("*.jsonl"))


def test_leftover_spool_of_a_crashed_rank_is_resent_once(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_id, token = _new_run(db)
    spool_dir = tmp_path / "spool"
    batch = {
        "kind": "metrics",
        "rank": 1,
        "session": "deadbeef",
        "seq": 1,
        "items": [{"name": "m", "value": 2.0, "step": 7}],
    }
    Spool(spool_dir, 1, "deadbeef").append([batch])
    with EmbeddedServer(db, record=False) as srv:
        # the batch reached the server just before the crash, but its spool entry stayed behind
        first = srv.info.client()._http.post(
            f"/v1/runs/{run_id}/metrics:batch",
            json={"rank": 1, "seq": 1, "session": "deadbeef", "metrics": batch["items"]},
        )
        assert first.json() == {"accepted": 1, "duplicate": False}
        with Reporter(srv.url, run_id, token, 1, spool_dir=str(spool_dir)) as rep:
            assert rep.flush(10) is True
    assert _points(db, run_id) == [(1, "m", 7, 2.0)]
    assert not list(spool_dir.glob("*.jsonl"))


def test_rejected_batches_are_dropped_not_retried_forever(
    server: EmbeddedServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    created = server.info.client().create_run(RunCreate(name="r"))
    rep = Reporter(server.url, created.run.id, "wrong-token", 0, spool_dir=str(tmp_path))
    rep.metric("x", 1.0)
    assert rep.flush(10) is True
    rep.close()
    assert rep.dropped == 1 and not list(tmp_path.glob("*.jsonl"))
    assert "rejected" in capfd.readouterr().err


def test_from_env_without_server_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLBENCH_SERVER_URL", raising=False)
    monkeypatch.delenv("MLBENCH_SPOOL_DIR", raising=False)
    noop = Reporter.from_env(0)
    noop.metric("x", 1.0)
    assert noop.flush(5) is True  # nothing to deliver to: a no-op
    noop.close()
    monkeypatch.setenv("MLBENCH_SPOOL_DIR", str(tmp_path))
    monkeypatch.setenv("MLBENCH_RUN_ID", "r-0123456789ab")
    spooling = Reporter.from_env(3)
    spooling.metric("x", 1.0)
    spooling.close()
    assert [b["kind"] for f in Spool(tmp_path, 3, "").files() for b in Spool.read(f)] == ["metrics"]


def test_exit_without_close_still_flushes(tmp_path: Path, server: EmbeddedServer) -> None:
    created = server.info.client().create_run(RunCreate(name="atexit"))
    script = textwrap.dedent(
        """
        from mlbench_worker.reporting.reporter import Reporter
        rep = Reporter.from_env(0)
        for i in range(300):
            rep.metric("m", float(i), step=i)
        rep.log("bye")
        """
    )
    env = dict(
        os.environ,
        MLBENCH_SERVER_URL=server.url,
        MLBENCH_RUN_ID=created.run.id,
        MLBENCH_RUN_TOKEN=created.write_token,
        MLBENCH_SPOOL_DIR=str(tmp_path),
    )
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    client = server.info.client()
    assert len(client.metrics(created.run.id, "m").series[0].value) == 300
    assert [ln.text for ln in client.logs(created.run.id).lines] == ["bye"]
