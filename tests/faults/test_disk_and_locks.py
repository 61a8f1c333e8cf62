"""A full disk, a read-only store and a held lock, met by real commands and a real server: a
clear error naming the folder and what to do, no traceback, nothing stored lost, recovery once
space is back; a read-only store readable by every read command; no wait without a bound."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from mlbench_tui.server.daemon import ensure_server, state_path
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.reader import StoreReader

from .conftest import Mounts, fill, home, run_mlbench, stop_servers, store_path, sweep_spec

pytestmark = pytest.mark.slow


def _clean(stderr: str) -> None:
    assert "Traceback" not in stderr and "internal_error" not in stderr, stderr


def test_a_full_store_disk_refuses_writes_clearly_keeps_everything_and_recovers(
    mounts: Mounts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = mounts.tmpfs(tmp_path / "disk", "2m")
    monkeypatch.setenv("MLBENCH_DB", str(disk / "store.db"))
    server = ensure_server()  # a real server process, its store on the small disk
    admin = server.client()
    run = admin.create_run(RunCreate(name="filling", workers=1))
    url = f"{server.url}/v1/runs/{run.run.id}/metrics:batch"
    token = {"Authorization": f"Bearer {run.write_token}"}

    def post(seq: int) -> httpx.Response:
        values = [{"name": "loss", "value": float(i), "step": seq * 500 + i} for i in range(500)]
        return httpx.post(url, json={"rank": 0, "seq": seq, "metrics": values}, headers=token, timeout=30)

    assert post(0).status_code == 200
    filler = fill(disk)
    seq = 1
    refused = post(seq)
    while refused.status_code == 200:  # SQLite had pages to spare: fill them too
        seq += 1
        refused = post(seq)
    assert refused.status_code == 507 and refused.json()["error"] == "disk_full"
    assert str(disk) in refused.json()["detail"] and "free space" in refused.json()["detail"]
    assert admin.get_run(run.run.id).name == "filling"  # reads go on

    applied = run_mlbench("apply", str(sweep_spec(tmp_path, "nospace")))
    assert applied.returncode == 1 and "507 (disk_full)" in applied.stderr and str(disk) in applied.stderr
    _clean(applied.stderr)

    filler.unlink()  # space again: the refused batch is stored when sent again, nothing was lost
    again = post(seq)
    assert again.status_code == 200 and again.json() == {"accepted": 500, "duplicate": False}
    steps = admin.metrics(run.run.id, "loss").series[0].step
    assert steps == list(range((seq + 1) * 500))


def test_a_full_run_folder_records_the_run_failed_saying_so(mounts: Mounts, tmp_path: Path) -> None:
    runs = mounts.tmpfs(home() / "state" / "runs", "256k")
    fill(runs)
    applied = run_mlbench("apply", str(sweep_spec(tmp_path, "full")))
    assert applied.returncode == 1
    _clean(applied.stderr)
    assert "failed to start: no space left on the disk of" in applied.stderr, applied.stderr
    status = run_mlbench("status", "full-gloo-2w")
    assert "state:    failed" in status.stdout and "no space left" in status.stdout, status.stdout
    assert str(runs) in status.stdout


def test_a_read_only_store_is_read_by_every_read_command(
    mounts: Mounts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied = run_mlbench("apply", str(sweep_spec(tmp_path, "kept")))
    assert applied.returncode == 0, applied.stderr
    stop_servers()
    source = store_path().parent
    view = mounts.read_only(source, tmp_path / "readonly")
    monkeypatch.setenv("MLBENCH_DB", str(view / store_path().name))
    for args in (
        ("status",),
        ("status", "kept-gloo-2w"),
        ("results", "kept-gloo-2w"),
        ("logs", "kept-gloo-2w", "--rank", "0"),
        ("export", "kept-gloo-2w", "--out", str(tmp_path / "kept.zip")),
        ("report", "kept-gloo-2w", "--out", str(tmp_path / "report.html")),
    ):
        result = run_mlbench(*args)
        assert result.returncode == 0, (args, result.stderr)
        _clean(result.stderr)
    assert "kept-gloo-2w" in run_mlbench("status").stdout
    reader = StoreReader.open(view / store_path().name)
    assert reader is not None and [r.name for r in reader.list_runs()] == ["kept-gloo-2w"]
    reader.close()
    refused = run_mlbench("apply", str(sweep_spec(tmp_path, "more")))
    assert refused.returncode == 1 and "open for reading only" in refused.stderr
    _clean(refused.stderr)


def test_a_held_server_lock_is_waited_on_with_a_bound_and_its_holder_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = state_path(store_path()).with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(["flock", str(lock), "sleep", "600"], start_new_session=True)
    try:
        monkeypatch.setenv("MLBENCH_LOCK_WAIT", "3")
        result = run_mlbench("status", timeout=60)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep, which keeps the lock open
        holder.wait(10)
    assert result.returncode == 1
    _clean(result.stderr)
    assert f"held by pid {holder.pid} (flock {lock} sleep 600)" in result.stderr
    assert "waiting for the server lock" in result.stderr and f"kill {holder.pid}" in result.stderr
    assert run_mlbench("status").returncode == 0  # free again: the command goes on


HOLD = """\
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()  # until told
conn.execute("ROLLBACK")
"""


def test_a_store_another_program_keeps_locked_is_waited_on_then_its_holder_named(tmp_path: Path) -> None:
    from mlbench_tui.store.engine import StoreLocked, storage_error

    server = ensure_server()
    run = server.client().create_run(RunCreate(name="locked", workers=1))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store_path())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        probe = sqlite3.connect(store_path(), timeout=0.1, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError) as busy:
            probe.execute("BEGIN IMMEDIATE")
        probe.close()
        known = storage_error(busy.value, store_path())
        assert isinstance(known, StoreLocked) and f"stayed locked by pid {holder.pid}" in known.message
        # a write while it holds the lock waits (bounded by busy_timeout) and lands once it lets go:
        # not refused at once (SQLite skips the busy wait when a deferred transaction upgrades)
        failures: list[BaseException] = []

        def write() -> None:
            try:
                server.client().update_run(run.run.id, state="running")
            except BaseException as exc:
                failures.append(exc)

        writing = threading.Thread(target=write, daemon=True)
        writing.start()
        writing.join(1.0)  # still waiting on the lock, however fast or slow this machine is
        assert writing.is_alive() and not failures, failures
        # and meanwhile the server answers reads: the wait does not stall it
        assert server.client().get_run(run.run.id).state.value == "pending"
        holder.stdin.write("\n")
        holder.stdin.flush()
        writing.join(60)
    finally:
        holder.kill()
        holder.wait(10)
    assert not writing.is_alive() and not failures, failures
    assert server.client().get_run(run.run.id).state.value == "running"


def test_a_read_only_store_serves_stale_results_recomputed_by_todays_rules(
    mounts: Mounts, tmp_path: Path
) -> None:
    """A store from an older version on a read-only mount: its server cannot keep a recomputed
    result, yet serves each one as today's rules compute it (the file is left as it was)."""
    from mlbench_tui.results.provenance import rules_digest
    from mlbench_tui.server.serve import EmbeddedServer
    from mlbench_tui.store.store import Store

    suite = Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "h200-2026-11-27" / "suite"
    copy = tmp_path / "suite"
    copy.mkdir()
    shutil.copy(suite / "mlbench.db", copy / "mlbench.db")
    Store(copy / "mlbench.db").close()  # its schema brought up to date; its results left as stored
    view = mounts.read_only(copy, tmp_path / "readonly")
    db = view / "mlbench.db"
    before = db.read_bytes()
    with EmbeddedServer(db, record=False) as server, server.info.client() as client:
        one = client.get_run("r-bd7119eb5cb2").result  # stored "0%" GPU use from one reading
        assert one is not None and one.computed_by is not None and one.computed_by.rules == rules_digest()
        assert one.telemetry is not None and one.telemetry.mean_gpu_util is None
        assert one.telemetry.gpu_util_note == "n/a: 1 reading in 1.4 s"
        listed = client.list_runs()
        assert len(listed) == 9 and all(
            run.result is not None
            and run.result.computed_by
            and run.result.computed_by.rules == rules_digest()
            for run in listed
        )
        assert {run.id: run.result for run in listed}["r-bd7119eb5cb2"] == one
    assert db.read_bytes() == before
