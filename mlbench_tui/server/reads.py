"""Store reads of the HTTP read routes: bounded, with a deadline, and dropped when the client goes.

Read routes run their query in a small thread pool of their own (``workers`` at a time), so a
burst of heavy reads (a TUI retrying on a big run, several dashboards opening at once) queues
instead of piling up threads that fight the ingest path for the GIL and the disk. While a query
runs, the event loop watches its request: when the client disconnects (a client that timed out
closes its connection) or the deadline passes, the query is stopped with SQLite's
``interrupt()``, which is safe to call from another thread and costs the query nothing until
then. A read that cannot start within ``queue_wait`` or is stopped at its deadline is answered
503 with a JSON reason; one whose client left is answered to nobody.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from starlette.requests import Request

from mlbench_tui.errors import StoreError

T = TypeVar("T")

READ_WORKERS = 2  # reads at once (2 cores: more would only take the GIL from ingest)
READ_DEADLINE_S = 30.0  # a read still running after this is stopped (clients give up sooner)
QUEUE_WAIT_S = 10.0  # a read that cannot start within this is refused as "busy"
WATCH_S = 0.1  # how often a running read checks its client and deadline


class ReadAborted(StoreError):
    """A read was refused (server busy) or stopped (deadline passed, client gone)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, hint="retry in a moment; a narrower read (names, points) is cheaper")
        self.reason = reason


class _Running:
    """The connection a read runs on, once it has one, and whether it must stop."""

    def __init__(self) -> None:
        self.raw: Any = None
        self.stop: str | None = None  # why it must stop: "client_gone" | "read_timeout"
        self.lock = threading.Lock()

    def interrupt(self, why: str) -> None:
        with self.lock:
            self.stop = self.stop or why
            if self.raw is not None:
                self.raw.interrupt()


class ReadGate:
    """Runs read functions ``fn(conn)`` for requests; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        *,
        workers: int = READ_WORKERS,
        deadline: float = READ_DEADLINE_S,
        queue_wait: float = QUEUE_WAIT_S,
    ) -> None:
        self._engine = engine
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="mlbench-read")
        self._workers = workers
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.deadline = deadline
        self.queue_wait = queue_wait
        self.running = 0  # reads in the pool now (tests, health)
        self.aborted = 0  # reads stopped or refused so far

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, request: Request | None, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` on a pooled connection in a read worker, watched until it is done."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:  # one app may be served by several loops
            self._slots, self._loop = asyncio.Semaphore(self._workers), loop
        slots = self._slots
        try:
            await asyncio.wait_for(slots.acquire(), self.queue_wait)
        except TimeoutError:
            self.aborted += 1
            raise ReadAborted(
                f"the server is busy: no read could start within {self.queue_wait:g} s", "server_busy"
            ) from None
        state = _Running()
        self.running += 1
        try:
            future = loop.run_in_executor(self._pool, self._call, fn, state)
            deadline = time.monotonic() + self.deadline
            while True:
                done, _ = await asyncio.wait({future}, timeout=WATCH_S)
                if done:
                    return future.result()
                # Interrupt again on every tick: a statement that started after the last
                # interrupt (a read runs several) is stopped too.
                if request is not None and await request.is_disconnected():
                    state.interrupt("client_gone")
                elif time.monotonic() > deadline:
                    state.interrupt("read_timeout")
                elif state.stop is not None:
                    state.interrupt(state.stop)
        finally:
            self.running -= 1
            slots.release()

    def _call(self, fn: Callable[[Connection], T], state: _Running) -> T:
        with self._engine.connect() as conn:
            with state.lock:
                if state.stop is None:
                    state.raw = conn.connection.driver_connection
            try:
                if state.stop is not None:
                    raise self._aborted(state.stop)
                return fn(conn)
            except Exception as exc:
                if state.stop is not None and not isinstance(exc, ReadAborted):
                    raise self._aborted(state.stop) from None
                raise
            finally:
                with state.lock:
                    state.raw = None
                with contextlib.suppress(Exception):
                    conn.rollback()

    def _aborted(self, reason: str) -> ReadAborted:
        self.aborted += 1
        if reason == "client_gone":
            return ReadAborted("read stopped: the client went away", reason)
        return ReadAborted(f"read stopped at its deadline of {self.deadline:g} s", reason)
