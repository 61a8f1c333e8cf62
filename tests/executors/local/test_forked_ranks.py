"""Every rank of a local run forked from the warm-start server, under a launcher that plays
torchrun's agent: the rendezvous, a failure taking the run down with its cause named, the
launcher's and the server's deaths, and a rank joining its node's network namespace.

The ranks run small scripts (a typed ``RankMain``) so each case takes seconds; the worker itself
runs forked through ``mlbench apply`` in ``test_warm_start`` and ``tests/test_quickstart.py``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker.warm_protocol import GroupRecord, RankMain
from support.local_runs import local_plan

from mlbench_tui.executors.api import LaunchContext
from mlbench_tui.executors.local import processes, warm_start
from mlbench_tui.executors.local.executor import LocalExecutor
from mlbench_tui.lifecycle import RunHandle, RunState

RENDEZVOUS = """
import datetime, os, sys
import torch.distributed as dist
env = os.environ
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_RANK", "ROLE_NAME", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
         "TORCHELASTIC_RESTART_COUNT", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "MASTER_ADDR")
print(" ".join(f"{name}={env[name]}" for name in names), flush=True)
rank, port = int(env["RANK"]), int(env["MASTER_PORT"])
store = dist.TCPStore(env["MASTER_ADDR"], port, 2, rank == 0, timeout=datetime.timedelta(seconds=60))
if rank == 0:
    store.set("hello", "from rank 0")
    store.wait(["done"])
else:
    print("rank 1 read", store.get("hello").decode(), flush=True)
    store.set("done", "1")
"""

HANG = """
import os, time
print("rank", os.environ["RANK"], "up", flush=True)
time.sleep(600)
"""

SLEEP = """
import os, sys, time
time.sleep(float(sys.argv[1]))
print("rank", os.environ["RANK"], "done", flush=True)
"""

NETWORK = """
import os, socket
print("rank", os.environ["RANK"], os.readlink("/proc/self/ns/net"),
      sorted(name for _, name in socket.if_nameindex()), flush=True)
"""


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[LocalExecutor]:
    yield LocalExecutor(tmp_path / "runs", warm=True)
    warm_start.shutdown()


def _start(
    executor: LocalExecutor,
    run_id: str,
    main: RankMain,
    workers: int = 2,
    netns: tuple[str | None, ...] = (),
    master_addr: str = "127.0.0.1",
) -> RunHandle:
    launch = LaunchContext(run_id=run_id, server_url="http://127.0.0.1:9", write_token="t")
    dry = executor.dryrun(local_plan("gloo", workers), launch)
    request = dataclasses.replace(dry.request, main=main, rank_netns=netns, master_addr=master_addr)
    handle = executor.schedule(dataclasses.replace(dry, request=request))
    launched = executor.files(run_id).launch()
    assert launched is not None and launched.mode.value == "forked"
    return handle


def _group(executor: LocalExecutor, run_id: str, ranks: int = 2, timeout: float = 60.0) -> GroupRecord:
    """The group's record once its launcher has recorded every rank."""
    path = executor.run_dir(run_id) / "group.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = GroupRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            record = None
        if record is not None and len(record.ranks) == ranks:
            return record
        time.sleep(0.02)
    raise AssertionError(f"no group record with {ranks} ranks at {path}")


def _lines(executor: LocalExecutor, handle: RunHandle) -> list[str]:
    return list(executor.log_iter(handle))


def test_forked_ranks_get_torchruns_environment_and_rank_0_serves_the_held_port(
    executor: LocalExecutor,
) -> None:
    """The rendezvous is torchrun's: every variable it sets, and a port the launcher held for the
    group, which rank 0's store binds (SO_REUSEADDR) while nothing else can."""
    handle = _start(executor, "r-rdv", RankMain(code=RENDEZVOUS))
    group = _group(executor, "r-rdv")
    assert group.master_port is not None
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.SUCCEEDED, (status, _lines(executor, handle))
    lines = _lines(executor, handle)
    for rank in (0, 1):
        expected = (
            f"RANK={rank} LOCAL_RANK={rank} WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "
            f"GROUP_WORLD_SIZE=1 ROLE_RANK={rank} ROLE_NAME=default TORCHELASTIC_RUN_ID=r-rdv "
            "TORCHELASTIC_USE_AGENT_STORE=False TORCHELASTIC_RESTART_COUNT=0 "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 MASTER_ADDR=127.0.0.1"
        )
        assert f"[rank {rank}] {expected}" in lines, lines
    assert "[rank 1] rank 1 read from rank 0" in lines


def test_the_held_port_is_not_handed_to_anyone_else_while_the_group_lives(executor: LocalExecutor) -> None:
    handle = _start(executor, "r-held", RankMain(code=HANG))
    port = _group(executor, "r-held").master_port
    assert port is not None
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", port))  # a plain bind, as any other program's
    executor.cancel(handle)
    final = executor.describe(handle)
    assert final is not None and final.state is RunState.CANCELLED


def test_a_rank_killed_takes_the_run_down_and_the_message_names_it(executor: LocalExecutor) -> None:
    """As torchrun: a rank that dies stops the others (SIGTERM), the run fails, and the root cause
    (here SIGKILL) is named; nothing of the run is left."""
    handle = _start(executor, "r-kill", RankMain(code=HANG))
    group = _group(executor, "r-kill")
    victim = next(forked.pid for forked in group.ranks if forked.rank == 1)
    while "[rank 1] rank 1 up" not in _lines(executor, handle):
        time.sleep(0.02)
    running = executor.describe(handle)
    assert running is not None and [r.pid for r in running.ranks] == [f.pid for f in group.ranks]
    os.kill(victim, signal.SIGKILL)
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.FAILED
    said = "rank 1 was killed by SIGKILL (signal 9) (see its log: mlbench logs RUN --rank 1)"
    assert status.message == said
    launcher_log = (executor.run_dir("r-kill") / "launcher.log").read_text()
    assert "mlbench: rank 1 (pid" in launcher_log and "stopping the other 1 rank(s)" in launcher_log
    assert "mlbench: root cause: rank 1 was killed by SIGKILL" in launcher_log
    assert not processes.run_pids("r-kill", group.pid)
    assert not [f.pid for f in group.ranks if processes.is_alive(f.pid)]


def test_a_killed_launcher_takes_its_ranks_with_it(executor: LocalExecutor) -> None:
    """The ranks die with their launcher (PR_SET_PDEATHSIG): kill -9 of it leaves no orphan."""
    handle = _start(executor, "r-agent", RankMain(code=HANG))
    group = _group(executor, "r-agent")
    os.kill(group.pid, signal.SIGKILL)
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.FAILED
    assert status.message == "the launcher was killed by SIGKILL (signal 9)"
    deadline = time.monotonic() + 60
    while [f.pid for f in group.ranks if processes.is_alive(f.pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [f.pid for f in group.ranks if processes.is_alive(f.pid)]


def test_when_the_server_dies_the_group_runs_on_and_its_end_is_read_from_its_record(
    executor: LocalExecutor,
) -> None:
    """The server only forks and reaps: killed mid-run, its group finishes, and the run's end is
    what the launcher's record says (no exit status is lost)."""
    handle = _start(executor, "r-orphan", RankMain(code=SLEEP, args=["1.5"]))
    group = _group(executor, "r-orphan")
    launched = executor.files("r-orphan").launch()
    assert launched is not None
    server = warm_start.current_server_pid()
    assert server is not None
    os.kill(server, signal.SIGKILL)
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.SUCCEEDED, status
    assert sorted(_lines(executor, handle)) == ["[rank 0] rank 0 done", "[rank 1] rank 1 done"]
    assert not processes.is_alive(group.pid)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def namespace() -> Iterator[str]:
    """A network namespace made for the test (``ip netns add``), removed after it."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    name = f"mlbench-t-{uuid.uuid4().hex[:8]}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        yield name
    finally:
        _ip("netns", "delete", name)


def _loopback_up(name: str) -> None:
    assert _ip("netns", "exec", name, "ip", "link", "set", "lo", "up").returncode == 0


def test_a_forked_rank_joins_its_network_namespace_before_it_runs(
    executor: LocalExecutor, namespace: str
) -> None:
    """The network dimension's hook: rank 0 joins ``/run/netns/NAME`` (setns, before any socket)
    and sees only that namespace's interfaces; rank 1, given none, stays in the host's. The
    rendezvous port is held in rank 0's namespace, where its store will listen."""
    _loopback_up(namespace)
    path = f"/run/netns/{namespace}"
    inside = _ip("netns", "exec", namespace, "readlink", "/proc/self/ns/net").stdout.strip()
    handle = _start(executor, "r-netns", RankMain(code=NETWORK), netns=(path, None))
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.SUCCEEDED, (status, _lines(executor, handle))
    lines = dict(line.split("] ", 1) for line in _lines(executor, handle))
    assert lines["[rank 0"] == f"rank 0 {inside} ['lo']"
    assert lines["[rank 1"].startswith(f"rank 1 {os.readlink('/proc/self/ns/net')} ")
    assert _group(executor, "r-netns").master_port is not None


def test_a_group_whose_rendezvous_port_cannot_be_held_fails_saying_why(executor: LocalExecutor) -> None:
    """A master address this host does not have leaves no port to hold: no rank starts, and the
    run's status says why."""
    handle = _start(executor, "r-noaddr", RankMain(code=HANG), master_addr="10.255.255.1")
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.FAILED
    assert status.message is not None and status.message.startswith(
        "the ranks were not all started: cannot hold a rendezvous port on 10.255.255.1: [Errno 99]"
    )
    assert not (executor.run_dir("r-noaddr") / "logs" / "rank-0.log").exists()


def test_a_rank_that_cannot_join_its_namespace_fails_saying_why(executor: LocalExecutor) -> None:
    handle = _start(executor, "r-nons", RankMain(code=HANG), netns=(None, "/run/netns/mlbench-none"))
    status = executor.wait(handle, timeout=120)
    assert status.state is RunState.FAILED
    assert status.message is not None and status.message.startswith(
        "rank 1 exited with code 1: FileNotFoundError: [Errno 2] No such file or directory: "
        "'/run/netns/mlbench-none'"
    )
    assert not processes.run_pids("r-nons", _group(executor, "r-nons").pid)  # rank 0 was stopped
