"""What ranks could not send is imported by whichever process next serves the store: spools
written by the worker's own reporter, a real server process, real restarts."""

from __future__ import annotations

import shutil
from pathlib import Path

from mlbench_worker import wire
from mlbench_worker.reporting.reporter import Reporter

from mlbench_tui.server.daemon import ServerInfo, ensure_server, stop_server
from mlbench_tui.store.api_models import RunCreate

POINTS = 1000


def _spool(folder: Path, rank: int, *, stopped: bool = True) -> None:
    """One rank's batches, as a rank that reaches no server leaves them (the worker's reporter)."""
    reporter = Reporter(None, "r-unused", "token", rank, spool_dir=str(folder), interval=0.05)
    for step in range(POINTS):
        reporter.metric("loss", 1.0 / (step + 1), step=step)
    reporter.log(f"rank {rank} done")
    if stopped:
        wire.emit(reporter, wire.RunStop(status="success", reason="sweep done", exit_code=0))
    reporter.close()


def _loss_points(server: ServerInfo, run_id: str) -> dict[int, int]:
    page = server.client().metrics(run_id, "loss")
    return {series.rank: len(series.value) for series in page.series}


def _restart(server: ServerInfo) -> ServerInfo:
    assert stop_server(server)
    return ensure_server()


def test_an_ended_runs_spool_is_imported_at_the_next_start_once_and_its_result_settled_again(
    tmp_path: Path,
) -> None:
    server = ensure_server()
    spool = tmp_path / "spool"
    run = server.client().create_run(RunCreate(name="spooled", workers=2)).run
    server.client().update_run(run.id, state="running", spool=str(spool))
    ended = server.client().update_run(run.id, state="unknown")  # its apply lost the exit status
    assert ended.state.value == "failed" and "0, 1" in (ended.error or "")  # no rank said how it stopped

    for rank in (0, 1):
        _spool(spool, rank)
    files = sorted(spool.glob("rank*.jsonl"))
    assert len(files) == 2
    shutil.copy(files[0], spool / "rank0-again.jsonl")  # the same batches twice: stored once
    with open(files[1], "a", encoding="utf-8") as torn:
        torn.write('{"kind":"metrics","rank":1,"ses')  # the rank died mid-write
    _spool(spool, 7)  # a rank this run never had: refused

    server = _restart(server)  # the next server imports, and settles the run again
    assert _loss_points(server, run.id) == {0: POINTS, 1: POINTS}
    again = server.client().get_run(run.id)
    assert again.state.value == "succeeded" and again.error is None, again.error
    assert again.result is not None and again.result.state.value == "succeeded"
    assert not list(spool.glob("*.jsonl")) and len(list(spool.glob("*.jsonl.imported"))) == 4
    logs = server.client().logs(run.id).lines
    assert sorted(line.text for line in logs) == ["rank 0 done", "rank 1 done"]

    server = _restart(server)  # imported files are not read again; nothing doubles
    assert _loss_points(server, run.id) == {0: POINTS, 1: POINTS}


def test_a_runs_spool_is_imported_before_its_end_is_settled(tmp_path: Path) -> None:
    server = ensure_server()
    spool = tmp_path / "spool"
    run = server.client().create_run(RunCreate(name="ending", workers=2)).run
    server.client().update_run(run.id, state="running", spool=str(spool))
    _spool(spool, 0)
    _spool(spool, 1)
    ended = server.client().update_run(run.id, state="unknown")  # the server imports, then settles
    assert ended.state.value == "succeeded", ended.error
    assert _loss_points(server, run.id) == {0: POINTS, 1: POINTS}
    assert not list(spool.glob("*.jsonl"))


def test_a_live_runs_spool_is_imported_at_start_and_left_for_its_ranks(tmp_path: Path) -> None:
    server = ensure_server()
    spool = tmp_path / "spool"
    run = server.client().create_run(RunCreate(name="live", workers=1)).run
    server.client().update_run(run.id, state="running", spool=str(spool))
    _spool(spool, 0, stopped=False)
    server = _restart(server)
    assert _loss_points(server, run.id) == {0: POINTS}
    assert server.client().get_run(run.id).state.value == "running"
    assert len(list(spool.glob("rank0-*.jsonl"))) == 1  # its rank may still resend it: dedup'd


def test_a_rank_whose_servers_port_went_to_another_store_keeps_its_batches(tmp_path: Path) -> None:
    """A dead server's port taken by another store's server, which answers 404 (no such run):
    the rank keeps the batches in its spool, and its own store imports them."""
    from mlbench_tui.server.serve import EmbeddedServer

    server = ensure_server()
    spool = tmp_path / "spool"
    created = server.client().create_run(RunCreate(name="moved", workers=1))
    run_id = created.run.id
    server.client().update_run(run_id, state="running", spool=str(spool))
    port = int(server.url.rsplit(":", 1)[1])
    reporter = Reporter(server.url, run_id, created.write_token, 0, spool_dir=str(spool), interval=0.05)
    reporter.metric("loss", 1.0, step=0)
    assert reporter.flush(30)
    assert stop_server(server)
    with EmbeddedServer(tmp_path / "another.db", port=port, record=False):  # not this run's store
        for step in range(1, POINTS):
            reporter.metric("loss", 1.0 / (step + 1), step=step)
        assert reporter.flush(30) is False  # kept, not sent
    reporter.close()
    assert reporter.dropped == 0 and list(spool.glob("rank0-*.jsonl"))
    server = ensure_server()  # its own store's next server imports them
    assert _loss_points(server, run_id) == {0: POINTS}
