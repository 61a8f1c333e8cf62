"""One run per name under way, and no run left pending without a live launch: two real applies
of one spec, a run whose apply died before launching it, interrupts in apply's first moments,
and the idle clock of a detached server that counts only runs whose owner lives."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.waiting import wait_for

from mlbench_tui.owners import RunOwner, host_name, start_ticks
from mlbench_tui.runs.interrupts import deferred_interrupts
from mlbench_tui.server.daemon import IDLE_TIMEOUT_ENV, alive, ensure_server, stop_server
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.reader import StoreReader

from .conftest import rank_pid, run_dirs, run_mlbench, start_mlbench, store_path, sweep_spec

pytestmark = pytest.mark.slow


def _runs() -> dict[str, list[str]]:
    """Run name -> the states of its runs, read from the store file."""
    reader = StoreReader.open(store_path())
    assert reader is not None
    with reader:
        found: dict[str, list[str]] = {}
        for run in reader.list_runs():
            found.setdefault(run.name, []).append(run.state.value)
        return found


def test_two_applies_of_one_spec_run_it_once_and_the_second_names_the_first(tmp_path: Path) -> None:
    long = sweep_spec(tmp_path / "first", "twice", repetitions=3000)
    first = start_mlbench("apply", str(long))
    try:
        wait_for(lambda: [d for d in run_dirs() if (d / "launch.json").exists()], "the first run to launch")
        run_id = run_dirs()[0].name
        # the first run's ranks are stopped (SIGSTOP) while the second apply decides, so the first
        # is under way then whatever the machine's speed
        ranks = [wait_for(lambda r=r: rank_pid(run_id, r), f"rank {r}'s process") for r in (0, 1)]
        # the same run again, from a directory that also holds another spec (that one runs)
        sweep_spec(tmp_path / "both", "twice", repetitions=3000)
        sweep_spec(tmp_path / "both", "other")
        for pid in ranks:
            os.kill(pid, signal.SIGSTOP)
        try:
            second = run_mlbench("apply", str(tmp_path / "both"))
        finally:
            for pid in ranks:
                os.kill(pid, signal.SIGCONT)
        assert second.returncode == 1, second.stderr
        said = f"twice-gloo-2w: not started: twice-gloo-2w is already under way as run {run_id}"
        assert said in second.stderr and f"launched by apply pid {first.pid}" in second.stderr, second.stderr
        assert re.search(r"other-gloo-2w\s+succeeded", second.stdout), second.stdout
        assert "Traceback" not in second.stderr
        _, err = first.communicate(timeout=240)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
    assert _runs() == {"twice-gloo-2w": ["succeeded"], "other-gloo-2w": ["succeeded"]}


def test_creates_racing_for_one_name_leave_one_run() -> None:
    server = ensure_server()
    owner = RunOwner.this_process()
    body = RunCreate(name="raced", workers=1, owner=owner, exclusive=True).model_dump(mode="json")
    answers: list[int] = []

    def create() -> None:
        response = httpx.post(
            f"{server.url}/v1/runs",
            json=body,
            headers={"Authorization": f"Bearer {server.admin_token}"},
            timeout=60,
        )
        answers.append(response.status_code)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201] + [409] * 7
    assert _runs() == {"raced": ["pending"]}


@pytest.fixture
def stand_in() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for an apply that created a run and then died (killed by the test)."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_a_run_whose_apply_died_before_launching_it_is_recorded_failed(
    stand_in: subprocess.Popen[bytes],
) -> None:
    server = ensure_server()
    owner = RunOwner(host=host_name(), pid=stand_in.pid, started=start_ticks(stand_in.pid))
    created = server.client().create_run(RunCreate(name="stranded", workers=2, owner=owner, exclusive=True))
    refused = httpx.post(
        f"{server.url}/v1/runs",
        json=RunCreate(name="stranded", exclusive=True, owner=RunOwner.this_process()).model_dump(
            mode="json"
        ),
        headers={"Authorization": f"Bearer {server.admin_token}"},
        timeout=30,
    )
    assert refused.status_code == 409 and refused.json()["error"] == "run_under_way"
    assert f"launched by apply pid {stand_in.pid}" in refused.json()["detail"]

    stand_in.kill()  # apply dies between registering the run and launching it
    stand_in.wait(10)
    assert stop_server(server)
    status = run_mlbench("status", "stranded")  # the next server records it
    assert status.returncode == 0, status.stderr
    assert "state:    failed" in status.stdout, status.stdout
    assert f"its apply pid {stand_in.pid} ended before launching it" in status.stdout
    again = ensure_server().client().create_run(RunCreate(name="stranded", exclusive=True, owner=owner))
    assert again.run.id != created.run.id  # the name is free again


def test_a_detached_server_outlives_only_runs_whose_owner_lives(
    stand_in: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "2")
    server = ensure_server()
    owner = RunOwner(host=host_name(), pid=stand_in.pid, started=start_ticks(stand_in.pid))
    server.client().create_run(RunCreate(name="owned", workers=1, owner=owner))
    server.client().create_run(RunCreate(name="orphan", workers=1))  # pending, but nothing drives it
    time.sleep(6.0)  # three idle timeouts (a slower machine only makes this check weaker)
    assert _alive(server.pid), "a run with a live owner keeps the server up"
    stand_in.kill()
    wait_for(lambda: not _alive(server.pid), "the idle server to exit", timeout=120)


def _alive(pid: int) -> bool:
    return alive(pid)  # reaps the server when it was this process's child


def test_deferred_interrupts_land_once_the_block_is_done() -> None:
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("the block went on")
    assert done == ["the block went on"]
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # asked twice: at once
        done.append("not reached")
    assert done == ["the block went on"]


@pytest.mark.parametrize("moment", ["plan", "started"])
def test_ctrl_c_in_applys_first_moments_leaves_no_run_pending(tmp_path: Path, moment: str) -> None:
    spec = sweep_spec(tmp_path, "interrupted", repetitions=3000)
    apply = start_mlbench("apply", str(spec))
    assert apply.stderr is not None
    marker = {"plan": "plan: ", "started": "started run"}[moment]
    seen = ""
    while marker not in seen:
        line = apply.stderr.readline()
        assert line, seen
        seen += line
    apply.send_signal(signal.SIGINT)
    _, err = apply.communicate(timeout=120)
    assert apply.returncode == 130, seen + err
    assert "Traceback" not in err
    states = [state for states in _runs().values() for state in states]
    assert all(state in ("cancelled", "failed") for state in states), states
