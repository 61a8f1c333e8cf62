"""The local executor with real launcher processes (torchrun and mpiexec) and real ranks.

The ranks here run a tiny script instead of the worker runtime so that process management
(crash, cancel, orphans, logs) is tested in seconds; the worker runtime itself runs through
``mlbench apply`` in tests/cli/test_run_commands.py and tests/test_quickstart.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker import rank_env
from mlbench_worker.warm_protocol import RankMain
from support.local_runs import local_plan

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import DryRun, LaunchContext
from mlbench_tui.executors.local import processes, warm_start
from mlbench_tui.executors.local.executor import LocalExecutor
from mlbench_tui.executors.local.launch import LaunchMode, LocalRequest
from mlbench_tui.executors.rank_logs import RankLogTailer
from mlbench_tui.lifecycle import RunHandle, RunState

RANK_SCRIPT = """
import os, sys, time
rank = int(os.environ.get("RANK") or os.environ["OMPI_COMM_WORLD_RANK"])
print(f"rank {rank} threads {os.environ['OMP_NUM_THREADS']}", flush=True)
mode = sys.argv[1]
if mode == "crash" and rank == 1:
    raise RuntimeError("boom on rank 1")
if mode == "exit3":
    env = os.environ
    print("world", env["WORLD_SIZE"], "local", env["LOCAL_RANK"], env["MASTER_ADDR"], flush=True)
    sys.exit(3)
time.sleep(60 if mode == "hang" else 0.2)
"""


_plan = local_plan


def _launch(run_id: str) -> LaunchContext:
    return LaunchContext(run_id=run_id, server_url="http://127.0.0.1:9", write_token="secret-token")


def _script_dryrun(
    executor: LocalExecutor, run_id: str, mode: str, backend: str = "gloo", workers: int = 2
) -> DryRun[LocalRequest]:
    """The executor's real dry run with every rank running RANK_SCRIPT instead of the worker."""
    dry = executor.dryrun(_plan(backend, workers), _launch(run_id))
    script = RankMain(code=RANK_SCRIPT, args=[mode])
    return dataclasses.replace(dry, request=dataclasses.replace(dry.request, main=script))


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path / "runs", warm=False)  # the cold launchers (warm starts: test_warm_start)


def test_dryrun_is_pure_and_exact(executor: LocalExecutor) -> None:
    dry = executor.dryrun(_plan("gloo", 2, threads=3), _launch("r-000000000001"))
    command = dry.request.command
    assert command[1:4] == ("-m", "torch.distributed.run", "--standalone")
    assert command[command.index("--nproc-per-node") + 1] == "2"
    assert command[-3:] == (
        "mlbench_worker",
        "--config",
        str(executor.runs_dir / "r-000000000001" / "config.json"),
    )
    env = dry.request.env
    assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "3"
    assert env["MLBENCH_RUN_TOKEN"] == "secret-token" and env["MLBENCH_RUN_ID"] == "r-000000000001"
    assert dry.request.config.world_size == 2
    assert not executor.runs_dir.exists()  # nothing written by a dry run


def test_one_rank_starts_without_torchrun_as_rank_0_of_1(executor: LocalExecutor) -> None:
    """torchrun's agent imports torch itself (seconds of every one-rank run on a GPU machine): a
    run of one rank starts its rank directly, with the environment torchrun would give it, and
    its exit code is the rank's."""
    dry = executor.dryrun(_plan("gloo", 1), _launch("r-one"))
    command = dry.request.command
    assert "torch.distributed.run" not in command
    assert command[1:3] == ("-m", "mlbench_tui.executors.local.rank_exec")
    rendezvous = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
    assert [dry.request.env[name] for name in rendezvous] == ["0", "0", "1", "1", "127.0.0.1"]
    handle = executor.schedule(_script_dryrun(executor, "r-one", "exit3", workers=1))
    status = executor.wait(handle, timeout=60)
    assert status.state is RunState.FAILED
    assert status.message == "rank 0 exited with code 3 (see its log: mlbench logs RUN --rank 0)"
    log = list(executor.log_iter(handle, rank=0))
    assert "world 1 local 0 127.0.0.1" in log  # and MASTER_PORT reserved for it, then released
    assert not list((executor.runs_dir / ".ports").iterdir())


def test_mpi_dryrun_flags() -> None:
    dry = LocalExecutor("/nonexistent", cpu_count=1).dryrun(_plan("mpi", 2), _launch("r-000000000002"))
    command = dry.request.command
    assert dry.request.mode is LaunchMode.MPIEXEC and dry.request.fallback is None
    assert Path(command[0]).name == "mpiexec" and command[1:3] == ("-n", "2")
    assert "--oversubscribe" in command  # 2 ranks on 1 core
    assert ("--allow-run-as-root" in command) == (os.geteuid() == 0)
    assert (
        not LocalExecutor("/x", cpu_count=4)
        .dryrun(_plan("mpi", 2), _launch("r-1"))
        .request.command.count("--oversubscribe")
    )


def test_nccl_needs_gpus(executor: LocalExecutor) -> None:
    with pytest.raises(ExecutorError, match="nccl"):
        executor.dryrun(_plan("nccl"), _launch("r-3"))


def test_unknown_runs(executor: LocalExecutor) -> None:
    handle = RunHandle("local", "host", "r-404")
    assert executor.describe(handle) is None
    executor.cancel(handle)  # no-op, no error
    with pytest.raises(ExecutorError):
        executor.describe(RunHandle("kubernetes", "ns", "r-404"))


@pytest.fixture(params=["forked", "cold"])
def either(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalExecutor]:
    """The executor forking every rank from the warm-start server, and starting them cold."""
    yield LocalExecutor(tmp_path / "runs", warm=request.param == "forked")
    warm_start.shutdown()


def _launcher(executor: LocalExecutor, run_id: str) -> tuple[int, int | None]:
    launch = executor.files(run_id).launch()
    assert launch is not None
    return launch.pid, launch.start_ticks


def test_crashing_rank_fails_run_with_traceback_in_its_log(either: LocalExecutor) -> None:
    executor = either
    handle = executor.schedule(_script_dryrun(executor, "r-crash", "crash"))
    launcher = _launcher(executor, "r-crash")
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.FAILED
    assert status.message is not None and status.message.startswith("rank 1 exited with code 1")
    rank1 = list(executor.log_iter(handle, rank=1))
    assert "rank 1 threads 1" in rank1
    assert any("RuntimeError: boom on rank 1" in line for line in rank1)
    assert any(line.startswith("Traceback") for line in rank1)
    assert list(executor.log_iter(handle, regex="boom")) == ["[rank 1] RuntimeError: boom on rank 1"]
    assert not processes.run_pids("r-crash", *launcher)  # rank 0 (sleeping) was stopped with it


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_cancel_from_another_process_leaves_no_process_behind(
    either: LocalExecutor, backend: str, tmp_path: Path
) -> None:
    executor = either
    run_id = f"r-hang-{backend}"
    handle = executor.schedule(_script_dryrun(executor, run_id, "hang", backend))
    launcher = _launcher(executor, run_id)
    deadline = time.monotonic() + 60
    while (
        len(processes.run_pids(run_id, *launcher)) < 3 and time.monotonic() < deadline
    ):  # launcher + 2 ranks
        time.sleep(0.1)
    seen = processes.run_pids(run_id, *launcher)
    assert len(seen) >= 3
    status = executor.describe(handle)
    assert status is not None and status.state is RunState.RUNNING
    other = LocalExecutor(tmp_path / "runs")  # what `mlbench cancel` in another shell builds
    other.cancel(str(handle))
    assert not processes.run_pids(run_id, *launcher)
    assert not [pid for pid in seen if processes.is_alive(pid)]
    final = executor.describe(handle)
    assert final is not None and final.state is RunState.CANCELLED
    if backend == "mpi":  # the MASTER_PORT claim is given back once the run is over
        assert not list((tmp_path / "runs" / ".ports").iterdir())
    other.cancel(handle)  # idempotent
    assert executor.describe(handle).state is RunState.CANCELLED  # type: ignore[union-attr]


# A launcher whose main thread has ended while another thread still runs: /proc shows the thread
# group leader as a zombie, yet its parent cannot reap it (waitpid says "not yet") until the last
# thread exits (here: once the release file exists). A GPU launcher ends this way while its CUDA
# and NCCL threads tear down.
ZOMBIE_LAUNCHER = """
import ctypes, os, sys, threading, time
def finish():
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    os._exit(0)
threading.Thread(target=finish).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


@pytest.mark.skipif(not processes.HAS_PROC, reason="needs /proc to see the zombie leader")
def test_a_launcher_that_is_a_zombie_before_it_can_be_reaped_is_running_until_its_exit_status_says(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    dry = executor.dryrun(_plan(), _launch("r-zombie"))
    zombie = (sys.executable, "-c", ZOMBIE_LAUNCHER, str(release))  # then the shim's argv, unread
    dry = dataclasses.replace(dry, request=dataclasses.replace(dry.request, launcher=zombie))
    handle = executor.schedule(dry)
    pid = int(json.loads((executor.run_dir("r-zombie") / "launch.json").read_text())["pid"])
    deadline = time.monotonic() + 30
    while _proc_state(pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _proc_state(pid) == "Z" and not processes.is_alive(pid)  # ended as /proc sees it
    for watcher in (executor, LocalExecutor(tmp_path / "runs")):  # `apply`, and `status` beside it
        status = watcher.describe(handle)
        assert status is not None and status.state is RunState.RUNNING, status
    release.touch()
    final = executor.wait(handle, timeout=30, poll_s=0.02)
    assert final.state is RunState.SUCCEEDED, final
    exit_record = json.loads((executor.run_dir("r-zombie") / "exit.json").read_text())
    assert exit_record["exit_code"] == 0


def test_two_runs_at_once_and_follow_logs(either: LocalExecutor) -> None:
    executor = either
    first = executor.schedule(_script_dryrun(executor, "r-a", "ok"))
    second = executor.schedule(_script_dryrun(executor, "r-b", "ok"))
    followed = list(executor.log_iter(first, follow=True))
    assert sorted(followed) == ["[rank 0] rank 0 threads 1", "[rank 1] rank 1 threads 1"]
    assert executor.wait(first, timeout=60).state is RunState.SUCCEEDED
    assert executor.wait(second, timeout=60).state is RunState.SUCCEEDED
    with pytest.raises(ExecutorError, match="already started"):
        executor.schedule(_script_dryrun(executor, "r-a", "ok"))


def test_log_tailer_holds_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "rank-3.log"
    log.write_bytes(b"one\ntw")
    tailer = RankLogTailer(tmp_path)
    assert tailer.poll() == [(3, "one")]
    with open(log, "ab") as fh:
        fh.write(b"o\nthree")
    assert tailer.poll() == [(3, "two")]
    assert tailer.poll(final=True) == [(3, "three")]
    assert tailer.poll(final=True) == []


def test_rank_exec_usage_error() -> None:
    from mlbench_tui.executors.local.rank_exec import main

    assert main(["--bogus"]) == 2
    assert rank_env.rank_of({"OMPI_COMM_WORLD_RANK": "5"}) == 5
    assert rank_env.rank_of({}) == 0
    assert sys.executable


def test_process_table_without_proc_uses_ps(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no /proc: the launcher's descendants are still found (through ps)."""
    import subprocess

    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(['sleep', '30'])"]
    )
    try:
        deadline = time.monotonic() + 60
        with_proc: set[int] = set()
        while not with_proc and time.monotonic() < deadline:
            with_proc = processes.descendants(child.pid)
            time.sleep(0.05)
        ticks = processes.start_ticks(child.pid)
        monkeypatch.setattr(processes, "HAS_PROC", False)
        assert processes.descendants(child.pid) == with_proc
        assert processes.is_alive(child.pid) and processes.start_ticks(child.pid) is not None
        assert processes.marked_pids("anything") == set() and processes.read_environ(child.pid) == {}
        assert processes.age_s(child.pid) is None
        monkeypatch.setattr(processes, "HAS_PROC", True)
        assert processes.start_ticks(child.pid) == ticks
    finally:
        child.kill()
        child.wait()
        for pid in with_proc:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
