"""Which process owns a run (the ``apply`` that created, launches and watches it) and whether it
still lives.

A run row records its owner, so the server can tell a run that something still drives from one
whose ``apply`` is gone: the first keeps a detached server up and blocks a second ``apply`` of the
same run name; the second does neither, and one never launched is recorded failed. A process is
named by host, pid and start time (clock ticks since boot), so a reused pid is not mistaken for it.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


@cache
def host_name() -> str:
    """This machine's short host name, as run owners record it."""
    return socket.gethostname().split(".")[0] or "localhost"


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, from ``/proc``); None when it is gone or
    this system has no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces and ')'
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


class RunOwner(BaseModel):
    """The process that owns a run: where it runs, its pid and when it started."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str = Field(max_length=255, description="Host name of the owning process.")
    pid: int = Field(ge=0, le=2**31, description="Its process id.")
    started: int | None = Field(
        default=None, ge=0, description="Its start time in clock ticks since boot (guards against pid reuse)."
    )
    command: str = Field(default="apply", max_length=64, description="What it is, e.g. 'apply'.")

    @classmethod
    def this_process(cls, command: str = "apply") -> RunOwner:
        pid = os.getpid()
        return cls(host=host_name(), pid=pid, started=start_ticks(pid), command=command)

    def local(self) -> bool:
        """Whether the owner runs on this machine (only then can its life be checked)."""
        return self.host == host_name()

    def alive(self) -> bool:
        """Whether the owner still runs; an owner on another machine is taken as alive."""
        if not self.local():
            return True
        if not pid_alive(self.pid):
            return False
        ticks = start_ticks(self.pid)
        return self.started is None or ticks is None or ticks == self.started

    def __str__(self) -> str:
        where = "" if self.local() else f" on {self.host}"
        return f"{self.command} pid {self.pid}{where}"
