"""The cause, not the symptom: a rank killed by a signal is named with its signal (not as the
surviving rank's "Connection closed by peer"), and a launcher that fails before any rank starts
reports its own error line (not "launcher exited with code 1")."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support.local_runs import local_plan
from support.waiting import wait_for

from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.local.executor import LocalExecutor
from mlbench_tui.executors.local.failures import launch_failure

from .conftest import rank_log, rank_pid, run_dirs, run_mlbench, start_mlbench, sweep_spec

TORCHRUN_SIGKILL = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
mlbench_tui.executors.rank_exec FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_00:53:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 30373)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 30373
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_00:53:29
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 30374)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 30374
=======================================================""".splitlines()

MPI_SIGNAL = [  # Open MPI 5 (prterun), as it wraps its notice
    "--------------------------------------------------------------------------",
    "prterun noticed that process rank 1 with PID 30986 on node vm exited on",
    "signal 9 (Killed).",
    "--------------------------------------------------------------------------",
]
MPI_SIGNAL_ONE_LINE = [
    "mpiexec noticed that process rank 1 with PID 4242 on node vm exited on signal 9 (Killed)."
]

PYTHONHOME = """\
Python path configuration:
  PYTHONHOME = '/nonexistent'
  PYTHONPATH = (not set)
Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem encoding
Python runtime state: core initialized
ModuleNotFoundError: No module named 'encodings'
Current thread 0x00007f3341bc2b80 (most recent call first):
  <no Python frame>""".splitlines()


def test_launcher_outputs_name_the_first_failing_rank_and_how_it_ended() -> None:
    killed = "rank 1 was killed by SIGKILL (signal 9) (see its log: mlbench logs RUN --rank 1)"
    assert launch_failure(TORCHRUN_SIGKILL, 1, direct=False, ranks_started=True) == killed
    assert launch_failure(MPI_SIGNAL, 137, direct=False, ranks_started=True) == killed
    assert launch_failure(MPI_SIGNAL_ONE_LINE, 137, direct=False, ranks_started=True) == killed
    exited = launch_failure(["  rank      : 3", "  exitcode  : 2"], 1, direct=False, ranks_started=True)
    assert exited == "rank 3 exited with code 2 (see its log: mlbench logs RUN --rank 3)"
    direct = launch_failure([], -6, direct=True, ranks_started=True)
    assert direct.startswith("rank 0 was killed by SIGABRT (signal 6)")
    assert launch_failure(["noise"], 1, direct=False, ranks_started=True) == "launcher exited with code 1"


def test_a_launcher_that_failed_before_any_rank_reports_its_own_error() -> None:
    said = launch_failure(PYTHONHOME, 1, direct=False, ranks_started=False)
    assert said == (
        "the launcher failed before any rank started: Fatal Python error: init_fs_encoding: failed to get "
        "the Python codec of the filesystem encoding (ModuleNotFoundError: No module named 'encodings') "
        "(see: mlbench logs RUN)"
    )
    assert "exit code 1" in launch_failure([], 1, direct=False, ranks_started=False)


@pytest.mark.slow
def test_a_launcher_that_cannot_start_python_says_why(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "runs")
    plan = local_plan().model_copy(update={"env": {"PYTHONHOME": "/nonexistent"}})
    handle = executor.submit(plan, LaunchContext(run_id="r-00000000beef", server_url="", write_token="t"))
    status = executor.wait(handle, timeout=120)
    assert status.state.value == "failed"
    assert status.message is not None and status.message.startswith(
        "the launcher failed before any rank started: Fatal Python error: init_fs_encoding"
    ), status.message
    assert "No module named 'encodings'" in status.message


@pytest.mark.slow
def test_a_rank_killed_by_sigkill_is_named_with_its_signal(tmp_path: Path) -> None:
    hang = '  env: {MLBENCH_INJECT_FAULT: "rank=1,step=0,mode=hang"}\n'
    spec = sweep_spec(tmp_path, "sigkill", extra=hang)
    apply = start_mlbench("apply", str(spec))
    try:
        found = wait_for(lambda: [d for d in run_dirs() if (d / "launch.json").exists()], "the run to launch")
        assert isinstance(found, list)
        run_id = found[0].name
        wait_for(lambda: "hanging on purpose" in rank_log(run_id, 1), "rank 1 to hang")
        pid = wait_for(lambda: rank_pid(run_id, 1), "rank 1's process")
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGKILL)  # the OOM killer, an operator: rank 1 dies without a word
        _, err = apply.communicate(timeout=240)
    finally:
        if apply.poll() is None:
            apply.kill()
    assert apply.returncode == 1
    said = "rank 1 was killed by SIGKILL (signal 9)"
    assert said in err and "Traceback" not in err, err
    status = run_mlbench("status", "sigkill-gloo-2w").stdout
    assert f"error:    {said}" in status, status
    assert "closed by peer" not in status.split("ranks:")[0]
