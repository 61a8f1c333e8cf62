"""One error map: the ingest fast path and the FastAPI routes refuse alike, in one JSON shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mlbench_tui.server.app import create_app
from mlbench_tui.server.auth import AuthConfig
from mlbench_tui.server.ingest import Ingestor
from mlbench_tui.store.api_models import MAX_BODY_BYTES, RunCreate
from mlbench_tui.store.store import Store

ADMIN, READ = "admin-token", "read-token"


def _answers(store: Store, asgi: Any, requests: list[tuple[str, bytes, str | None]]) -> list[tuple[Any, ...]]:
    out = []
    with TestClient(asgi, raise_server_exceptions=False) as client:
        for path, body, token in requests:
            headers = {"Content-Type": "application/json"}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            resp = client.post(path, content=body, headers=headers)
            out.append((resp.status_code, resp.json(), resp.headers.get("www-authenticate")))
    return out


def test_the_fast_path_and_the_fastapi_routes_answer_refusals_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "m.db") as store:
        run, token = store.create_run(RunCreate(name="errors"))
        _other, other_token = store.create_run(RunCreate(name="other"))
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token=READ))
        url = f"/v1/runs/{run.id}/metrics:batch"
        good = b'{"rank":0,"seq":1,"metrics":[{"name":"x","value":1}]}'
        requests = [
            (url, good, None),  # 401, with WWW-Authenticate
            (url, good, "not-a-token"),  # 401
            (url, good, other_token),  # 403: another run's token
            (url, good, READ),  # 403
            ("/v1/runs/r-000000000000/metrics:batch", good, token),  # 404
            (url, b'{"rank":0,"seq":1,"metrics":[{"name":"x","value":NaN}]}', token),  # 422
            (f"/v1/runs/{run.id}/logs:batch", b'{"rank":0,"seq":1,"lines":"no"}', token),  # 422
            (f"/v1/runs/{run.id}/events:batch", b"[]", token),  # 422
            (url, b" " * (MAX_BODY_BYTES + 1), token),  # 413
        ]
        fast = _answers(store, app, requests)
        routed = _answers(store, app.app, requests)  # the FastAPI app alone: its routes of these paths
        assert fast == routed
        assert [status for status, _, _ in fast] == [401, 401, 403, 403, 404, 422, 422, 422, 413]
        for status, body, challenge in fast:
            assert set(body) == {"error", "detail"} and isinstance(body["error"], str)
            assert (challenge == "Bearer") == (status == 401)
        assert fast[4][1]["error"] == "not_found" and fast[8][1]["error"] == "body_too_large"

        async def broken(*_args: object) -> bytes:
            raise RuntimeError("a bug")

        monkeypatch.setattr(Ingestor, "handle", broken)
        crash = [(url, good, token)]
        assert _answers(store, app, crash) == _answers(store, app.app, crash)
        status, body, _ = _answers(store, app, crash)[0]
        assert status == 500 and body["error"] == "internal_error" and "a bug" not in str(body)


def test_other_routes_refuse_in_the_same_shape(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token=READ, open_reads=False))
        with TestClient(app) as client:
            missing = client.get("/v1/runs/r-000000000000", headers={"Authorization": f"Bearer {READ}"})
            unauthorised = client.get("/v1/runs")
            invalid = client.get("/v1/runs", params={"limit": 0}, headers={"Authorization": f"Bearer {READ}"})
            unknown = client.get("/v1/nothing")
        assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
        assert (unauthorised.status_code, unauthorised.headers["www-authenticate"]) == (401, "Bearer")
        assert (invalid.status_code, invalid.json()["error"]) == (422, "invalid_request")
        assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")
        for resp in (missing, unauthorised, invalid, unknown):
            assert set(resp.json()) == {"error", "detail"}
