"""The /v1 routes for runs of many ranks, over a real ``mlbench server`` process: every rank's
latest point and percentile bands in one request each, logs of a rank set, and the states of
many ranks set in one request."""

from __future__ import annotations

import httpx
import pytest

from mlbench_tui.server.client import MlbenchClient, ServerHTTPError
from mlbench_tui.store.api_models import RankUpdate, RunCreate

from .conftest import ADMIN, ServerProcess

pytestmark = pytest.mark.slow

RANKS = 16


def _wide_run(server: ServerProcess) -> tuple[str, MlbenchClient]:
    created = server.admin().create_run(RunCreate(name="wide", workers=RANKS, task="1a"))
    writer = MlbenchClient(server.url, created.write_token)
    for rank in range(RANKS):
        metrics = [{"name": "step_time", "value": 0.1 + rank / 100, "step": s} for s in range(1, 4)]
        metrics.append({"name": "time_compute", "value": 10.0 + rank, "step": 3})
        writer.post_metrics(created.run.id, metrics, rank=rank)
        writer.post_logs(created.run.id, [f"rank {rank} line {i}" for i in range(3)], rank=rank)
    return created.run.id, writer


def test_latest_and_bands_answer_for_every_rank_in_one_request(server: ServerProcess) -> None:
    run_id, _writer = _wide_run(server)
    reader = server.reader()
    latest = reader.latest(run_id, ["step_time", "time_compute", "absent"])
    step_time, compute = latest.series
    assert step_time.rank == list(range(RANKS)) and step_time.step == [3] * RANKS
    assert compute.value == [10.0 + r for r in range(RANKS)]
    (band,) = reader.bands(run_id, ["step_time"], points=100).bands
    assert band.step == [1, 2, 3] and band.ranks == [RANKS] * 3
    assert band.p50 == [pytest.approx(0.17)] * 3 and band.p90 == [pytest.approx(0.24)] * 3
    assert band.max == [pytest.approx(0.25)] * 3 and band.max_rank == [15] * 3
    missing = reader._http.get(f"/v1/runs/{run_id}/metrics/latest")
    assert missing.status_code == 422 and missing.json()["error"] == "invalid_request"


def test_logs_of_a_rank_set_and_their_tail(server: ServerProcess) -> None:
    run_id, _writer = _wide_run(server)
    reader = server.reader()
    page = reader.logs(run_id, ranks="0-2, 14", limit=100)
    assert sorted({line.rank for line in page.lines}) == [0, 1, 2, 14] and len(page.lines) == 12
    tail = reader.logs(run_id, ranks="3-15", limit=2, tail=True)
    assert [line.text for line in tail.lines] == ["rank 15 line 1", "rank 15 line 2"]
    assert tail.cursor == max(line.id for line in reader.logs(run_id, limit=1000).lines)
    bad = reader._http.get(f"/v1/runs/{run_id}/logs", params={"ranks": "0-x"})
    assert bad.status_code == 422 and bad.json()["detail"] == (
        "'0-x' in '0-x' is not a rank or a range of ranks (write ranks like 0-7,512)"
    )


def test_many_ranks_states_in_one_request(server: ServerProcess) -> None:
    run_id, writer = _wide_run(server)
    updates = [
        (rank, RankUpdate(state="running", host=f"node-{rank // 8}", pid=100 + rank)) for rank in range(RANKS)
    ]
    infos = server.admin().update_ranks(run_id, updates)
    assert [i.rank for i in infos] == list(range(RANKS)) and {i.state for i in infos} == {"running"}
    detail = server.admin().get_run(run_id)
    assert detail.ranks[9].host == "node-1" and detail.ranks[9].pid == 109
    assert writer.update_ranks(run_id, [(3, RankUpdate(state="failed", exit_code=1))])[0].exit_code == 1
    with pytest.raises(ServerHTTPError) as err:  # a reader cannot set states
        server.reader().update_ranks(run_id, [(0, RankUpdate(state="failed"))])
    assert err.value.status in (401, 403)
    empty = httpx.put(
        f"{server.url}/v1/runs/{run_id}/ranks",
        json={"ranks": []},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert empty.status_code == 422
