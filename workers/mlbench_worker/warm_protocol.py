"""The warm-start protocol: what the local executor and the fork server (``mlbench_worker.warm``)
say to each other, one JSON line each, and the record of how a forked rank ended.

The executor writes a ``StartRequest`` line to the server's stdin; the server answers with
``Started`` (the rank's pid, or why it was not started) on its stdout, after a first ``Ready``
line that says what it preloaded (or why it cannot fork). When a forked rank ends the server
writes its ``Exited`` record to the file the request named. This module is a contract: the engine
imports it and never the server. Stdlib and pydantic.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

SWITCH = "MLBENCH_WARM_START"
"""``0`` (or ``off``, ``false``, ``no``) starts every local rank cold."""
SERVER_MODULE = "mlbench_worker.warm"
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


class StartRequest(BaseModel):
    """Start one rank: what a cold start gets from its command line and its launcher."""

    main: RankMain
    env: dict[str, str] = Field(description="The rank's whole environment.")
    cwd: str
    log_path: str = Field(description="The rank's log; its stdout and stderr are appended to it.")
    status_path: str = Field(description="Where the server writes ``Exited`` when the rank ends.")


class Ready(BaseModel):
    """The server's first line: what it preloaded, or why it cannot start ranks."""

    pid: int
    preloaded: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


class Started(BaseModel):
    """The answer to one ``StartRequest``: the rank's pid, or why it was not started."""

    pid: int | None = None
    error: str | None = None


class Exited(BaseModel):
    """A rank's end, as ``subprocess`` reports it: its exit status, or minus the killing signal."""

    pid: int
    exit_code: int
    ended_at: float
