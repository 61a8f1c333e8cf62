"""Warm starts: one-rank local runs forked from a server that has imported torch and the tasks.

Real processes throughout: the server (``python -m mlbench_worker.launch.warm``), the ranks it forks
(the real worker runtime), and ``mlbench apply``/``cancel`` in subprocesses against a real
embedded server and store.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker.warm_protocol import GroupRecord, RankMain, RankSlot, StartRequest
from support.local_runs import local_plan

from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.local import processes, warm_start
from mlbench_tui.executors.local.executor import LocalExecutor
from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import RunPlan
from mlbench_tui.server.daemon import ensure_server

ROOT = Path(__file__).resolve().parents[3]

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: {name}
spec:
  task: 0a
  workers: {workers}
  backend: gloo
  target: local
  data: synthetic
  repeats: {repeats}
  hyperparameters: {{sizes_max_exp: 2, num_sizes: 3, repetitions: 3, warmup: 1, dtypes: [fp32]}}
{extra}"""


@pytest.fixture(autouse=True)
def _close_server() -> Iterator[None]:
    yield
    warm_start.shutdown()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def _request(
    tmp_path: Path, name: str, argv: list[str], *, main: RankMain | None = None, ranks: int = 1, **env: str
) -> StartRequest:
    """A group of ``ranks`` forked ranks running the worker with ``argv`` (or ``main``)."""
    run = tmp_path / name
    run.mkdir()
    return StartRequest(
        main=main or RankMain(module="mlbench_worker", args=argv),
        env=_env(**env),
        cwd=str(run),
        ranks=[
            RankSlot(
                rank=r, env={"RANK": str(r), "WORLD_SIZE": str(ranks)}, log_path=str(run / f"rank-{r}.log")
            )
            for r in range(ranks)
        ],
        launcher_log=str(run / "launcher.log"),
        status_path=str(run / warm_start.EXIT_FILE),
        record_path=str(run / "group.json"),
        master_host="127.0.0.1",
    )


def _log(request: StartRequest, rank: int = 0) -> str:
    return Path(request.ranks[rank].log_path).read_text()


def _group(request: StartRequest) -> GroupRecord:
    return GroupRecord.model_validate_json(Path(request.record_path).read_text())


def _wait_gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while processes.is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not processes.is_alive(pid)


def test_a_forked_rank_gets_its_run_environment_log_and_exit_status(tmp_path: Path) -> None:
    """The rank reads its own configuration (here: none it can use), writes to its own log and
    ends with the status a cold start would: 2 for an unusable configuration; its launcher ends
    with it and names it as the root cause."""
    (tmp_path / "bad.json").write_text("{}")
    request = _request(tmp_path, "a", ["--config", str(tmp_path / "bad.json")])
    launcher = warm_start.start(request, tmp_path)
    assert launcher.wait(timeout=60) == 2
    assert "error:" in _log(request)
    record = warm_start.read_exit(Path(request.status_path))
    assert record is not None and record.pid == launcher.pid and record.exit_code == 2
    group = _group(request)
    assert group.ended and group.failure is not None and group.failure.rank == 0
    assert group.failure.exit_code == 2
    # MLBENCH_CONFIG from the request's environment, not the server's
    request_b = _request(tmp_path, "b", [], MLBENCH_CONFIG=str(tmp_path / "missing.json"))
    launcher_b = warm_start.start(request_b, tmp_path)
    assert launcher_b.wait(timeout=60) == 2
    assert "missing.json" in _log(request_b)
    assert launcher_b.server.pid == launcher.server.pid  # one server for both


def test_a_killed_launcher_reads_minus_its_signal_takes_its_ranks_and_the_server_ends_after_it(
    tmp_path: Path,
) -> None:
    """The server outlives its input (the executor gone) until the launchers it forked have ended
    and their statuses are on file; a launcher killed with SIGKILL takes its ranks with it (they
    die with their parent), so nothing of the run is left behind."""
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)  # reading the config blocks: ranks that wait like a long run
    request = _request(tmp_path, "k", ["--config", str(fifo)], ranks=2)
    launcher = warm_start.start(request, tmp_path)
    server = launcher.server
    warm_start.shutdown()  # its input ends; it keeps reaping
    ranks = _wait_for_ranks(request, 2)
    assert server.poll() is None and processes.is_alive(launcher.pid)
    os.kill(launcher.pid, signal.SIGKILL)
    assert launcher.wait(timeout=60) == -signal.SIGKILL
    assert all(_wait_gone(pid) for pid in ranks)
    assert server.wait(timeout=60) == 0


def _wait_for_ranks(request: StartRequest, count: int, timeout: float = 60.0) -> list[int]:
    """The pids of the group's ranks once its launcher recorded them all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pids = [forked.pid for forked in _group(request).ranks]
        except (OSError, ValueError):
            pids = []
        if len(pids) == count:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"the launcher did not record {count} ranks")


def test_a_forked_rank_keeps_every_descriptor_it_opens_and_none_of_the_servers(tmp_path: Path) -> None:
    """The server's descriptors are closed once, in the child, before the rank runs, each through
    its owner: none is closed again later by number when the number belongs to the rank (gloo's
    store loop spun forever on a closed epoll that way, and its rank never ended), and none of the
    server's pipes is left open in the rank."""
    out = tmp_path / "fds.txt"
    code = f"""
import gc, os, stat, sys
files = [open(os.devnull) for _ in range(8)]
gc.collect()  # whatever of the server's the child inherited is finalized now, if ever
def alive(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
bad = [f.fileno() for f in files if not alive(f.fileno())]
fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
pipes = [fd for fd in fds if alive(fd) and stat.S_ISFIFO(os.fstat(fd).st_mode)]
with open({str(out)!r}, "w") as o:
    o.write(f"closed under the rank: {{bad}}; pipes: {{pipes}}")
sys.exit(3)
"""
    request = _request(tmp_path, "c", [], main=RankMain(code=code))
    launcher = warm_start.start(request, tmp_path)
    assert launcher.wait(timeout=60) == 3, _log(request)
    assert out.read_text() == "closed under the rank: []; pipes: []"


def test_another_import_environment_gets_another_server(tmp_path: Path) -> None:
    """Thread counts are read when libraries load: a run with another count is not forked from a
    server that loaded them with the old one (and the old server goes once idle)."""
    (tmp_path / "bad.json").write_text("{}")
    argv = ["--config", str(tmp_path / "bad.json")]
    one = warm_start.start(_request(tmp_path, "one", argv, OMP_NUM_THREADS="1"), tmp_path)
    same = warm_start.start(_request(tmp_path, "same", argv, OMP_NUM_THREADS="1", MASTER_PORT="1"), tmp_path)
    two = warm_start.start(_request(tmp_path, "two", argv, OMP_NUM_THREADS="2"), tmp_path)
    assert same.server.pid == one.server.pid  # per-run variables do not count
    assert two.server.pid != one.server.pid
    assert one.server.wait(timeout=60) == 0  # closed once its ranks had ended


def test_a_server_that_cannot_preload_leaves_the_rank_to_a_cold_start(tmp_path: Path) -> None:
    """A torch that fails to import (here a stand-in that raises) makes the server say so and
    exit; the rank is then not forked (the executor starts it cold, where it fails visibly)."""
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise RuntimeError('a broken torch build')\n")
    path = os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])
    request = _request(tmp_path, "x", ["--config", "x"], PYTHONPATH=path)
    with pytest.raises(warm_start.Unavailable, match="could not preload: RuntimeError: a broken torch build"):
        warm_start.start(request, tmp_path)
    assert not Path(request.ranks[0].log_path).exists()  # nothing was forked


def _plan() -> RunPlan:
    return local_plan(workers=1)


SCHEDULE_AND_VANISH = """
import dataclasses, os, sys
from pathlib import Path
from mlbench_worker.warm_protocol import RankMain
from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.local.executor import LocalExecutor
from support.local_runs import local_plan
plan = local_plan(workers=1)
executor = LocalExecutor(Path(sys.argv[1]))
launch = LaunchContext(run_id="r-vanish", server_url="http://127.0.0.1:9", write_token="t")
dry = executor.dryrun(plan, launch)
bad = Path(sys.argv[1]).parent / "bad.json"
bad.write_text('{"task": "0a"}')  # unusable: exit 2
main = RankMain(module="mlbench_worker", args=["--config", str(bad)])
executor.schedule(dataclasses.replace(dry, request=dataclasses.replace(dry.request, main=main)))
os._exit(0)  # the watching process is gone before its rank ends
"""


def test_a_warm_ranks_end_is_known_after_its_executor_has_gone(tmp_path: Path) -> None:
    """A cold launcher's exit status dies with its parent; a warm rank's is on file."""
    runs = tmp_path / "runs"
    paths = [str(ROOT), str(ROOT / "workers"), str(ROOT / "tests")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    subprocess.run([sys.executable, "-c", SCHEDULE_AND_VANISH, str(runs)], env=env, check=True, cwd=ROOT)
    launch = json.loads((runs / "r-vanish" / "launch.json").read_text())
    assert launch["mode"] == "forked"
    status = LocalExecutor(runs).wait("local://x/r-vanish", timeout=60)
    assert status.state is RunState.FAILED, status
    assert status.message == (  # the cause as the rank recorded it in its error file
        "rank 0 exited with code 2: ConfigError: missing key 'run_id' "
        "(see its log: mlbench logs RUN --rank 0)"
    )


def test_a_forked_rank_runs_any_python_main_and_warm_false_starts_it_cold(tmp_path: Path) -> None:
    """What a rank runs is typed (a module or code, with arguments): a script is forked like the
    worker; an executor made with ``warm=False`` starts the same run cold, as its dry run says."""
    script = RankMain(code="import sys; print('script ran with', sys.argv[1:])", args=["a", "b"])
    for warm, mode in ((True, "forked"), (False, "direct")):
        executor = LocalExecutor(tmp_path / "runs", warm=warm)
        launch = LaunchContext(run_id=f"r-script-{mode}", server_url="http://127.0.0.1:9", write_token="t")
        dry = executor.dryrun(_plan(), launch)
        assert dry.request.mode.value == mode and f"# launch: {mode}" in dry.text()
        handle = executor.schedule(
            dataclasses.replace(dry, request=dataclasses.replace(dry.request, main=script))
        )
        status = executor.wait(handle, timeout=60)
        assert status.state is RunState.SUCCEEDED, status
        assert json.loads((executor.run_dir(launch.run_id) / "launch.json").read_text())["mode"] == mode
        assert "script ran with ['a', 'b']" in "\n".join(executor.log_iter(handle, rank=0))


# -- through mlbench apply -------------------------------------------------------------------


def _mlbench(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _launches() -> list[dict[str, object]]:
    runs = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs"
    return [json.loads(path.read_text()) for path in sorted(runs.glob("r-*/launch.json"))]


@pytest.mark.slow
def test_apply_forks_every_rank_of_every_run_of_a_sweep_and_leaves_no_server_behind(tmp_path: Path) -> None:
    """A sweep of one- and two-rank gloo runs: every rank of each is forked (the launch record
    says so), each run succeeds, and every rank reports its start."""
    spec = tmp_path / "warm.yaml"
    spec.write_text(SPEC.format(name="warm", workers="[1, 2]", repeats=2, extra=""))
    done = _mlbench("apply", "--quiet", str(spec))
    assert done.returncode == 0, done.stderr
    launches = _launches()
    assert sorted(launch["workers"] for launch in launches) == [1, 1, 2, 2]
    assert all(launch["mode"] == "forked" for launch in launches)
    results = json.loads(_mlbench("results", str(spec), "-o", "json").stdout)["runs"]
    assert [r["state"] for r in results] == ["succeeded"] * 4
    assert all(r["startup"] and r["startup"]["phases"] for r in results)  # each rank said how it started
    assert sorted(r["startup"]["ranks"] for r in results) == [1, 1, 2, 2]
    stored = ensure_server().client().logs(results[0]["run_id"]).lines  # shipped by apply's watcher
    system = [line.text for line in stored if line.stream == "system"]
    assert any("forked by the warm-start server" in text for text in system), system
    assert any(line.stream == "stdout" and "run stopped: success" in line.text for line in stored)
    deadline = time.monotonic() + 60
    while _servers_of_this_home() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _servers_of_this_home()  # apply's server ended with it


@pytest.mark.slow
def test_a_fault_on_one_forked_rank_fails_the_run_and_names_the_rank_and_its_exception(
    tmp_path: Path,
) -> None:
    """As torchrun: the rank that raised is the root cause, the other rank is stopped, and the
    run's record says which rank failed with what."""
    spec = tmp_path / "fault.yaml"
    extra = '  env: {MLBENCH_INJECT_FAULT: "rank=1,step=0,mode=raise"}\n'
    spec.write_text(SPEC.format(name="fault", workers=2, repeats=1, extra=extra))
    done = _mlbench("apply", "--quiet", str(spec))
    assert done.returncode == 1, done.stderr
    (launch,) = _launches()
    assert launch["mode"] == "forked"
    (run,) = json.loads(_mlbench("results", str(spec), "-o", "json").stdout)["runs"]
    assert run["state"] == "failed"
    cause = "InjectedFault: fault injected by MLBENCH_INJECT_FAULT on rank 1 at step 0"
    assert run["message"] == f"rank 1 failed: {cause}", run
    runs = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs"
    launcher_log = (runs / str(launch["run_id"]) / "launcher.log").read_text()
    assert f"mlbench: root cause: rank 1 exited with code 1: {cause}" in launcher_log
    group = GroupRecord.model_validate_json((runs / str(launch["run_id"]) / "group.json").read_text())
    assert not [forked.pid for forked in group.ranks if processes.is_alive(forked.pid)]


def _servers_of_this_home() -> list[int]:
    home = os.environ["MLBENCH_HOME"]
    return [
        pid
        for pid in processes.descendants(1)
        if "mlbench_worker.launch.warm" in _cmdline(pid)
        and processes.read_environ(pid).get("MLBENCH_HOME") == home
    ]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.slow
def test_warm_start_0_starts_cold_and_a_spec_env_reaches_a_forked_rank(tmp_path: Path) -> None:
    """``MLBENCH_WARM_START=0`` starts every rank cold; a spec's ``env`` is honoured by a forked
    rank (here a fault that hangs rank 0, which ``mlbench cancel`` then stops)."""
    spec = tmp_path / "cold.yaml"
    spec.write_text(SPEC.format(name="cold", workers=1, repeats=1, extra=""))
    done = _mlbench("apply", "--quiet", str(spec), env={**os.environ, "MLBENCH_WARM_START": "0"})
    assert done.returncode == 0, done.stderr
    assert [launch["mode"] for launch in _launches()] == ["direct"]

    hang = tmp_path / "hang.yaml"
    extra = '  env: {MLBENCH_INJECT_FAULT: "rank=0,step=0,mode=hang"}\n'
    hang.write_text(SPEC.format(name="hang", workers=1, repeats=1, extra=extra))
    apply = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", "--quiet", str(hang)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        runs = Path(os.environ["MLBENCH_HOME"]) / "state" / "runs"
        deadline = time.monotonic() + 120
        log: Path | None = None
        while time.monotonic() < deadline:
            logs = [p for p in runs.glob("r-*/logs/rank-0.log") if "hanging on purpose" in p.read_text()]
            if logs:
                log = logs[0]
                break
            time.sleep(0.2)
        assert log is not None, "the forked rank never read its fault from the spec's env"
        run_id = log.parent.parent.name
        launch = json.loads((runs / run_id / "launch.json").read_text())
        assert launch["mode"] == "forked"
        cancelled = _mlbench("cancel", run_id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert _wait_gone(int(launch["pid"]))
        apply.wait(timeout=120)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.wait()
    state = json.loads(_mlbench("results", str(hang), "-o", "json").stdout)["runs"][0]["state"]
    assert state == "cancelled"


GPU_SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: warm-gpu
spec:
  task: 0a
  workers: 1
  backend: nccl
  hardware: {gpu: 1}
  target: local
  data: synthetic
  repeats: 2
  hyperparameters: {sizes_max_exp: 3, num_sizes: 3, repetitions: 5, warmup: 1}
"""


@pytest.mark.gpu
def test_forked_ranks_use_cuda_and_nccl(tmp_path: Path) -> None:
    """The server never touches CUDA, so each rank forked from it creates its own context and
    NCCL communicator: two nccl runs in a row, both forked, both succeed."""
    spec = tmp_path / "gpu.yaml"
    spec.write_text(GPU_SPEC)
    done = _mlbench("apply", "--quiet", str(spec))
    assert done.returncode == 0, done.stderr + done.stdout
    assert [launch["mode"] for launch in _launches()] == ["forked", "forked"]
    results = json.loads(_mlbench("results", str(spec), "-o", "json").stdout)["runs"]
    assert [r["state"] for r in results] == ["succeeded"] * 2


NO_CUDA_PRELOAD = """
import torch, torch.cuda
def refusing(name):  # one function per name: torch._dynamo's rules refuse one object twice
    def refuse(*args, **kwargs):
        raise AssertionError(f"CUDA asked for while preloading ({name})")
    return refuse
for name in ("is_available", "device_count", "init", "current_device", "set_device", "synchronize",
             "get_device_name", "get_device_properties", "get_device_capability", "mem_get_info"):
    setattr(torch.cuda, name, refusing(name))
from mlbench_worker.launch import warm
done = warm.preload()
print(len(done), "modules")
"""


def test_the_server_preloads_without_asking_cuda_anything() -> None:
    """A CUDA context does not survive a fork, and asking CUDA whether a GPU is there starts the
    driver: the CPU twin of the server's promise is that preloading never asks."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "workers")])}
    done = subprocess.run(
        [sys.executable, "-c", NO_CUDA_PRELOAD], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) >= 10
