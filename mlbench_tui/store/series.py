"""``SeriesCatalog``: the series id of every (run, metric name) pair the store knows, in memory.

Metric rows refer to a series (one run and metric name) by id. The catalog is the one map of
those ids: the ingest parser looks names up in it (any thread), the writer writes the series rows
and live streams name the series of a ``MetricChunk`` from it. Ids are handed out when a batch is
parsed; the series row is written by the first transaction that stores a row of it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any


class SeriesCatalog:
    """Series ids by run and name, names by run and id, and the series not yet written."""

    def __init__(self, rows: Iterable[tuple[int, str, str]] = ()) -> None:
        """``rows``: the stored ``(id, run_id, name)`` series."""
        self._ids: dict[str, dict[str, int]] = {}
        self._names: dict[str, dict[int, str]] = {}
        self._unwritten: dict[str, dict[int, str]] = {}  # run -> {series id: name}
        self._lock = threading.Lock()
        top = 0
        for sid, run_id, name in rows:
            self._ids.setdefault(run_id, {})[name] = sid
            self._names.setdefault(run_id, {})[sid] = name
            top = max(top, sid)
        self._next = top + 1

    def ids(self, run_id: str) -> Mapping[str, int]:
        """Known series ids of a run by metric name (a live view; empty for a run without any)."""
        return self._ids.get(run_id) or {}

    def names(self, run_id: str) -> Mapping[int, str]:
        """Metric names of a run by series id (a live view, so later names show up in it)."""
        return self._names.get(run_id) or {}

    def id(self, run_id: str, name: str) -> int:
        """The series id of ``(run_id, name)``, handing out a new one for a name seen first.

        The caller has validated ``name`` (the wire model's rules).
        """
        sid = self._ids.get(run_id, {}).get(name)
        if sid is not None:
            return sid
        with self._lock:
            ids = self._ids.setdefault(run_id, {})
            sid = ids.get(name)
            if sid is None:
                sid = self._next
                self._next += 1
                self._unwritten.setdefault(run_id, {})[sid] = name
                self._names.setdefault(run_id, {})[sid] = name
                ids[name] = sid
            return sid

    def params(self, run_id: str, rank: int, rows: Iterable[tuple[Any, ...]]) -> list[Any]:
        """``MetricChunk.params`` of metric rows ``(name, step, epoch, t, value)`` of one rank."""
        params: list[Any] = []
        add = params.extend
        ids = self.ids(run_id)
        for name, step, epoch, t, value in rows:
            sid = ids.get(name)
            if sid is None:
                sid = self.id(run_id, name)
                ids = self.ids(run_id)
            add((sid, rank, step, epoch, t, value))
        return params

    def has_unwritten(self, run_id: str) -> bool:
        return run_id in self._unwritten

    def take_unwritten(self, run_id: str, sids: Iterable[int]) -> list[tuple[int, str]]:
        """``(id, name)`` of the series among ``sids`` whose row is still to be written (the
        caller writes them, and gives them back with ``put_back`` if its transaction fails)."""
        with self._lock:
            pending = self._unwritten.get(run_id, {})
            taken = [(sid, pending.pop(sid)) for sid in set(sids) if sid in pending]
            if not pending:
                self._unwritten.pop(run_id, None)
        return taken

    def put_back(self, series: Iterable[tuple[int, str, str]]) -> None:
        """Series ``(id, run_id, name)`` whose rows were rolled back: to be written again."""
        with self._lock:
            for sid, run_id, name in series:
                self._unwritten.setdefault(run_id, {})[sid] = name

    def forget(self, run_id: str) -> None:
        """Drop a deleted run's series."""
        with self._lock:
            self._ids.pop(run_id, None)
            self._names.pop(run_id, None)
            self._unwritten.pop(run_id, None)
