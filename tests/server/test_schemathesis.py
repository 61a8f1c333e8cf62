"""Every operation of the HTTP API answers as its published OpenAPI document says.

Schemathesis generates requests from the server's own document (valid and invalid bodies, query
and path values; half of them aimed at an existing run, so the paths behind the 404 are reached)
and checks each answer: never a 5xx, a documented status code and content type, a body that fits
the documented schema. The two live streams never end, so schemathesis cannot call them; a
contract test below reads each and checks every event against the document's ``x-events``. The
run prints how many requests it made and its seed (``MLBENCH_FUZZ_SEED`` replays one,
``MLBENCH_FUZZ_EXAMPLES`` makes it deeper).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from support.waiting import wait_for

from mlbench_tui.server.app import create_app
from mlbench_tui.server.auth import AuthConfig
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store

ADMIN = "schemathesis-admin"
EXAMPLES = int(os.environ.get("MLBENCH_FUZZ_EXAMPLES", "8"))  # per operation; raise it for a deeper run
SEED = int(os.environ.get("MLBENCH_FUZZ_SEED", "20261129"))
STREAMS = ("/v1/runs/{run_id}/stream", "/v1/stream")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def headers(bearer: str) -> dict[str, str]:
    """What every request carries: the credential (and, where the server checks it, its Host)."""
    return {"Authorization": f"Bearer {bearer}"}


def test_every_operation_answers_as_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "fuzz.db")
    try:
        run, token = store.create_run(RunCreate(name="fuzz", workers=2))
        store.ingest_metrics(run.id, 0, 1, [("loss", i, None, 1.0, 1.0) for i in range(20)])
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token="read", open_reads=True))
        document = schemathesis.openapi.from_asgi("/openapi.json", app)
        operations = [result.ok() for result in document.get_all_operations()]  # type: ignore[union-attr]
        documented = {(op.method.upper(), op.path) for op in operations}
        fuzzed = [op for op in operations if op.path not in STREAMS]
        assert documented - {(m, p) for m, p in documented if p in STREAMS} == {
            (op.method.upper(), op.path) for op in fuzzed
        }
        assert len(fuzzed) >= 18  # every route but the two streams
        failures: list[str] = []
        calls = [0]
        for operation in fuzzed:
            _fuzz(store, operation, run.id, token, failures, calls)
        with capsys.disabled():
            print(f"\nschemathesis: {calls[0]} requests over {len(fuzzed)} operations, seed {SEED}")
        assert not failures, "\n".join(failures[:10])
        assert store.get_run(run.id).name  # the store is still sound
    finally:
        store.close()


def _fuzz(
    store: Store, operation: Any, run_id: str, token: str, failures: list[str], calls: list[int]
) -> None:
    cases = st.one_of(
        operation.as_strategy(), operation.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE)
    )

    @seed(SEED)
    @given(case=cases, real=st.booleans(), as_writer=st.booleans())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # bounded: no shrinking
    )
    def check(case: Any, real: bool, as_writer: bool) -> None:
        if real and case.path_parameters and "run_id" in case.path_parameters:
            # a DELETE gets a run of its own, so the other cases keep theirs
            doomed = (
                store.create_run(RunCreate(name="doomed"))[0].id
                if operation.method.upper() == "DELETE"
                else None
            )
            case.path_parameters["run_id"] = doomed or run_id
        bearer = token if as_writer and ("batch" in operation.path or "ranks" in operation.path) else ADMIN
        response = case.call(headers=headers(bearer))
        calls[0] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except BaseException as exc:  # schemathesis reports a group of failed checks
            titles = sorted({getattr(e, "title", str(e)) for e in getattr(exc, "exceptions", [exc])})
            failures.append(
                f"{operation.method.upper()} {operation.path} -> {response.status_code}: {'; '.join(titles)}"
                f"\n  {response.text[:300]}"
            )

    check()


def _read(url: str, bearer: str, into: list[tuple[str, Any]], stop: threading.Event) -> None:
    """Append a stream's events to ``into`` as (name, data) until ``stop`` (or the server ends it)."""
    try:
        with httpx.stream("GET", url, headers=headers(bearer), timeout=60) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            name = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: ") and name is not None:
                    into.append((name, json.loads(line.removeprefix("data: "))))
                if stop.is_set():
                    return
    except httpx.HTTPError:
        return  # the server closed the stream as it stopped


def test_every_stream_event_fits_its_documented_schema(tmp_path: Path) -> None:
    seen: dict[str, list[tuple[str, Any]]] = {"run": [], "list": []}
    with EmbeddedServer(tmp_path / "s.db", record=False) as server, server.info.client() as client:
        admin = server.info.admin_token or ""
        document = httpx.get(f"{server.url}/openapi.json", headers=headers(admin)).json()
        created = client.create_run(RunCreate(name="streamed", workers=1))
        run_id, writer = created.run.id, created.write_token
        stop = threading.Event()
        since = "metrics_since=0&logs_since=0&events_since=0&keepalive=0.2"
        readers = [
            threading.Thread(
                target=_read, args=(f"{server.url}/v1/runs/{run_id}/stream?{since}", admin, seen["run"], stop)
            ),
            threading.Thread(target=_read, args=(f"{server.url}/v1/stream", admin, seen["list"], stop)),
        ]
        for reader in readers:
            reader.start()
        wait_for(
            lambda: seen["list"] and seen["run"], "the streams' first events", 30, poll=0.02
        )  # both subscribed (hello, the run)
        client.post_metrics(run_id, [{"name": "loss", "value": 0.5, "step": 1}], token=writer)
        client.post_logs(run_id, ["hello"], token=writer)
        client.post_events(run_id, [{"kind": "run_start", "payload": {}}], token=writer)
        client.update_rank(run_id, 0, state="running", token=writer)
        client.update_run(run_id, handle="local://test/streamed")
        wanted = {"run", "metrics", "logs", "events", "rank"}
        wait_for(
            lambda: wanted <= {name for name, _ in seen["run"]} and len(seen["list"]) >= 2,
            "every event kind on both streams",
            30,
            poll=0.02,
        )
        stop.set()
    for reader in readers:
        reader.join(10)
    components = {"components": {"schemas": document["components"]["schemas"]}}
    for key, path in (("run", "/v1/runs/{run_id}/stream"), ("list", "/v1/stream")):
        content = document["paths"][path]["get"]["responses"]["200"]["content"]["text/event-stream"]
        for name, data in seen[key]:
            assert name in content["x-events"], f"{path}: undocumented event {name!r}"
            jsonschema.validate(data, {**content["x-events"][name], **components})
    assert seen["list"][0][0] == "hello" and seen["list"][1][0] == "run"


@pytest.mark.parametrize(
    "body", [b"", b"[]", b'{"rank": 0}', b"\xff\xfe", b'{"rank":0,"seq":1,"metrics":[1]}']
)
def test_malformed_ingest_bodies_are_422(tmp_path: Path, body: bytes) -> None:
    from fastapi.testclient import TestClient

    with Store(tmp_path / "m.db") as store:
        run, token = store.create_run(RunCreate(name="m"))
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token="read"))
        with TestClient(app) as client:
            resp = client.post(f"/v1/runs/{run.id}/metrics:batch", content=body, headers=headers(token))
        assert resp.status_code == 422 and resp.json()["error"] == "invalid_request"


def test_a_body_that_is_not_json_is_the_documented_400(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    with Store(tmp_path / "b.db") as store:
        run, _token = store.create_run(RunCreate(name="b"))
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token="read"))
        with TestClient(app) as client:
            document = client.get("/openapi.json", headers=headers(ADMIN)).json()
            for method, path in (
                ("POST", "/v1/runs"),
                ("PATCH", f"/v1/runs/{run.id}"),
                ("PUT", f"/v1/runs/{run.id}/ranks/0"),
            ):
                resp = client.request(
                    method,
                    path,
                    content=b"\x96\x00\xc5",
                    headers={**headers(ADMIN), "content-type": "application/json"},
                )
                assert resp.status_code == 400 and resp.json()["error"] == "invalid_body"
                documented = path.replace(run.id, "{run_id}").replace("/0", "/{rank}")
                assert "400" in document["paths"][documented][method.lower()]["responses"]
