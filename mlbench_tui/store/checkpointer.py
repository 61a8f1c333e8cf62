"""Keeps the store's WAL synced, copied into the database file and bounded, from its own thread."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import threading
import time
from pathlib import Path

from mlbench_tui.store.engine import raw_connect


class Checkpointer:
    """Keeps the WAL synced, copied into the database file and bounded, from its own thread.

    SQLite's automatic checkpoint runs inside a writer's COMMIT and fsyncs there, which stalls
    every request waiting on that commit. The writer turns it off and this thread does the work
    instead, in small steps so that the writer never waits for a large flush:

    * Sync. Each checkpoint first fsyncs the WAL (``synchronous=NORMAL``). Tens of megabytes of
      frames flushed at once stall the writer's appends to the same file for 5-40 ms (measured
      under heavy ingest: its ``pwrite`` blocks while the filesystem writes the WAL back), so
      the WAL is fdatasync'ed here every ``sync_bytes`` of new frames, polled every
      ``sync_interval`` while it grows. A checkpoint then has only a few frames left to flush.
    * Copy. Once ``wal_bytes`` of frames wait to be copied (read from the wal-index, without
      touching the database), a PASSIVE checkpoint copies them while the writer goes on, and the
      database file is synced right after: SQLite itself syncs it only when a checkpoint copies
      everything, which would leave every partial checkpoint's pages to one large sync.
    * Start over. Under steady writes a PASSIVE checkpoint never quite catches up, and SQLite
      starts the WAL over only after a complete one: the WAL would grow without bound. So from
      time to time the rest is copied with the writer paused (``pause``, the writer's lock), and
      its next transaction writes from the start of the WAL again. Everything before is synced
      first, so the pause costs the acks waiting on it only the frames written meanwhile (about
      3 ms measured, against 40-50 ms when the pause also flushed the database). It is still
      rationed: a WAL of at least ``wal_bytes`` starts over once ``restart_every`` seconds have
      passed since the last time, or at once when it reaches ``wal_cap`` bytes.

    The wal-index, the WAL and the database are read and synced through descriptors opened once
    and kept until ``close``: closing any descriptor of a file drops every POSIX lock this
    process holds on it, SQLite's included (on the wal-index, the lock that tells another
    process the index is in use, which would then reinitialise it under this one).
    """

    def __init__(
        self,
        path: Path,
        interval: float = 0.25,
        *,
        pause: threading.Lock | None = None,
        wal_bytes: int = 64 * 1024 * 1024,
        restart_every: float = 30.0,
        wal_cap: int = 512 * 1024 * 1024,
        sync_bytes: int = 2 * 1024 * 1024,
        sync_interval: float = 0.02,
    ) -> None:
        self.path = path
        self.shm = path.with_name(path.name + "-shm")
        self.wal = path.with_name(path.name + "-wal")
        self.interval = interval
        self.pause = pause
        self.wal_bytes = wal_bytes
        self.restart_every = restart_every
        self.wal_cap = wal_cap
        self.sync_bytes = sync_bytes
        self.sync_interval = sync_interval
        self.checkpoints = 0
        self.restarts = 0  # checkpoints completed with the writer paused
        self.syncs = 0  # fdatasyncs of the WAL between checkpoints
        self._synced = 0  # WAL bytes (frames) known to be synced
        self._fds: dict[Path, int] = {}
        self._fds_lock = threading.Lock()
        self._last_restart = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlbench-store-checkpoint", daemon=True)
        self._thread.start()

    def _fd(self, path: Path) -> int | None:
        """A read-only descriptor of ``path``, opened on first use and kept (see the class doc)."""
        fd = self._fds.get(path)
        if fd is None:
            with self._fds_lock:
                if self._stop.is_set():
                    return None
                fd = self._fds.get(path)
                if fd is None:
                    try:
                        fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    except OSError:
                        return None
        return fd

    def wal_state(self) -> tuple[int, int]:
        """``(bytes of frames in the WAL, bytes of them not yet copied into the database)``.

        From the wal-index: the header's ``szPage`` and ``mxFrame``, and the checkpoint info's
        ``nBackfill`` (frames already copied) right after the header's two copies.
        """
        fd = self._fd(self.shm)
        try:
            head = os.pread(fd, 100, 0) if fd is not None else b""
        except OSError:
            return 0, 0
        if len(head) < 100:
            return 0, 0
        page, frames = struct.unpack_from("=HI", head, 14)  # szPage (1 means 65536), mxFrame
        (copied,) = struct.unpack_from("=I", head, 96)  # nBackfill
        frame = (65536 if page == 1 else int(page)) + 24
        return int(frames) * frame, max(0, int(frames) - int(copied)) * frame

    def _sync(self, path: Path) -> None:
        fd = self._fd(path)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.fdatasync(fd)

    def _sync_wal(self, size: int) -> None:
        """fdatasync the WAL once ``sync_bytes`` of frames were written since the last sync."""
        if size < self._synced:  # the WAL started over
            self._synced = 0
        if size - self._synced >= self.sync_bytes:
            self._sync(self.wal)
            self._synced = size
            self.syncs += 1

    def _restart_due(self, size: int) -> bool:
        if self.pause is None or size < self.wal_bytes:
            return False
        return size >= self.wal_cap or time.monotonic() - self._last_restart >= self.restart_every

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        last = -1
        try:
            wait = self.interval
            while not self._stop.wait(wait):
                size, waiting = self.wal_state()
                wait = self.sync_interval if size != last else self.interval  # poll often while it grows
                last = size
                self._sync_wal(size)
                restart = self._restart_due(size)
                if waiting < self.wal_bytes and not restart:
                    continue
                with contextlib.suppress(sqlite3.Error):
                    if conn is None:
                        conn = raw_connect(self.path)
                    self._checkpoint(conn, restart)
        finally:
            if conn is not None:
                conn.close()

    def _checkpoint(self, conn: sqlite3.Connection, restart: bool) -> None:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.checkpoints += 1
        self._sync(self.path)  # the copied pages, now rather than all at the restart
        if not restart or self.pause is None:
            return
        self._sync(self.wal)  # what came since, so the paused checkpoint flushes only the rest
        with self.pause:  # no writes meanwhile: this one completes, the WAL starts over
            _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self._last_restart = time.monotonic()
        if copied >= frames:
            self.restarts += 1

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
        with self._fds_lock:
            for fd in self._fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()
