"""Coalesced run streams: one min/max/last summary per interval instead of every metrics batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlbench_tui.server.client import MlbenchClient, ServerHTTPError
from mlbench_tui.server.stream import summarise
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import MetricsSummary, RunCreate
from mlbench_tui.store.changes import MetricChunk
from mlbench_tui.store.store import Store

from .conftest import ServerProcess


def test_metric_summary_keeps_extremes_last_point_and_cursor(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        run, _ = store.create_run(RunCreate(name="r", workers=2))
        other, _ = store.create_run(RunCreate(name="other"))
        store.ingest_metrics(run.id, 0, 1, [("loss", 0, None, 100.0, 3.0), ("loss", 1, None, 101.0, 9.0)])
        store.ingest_metrics(other.id, 0, 1, [("loss", 0, None, 100.0, 1000.0)])
        start, first = store.read(lambda c: queries.metric_summary(c, run.id, 0))
        assert [(s["name"], s["min"], s["max"], s["count"]) for s in first] == [("loss", [3.0], [9.0], 2)]
        store.ingest_metrics(run.id, 0, 2, [("loss", 2, None, 102.0, None), ("lr", 2, None, 102.0, 0.1)])
        store.ingest_metrics(run.id, 0, 3, [("loss", 3, None, 105.0, 2.0)])
        store.ingest_metrics(run.id, 1, 1, [("loss", 3, None, 105.0, None)])
        cursor, series = store.read(lambda c: queries.metric_summary(c, run.id, start))
        top = store.read(lambda c: queries.metrics(c, run.id)).cursor
        assert cursor == top
        by_key = {
            (s["name"], s["rank"]): MetricsSummary.model_validate({"cursor": cursor, "series": [s]}).series[0]
            for s in series
        }
        loss = by_key[("loss", 0)]
        assert (loss.min, loss.max, loss.value, loss.step, loss.t, loss.count) == (
            [2.0],
            [2.0],
            [2.0],
            [3],
            [105.0],
            2,
        )
        assert by_key[("lr", 0)].value == [0.1] and by_key[("lr", 0)].count == 1
        assert by_key[("loss", 1)].min == [None] and by_key[("loss", 1)].value == [None]
        assert store.read(lambda c: queries.metric_summary(c, run.id, cursor)) == (cursor, [])
        only = store.read(lambda c: queries.metric_summary(c, run.id, start, ["lr", "absent"]))
        assert only[0] == cursor and [s["name"] for s in only[1]] == ["lr"]


def test_summarise_folds_queued_batches() -> None:
    names = {1: "loss", 2: "lr"}
    first = MetricChunk(
        10, "r", [1, 0, 0, None, 100.0, 3.0, 1, 0, 1, None, 101.0, 9.0, 2, 0, 1, None, 101.0, 0.1], names
    )
    mixed = MetricChunk(
        13, "r", [1, 0, 2, None, 102.0, None, 1, 0, 3, None, 105.0, 2.0, 1, 1, 3, None, 105.0, None], names
    )
    cursor, series = summarise([first, MetricChunk(13, "r", [], names), mixed])
    assert cursor == 15
    by_key = {
        (s["name"], s["rank"]): MetricsSummary.model_validate({"cursor": cursor, "series": [s]}).series[0]
        for s in series
    }
    assert list(by_key) == [("loss", 0), ("loss", 1), ("lr", 0)]
    loss = by_key[("loss", 0)]
    assert (loss.min, loss.max, loss.value, loss.step, loss.t) == ([2.0], [9.0], [2.0], [3], [105.0])
    assert loss.count == 4 and by_key[("lr", 0)].value == [0.1] and by_key[("lr", 0)].count == 1
    assert by_key[("loss", 1)].min == [None] and by_key[("loss", 1)].value == [None]
    assert [s["name"] for s in summarise([first, mixed], ("lr",))[1]] == ["lr"]


@pytest.mark.slow
def test_coalesced_stream_summarises_while_plain_stream_gets_every_point(server: ServerProcess) -> None:
    admin = server.admin()
    created = admin.create_run(RunCreate(name="coalesce", workers=2, task="1a"))
    run_id, writer = created.run.id, MlbenchClient(server.url, created.write_token)
    writer.post_metrics(run_id, [{"name": "loss", "value": 7.0, "step": 0}])  # replayed as a summary
    got: dict[str, list[tuple[str, Any]]] = {"plain": [], "summary": []}
    ready = {k: threading.Event() for k in got}

    def listen(key: str, coalesce: float | None) -> None:
        for event in server.reader().stream(run_id, metrics_since=0, coalesce=coalesce):
            got[key].append((event.kind, event.data))
            ready[key].set()
            if event.kind == "run_deleted":
                return

    threads = [
        threading.Thread(target=listen, args=("plain", None), daemon=True),
        threading.Thread(target=listen, args=("summary", 0.2), daemon=True),
    ]
    for t in threads:
        t.start()
    assert all(e.wait(10) for e in ready.values())
    for rank in (0, 1):  # a spike in the middle of a batch must survive the summary
        values = [1.0, 50.0, 0.5] if rank == 0 else [2.0, 2.0, -1.0]
        writer.post_metrics(
            run_id, [{"name": "loss", "value": v, "step": 1 + i} for i, v in enumerate(values)], rank=rank
        )
    writer.post_logs(run_id, ["hello"])

    def live_ranks() -> set[int]:  # ranks in the summaries after the replay
        data = [d for k, d in list(got["summary"]) if k == "metrics_summary"]
        return {s.rank for d in data[1:] for s in MetricsSummary.model_validate(d).series}

    deadline = time.monotonic() + 60  # each rank's batch lands in one summary, the two maybe apart
    while time.monotonic() < deadline and live_ranks() != {0, 1}:
        time.sleep(0.05)
    admin.delete_run(run_id)
    for t in threads:
        t.join(10)

    plain_kinds = [k for k, _ in got["plain"]]
    assert "metrics_summary" not in plain_kinds
    steps = [(p["rank"], p["step"]) for k, d in got["plain"] if k == "metrics" for p in d["points"]]
    assert steps == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]

    kinds = [k for k, _ in got["summary"]]
    assert kinds[0] == "run" and kinds[-1] == "run_deleted" and "metrics" not in kinds and "logs" in kinds
    summaries = [MetricsSummary.model_validate(d) for k, d in got["summary"] if k == "metrics_summary"]
    replay, live = summaries[0], summaries[1:]
    assert [(s.rank, s.value) for s in replay.series] == [(0, [7.0])]
    in_live = [s for summary in live for s in summary.series]
    by_rank = {s.rank: s for s in in_live}
    assert sorted(s.rank for s in in_live) == [0, 1]  # one bucket per rank's batch
    assert (by_rank[0].min, by_rank[0].max, by_rank[0].value, by_rank[0].step) == ([0.5], [50.0], [0.5], [3])
    assert (by_rank[1].min, by_rank[1].max, by_rank[1].value) == ([-1.0], [2.0], [-1.0])
    assert live[-1].cursor == max(int(d["cursor"]) for k, d in got["plain"] if k == "metrics")


@pytest.mark.slow
def test_coalesce_interval_is_validated_and_documented(server: ServerProcess) -> None:
    run_id = server.admin().create_run(RunCreate(name="coalesce-bad", workers=1, task="1a")).run.id
    with pytest.raises(ServerHTTPError) as err:
        next(server.reader().stream(run_id, coalesce=0.001))
    assert err.value.status == 422
    doc = server.reader()._http.get("/openapi.json").json()
    params = {p["name"] for p in doc["paths"]["/v1/runs/{run_id}/stream"]["get"]["parameters"]}
    assert "coalesce" in params and "MetricsSummary" in doc["components"]["schemas"]


@pytest.mark.slow
def test_a_quiet_run_stream_sends_keepalives_as_often_as_asked(server: ServerProcess) -> None:
    """The TUI's stream reader looks whether it is still wanted at each keepalive: a quiet run's
    stream sends them at the asked interval (bounded), as ``keepalive`` events of the client."""
    run_id = server.admin().create_run(RunCreate(name="quiet", workers=1, task="1a")).run.id
    with server.reader() as client:
        events = client.stream(run_id, keepalive=0.2)
        kinds = [next(events).kind for _ in range(3)]
        events.close()
        assert kinds[0] == "run" and kinds[1:] == ["keepalive", "keepalive"]
        with pytest.raises(ServerHTTPError) as err:
            next(client.stream(run_id, keepalive=0.01))
        assert err.value.status == 422
