"""The fault suite's tools: the ``mlbench`` CLI in subprocesses, a real server process, small
file systems (tmpfs) and read-only bind mounts (root only; unmounted after each test), and
finders for this test's own processes (never anyone else's)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlbench_worker.warm_protocol import GroupRecord
from support.waiting import wait_for

from mlbench_tui.executors.local.records import GROUP_FILE
from mlbench_tui.server.daemon import ServerInfo, read_state, state_path

ROOT = Path(__file__).resolve().parents[2]

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
  hyperparameters: {{sizes_max_exp: 2, num_sizes: 3, repetitions: {repetitions}, warmup: 1, dtypes: [fp32]}}
{extra}"""


def sweep_spec(
    folder: Path, name: str, *, repetitions: int = 2, backend: str = "gloo", extra: str = ""
) -> Path:
    """A small all-reduce sweep of 2 ranks (seconds; ``repetitions`` makes it last), as a spec file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(SWEEP.format(name=name, backend=backend, repetitions=repetitions, extra=extra))
    return path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_mlbench(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> Result:
    """``python -m mlbench_tui ARGS`` to completion (a hang guard only: ``timeout``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def start_mlbench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m mlbench_tui ARGS`` started in the background (stdout and stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def home() -> Path:
    return Path(os.environ["MLBENCH_HOME"])


def store_path() -> Path:
    return Path(os.environ.get("MLBENCH_DB") or home() / "mlbench.db")


def server_record(store: Path | None = None) -> ServerInfo | None:
    """The record of the store's server (its pid and URL), as commands find it."""
    return read_state(state_path(store or store_path()))


def kill_server(store: Path | None = None) -> int:
    """SIGKILL the store's recorded server (started by this test's commands); its pid."""
    info = wait_for(lambda: server_record(store), "a recorded server")
    assert isinstance(info, ServerInfo)
    os.kill(info.pid, signal.SIGKILL)
    wait_for(lambda: not _alive(info.pid), f"server {info.pid} to die")
    return info.pid


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = (
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if Path(f"/proc/{pid}").exists()
        else "X"
    )
    return state not in ("Z", "X")


def rank_pid(run_id: str, rank: int) -> int | None:
    """The pid of rank ``rank``'s worker process of this test's run ``run_id`` (not its shim): from
    the group record when the ranks were forked warm, else by their environment."""
    with contextlib.suppress(OSError, ValueError):
        group = GroupRecord.model_validate_json((home() / "state" / "runs" / run_id / GROUP_FILE).read_text())
        return next((forked.pid for forked in group.ranks if forked.rank == rank), None)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"MLBENCH_RUN_ID={run_id}".encode() in env
            and f"RANK={rank}".encode() in env
            and b"mlbench_worker" in argv
            and b"mlbench_tui.executors.rank_exec" not in argv
        ):
            return int(entry.name)
    return None


def run_dirs() -> list[Path]:
    return sorted((home() / "state" / "runs").glob("r-*"))


def rank_log(run_id: str, rank: int) -> str:
    try:
        return (home() / "state" / "runs" / run_id / "logs" / f"rank-{rank}.log").read_text(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------------- mounts


def _why_no_mounts() -> str | None:
    if os.geteuid() != 0:
        return "mounting a tmpfs or a read-only bind needs root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "needs mount and umount"
    return None


@dataclass
class Mounts:
    """Mounts made by one test, undone after it (innermost first)."""

    made: list[Path]

    def tmpfs(self, where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)], check=True
        )
        self.made.append(where)
        return where

    def read_only(self, source: Path, where: Path) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(where)], check=True)
        self.made.append(where)
        return where


@pytest.fixture
def mounts() -> Iterator[Mounts]:
    reason = _why_no_mounts()
    if reason is not None:
        pytest.skip(reason)
    made = Mounts([])
    try:
        yield made
    finally:
        stop_servers()  # servers of the test's commands serve files there
        for where in reversed(made.made):
            for attempt in range(50):  # a server of the test may still hold files there
                if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1 * (attempt + 1))
            else:
                subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte (a file of zeros); returns the file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1 << 10, 1):  # big blocks, then what is left byte by byte
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return filler


def stop_servers() -> None:
    """Stop the servers this test's commands started (before unmounting under them)."""
    from mlbench_tui.server.daemon import recorded_servers, stop_server

    for info in recorded_servers():
        stop_server(info)
