"""Process bookkeeping for local runs: find every process of a run, stop them all, pick free ports.

torchrun starts each worker in a session of its own and Open MPI gives each rank its own process
group, so killing the launcher's process group is not enough to leave no orphan. Every process of
a run carries ``MLBENCH_RUN_ID=<id>`` in its environment (the reporting contract), so the run's
processes are found by that marker in ``/proc`` plus the launcher's descendants. Stdlib only (and
the stdlib-only rank environment contract).
Without ``/proc`` (macOS) the process table comes from ``ps`` and only the launcher's
descendants are found (environments of other processes are not readable there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

from mlbench_worker import rank_env

PROC = Path("/proc")
HAS_PROC = (PROC / "self" / "stat").exists()
RUN_MARKER = rank_env.RUN_ID


def _ps_table() -> dict[int, tuple[str, int, str]]:
    """``pid -> (state, ppid, start time text)`` from ``ps`` where there is no ``/proc``."""
    try:
        out = subprocess.run(
            ["ps", "-axo", "pid=,ppid=,stat=,lstart="],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    table: dict[int, tuple[str, int, str]] = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
            table[int(parts[0])] = (parts[2][:1], int(parts[1]), parts[3].strip())
    return table


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 (state) on; None when the process is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (guards against pid reuse); None if gone."""
    if not HAS_PROC:
        entry = _ps_table().get(pid)
        return None if entry is None else zlib.crc32(entry[2].encode())
    fields = _stat_fields(pid)
    try:
        return None if fields is None else int(fields[19])
    except (IndexError, ValueError):
        return None


def age_s(pid: int) -> float | None:
    """Seconds since ``pid`` started; None when it is gone or this system cannot tell."""
    ticks = start_ticks(pid) if HAS_PROC else None
    if ticks is None:
        return None
    try:
        uptime = float((PROC / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _state_and_ppid(pid: int) -> tuple[str, int] | None:
    if not HAS_PROC:
        entry = _ps_table().get(pid)
        return None if entry is None else (entry[0], entry[1])
    fields = _stat_fields(pid)
    return None if fields is None else (fields[0], int(fields[1]))


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """True when ``pid`` exists, is not a zombie, and (if given) started at ``ticks``."""
    info = _state_and_ppid(pid)
    if info is None or info[0] in ("Z", "X"):
        return False
    return ticks is None or start_ticks(pid) == ticks


def _all_pids() -> list[int]:
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]


def _parents() -> dict[int, tuple[str, int]]:
    """``pid -> (state, ppid)`` for every process."""
    if not HAS_PROC:
        return {pid: (state, ppid) for pid, (state, ppid, _) in _ps_table().items()}
    table = {}
    for pid in _all_pids():
        info = _state_and_ppid(pid)
        if info is not None:
            table[pid] = info
    return table


def descendants(root: int) -> set[int]:
    """Every live descendant of ``root`` (children, grandchildren, ...), not ``root`` itself."""
    children: dict[int, list[int]] = {}
    for pid, (state, ppid) in _parents().items():
        if state not in ("Z", "X"):
            children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def read_environ(pid: int) -> dict[str, str]:
    """The environment of a process (empty when unreadable, gone, or without ``/proc``)."""
    if not HAS_PROC:
        return {}
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def marked_pids(run_id: str) -> set[int]:
    """Live processes whose environment carries ``MLBENCH_RUN_ID=<run_id>`` (none found
    without ``/proc``)."""
    if not HAS_PROC:
        return set()
    needle = f"{RUN_MARKER}={run_id}\0".encode()
    me = os.getpid()
    found: set[int] = set()
    for pid in _all_pids():
        if pid == me:
            continue
        try:
            raw = (PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if (raw.startswith(needle) or b"\0" + needle in raw) and is_alive(pid):
            found.add(pid)
    return found


def run_pids(run_id: str, launcher_pid: int | None = None, launcher_ticks: int | None = None) -> set[int]:
    """Every live process of a run: the launcher (if it is still the same process), its
    descendants, and anything else carrying the run's marker."""
    pids = marked_pids(run_id)
    if launcher_pid is not None and is_alive(launcher_pid, launcher_ticks):
        pids.add(launcher_pid)
        pids |= descendants(launcher_pid)
    return pids


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def terminate_run(
    run_id: str,
    launcher_pid: int | None = None,
    launcher_ticks: int | None = None,
    *,
    grace_s: float = 5.0,
) -> set[int]:
    """Stop every process of a run: SIGTERM (launchers forward it to their ranks), then SIGKILL
    whatever is still alive after ``grace_s``. Returns the pids that were signalled."""
    pids = run_pids(run_id, launcher_pid, launcher_ticks)
    if not pids:
        return set()
    if launcher_pid is not None and launcher_pid in pids:
        # The launcher leads its own process group (start_new_session): signal the whole group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(launcher_pid, signal.SIGTERM)
    _signal_all(pids, signal.SIGTERM)
    signalled = set(pids)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        pids = {p for p in run_pids(run_id, launcher_pid, launcher_ticks)}
        if not pids:
            return signalled
        signalled |= pids
        time.sleep(0.05)
    for _ in range(3):
        pids = run_pids(run_id, launcher_pid, launcher_ticks)
        if not pids:
            break
        signalled |= pids
        _signal_all(pids, signal.SIGKILL)
        time.sleep(0.1)
    return signalled


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel picks it; used for MPI's side channel).

    torchrun runs use ``--standalone`` rendezvous, which binds its port itself and cannot race.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
