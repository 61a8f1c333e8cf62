"""Importing what ranks could not send: the batches in each run's spool folder.

A rank that cannot reach the server keeps its batches in its run's spool folder (one JSON line
per batch, ``mlbench_worker/reporting/spool.py``), each with the rank's sender session and sequence number.
Whichever process next serves the store imports every run's spool when it starts, and a run's
own spool once more when the run ends, before its result is computed: the record is complete
whatever happened to the server, ``apply`` or the network. Imports are idempotent: a batch the
server already stored (sent before the outage, re-sent by the rank, imported before) is matched
by its ``(rank, session, kind, seq)`` receipt and stored once.

Each line is checked as the HTTP API checks a batch (the same decoders and wire models) and
stored through the writer without a token: it comes from the run's own ranks, so the rules of
tokens (run ended, rank stopped) do not apply; a rank outside the run's world is still refused.
An ended run whose spool added rows gets its state settled and its result computed again; a
file of an ended run, once wholly imported, is renamed ``*.imported`` so it is not read again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from mlbench_tui.errors import Conflict, MlbenchError, NotFound, StoreError
from mlbench_tui.server.errors import ApiError
from mlbench_tui.server.ingest import event_rows, fast_metric_parts, log_rows, metric_params, validated
from mlbench_tui.server.results import resettled
from mlbench_tui.store.api_models import MAX_RANK
from mlbench_tui.store.store import Store

log = logging.getLogger("mlbench.server")

IMPORTED = ".imported"
ENDED = ("succeeded", "failed", "cancelled")
IN_FLIGHT = 64  # batches queued to the writer at once (they share group commits)
_BODY_KEYS = {"metrics": b"metrics", "logs": b"lines", "events": b"events"}


class SpoolLine(msgspec.Struct, forbid_unknown_fields=True):
    """One line of a spool file: a batch as the rank would have POSTed it, and its kind."""

    kind: str
    rank: Annotated[int, msgspec.Meta(ge=0, le=MAX_RANK)]
    session: Annotated[str, msgspec.Meta(max_length=64)]
    seq: Annotated[int, msgspec.Meta(ge=0, le=2**62)]
    items: msgspec.Raw

    def body(self) -> bytes:
        """The HTTP body of this batch (``{"rank", "seq", "session", <items key>}``)."""
        session = msgspec.json.encode(self.session)
        key = _BODY_KEYS[self.kind]
        return b'{"rank":%d,"seq":%d,"session":%s,"%s":%s}' % (self.rank, self.seq, session, key, self.items)


_LINE = msgspec.json.Decoder(SpoolLine)


@dataclass
class SpoolImport:
    """What one import did: batches stored, already there, refused or unreadable, and rows added."""

    files: int = 0
    stored: int = 0
    duplicates: int = 0
    refused: int = 0
    invalid: int = 0
    rows: int = 0
    runs: list[str] = field(default_factory=list)  # runs that got rows

    def add(self, other: SpoolImport) -> None:
        self.files += other.files
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.refused += other.refused
        self.invalid += other.invalid
        self.rows += other.rows
        self.runs += other.runs

    def __str__(self) -> str:
        text = f"{self.rows} row(s) in {self.stored} batch(es) from {self.files} spool file(s)"
        if self.duplicates:
            text += f", {self.duplicates} already stored"
        if self.refused or self.invalid:
            text += f", {self.refused} refused, {self.invalid} unreadable"
        return text


def spool_files(folder: Path) -> list[Path]:
    """The spool files in ``folder`` not imported yet, oldest first."""
    try:
        found = [p for p in folder.glob("rank*-*.jsonl") if p.is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def read_lines(path: Path) -> Iterator[SpoolLine | None]:
    """The batches of a spool file; None for a line that is not one (a torn last line)."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            parsed = _LINE.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            yield None
            continue
        yield parsed if parsed.kind in _BODY_KEYS else None


class SpoolImporter:
    """Imports spools into one store; remembers files it read whole, so a file that did not
    change is not read again."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: dict[Path, tuple[int, int]] = {}

    def import_all(self) -> SpoolImport:
        """Every run's spool (``Run.spool``) that exists here; ended runs that got rows are
        settled again. What a run lost to a deleted run or a full disk stays in its files."""
        total = SpoolImport()
        if self.store.writer is None:
            return total
        rows = self.store.read(
            lambda c: c.exec_driver_sql(
                "SELECT id, spool, state FROM runs WHERE spool IS NOT NULL ORDER BY created"
            ).fetchall()
        )
        for run_id, folder, state in rows:
            try:
                total.add(self.import_run(run_id, Path(folder), ended=state in ENDED))
            except NotFound:
                continue  # deleted meanwhile
            except StoreError as exc:  # a full disk: the files stay for the next import
                log.error("spool import stopped at run %s: %s", run_id, exc.message)
                break
        return total

    def import_for(self, run_id: str, *, ended: bool, settle: bool = True) -> SpoolImport:
        """The spool of ``run_id`` as its row names it (nothing when it names none); ``settle``
        False leaves the result to the caller (the request ending the run computes it next)."""
        folder = self.store.read(
            lambda c: c.exec_driver_sql("SELECT spool FROM runs WHERE id = ?", (run_id,)).scalar()
        )
        if not folder or self.store.writer is None:
            return SpoolImport()
        return self.import_run(run_id, Path(folder), ended=ended, settle=settle)

    def import_run(self, run_id: str, folder: Path, *, ended: bool, settle: bool = True) -> SpoolImport:
        """One run's spool; with ``ended`` its files are marked imported and (``settle``) its
        result is computed again when rows were added."""
        done = SpoolImport()
        for path in spool_files(folder):
            try:
                stat = path.stat()
            except OSError:
                continue
            mark = (stat.st_size, stat.st_mtime_ns)
            if self._seen.get(path) == mark and not ended:
                continue
            found = self._import_file(run_id, path)
            done.add(found)
            self._seen[path] = mark
            if ended:
                self._mark_imported(run_id, path, done)
        if done.rows:
            done.runs.append(run_id)
            if ended and settle:
                self._settle_again(run_id)
        return done

    def _mark_imported(self, run_id: str, path: Path, done: SpoolImport) -> None:
        target = path.with_name(path.name + IMPORTED)
        with contextlib.suppress(OSError):
            path.rename(target)
            self._seen.pop(path, None)
            # a batch appended while the file was read (by a rank outliving its run) is not lost
            late = self._import_file(run_id, target)
            late.files = 0
            done.add(late)

    def _import_file(self, run_id: str, path: Path) -> SpoolImport:
        done = SpoolImport(files=1)
        writer = self.store.require_writer()
        if not writer.has_run(run_id):  # before handing out series ids for it
            raise NotFound(f"run {run_id} not found")
        pending: list[Future[Any]] = []
        now = time.time()
        for line in read_lines(path):
            if line is None:
                done.invalid += 1
                continue
            try:
                batch = self._fast(line)
                if batch is None:
                    batch = validated(line.kind, line.body())  # as the HTTP API decides
                if line.kind == "metrics":
                    params = metric_params(writer.series, run_id, batch, now)
                    pending.append(writer.submit_metrics(run_id, line.rank, line.session, line.seq, params))
                else:
                    rows = (
                        log_rows(run_id, batch, now)
                        if line.kind == "logs"
                        else event_rows(run_id, batch, now)
                    )
                    pending.append(writer.submit(line.kind, run_id, line.rank, line.session, line.seq, rows))
            except ApiError:
                done.invalid += 1
                continue
            if len(pending) >= IN_FLIGHT:
                self._settle(pending, done)
        self._settle(pending, done)
        return done

    @staticmethod
    def _fast(line: SpoolLine) -> Any | None:
        """A metric line decoded in one pass (None: another kind, or one pydantic must decide)."""
        if line.kind != "metrics":
            return None
        return fast_metric_parts(line.rank, line.seq, line.session, bytes(line.items))

    @staticmethod
    def _settle(pending: list[Future[Any]], done: SpoolImport) -> None:
        """Wait for queued batches; a refused one is counted, a store failure stops the import."""
        failure: MlbenchError | None = None
        for fut in pending:
            try:
                accepted, duplicate = fut.result()
            except Conflict:
                done.refused += 1
                continue
            except (NotFound, StoreError) as exc:
                failure = failure or exc
                continue
            if duplicate:
                done.duplicates += 1
            else:
                done.stored += 1
                done.rows += accepted
        pending.clear()
        if failure is not None:
            raise failure

    def _settle_again(self, run_id: str) -> None:
        """An ended run's state and result, from its record as it is now."""
        update = self.store.read(lambda c: resettled(self.store, c, run_id))
        if update is not None:
            self.store.update_run(run_id, update)
            log.warning("run %s: result computed again after its spool was imported", run_id)
