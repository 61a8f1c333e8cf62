"""The records a local run keeps in its directory, so any shell can read what another started:
the launch (``launch.json``), its end (``exit.json``) and a cancel request (``cancel.json``).
Typed end to end; a record that is missing or unreadable reads as None."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from mlbench_tui.executors.local.launch import LaunchMode
from mlbench_tui.executors.run_files import read_record, write_record
from mlbench_tui.lifecycle import NetworkCheck, RunState

LAUNCH_FILE = "launch.json"
EXIT_FILE = "exit.json"
CANCEL_FILE = "cancel.json"
NETWORK_FILE = "network.json"  # the run's emulated network: made (setup time), then checked and removed
LAUNCHER_LOG = "launcher.log"
GROUP_FILE = "group.json"  # a forked run's ranks and root cause (``warm_protocol.GroupRecord``)


class LaunchRecord(BaseModel):
    """What ``schedule`` started: the launcher (a forked group's, or a rank itself when it
    started alone), how, and which process watches it (only a launcher's parent can read its
    exit status)."""

    run_id: str
    pid: int
    start_ticks: int | None  # guards against pid reuse
    mode: LaunchMode
    argv: list[str]  # the cold command (what forked ranks are the equivalent of)
    backend: str
    workers: int
    host: str
    started_at: float
    watcher_pid: int
    master_port: int | None = None  # reserved by schedule (claim released when the run ends)


class ExitRecord(BaseModel):
    """How the run ended, as its watcher (or a cancel) recorded it."""

    exit_code: int | None
    state: RunState
    finished_at: float


class CancelRecord(BaseModel):
    """A cancel was asked for: the launcher's end then reads as cancelled."""

    requested_at: float
    by_pid: int


class RunFiles:
    """The records of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def launch(self) -> LaunchRecord | None:
        return read_record(self.run_dir / LAUNCH_FILE, LaunchRecord)

    def exit(self) -> ExitRecord | None:
        return read_record(self.run_dir / EXIT_FILE, ExitRecord)

    def cancelled(self) -> bool:
        return (self.run_dir / CANCEL_FILE).exists()

    def network(self) -> NetworkCheck | None:
        return read_record(self.run_dir / NETWORK_FILE, NetworkCheck)

    def write(self, record: LaunchRecord | ExitRecord | CancelRecord | NetworkCheck) -> None:
        if isinstance(record, LaunchRecord):
            name = LAUNCH_FILE
        elif isinstance(record, ExitRecord):
            name = EXIT_FILE
        elif isinstance(record, NetworkCheck):
            name = NETWORK_FILE
        else:
            name = CANCEL_FILE
        write_record(self.run_dir / name, record)
