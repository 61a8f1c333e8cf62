"""Copies the store's WAL into the database file from its own thread, in small steps, and keeps
the WAL bounded.

SQLite's automatic checkpoint runs inside a writer's COMMIT and syncs there, stalling the acks
waiting on that commit; the writer turns it off and this thread does the work instead. Every
``interval`` it runs ``PRAGMA wal_checkpoint(PASSIVE)``: SQLite syncs the frames written since the
last one and copies them into the database without waiting for the writer, and the thread then
syncs the copied pages, so no sync is ever large. The pragma's answer (busy, frames in the WAL,
frames copied) is all it reads of the WAL.

Under steady writes a passive checkpoint rarely copies everything, and SQLite starts the WAL over
only after a complete one. So once the WAL holds ``wal_bytes``, one checkpoint runs with the
writer paused (``pause``), and the writer's next transaction starts the WAL over. That pause is
rationed: once per ``restart_every`` seconds, or at once when the WAL reaches ``wal_cap`` bytes.
Each poll's observation and decision go to ``observe`` (a ``Poll``), if set.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlbench_tui.store.engine import raw_connect

_FRAME_HEADER = 24  # bytes before each page in a WAL frame


@dataclass(frozen=True)
class Poll:
    """One poll of the checkpointer: the WAL's bytes of frames after its passive checkpoint, the
    bytes that checkpoint copied, the seconds since the last start-over, and whether it paused the
    writer for a complete checkpoint (``paused``) and that one copied everything (``completed``)."""

    wal_size: int
    copied: int
    since_restart: float
    paused: bool
    completed: bool


class Checkpointer:
    """The store's checkpoint thread (see the module doc); ``pause`` is the writer's lock, and
    ``close`` folds the whole WAL in. ``observe``, called on the thread after each poll, sees
    what it decided and why (it must not raise)."""

    def __init__(
        self,
        path: Path,
        pause: threading.Lock,
        *,
        interval: float = 0.05,
        wal_bytes: int = 64 * 1024 * 1024,
        restart_every: float = 30.0,
        wal_cap: int = 512 * 1024 * 1024,
        observe: Callable[[Poll], None] | None = None,
    ) -> None:
        self.path = path
        self.interval = interval
        self.pause = pause
        self.wal_bytes = wal_bytes
        self.restart_every = restart_every
        self.wal_cap = wal_cap
        self.observe = observe
        self.checkpoints = 0  # checkpoints that copied frames
        self.restarts = 0  # complete checkpoints with the writer paused
        self.most_copied = 0  # the most bytes one checkpoint copied
        self.syncs = 0  # database syncs after checkpoints that copied part of the WAL
        self.copied_bytes = 0  # bytes all checkpoints copied
        self._frames = self._copied = 0  # the last checkpoint's answer
        self._frame_bytes = 0
        self._last_restart = time.monotonic()
        # The database file is synced through a descriptor kept until ``close``: closing any
        # descriptor of a file drops every POSIX lock this process holds on it, SQLite's too.
        self._db_fd: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlbench-store-checkpoint", daemon=True)
        self._thread.start()

    def wal_state(self) -> tuple[int, int]:
        """``(bytes of frames in the WAL, bytes of them not copied)`` at the last checkpoint."""
        return self._frames * self._frame_bytes, max(0, self._frames - self._copied) * self._frame_bytes

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(self.interval):
                with contextlib.suppress(sqlite3.Error):
                    if conn is None:
                        conn = raw_connect(self.path)
                        self._frame_bytes = conn.execute("PRAGMA page_size").fetchone()[0] + _FRAME_HEADER
                    self._step(conn)
        finally:
            if conn is not None:
                conn.close()

    def restart_due(self, wal_size: int, since_restart: float | None = None) -> bool:
        """Whether a WAL of ``wal_size`` bytes is to start over now (with the writer paused),
        ``since_restart`` seconds (by default: as now) after the last start-over."""
        if wal_size < self.wal_bytes:
            return False
        if since_restart is None:
            since_restart = time.monotonic() - self._last_restart
        return wal_size >= self.wal_cap or since_restart >= self.restart_every

    def _step(self, conn: sqlite3.Connection) -> None:
        copied_before = self.copied_bytes
        frames, copied = self._checkpoint(conn)
        wal_size, since_restart = frames * self._frame_bytes, time.monotonic() - self._last_restart
        copied_now = self.copied_bytes - copied_before
        paused = completed = False
        if self.restart_due(wal_size, since_restart):
            with self.pause:  # no writes meanwhile: this one completes, and the WAL starts over
                frames, copied = self._checkpoint(conn)
            self._last_restart = time.monotonic()
            paused, completed = True, copied >= frames
            if completed:
                self.restarts += 1
        if self.observe is not None:
            self.observe(Poll(wal_size, copied_now, since_restart, paused, completed))

    def _checkpoint(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """One passive checkpoint; ``(frames in the WAL, frames copied)`` after it."""
        _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        frames, copied = max(0, frames), max(0, copied)  # -1, -1 when the store is not in WAL mode
        started_over = frames < self._frames or copied < self._copied
        new = copied - (0 if started_over else self._copied)
        self._frames, self._copied = frames, copied
        if new > 0:
            self.checkpoints += 1
            self.most_copied = max(self.most_copied, new * self._frame_bytes)
            self.copied_bytes += new * self._frame_bytes
            if copied < frames:  # SQLite syncs the database itself after a complete checkpoint
                self._sync_database()
        return frames, copied

    def _sync_database(self) -> None:
        with contextlib.suppress(OSError):
            if self._db_fd is None:
                self._db_fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            os.fdatasync(self._db_fd)
            self.syncs += 1

    def close(self) -> None:
        """Stop the thread and fold the whole WAL into the database (clean shutdown)."""
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(sqlite3.Error, OSError):
            conn = raw_connect(self.path)
            try:
                conn.execute("PRAGMA busy_timeout=1000")  # never hold up shutdown for long
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.close()
        if self._db_fd is not None:  # after every connection of the store is closed (``Store.close``)
            with contextlib.suppress(OSError):
                os.close(self._db_fd)
            self._db_fd = None
