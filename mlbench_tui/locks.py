"""Advisory file locks (``flock``) with a bounded wait and a message that names who holds them.

A command that meets a lock another process holds says so after ``NOTE_AFTER_S`` (which process:
its pid and command line, read from ``/proc/locks`` and ``/proc/<pid>/cmdline``) and gives up
after its bound with an error naming that process, instead of hanging without a word.
``MLBENCH_LOCK_WAIT`` (seconds) overrides the bound of every such wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mlbench_tui.errors import MlbenchError

LOCK_WAIT_ENV = "MLBENCH_LOCK_WAIT"
NOTE_AFTER_S = 2.0
POLL_S = 0.05


class LockHeld(MlbenchError):
    """A lock stayed held by another process for longer than the wait allowed."""


def wait_bound(default: float) -> float:
    """The wait of a lock: ``MLBENCH_LOCK_WAIT`` when set to a non-negative number, else ``default``."""
    raw = os.environ.get(LOCK_WAIT_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value >= 0 else default


def holder(path: Path, kinds: tuple[str, ...] = ("FLOCK",)) -> int | None:
    """The pid of a process holding a lock of ``kinds`` (``FLOCK``; ``POSIX`` as SQLite takes)
    on ``path`` (from ``/proc/locks``), if any. A write lock's holder comes first: that is the one
    a writer waits on (SQLite's readers keep read locks on a WAL store's shared memory too)."""
    try:
        info = os.stat(path)
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    found: list[tuple[bool, int]] = []
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters carry "->")
        if len(fields) < 6 or "->" in fields[1] or fields[1] not in kinds:
            continue
        pid = fields[4]
        if fields[5] == where and pid.isdigit() and int(pid) != os.getpid():
            found.append((fields[3] != "WRITE", int(pid)))
    return min(found, key=lambda item: item[0])[1] if found else None


def describe(pid: int | None) -> str:
    """``pid 1234 (python -m mlbench_tui apply q.yaml)``, or ``another process`` when unknown."""
    if pid is None:
        return "another process"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        command = " ".join(part.decode(errors="replace") for part in argv if part)[:160]
    except OSError:
        command = ""
    return f"pid {pid} ({command})" if command else f"pid {pid}"


def try_lock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting; False when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def held(
    path: Path,
    *,
    what: str,
    wait: float,
    hint: str,
    note: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created 0600) for the block; wait at most ``wait``
    seconds for another holder, telling ``note`` who it is after ``NOTE_AFTER_S``; raise
    ``LockHeld`` naming the holder when the wait runs out (``PID`` in ``hint`` becomes its pid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        started = time.monotonic()
        noted = False
        while not try_lock(fd):
            waited = time.monotonic() - started
            if waited >= wait:
                pid = holder(path)
                raise LockHeld(
                    f"{what} ({path}) is held by {describe(pid)}; gave up after {waited:.0f} s",
                    hint=hint.replace("PID", str(pid)) if pid else hint,
                )
            if note is not None and not noted and waited >= min(NOTE_AFTER_S, wait / 2):
                note(f"waiting for {what} ({path}), held by {describe(holder(path))} ...")
                noted = True
            time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)
