"""``mlbench apply|status|logs|cancel|delete|results|export`` through the real CLI in subprocesses:
real store, real embedded server, real ranks (mpi and gloo), small all-reduce sweeps so each run
takes seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlbench_tui.executors.local import processes

pytestmark = pytest.mark.slow

SWEEP = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: {name}
spec:
  task: 0a
  workers: 2
  backend: {backend}
  target: local
  data: synthetic
  hyperparameters:
    sizes_max_exp: {max_exp}
    num_sizes: {num_sizes}
    repetitions: {repetitions}
    warmup: 1
    dtypes: [fp32]
{extra}"""


def _spec(
    tmp_path: Path,
    name: str,
    backend: str = "gloo",
    *,
    repetitions: int = 5,
    max_exp: int = 3,
    num_sizes: int = 4,
    extra: str = "",
) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        SWEEP.format(
            name=name,
            backend=backend,
            repetitions=repetitions,
            max_exp=max_exp,
            num_sizes=num_sizes,
            extra=extra,
        )
    )
    return path


def _run_pids(run_id: str) -> set[int]:
    """Every live process of a local run: its launcher (a forked group's, or torchrun), the
    launcher's descendants, and whatever carries the run's marker (a forked rank carries none)."""
    launch = json.loads(
        (Path(os.environ["MLBENCH_HOME"]) / "state" / "runs" / run_id / "launch.json").read_text()
    )
    return processes.run_pids(run_id, launch["pid"], launch["start_ticks"])


def _running_local_run(timeout: float = 120.0) -> str | None:
    """The id of the local run whose launcher and both ranks are up (None if none comes up)."""
    runs = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for launch in runs.glob("r-*/launch.json"):
            if len(_run_pids(launch.parent.name)) >= 3:  # the launcher + 2 ranks
                return launch.parent.name
        time.sleep(0.3)
    return None


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def mlbench(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., Result]]:
    """``mlbench ARGS`` through the CLI entry point in this process (the server it starts is a
    detached process of its own, stopped after the test); ranks are real subprocesses."""
    from mlbench_tui.cli import main

    def run(*args: str) -> Result:
        code = main(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    yield run


def test_dry_run_prints_exact_commands_without_running(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    result = mlbench("apply", "--dry-run", str(_spec(tmp_path, "dry", "mpi")))
    assert result.returncode == 0, result.stderr
    assert "mpiexec -n 2 --bind-to none" in result.stdout
    assert "-m mlbench_worker --config" in result.stdout
    assert "export OMP_NUM_THREADS=1" in result.stdout
    assert "MLBENCH_RUN_TOKEN='<write token>'" in result.stdout
    assert not (Path(os.environ["MLBENCH_HOME"]) / "mlbench.db").exists()
    kind = mlbench("apply", "--dry-run", str(Path(__file__).parents[2] / "specs" / "smoke-kind.yaml"))
    assert kind.returncode == 0, kind.stderr
    assert "kind: Job" in kind.stdout and "completionMode: Indexed" in kind.stdout
    slurm = mlbench("apply", "--dry-run", str(Path(__file__).parents[2] / "specs" / "smoke-slurm.yaml"))
    assert slurm.returncode == 0, slurm.stderr
    assert (
        "<<'MLBENCH_FILE_END'\n#!/bin/bash\n" in slurm.stdout
        and "\nsbatch --parsable --export=ALL" in slurm.stdout
    )
    assert "MLBENCH_RUN_TOKEN='<write token>'" in slurm.stdout  # sbatch's environment, redacted


def test_bad_input_is_a_clean_error(tmp_path: Path, mlbench: Callable[..., Result]) -> None:
    missing = mlbench("apply", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    unknown = mlbench("logs", "no-such-run")
    assert unknown.returncode == 1 and "no run named 'no-such-run'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    with pytest.raises(SystemExit) as bad_rank:  # argparse: usage error, exit 2
        mlbench("logs", "no-such-run", "--rank", "-1")
    assert bad_rank.value.code == 2
    bad_regex = mlbench("logs", "no-such-run", "--grep", "(")
    assert bad_regex.returncode == 2 and "invalid --grep" in bad_regex.stderr


def test_mpi_allreduce_apply_results_export_idempotence_delete(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    spec = _spec(tmp_path, "ar", "mpi")
    first = mlbench("apply", str(spec))
    assert first.returncode == 0, first.stderr
    assert re.search(r"ar-mpi-2w\s+succeeded\s+fp32 peak [\d.]+ GB/s", first.stdout), first.stdout
    assert "4/4 sizes" in first.stderr  # live progress went to stderr

    again = mlbench("apply", str(spec))
    assert again.returncode == 0
    assert "nothing to do" in again.stderr and "ar-mpi-2w" in again.stdout

    results = json.loads(mlbench("results", str(spec), "-o", "json").stdout)
    (summary,) = results["runs"]
    assert summary["state"] == "succeeded" and summary["backend"] == "mpi"
    assert summary["allreduce"]["fp32"]["sizes"] == 4
    assert summary["fingerprint"]["mpi4py"] and summary["fingerprint"]["python"]

    status = mlbench("status", "ar-mpi-2w")
    assert "state:    succeeded" in status.stdout

    logs = mlbench("logs", "ar-mpi-2w", "--rank", "0", "--grep", "run stopped")
    assert logs.returncode == 0 and "run stopped: success" in logs.stdout
    followed = mlbench("logs", "ar-mpi-2w", "-f")  # the run is over: follow returns at once
    assert followed.returncode == 0 and "[rank 0]" in followed.stdout

    into_dir = mlbench("export", "ar-mpi-2w", "--out", str(tmp_path))
    assert into_dir.returncode == 2 and "is a directory" in into_dir.stderr
    archive = tmp_path / "ar.zip"
    assert mlbench("export", "ar-mpi-2w", "--out", str(archive)).returncode == 0
    with zipfile.ZipFile(archive) as zf:
        official = json.loads(zf.read("official_result.json"))
        assert official["allreduce"]["fp32"]["peak_busbw_gbps"] > 0
        assert "allreduce_fp32_busbw" in zf.read("metrics.csv").decode()
        assert zf.read("mllog.txt").decode().startswith(":::MLLOG")

    forced = mlbench("apply", "--force", "-q", str(spec))
    assert forced.returncode == 0 and "nothing to do" not in forced.stderr
    refused = mlbench("delete", "ar-mpi-2w")  # no terminal to ask on
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert mlbench("delete", "ar-mpi-2w", "--yes").returncode == 0
    listed = mlbench("status").stdout
    assert listed.count("ar-mpi-2w") == 1  # the older run is still there, the deleted one is gone


def test_crashing_rank_fails_the_run_with_its_traceback_in_the_logs(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    spec = _spec(tmp_path, "crash", extra='  env:\n    MLBENCH_INJECT_FAULT: "rank=1,step=0"\n')
    result = mlbench("apply", str(spec))
    assert result.returncode == 1
    assert re.search(r"crash-gloo-2w\s+failed", result.stdout), result.stdout
    assert "rank 1 failed: InjectedFault" in result.stderr
    rank1 = mlbench("logs", "crash-gloo-2w", "--rank", "1").stdout
    assert "Traceback (most recent call last)" in rank1 and "InjectedFault" in rank1
    status = mlbench("status", "crash-gloo-2w").stdout
    assert "state:    failed" in status and "error:    rank 1 failed" in status


def test_cancel_of_a_detached_run_leaves_no_process_behind(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    spec = _spec(tmp_path, "long", repetitions=1_000_000, max_exp=4, num_sizes=8)
    started = mlbench("apply", "--detach", str(spec))
    assert started.returncode == 0, started.stderr
    match = re.search(r"pid (\d+)", started.stderr)
    assert match, started.stderr
    apply_pid = int(match[1])
    run_id = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = mlbench("status").stdout
        found = re.search(r"(r-[0-9a-f]{12})\s+long-gloo-2w\s+running", listed)
        if found and len(_run_pids(found[1])) >= 3:  # the launcher + 2 ranks
            run_id = found[1]
            break
        time.sleep(0.5)
    assert run_id is not None, "the detached run never got going"
    pids = _run_pids(run_id)
    assert "sizes measured so far" in mlbench("status").stdout
    cancelled = mlbench("cancel", "long-gloo-2w")
    assert cancelled.returncode == 0 and "cancelled long-gloo-2w" in cancelled.stderr
    assert not _run_pids(run_id)
    assert not [pid for pid in pids if processes.is_alive(pid)]
    deadline = time.monotonic() + 30
    while processes.is_alive(apply_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes.is_alive(apply_pid)  # the background apply noticed and ended
    assert "state:    cancelled" in mlbench("status", run_id).stdout
    again = mlbench("cancel", run_id)
    assert again.returncode == 0 and "nothing to cancel" in again.stderr


def test_ctrl_c_on_apply_stops_every_rank(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "intr", repetitions=1_000_000, max_exp=4, num_sizes=8)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    run_id = _running_local_run()
    try:
        assert run_id is not None, "the run never got going"
        pids = _run_pids(run_id)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends to apply
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted: cancelling active runs" in err
    assert not _run_pids(run_id)
    assert not [pid for pid in pids if processes.is_alive(pid)]


def _apply_then_kill_it(spec: Path) -> str:
    """Starts ``mlbench apply SPEC`` and SIGKILLs it (no chance to clean up) once its run's ranks
    are going; the run's id."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", "-q", str(spec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ,
    )
    run_id = _running_local_run()
    proc.kill()
    proc.wait(10)
    assert run_id is not None, "the run never got going"
    return run_id


def test_cancel_after_apply_was_killed(tmp_path: Path, mlbench: Callable[..., Result]) -> None:
    """apply dies with SIGKILL (no chance to clean up): its ranks keep running, and a later
    ``mlbench cancel`` from another process still finds and stops every one of them."""
    spec = _spec(tmp_path, "orphan", repetitions=1_000_000, max_exp=4, num_sizes=8)
    run_id = _apply_then_kill_it(spec)
    pids = _run_pids(run_id)
    assert len(pids) >= 3  # the ranks outlived their apply
    assert "state:    running" in mlbench("status", run_id).stdout
    assert mlbench("cancel", run_id).returncode == 0
    assert not _run_pids(run_id)
    assert not [pid for pid in pids if processes.is_alive(pid)]
    assert "state:    cancelled" in mlbench("status", run_id).stdout


def test_a_run_whose_apply_was_killed_ends_as_its_ranks_said(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    """apply dies with SIGKILL while its ranks run on and finish normally: nobody holds the
    launcher's exit status, so ``mlbench status`` settles the run from every rank's run_stop."""
    assert mlbench("status").returncode == 0  # the server is a process of its own and outlives apply
    # seconds of work even for warm (forked) ranks, so they are still going when apply is killed
    spec = _spec(tmp_path, "lost", repetitions=5000, max_exp=3, num_sizes=4)
    run_id = _apply_then_kill_it(spec)
    assert len(_run_pids(run_id)) >= 3  # the ranks outlived their apply
    deadline = time.monotonic() + 120
    while _run_pids(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _run_pids(run_id), "the ranks did not finish"
    status = mlbench("status", run_id).stdout
    assert "state:    succeeded" in status, status
    assert re.search(r"ranks: .*\n +0  succeeded .*\n +1  succeeded", status), status


def test_a_run_whose_ranks_all_stopped_stays_succeeded_when_apply_is_stopped(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    """SIGTERM reaches ``apply`` after the run's rank reported a successful stop but before its
    process exited (it hangs at exit on purpose, so the window is always open): apply cancels
    what is still running, and the run is still recorded as succeeded; the repeats not yet
    started are not run: they were queued (pending) and end cancelled, saying why."""
    assert mlbench("status").returncode == 0  # the server lives in this process and outlives apply
    extra = '  repeats: 3\n  env: {MLBENCH_INJECT_FAULT: "rank=0,step=exit,mode=hang"}\n'
    spec = _spec(tmp_path, "late-term", repetitions=2, max_exp=1, num_sizes=2, extra=extra)
    spec.write_text(spec.read_text().replace("workers: 2", "workers: 1"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", "-q", str(spec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    runs = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs"
    deadline = time.monotonic() + 120
    hanging: list[Path] = []
    while not hanging and proc.poll() is None and time.monotonic() < deadline:
        logs = runs.glob("r-*/logs/rank-0.log")
        hanging = [log for log in logs if "hanging on purpose" in log.read_text(errors="replace")]
        time.sleep(0.2)
    assert hanging, "the rank never reached its exit"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "interrupted" in err, err
    run_id = hanging[0].parent.parent.name
    assert not _run_pids(run_id)
    status = mlbench("status", run_id).stdout
    assert "state:    succeeded" in status, status
    listed = json.loads(mlbench("status", "-o", "json").stdout)["runs"]
    mine = sorted((run for run in listed if run["spec_name"] == "late-term"), key=lambda run: run["repeat"])
    assert [(run["state"], run["handle"] is None) for run in mine] == [
        ("succeeded", False),
        ("cancelled", True),  # never launched
        ("cancelled", True),
    ], mine
    assert {run["error"] for run in mine[1:]} == {"apply was interrupted before it started this run"}


STRESS_RUNS = 30


def test_thirty_short_runs_in_a_row_are_all_recorded_as_their_launchers_ended(
    tmp_path: Path, mlbench: Callable[..., Result]
) -> None:
    """Many launchers ending one after another (the cheapest real runs: one mpi rank, one
    all-reduce of one element) are each reaped by apply itself, which records its exit status,
    so not one is misrecorded; two at a time where the cores allow, so apply watches several."""
    spec = tmp_path / "stress.yaml"
    spec.write_text(
        SWEEP.format(name="stress", backend="mpi", max_exp=0, num_sizes=1, repetitions=1, extra="")
        .replace("workers: 2", "workers: 1")
        .replace("warmup: 1", "warmup: 0")
        + f"  repeats: {STRESS_RUNS}\n"
    )
    result = mlbench("apply", "-q", "--parallel", str(spec))
    assert result.returncode == 0, result.stderr
    listed = json.loads(mlbench("results", "stress", "-o", "json").stdout)["runs"]
    assert len(listed) == STRESS_RUNS
    assert [run["state"] for run in listed] == ["succeeded"] * STRESS_RUNS, listed
    runs = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs"
    exits = [json.loads((runs / run["run_id"] / "exit.json").read_text()) for run in listed]
    assert [(e["exit_code"], e["state"]) for e in exits] == [(0, "succeeded")] * STRESS_RUNS
