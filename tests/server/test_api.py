"""The /v1 API over a real ``mlbench server`` process on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from mlbench_tui.errors import NotFound, ServerError
from mlbench_tui.server.client import MlbenchClient, ServerHTTPError
from mlbench_tui.store.api_models import MAX_BATCH_ITEMS, MAX_BODY_BYTES, RunCreate

from .conftest import ADMIN, READ, ServerProcess

pytestmark = pytest.mark.slow


def _run(server: ServerProcess, workers: int = 2) -> tuple[str, str]:
    created = server.admin().create_run(RunCreate(name="api-test", workers=workers, task="1a"))
    return created.run.id, created.write_token


def test_health_and_openapi(server: ServerProcess) -> None:
    health = MlbenchClient(server.url).health()
    assert health.status == "ok" and health.store == str(server.db.resolve()) and not health.open_reads
    doc = httpx.get(f"{server.url}/openapi.json").json()
    assert "/v1/runs/{run_id}/metrics:batch" in doc["paths"]
    body = doc["paths"]["/v1/runs/{run_id}/metrics:batch"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("/MetricBatch")
    assert "MetricIn" in doc["components"]["schemas"]


def test_full_flow_ingest_and_reads(server: ServerProcess) -> None:
    admin = server.admin()
    run_id, token = _run(server)
    writer = MlbenchClient(server.url, token)
    for rank in (0, 1):
        ack = writer.post_metrics(
            run_id, [{"name": "train_loss", "value": 1.0 / (i + 1), "step": i} for i in range(100)], rank=rank
        )
        assert ack.accepted == 100 and not ack.duplicate
    writer.post_logs(run_id, ["epoch 1 loss 0.5", "epoch 2 loss 0.2", "done"], rank=1)
    writer.post_events(run_id, [{"kind": "run_start", "payload": {}}])
    writer.update_rank(run_id, 1, state="running", host="node", pid=123)

    page = admin.metrics(run_id, "train_loss", rank=1)
    assert [s.rank for s in page.series] == [1] and len(page.series[0].value) == 100
    assert admin.metrics(run_id, "train_loss", since=page.cursor).series == []
    small = admin.metrics(run_id, ["train_loss"], points=10)
    assert all(len(s.value) == 10 for s in small.series) and small.downsampled
    assert [n.name for n in admin.metric_names(run_id)] == ["train_loss"]
    logs = admin.logs(run_id, rank=1, regex=r"epoch \d")
    assert [ln.text for ln in logs.lines] == ["epoch 1 loss 0.5", "epoch 2 loss 0.2"]
    assert admin.events(run_id).events[0].kind == "run_start"
    detail = admin.update_run(run_id, state="running")
    assert detail.state.value == "running" and detail.ranks[1].host == "node"
    assert run_id in [r.id for r in admin.list_runs(state="running")]
    admin.delete_run(run_id)
    with pytest.raises(NotFound, match=f"run {run_id} not found"):
        admin.get_run(run_id)


def test_retried_batch_is_stored_once(server: ServerProcess) -> None:
    run_id, token = _run(server)
    writer = MlbenchClient(server.url, token)
    points = [{"name": "x", "value": 1.0, "step": 1}]
    assert writer.post_metrics(run_id, points, rank=0, seq=5).accepted == 1
    again = writer.post_metrics(run_id, points, rank=0, seq=5)
    assert again.duplicate and again.accepted == 0
    assert len(server.admin().metrics(run_id).series[0].value) == 1


def test_tokens_401_403_and_unknown_run_404(server: ServerProcess) -> None:
    run_id, token = _run(server)
    other_id, other_token = _run(server)
    url = f"{server.url}/v1/runs/{run_id}/metrics:batch"
    body = {"rank": 0, "seq": 1, "metrics": [{"name": "x", "value": 1.0}]}

    def post(tok: str | None, target: str = url) -> httpx.Response:
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        return httpx.post(target, json=body, headers=headers)

    assert post(None).status_code == 401
    assert post("nope").status_code == 401
    resp = post(other_token)  # another run's token
    assert resp.status_code == 403 and resp.json()["error"] == "forbidden"
    assert post(READ).status_code == 403
    assert post(token).status_code == 200
    assert post(ADMIN).status_code == 200
    missing = post(token, f"{server.url}/v1/runs/r-000000000000/metrics:batch")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    # managing runs needs the admin token
    with pytest.raises(ServerHTTPError) as err:
        MlbenchClient(server.url, token).update_run(run_id, state="failed")
    assert err.value.status == 403
    assert httpx.post(f"{server.url}/v1/runs", json={"name": "x"}).status_code == 401
    assert (
        httpx.delete(f"{server.url}/v1/runs/{other_id}", headers={"Authorization": "Bearer bad"}).status_code
        == 401
    )
    # tokens never come back in answers
    assert token not in httpx.get(f"{server.url}/v1/runs/{run_id}").text


def test_bad_input_is_4xx_with_json_reason(server: ServerProcess) -> None:
    run_id, token = _run(server)
    url = f"{server.url}/v1/runs/{run_id}/metrics:batch"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(content: bytes) -> httpx.Response:
        return httpx.post(url, content=content, headers=headers)

    nan = post(b'{"rank":0,"seq":1,"metrics":[{"name":"x","value":NaN}]}')
    assert nan.status_code == 422 and nan.json()["error"] == "invalid_request"
    assert "finite" in str(nan.json()["detail"])
    null = post(b'{"rank":0,"seq":1,"metrics":[{"name":"x","value":null}]}')
    assert null.status_code == 200  # null is the explicit "not a finite number"
    assert post(b"not json").status_code == 422
    assert post(b'{"rank":-1,"seq":1,"metrics":[{"name":"x","value":1}]}').status_code == 422
    assert post(b'{"rank":0,"seq":1,"metrics":[]}').status_code == 422
    long_name = b'{"rank":0,"seq":2,"metrics":[{"name":"' + b"n" * 200 + b'","value":1}]}'
    assert post(long_name).status_code == 422
    too_many = httpx.post(
        url,
        json={"rank": 0, "seq": 3, "metrics": [{"name": "x", "value": 1.0}] * (MAX_BATCH_ITEMS + 1)},
        headers=headers,
    )
    assert too_many.status_code == 422
    huge = post(b'{"rank":0,"seq":4,"metrics":[' + b" " * (MAX_BODY_BYTES + 10) + b"]}")
    assert huge.status_code == 413 and huge.json()["error"] == "body_too_large"
    extra = post(b'{"rank":0,"seq":5,"metrics":[{"name":"x","value":1}],"bogus":1}')
    assert extra.status_code == 422
    reader = {"Authorization": f"Bearer {READ}"}
    bad_regex = httpx.get(f"{server.url}/v1/runs/{run_id}/logs", params={"regex": "("}, headers=reader)
    assert bad_regex.status_code == 422 and "regex" in bad_regex.json()["detail"]
    points = httpx.get(f"{server.url}/v1/runs/{run_id}/metrics", params={"points": 0}, headers=reader)
    assert points.status_code == 422
    assert httpx.get(f"{server.url}/v1/nothing").json()["error"] == "not_found"


def test_reads_need_the_read_token_on_loopback_too(server: ServerProcess) -> None:
    # a page the user visits can reach 127.0.0.1, but it has no token: it reads nothing
    run_id, token = _run(server)
    for path in ("/v1/runs", f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/logs", f"/v1/runs/{run_id}/stream"):
        refused = httpx.get(f"{server.url}{path}", timeout=10)
        assert refused.status_code == 401 and refused.json()["error"] == "missing_token", path
    with pytest.raises(ServerHTTPError) as err:
        MlbenchClient(server.url, token).get_run(run_id)  # a run's write token does not read
    assert err.value.status == 403
    assert MlbenchClient(server.url, READ).get_run(run_id).id == run_id
    assert MlbenchClient(server.url, ADMIN).list_runs()[0].id == run_id
    with pytest.raises(ServerHTTPError) as err:
        MlbenchClient(server.url, READ).delete_run(run_id)
    assert err.value.status == 403


def test_live_streams_deliver_metrics_logs_and_run_changes(server: ServerProcess) -> None:
    admin = server.admin()
    run_id, token = _run(server)
    writer = MlbenchClient(server.url, token)
    writer.post_metrics(run_id, [{"name": "loss", "value": 1.0, "step": 0}])  # before subscribing
    got: list[tuple[str, object]] = []
    ready = threading.Event()

    def listen() -> None:
        for event in server.reader().stream(run_id, metrics_since=0):
            got.append((event.kind, event.data))
            ready.set()
            if event.kind == "run_deleted":
                return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert ready.wait(10)
    runs_stream = server.reader().stream(None)
    assert next(runs_stream).kind == "hello"
    writer.post_metrics(run_id, [{"name": "loss", "value": 0.5, "step": 1}])
    writer.post_logs(run_id, ["hello"])
    admin.update_run(run_id, state="running")
    run_event = next(e for e in runs_stream if e.kind == "run")
    assert run_event.data["id"] == run_id and run_event.data["state"] == "running"
    runs_stream.close()
    admin.delete_run(run_id)
    listener.join(10)
    kinds = [k for k, _ in got]
    assert kinds[0] == "run" and kinds[-1] == "run_deleted"
    steps = [p["step"] for k, d in got if k == "metrics" for p in d["points"]]  # type: ignore[index]
    assert steps == [0, 1]  # backlog then live, no duplicates
    assert any(k == "logs" for k in kinds) and kinds.count("run") >= 2


def test_connection_failure_is_a_clear_server_error() -> None:
    with pytest.raises(ServerError, match="cannot reach mlbench server"):
        MlbenchClient("http://127.0.0.1:9", timeout=2).health()


def test_sigterm_stops_cleanly_and_removes_state(server_factory: Callable[..., ServerProcess]) -> None:
    from mlbench_tui.server.daemon import read_state, state_path

    server = server_factory()
    info = read_state(state_path(server.db))
    assert info is not None and info.url == server.url and info.admin_token == ADMIN
    assert server.stop() == 0
    assert read_state(state_path(server.db)) is None
