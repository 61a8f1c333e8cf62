"""What the store's writer queues and how its senders hear back.

A write reaches the ``Writer`` as a job: a batch of log or event rows, a metric batch, or a
function to run in its transaction. Each carries the future its sender waits on; once the group
transaction holding it commits (or fails), ``resolve`` settles every future in its own thread or
event loop, so an acknowledged write is on disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from mlbench_tui.store.changes import Change, MetricChunk


@dataclass
class Job:
    """A request queued for the writer, and the future its sender waits on (``loop``: the event
    loop that future belongs to; None for a thread's ``concurrent.futures.Future``)."""

    future: concurrent.futures.Future[Any] | asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop | None

    def size(self) -> int:
        return 1


@dataclass
class IngestJob(Job):
    """A batch of log or event rows from one rank's sender session."""

    kind: str = "logs"
    run_id: str = ""
    rank: int = 0
    session: str = ""
    seq: int = 0
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # rows without the leading id
    by_run_token: bool = False  # sent with the run's write token: bound by every write rule

    def size(self) -> int:
        return len(self.rows)


@dataclass
class MetricJob(Job):
    """A metric batch in the ``MetricChunk`` layout (series ids already handed out)."""

    run_id: str = ""
    rank: int = 0
    session: str = ""
    seq: int = 0
    params: list[Any] = field(default_factory=list)  # MetricChunk.FIELDS of each row
    by_run_token: bool = False

    def size(self) -> int:
        return len(self.params) // MetricChunk.WIDTH


@dataclass
class CallJob(Job):
    """A function run in the writer's transaction (run create, update, delete, ranks)."""

    fn: Callable[[Connection], tuple[Any, list[Change]]] | None = None


STOP = object()  # queued by ``Writer.close``: the writer thread ends after what came before it


def resolve(
    jobs: list[Job], results: list[tuple[Any, BaseException | None]], inline_thread: int | None = None
) -> None:
    """Settle each job's future with its ``(result, exception)``: a thread's at once, a loop's in
    that loop (at once when the group was committed inside it, on ``inline_thread``)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any, BaseException | None]]] = {}
    for job, (result, exc) in zip(jobs, results, strict=True):
        if job.loop is None:
            fut = job.future
            assert isinstance(fut, concurrent.futures.Future)
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
        else:
            by_loop.setdefault(job.loop, []).append((job.future, result, exc))
    here = threading.get_ident()
    for loop, items in by_loop.items():
        if inline_thread == here and loop.is_running() and _running_loop() is loop:
            _settle(items)  # committed inside this very loop: settle at once
            continue
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(_settle, items)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(items: list[tuple[Any, Any, BaseException | None]]) -> None:
    for fut, result, exc in items:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
