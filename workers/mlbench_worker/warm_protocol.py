"""The warm-start protocol: what the local executor and the fork server (``mlbench_worker.launch.warm``)
say to each other, one JSON line each, and the record of how a forked rank ended.

The executor writes a ``StartRequest`` line to the server's stdin; the server answers with
``Started`` (the pid of the group's launcher, or why it was not started) on its stdout, after a
first ``Ready`` line that says what it preloaded (or why it cannot fork). The launcher forks the
run's ranks and keeps a ``GroupRecord``; when it ends the server writes its ``Exited`` record to
the file the request named. This module is a contract: the engine
imports it and never the server. Stdlib and pydantic.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

SWITCH = "MLBENCH_WARM_START"
"""``0`` (or ``off``, ``false``, ``no``) starts every local rank cold."""
SERVER_MODULE = "mlbench_worker.launch.warm"
"""What the executor runs (``python -m``) to start a server."""


class RankMain(BaseModel):
    """What a rank runs, as ``python -u -m MODULE ARGS...`` or ``python -u -c CODE ARGS...``
    would: exactly one of ``module`` and ``code``."""

    module: str | None = None
    code: str | None = None
    args: list[str] = Field(default_factory=list)

    def argv(self, python: str) -> list[str]:
        """The cold start's command line with interpreter ``python``."""
        what = ["-m", self.module] if self.module is not None else ["-c", self.code or ""]
        return [python, "-u", *what, *self.args]


WORKER_MODULE = "mlbench_worker"
"""The rank runtime every run's ranks start (``python -m mlbench_worker --config FILE``)."""


class RankSlot(BaseModel):
    """One rank of a forked group: its own variables over the group's, its log and, with the
    network dimension, the network namespace it joins before it opens any socket."""

    rank: int
    env: dict[str, str] = Field(default_factory=dict)
    log_path: str = Field(description="The rank's log; its stdout and stderr are appended to it.")
    netns: str | None = Field(
        default=None, description="A network namespace to join (``/run/netns/NAME``) before the rank runs."
    )


class StartRequest(BaseModel):
    """Start a run's ranks: what a cold launcher gets from its command line and its environment.

    The server forks one process for the request, the group's launcher (torchrun's local agent,
    forked): it leads a session of its own, forks every rank, watches them, and when one fails
    stops the others; its ``GroupRecord`` says which rank failed first and why."""

    main: RankMain
    env: dict[str, str] = Field(description="Every rank's environment (a slot's own variables win).")
    cwd: str
    ranks: list[RankSlot]
    launcher_log: str = Field(description="Where the group's launcher appends what it says.")
    status_path: str = Field(description="Where the server writes ``Exited`` when the launcher ends.")
    record_path: str = Field(description="Where the launcher keeps the ``GroupRecord``.")
    master_host: str | None = Field(
        default=None,
        description="When set, the launcher holds a free port on this address for the group's "
        "rendezvous and gives it to every rank as MASTER_PORT.",
    )
    grace_s: float = Field(default=10.0, description="How long stopped ranks get before SIGKILL.")


class Ready(BaseModel):
    """The server's first line: what it preloaded, or why it cannot start ranks."""

    pid: int
    preloaded: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


class Started(BaseModel):
    """The answer to one ``StartRequest``: the launcher's pid, or why it was not started."""

    pid: int | None = None
    error: str | None = None


class Exited(BaseModel):
    """A process's end, as ``subprocess`` reports it: its exit status, or minus the killing signal."""

    pid: int
    exit_code: int
    ended_at: float


class RankPid(BaseModel):
    rank: int
    pid: int


class RankFailure(BaseModel):
    """The first rank that failed: its exit status (minus the signal that killed it) and, when it
    recorded one, its exception (torch's error file, ``TORCHELASTIC_ERROR_FILE``)."""

    rank: int
    pid: int
    exit_code: int
    cause: str | None = None
    ended_at: float


class GroupRecord(BaseModel):
    """What a forked group's launcher keeps in the run directory: its ranks as they started, the
    rendezvous port it held, and once it ends, the first failure (None: every rank ended well)."""

    pid: int
    master_port: int | None = None
    ranks: list[RankPid] = Field(default_factory=list)
    ended: bool = False
    failure: RankFailure | None = None
    stopped_by: int | None = Field(default=None, description="The signal that stopped the group, if one did.")
    start_error: str | None = Field(
        default=None, description="Why the group's ranks could not all be started, if they could not."
    )

    def exit_status(self) -> int | None:
        """The launcher's exit status once the group ended (None before): the root cause's (a
        signal as 128 + its number), 128 + the signal that stopped the group, 1 when its ranks
        could not all be started, else 0."""
        if not self.ended:
            return None
        if self.failure is not None:
            code = self.failure.exit_code
            return code if code > 0 else 128 - code
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        return 1 if self.start_error is not None else 0
