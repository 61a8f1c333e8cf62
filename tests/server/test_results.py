"""The server computes a run's result once, when the run reaches its final state, from the
plan, metrics and events it holds (a real ``mlbench server`` process on 127.0.0.1)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from support.results import OLD_STORED, plan

from mlbench_tui.lifecycle import LaunchMilestones, RunState
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.store.api_models import RunCreate

from .conftest import ServerProcess

pytestmark = pytest.mark.slow

HOST = {"python": "3.11-host", "torch": "from-the-host", "cpu_count": 2}


def _report(
    client: MlbenchClient, run_id: str, top1: list[float], stop: str = "success", reason: str = "goal"
) -> None:
    """What a worker reports: top-1 and cumulative train/validation time per epoch, its
    environment, start and stop (t = 100 + 10 x epoch)."""
    points = []
    for epoch, value in enumerate(top1, start=1):
        t = 100.0 + 10 * epoch
        points += [
            {"name": "val_global_Prec@1", "value": value, "step": 50 * epoch, "epoch": epoch, "t": t},
            {"name": "time_train", "value": 8.0 * epoch, "step": 50 * epoch, "epoch": epoch, "t": t},
            {"name": "time_validation", "value": 1.5 * epoch, "step": 50 * epoch, "epoch": epoch, "t": t},
            {"name": "train_loss", "value": 1.0 / epoch, "step": 50 * epoch, "t": t},
        ]
    client.post_metrics(run_id, points)
    client.post_events(
        run_id,
        [
            {"kind": "run_start", "payload": {}, "t": 100.0},
            {"kind": "environment", "payload": {"torch": "2.x-on-the-ranks"}, "t": 100.5},
            {"kind": "run_stop", "payload": {"status": stop, "reason": reason}, "t": 150.0},
        ],
    )


def _run(server: ServerProcess, spec: str, workers: int, top1: list[float], **report: Any) -> str:
    admin = server.admin()
    created = admin.create_run(
        RunCreate.from_plan(plan(spec_name=spec, name=f"{spec}-{workers}w", workers=workers))
    )
    _report(MlbenchClient(server.url, created.write_token), created.run.id, top1, **report)
    return created.run.id


def test_the_final_state_update_computes_and_stores_the_result_once(server: ServerProcess) -> None:
    admin = server.admin()
    run_id = _run(server, "once", 2, [50.0, 71.0])
    admin.update_run(run_id, state="running")
    assert admin.get_run(run_id).result is None  # not before the run ends
    detail = admin.update_run(run_id, state=RunState.SUCCEEDED, host=HOST)
    result = detail.result
    assert result is not None and result.run_id == run_id and result.state is RunState.SUCCEEDED
    assert result.reached and result.time_to_accuracy_s == 16.0 and result.validation_time_s == 3.0
    assert result.best_value == 71.0 and result.wall_time_s == 50.0 and result.stop_reason == "goal"
    # the host's fingerprint, overlaid with what the ranks measured
    assert result.fingerprint == {**HOST, "torch": "2.x-on-the-ranks"}
    assert admin.get_run(run_id).result == result
    assert [r.result for r in admin.list_runs(spec_name="once")] == [result]
    # computed once: a later final-state update (reconcile, a second cancel) keeps it
    _report(MlbenchClient(server.url, admin.token), run_id, [90.0, 95.0, 99.0])
    again = admin.update_run(run_id, state=RunState.SUCCEEDED)
    assert again.result == result


def test_the_server_settles_the_state_against_what_the_ranks_reported(server: ServerProcess) -> None:
    admin = server.admin()
    run_id = _run(server, "settle", 2, [50.0, 60.0], stop="failed", reason="loss diverged")
    detail = admin.update_run(run_id, state=RunState.SUCCEEDED)  # every process exited 0
    assert detail.state is RunState.FAILED and detail.error == "loss diverged"
    assert detail.result is not None and detail.result.state is RunState.FAILED
    assert detail.result.reached is False and detail.result.message == "loss diverged"


def _stop_rank(
    server: ServerProcess, run_id: str, rank: int, exit_code: int, status: str = "success"
) -> None:
    writer = MlbenchClient(server.url, server.admin().token)
    stop = {"kind": "run_stop", "payload": {"status": status, "reason": "goal", "exit_code": exit_code}}
    writer.post_events(run_id, [{**stop, "t": 150.0 + rank}], rank=rank)


def test_a_run_whose_exit_status_was_lost_ends_as_its_ranks_said(server: ServerProcess) -> None:
    """The executor reports ``unknown`` (the launcher's exit status was lost): every rank's
    run_stop decides, so a run all of whose ranks stopped normally is a success."""
    admin = server.admin()
    lost = "the launcher ended while its watching process (42) was gone; exit status unknown"
    ok = _run(server, "lost", 2, [50.0, 71.0])  # rank 0 reports its success
    _stop_rank(server, ok, 1, 0)
    detail = admin.update_run(ok, state=RunState.UNKNOWN, error=lost)
    assert detail.state is RunState.SUCCEEDED and detail.error is None
    assert detail.result is not None and detail.result.state is RunState.SUCCEEDED and detail.result.reached
    admin.delete_run(ok)

    silent = _run(server, "lost", 2, [50.0, 71.0])  # rank 1 never said how it stopped
    detail = admin.update_run(silent, state=RunState.UNKNOWN, error=lost)
    assert detail.state is RunState.FAILED
    assert detail.error == f"{lost}; rank(s) 1 of 2 never reported how they stopped"
    admin.delete_run(silent)

    interrupted = _run(server, "lost", 2, [50.0, 71.0])
    _stop_rank(server, interrupted, 1, 130, status="aborted")
    assert admin.update_run(interrupted, state=RunState.UNKNOWN, error=lost).state is RunState.FAILED


def test_speedup_against_the_one_worker_runs_of_the_spec(server: ServerProcess) -> None:
    admin = server.admin()
    one = _run(server, "scale", 1, [50.0, 60.0, 65.0, 71.0])  # reaches the goal after 32 s
    solo = admin.update_run(one, state=RunState.SUCCEEDED).result
    assert solo is not None and solo.time_to_accuracy_s == 32.0 and solo.speedup == pytest.approx(1.0)
    two = _run(server, "scale", 2, [50.0, 71.0])  # after 16 s
    result = admin.update_run(two, state=RunState.SUCCEEDED).result
    assert result is not None and result.one_worker_time_s == 32.0
    assert result.speedup == pytest.approx(2.0) and result.efficiency == pytest.approx(1.0)


def test_results_stored_by_older_versions_still_load(server: ServerProcess) -> None:
    admin = server.admin()
    run_id = admin.create_run(RunCreate(name="old-run", spec_name="old", task="1a", workers=2)).run.id
    with sqlite3.connect(server.db, timeout=30) as db:  # a row as an older version wrote it
        db.execute(
            "UPDATE runs SET state = 'succeeded', result = ? WHERE id = ?", (json.dumps(OLD_STORED), run_id)
        )
    result = admin.get_run(run_id).result
    assert result is not None and result.time_to_accuracy_s == 16.0 and result.speedup == 1.8
    assert result.time_split is not None and result.time_split.compute == 7.0
    assert [r.result for r in admin.list_runs(spec_name="old")] == [result]


def test_the_targets_launch_milestones_are_stored_and_split_the_launcher_part(server: ServerProcess) -> None:
    admin = server.admin()
    created = admin.create_run(
        RunCreate.from_plan(plan(spec_name="queued", name="queued-2w", target={"kind": "slurm"}))
    ).run
    assert created.launch is None  # nothing known of its launch yet
    t0 = created.created.timestamp()
    starts = [
        {
            "kind": "startup",
            "payload": {"rank": r, "process_start_t": t0 + 6.0 + r, "phases": {"imports": 1.0}},
        }
        for r in (0, 1)
    ]
    MlbenchClient(server.url, admin.token).post_events(created.id, starts)
    milestones = LaunchMilestones(submitted=t0 + 0.5, started=t0 + 4.0)
    assert admin.update_run(created.id, launch=milestones).launch == milestones
    result = admin.update_run(created.id, state=RunState.SUCCEEDED).result
    assert result is not None and result.startup is not None
    assert result.startup.launcher_s == pytest.approx(6.0)
    assert result.startup.launcher_parts == pytest.approx({"queued": 4.0, "spawned": 2.0})
    assert admin.get_run(created.id).launch == milestones
