"""The checkpoint thread on a real store: the WAL is copied in small steps, bounded under
continuous writes, folded in on close, and SQLite's locks stay held while the store is open."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.checkpointer import Checkpointer, Poll
from mlbench_tui.store.store import Store


def _checkpointer(store: Store) -> Checkpointer:
    assert store.checkpointer is not None
    return store.checkpointer


def test_wal_is_checkpointed_in_the_background_and_truncated_on_close(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    store = Store(path)
    run, _ = store.create_run(RunCreate(name="wal"))
    for seq in range(60):  # ~6 MB of WAL
        store.ingest_metrics(run.id, 0, seq, [("loss", seq * 1000 + i, None, 1.0, 0.5) for i in range(1000)])
    deadline = time.monotonic() + 60
    while path.stat().st_size < 1_000_000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.stat().st_size >= 1_000_000, "the WAL was not folded into the database while open"
    assert _checkpointer(store).checkpoints > 0
    store.close()
    wal = path.with_name("wal.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert sqlite3.connect(path).execute("SELECT count(*) FROM metrics").fetchone() == (60_000,)


def _busy_store(tmp_path: Path) -> tuple[Store, Checkpointer, Callable[..., int]]:
    """A store, its checkpointer (a WAL of 1 MB is "large") and ``write(batches, senders=1)``:
    ``senders`` threads send ``batches`` batches of 1000 metric rows between them, back to back
    (with several, the writer never waits for the next batch); it returns the rows written so far."""
    store = Store(tmp_path / "busy.db")
    run, _ = store.create_run(RunCreate(name="busy", workers=8))
    checkpointer = _checkpointer(store)
    checkpointer.wal_bytes = 1024 * 1024
    seqs = [0] * 8

    def send(rank: int, batches: int) -> None:
        for _ in range(batches):
            seq = seqs[rank]
            rows = [("loss", seq * 1000 + i, None, 1.0, 0.5) for i in range(1000)]
            store.ingest_metrics(run.id, rank, seq, rows)
            seqs[rank] += 1

    def write(batches: int, senders: int = 1) -> int:
        threads = [threading.Thread(target=send, args=(r, batches // senders)) for r in range(senders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(seqs) * 1000

    return store, checkpointer, write


def test_wal_starts_over_under_continuous_writes(tmp_path: Path) -> None:
    """A writer that never pauses never sees a fully copied WAL; the checkpointer makes it so:
    while four senders write back to back, the WAL keeps starting over (each start-over a complete
    checkpoint with the writer held for a moment), and nothing written is lost. How large the WAL
    file gets in between depends on how often the machine lets the thread run, so that is not
    asserted; the senders go on until the start-overs happened, however long that takes."""
    store, checkpointer, write = _busy_store(tmp_path)
    try:
        # start over whenever the WAL holds 64 KB: at almost every checkpoint
        checkpointer.restart_every, checkpointer.wal_bytes = 0.0, 64 * 1024
        before = checkpointer.restarts
        written = 0
        deadline = time.monotonic() + 300  # a guard against a checkpointer that never starts over
        while checkpointer.restarts < before + 3 and time.monotonic() < deadline:
            written = write(40, senders=4)  # back to back: every sender keeps a batch in flight
        assert checkpointer.restarts >= before + 3, "the WAL never started over under continuous writes"
        size, waiting = checkpointer.wal_state()
        assert 0 <= waiting <= size
        assert store.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM metrics").scalar()) == written
    finally:
        store.close()


def test_writer_pauses_are_rationed_but_the_wal_stays_under_its_cap(tmp_path: Path) -> None:
    """Under heavy ingest the WAL is copied without pausing the writer (passive checkpoints) and
    starts over (a short pause of every write) only at ``wal_cap`` while ``restart_every`` has not
    passed: every poll that saw the WAL at its cap paused the writer for a complete checkpoint, no
    poll below it did. What each poll saw and did is asserted, not the WAL file's size, which
    passes the cap by however much the machine lets the senders write between two polls; the
    senders go on until polls below and at the cap were seen, however long that takes."""
    store, checkpointer, write = _busy_store(tmp_path)
    polls: list[Poll] = []
    cap = 8 * 1024 * 1024
    try:
        checkpointer.restart_every, checkpointer.wal_cap = 3600.0, cap
        checkpointer.observe = polls.append

        def checked_polls() -> list[Poll]:
            seen = list(polls)
            for poll in seen:
                assert poll.since_restart < checkpointer.restart_every
                assert poll.paused == (poll.wal_size >= cap), f"paused at {poll.wal_size} bytes (cap {cap})"
                assert poll.completed == poll.paused, "a checkpoint with the writer paused stopped short"
            return seen

        def seen_enough(seen: list[Poll]) -> bool:
            rationed = [p for p in seen if checkpointer.wal_bytes <= p.wal_size < cap]
            return sum(p.wal_size >= cap for p in seen) >= 2 and any(p.copied for p in rationed)

        written = 0
        deadline = time.monotonic() + 240  # a guard against a WAL that never reaches its cap
        while not seen_enough(checked_polls()) and time.monotonic() < deadline:
            written = write(40, senders=4)  # back to back: every sender keeps a batch in flight
        checkpointer.observe = None
        seen = checked_polls()
        assert seen_enough(seen), "no poll saw the WAL both large (and copied it) and at its cap"
        assert checkpointer.restarts == sum(p.paused for p in seen)
        size, waiting = checkpointer.wal_state()
        assert 0 <= waiting <= size
        assert store.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM metrics").scalar()) == written
    finally:
        store.close()


def test_the_writer_is_paused_only_when_the_wal_is_large_and_rarely(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        checkpointer = _checkpointer(store)
        checkpointer.wal_bytes, checkpointer.wal_cap, checkpointer.restart_every = 100, 1000, 3600.0
        assert not checkpointer.restart_due(99)  # small: no pause
        assert not checkpointer.restart_due(999)  # large, but the last start-over was recent
        assert checkpointer.restart_due(1000)  # at its cap: at once
        checkpointer.restart_every = 0.0
        assert checkpointer.restart_due(100) and not checkpointer.restart_due(99)


def _wait_for_polls(polls: list[Poll], more: int) -> None:
    """Wait until the checkpointer has reported ``more`` further polls (a guard against a thread
    that stopped, not a window in which they must happen)."""
    target = len(polls) + more
    deadline = time.monotonic() + 60
    while len(polls) < target and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(polls) >= target, "the checkpointer stopped polling"


def test_the_wal_is_copied_in_small_steps_as_it_grows(tmp_path: Path) -> None:
    """Frames reach the disk and the database a poll's worth at a time as they are written, not
    tens of megabytes at once (a large flush stalls the writer's appends to the same file). The
    writer goes on after each ~0.5 MB step once a whole poll has passed, so each checkpoint copies
    at most one step's frames however fast the machine runs the thread."""
    store, checkpointer, write = _busy_store(tmp_path)
    polls: list[Poll] = []
    try:
        checkpointer.wal_bytes = checkpointer.wal_cap = 1 << 40  # no pauses: passive steps only
        checkpointer.observe = polls.append
        while write(5) < 120_000:  # ~9 MB of frames from a steady writer, not a single burst
            _wait_for_polls(polls, 2)  # one of them began after this step was written
        assert checkpointer.checkpoints >= 4, "the WAL was not copied while it grew"
        assert 0 < checkpointer.most_copied < 2 * 1024 * 1024
    finally:
        store.close()


def test_another_process_sees_the_wal_index_in_use_while_the_store_is_open(tmp_path: Path) -> None:
    """SQLite's lock that marks the wal-index as in use stays held while the store is open (no
    descriptor of the store's files is closed under it), so the next process to open the store
    does not reinitialise (truncate) the index under the running server."""
    store = Store(tmp_path / "m.db")
    probe = (
        "import fcntl, sys\n"
        "with open(sys.argv[1], 'r+b') as fh:\n"
        "    try:\n"
        "        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)\n"  # SQLite's DMS byte
        "    except OSError:\n"
        "        sys.exit(3)\n"
    )
    try:
        run, _ = store.create_run(RunCreate(name="locks"))
        store.ingest_metrics(run.id, 0, 0, [("loss", 1, None, 1.0, 0.5)])
        checkpointer = _checkpointer(store)
        deadline = time.monotonic() + 60  # the thread checkpoints first (a guard, not a window)
        while checkpointer.checkpoints == 0 and time.monotonic() < deadline:
            time.sleep(checkpointer.interval)
        assert checkpointer.checkpoints > 0
        shm = str(tmp_path / "m.db-shm")
        held = subprocess.run([sys.executable, "-c", probe, shm], check=False, timeout=30)
        assert held.returncode == 3, "the wal-index's in-use lock was released"
    finally:
        store.close()


def test_another_process_opening_and_closing_the_store_leaves_its_wal_alone(tmp_path: Path) -> None:
    """The last connection to close folds the WAL in and deletes it. A process that reads the
    store and exits must see the server's locks on the database file, kept while the store is
    open (also across the checkpointer's syncs of that file), and leave the WAL to the server."""
    path = tmp_path / "m.db"
    store = Store(path)
    try:
        checkpointer = _checkpointer(store)
        checkpointer.wal_bytes = checkpointer.wal_cap = 1 << 40  # no pauses
        run, _ = store.create_run(RunCreate(name="shared"))

        def batch(seq: int) -> list[tuple[object, ...]]:
            return [("loss", seq * 100 + i, None, 1.0, 0.5) for i in range(100)]

        store.ingest_metrics(run.id, 0, 0, batch(0))
        snapshot = sqlite3.connect(path)  # a reader on an old snapshot: checkpoints stop short of it
        snapshot.execute("BEGIN")
        snapshot.execute("SELECT count(*) FROM metrics").fetchone()
        seq = 1
        deadline = time.monotonic() + 60
        while checkpointer.syncs < 1 and time.monotonic() < deadline:
            store.ingest_metrics(run.id, 0, seq, batch(seq))
            seq += 1
            time.sleep(checkpointer.interval / 2)
        snapshot.close()
        assert checkpointer.syncs >= 1, "no checkpoint copied part of the WAL"
        wal = path.with_name("m.db-wal")
        assert wal.exists() and wal.stat().st_size > 0
        reader = (
            "import sqlite3, sys\n"
            "print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM metrics').fetchone()[0])"
        )
        out = subprocess.run(
            [sys.executable, "-c", reader, str(path)], capture_output=True, text=True, timeout=30
        )
        assert out.stdout.strip() == str(seq * 100)
        assert wal.exists() and wal.stat().st_size > 0, "another process folded in and removed the WAL"
        store.ingest_metrics(run.id, 0, seq, batch(seq))
        count = store.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM metrics").scalar())
        assert count == (seq + 1) * 100
    finally:
        store.close()
