"""Writes only while a run lives, only inside its world, and reads only by whoever holds the
store's read token, only for requests addressed to the server: a real detached server process,
raw HTTP as a forger (or a web page) would send it."""

from __future__ import annotations

import socket
import stat
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.daemon import ServerInfo, ensure_server, identity_path, state_path
from mlbench_tui.store.api_models import RunCreate

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> ServerInfo:
    return ensure_server()  # a detached `mlbench server` process for this test's store


def _post(server: ServerInfo, run_id: str, kind: str, body: dict[str, object], token: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/runs/{run_id}/{kind}:batch",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _values(server: ServerInfo, run_id: str, name: str) -> list[float | None]:
    page = server.client().metrics(run_id, name)
    return [v for series in page.series for v in series.value]


def test_a_finished_runs_token_writes_nothing_more(server: ServerInfo) -> None:
    admin = server.client()
    created = admin.create_run(RunCreate(name="ended", workers=2))
    run_id, token = created.run.id, created.write_token
    live = {"rank": 0, "seq": 1, "metrics": [{"name": "val_global_Prec@1", "value": 41.0}]}
    assert _post(server, run_id, "metrics", live, token).status_code == 200
    admin.update_run(run_id, state="succeeded")

    forged = {"rank": 0, "seq": 2, "session": "x", "metrics": [{"name": "val_global_Prec@1", "value": 100.0}]}
    refused = _post(server, run_id, "metrics", forged, token)
    assert refused.status_code == 409 and refused.json()["error"] == "run_ended"
    assert "no longer writes" in refused.json()["detail"]
    for kind, key, item in (("logs", "lines", {"text": "x"}), ("events", "events", {"kind": "goal_reached"})):
        late = _post(server, run_id, kind, {"rank": 0, "seq": 3, key: [item]}, token)
        assert late.status_code == 409, kind
    rank = httpx.put(
        f"{server.url}/v1/runs/{run_id}/ranks/0",
        json={"state": "failed"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert rank.status_code == 409 and rank.json()["error"] == "run_ended"
    assert _values(server, run_id, "val_global_Prec@1") == [41.0]  # the forged 100 is nowhere


def test_ranks_outside_the_world_are_refused_whoever_sends_them(server: ServerInfo) -> None:
    admin = server.client()
    created = admin.create_run(RunCreate(name="two-ranks", workers=2))
    run_id, token = created.run.id, created.write_token
    for rank in (2, 999):
        for who in (token, server.admin_token):
            body = {"rank": rank, "seq": 1, "metrics": [{"name": "loss", "value": 1.0}]}
            refused = _post(server, run_id, "metrics", body, who)
            assert refused.status_code == 422 and refused.json()["error"] == "rank_out_of_range"
            assert (
                f"rank {rank} is outside run {run_id}, which has 2 rank(s): 0-1" == refused.json()["detail"]
            )
    logs = _post(server, run_id, "logs", {"rank": 999, "seq": 1, "lines": [{"text": "hi"}]}, token)
    assert logs.status_code == 422
    state = httpx.put(
        f"{server.url}/v1/runs/{run_id}/ranks/999",
        json={"state": "running"},
        headers={"Authorization": f"Bearer {server.admin_token}"},
        timeout=30,
    )
    assert state.status_code == 422 and state.json()["error"] == "rank_out_of_range"
    assert [r.rank for r in admin.get_run(run_id).ranks] == [0, 1]
    fine = {"rank": 1, "seq": 1, "metrics": [{"name": "loss", "value": 1.0}]}
    assert _post(server, run_id, "metrics", fine, token).status_code == 200


def test_a_stopped_rank_takes_only_its_own_senders_last_batches(server: ServerInfo) -> None:
    created = server.client().create_run(RunCreate(name="stopping", workers=2))
    run_id, token = created.run.id, created.write_token

    def batch(seq: int, session: str, rank: int = 0, value: float = 1.0) -> dict[str, object]:
        return {"rank": rank, "seq": seq, "session": session, "metrics": [{"name": "loss", "value": value}]}

    assert _post(server, run_id, "metrics", batch(1, "own"), token).status_code == 200
    stop = {"kind": "run_stop", "payload": {"status": "success", "reason": "goal", "exit_code": 0}}
    assert _post(
        server, run_id, "events", {"rank": 0, "seq": 2, "session": "own", "events": [stop]}, token
    ).is_success
    # the rank's own reporter still flushes (a telemetry sample, a last log line)
    assert _post(server, run_id, "metrics", batch(3, "own", value=2.0), token).status_code == 200
    late = _post(server, run_id, "metrics", batch(1, "someone-else", value=99.0), token)
    assert late.status_code == 409 and late.json()["error"] == "rank_stopped"
    assert _post(server, run_id, "metrics", batch(1, "someone-else", rank=1), token).status_code == 200
    assert sorted(v for v in _values(server, run_id, "loss") if v is not None) == [1.0, 1.0, 2.0]


def test_reads_need_the_stores_read_token_which_only_the_users_0600_files_hold(server: ServerInfo) -> None:
    created = server.client().create_run(RunCreate(name="secret", workers=1))
    for path in ("/v1/runs", f"/v1/runs/{created.run.id}", f"/v1/runs/{created.run.id}/logs"):
        page = httpx.get(f"{server.url}{path}", timeout=30)  # what a web page could send
        assert page.status_code == 401 and page.json()["error"] == "missing_token", path
    for private in (state_path(server.store), identity_path(server.store)):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    # a client made without a token reads with the one this user's records hold
    assert [r.id for r in MlbenchClient(server.url).list_runs()] == [created.run.id]


def test_requests_naming_another_host_are_refused_before_anything_runs(server: ServerInfo) -> None:
    port = server.url.rsplit(":", 1)[1]
    token = {"Authorization": f"Bearer {server.read_token}"}
    for host in (
        "evil.example",
        f"evil.example:{port}",
        "127.0.0.1.nip.io",
        f"127.0.0.1:{int(port) + 1}",
        "",
    ):
        refused = httpx.get(f"{server.url}/v1/runs", headers={**token, "Host": host}, timeout=30)
        assert refused.status_code == 421, host
        assert refused.json()["error"] == "wrong_host" and f"127.0.0.1:{port}" in refused.json()["detail"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):  # the last: a Unix-socket request
        assert (
            httpx.get(f"{server.url}/v1/runs", headers={**token, "Host": host}, timeout=30).status_code == 200
        )


@pytest.fixture
def wide_server() -> Iterator[str]:
    """``mlbench server --host 0.0.0.0 --allow-host bench.example``: reached by other names."""
    argv = ["server", "--host", "0.0.0.0", "--port", "0", "--allow-host", "bench.example"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(15)


def test_a_server_on_every_interface_answers_this_machines_names_and_configured_ones(
    wide_server: str,
) -> None:
    port = wide_server.rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}/healthz"
    for host in (socket.gethostname(), "bench.example", "10.1.2.3", f"127.0.0.1:{int(port) + 7}"):
        assert httpx.get(url, headers={"Host": host}, timeout=30).status_code == 200, host
    assert httpx.get(url, headers={"Host": "evil.example"}, timeout=30).status_code == 421
