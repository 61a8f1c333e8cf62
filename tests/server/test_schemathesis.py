"""A bounded property-based run of every documented operation: no input may cause a 5xx.

Schemathesis generates requests from the published OpenAPI document (valid and invalid bodies,
query and path values). Half of the cases target an existing run so the ingest and read paths
behind the 404 are exercised too. Live streams are excluded (they never end by design).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mlbench_tui.server.app import create_app
from mlbench_tui.server.auth import AuthConfig
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store

ADMIN = "schemathesis-admin"
EXAMPLES = int(os.environ.get("MLBENCH_FUZZ_EXAMPLES", "8"))  # raise it for a deeper run


def test_no_operation_answers_5xx(tmp_path: Path) -> None:
    store = Store(tmp_path / "fuzz.db")
    try:
        run, token = store.create_run(RunCreate(name="fuzz", workers=2))
        store.ingest_metrics(run.id, 0, 1, [("loss", i, None, 1.0, 1.0) for i in range(20)])
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token="read", open_reads=True))
        schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex="stream")
        operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
        assert len(operations) >= 12
        failures: list[str] = []
        for operation in operations:
            if operation.method.upper() == "DELETE":
                continue  # deleting the shared run would make the other cases plain 404s
            _fuzz(operation, run.id, token, failures)
        assert not failures, "\n".join(failures[:10])
        assert store.get_run(run.id).name  # the store is still sound
    finally:
        store.close()


def _fuzz(operation: Any, run_id: str, token: str, failures: list[str]) -> None:
    @given(case=operation.as_strategy(), real=st.booleans(), as_writer=st.booleans())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # bounded: no shrinking
    )
    def check(case: Any, real: bool, as_writer: bool) -> None:
        if real and case.path_parameters and "run_id" in case.path_parameters:
            case.path_parameters["run_id"] = run_id
        bearer = token if as_writer and "batch" in operation.path else ADMIN
        response = case.call(headers={"Authorization": f"Bearer {bearer}"})
        if response.status_code >= 500:
            failures.append(
                f"{operation.method} {operation.path}: {response.status_code} {response.text[:300]}"
            )
        elif response.status_code != 204:
            content_type = response.headers.get("content-type") or [""]
            assert str(content_type[0] if isinstance(content_type, list) else content_type).startswith(
                "application/json"
            )

    check()


@pytest.mark.parametrize(
    "body", [b"", b"[]", b'{"rank": 0}', b"\xff\xfe", b'{"rank":0,"seq":1,"metrics":[1]}']
)
def test_malformed_ingest_bodies_are_422(tmp_path: Path, body: bytes) -> None:
    from fastapi.testclient import TestClient

    with Store(tmp_path / "m.db") as store:
        run, token = store.create_run(RunCreate(name="m"))
        app = create_app(store, AuthConfig(admin_token=ADMIN, read_token="read"))
        with TestClient(app) as client:
            resp = client.post(
                f"/v1/runs/{run.id}/metrics:batch", content=body, headers={"Authorization": f"Bearer {token}"}
            )
        assert resp.status_code == 422 and resp.json()["error"] == "invalid_request"
