"""What the writer checks of every ingest batch before it stores it: a run's record takes only
what its ranks could have produced while it lived.

* a rank outside the run's world size (``rank >= workers``) is refused (422 ``rank_out_of_range``),
  whoever sends it;
* a batch sent with the run's write token after the run ended is refused (409 ``run_ended``);
* a batch sent with the run's write token for a rank that has reported its ``run_stop``, by a
  sender session that never wrote for that rank before, is refused (409 ``rank_stopped``): the
  rank's own reporter may still flush what it produced before stopping (same session), a late or
  forged writer may not.

Writes with the admin token (the engine itself: apply shipping rank logs) and spool imports (the
ranks' own files) are not bound by the last two. The facts the rules need (each run's world size,
whether it ended, which ranks stopped) are kept in memory, loaded once from the store and updated
as the writer applies each job, so a check costs a few dictionary lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from mlbench_tui.errors import Conflict

TERMINAL = ("succeeded", "failed", "cancelled")
RUN_STOP = "run_stop"  # mlbench_worker.wire.RUN_STOP; a contract test pins it


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the rules know of one run."""

    workers: int
    ended: bool


class WriteRules:
    """The facts and checks above, for one store (used by its writer thread only)."""

    def __init__(self, runs: dict[str, RunFacts], stopped: Iterable[tuple[str, int]] = ()) -> None:
        self.runs = runs
        self.stopped: set[tuple[str, int]] = set(stopped)

    @classmethod
    def load(cls, conn: Connection) -> WriteRules:
        runs = {
            run_id: RunFacts(int(workers), state in TERMINAL)
            for run_id, workers, state in conn.exec_driver_sql("SELECT id, workers, state FROM runs")
        }
        stopped = conn.exec_driver_sql(
            "SELECT DISTINCT run_id, rank FROM events WHERE kind = ? AND rank IS NOT NULL", (RUN_STOP,)
        )
        return cls(runs, ((run_id, int(rank)) for run_id, rank in stopped))

    # ---- checks

    def ended(self, run_id: str) -> bool:
        facts = self.runs.get(run_id)
        return facts is not None and facts.ended

    def refusal(
        self,
        run_id: str,
        rank: int,
        session: str,
        by_run_token: bool,
        session_wrote: Callable[[str, int, str], bool],
    ) -> Conflict | None:
        """Why a batch of ``rank`` from ``session`` is refused, or None to store it;
        ``session_wrote(run_id, rank, session)`` asks the store whether that session wrote for
        that rank before (asked only of a stopped rank)."""
        facts = self.runs.get(run_id)
        if facts is None:
            return None  # the writer answers unknown runs itself
        if rank >= facts.workers:
            return rank_out_of_range(run_id, rank, facts.workers)
        if not by_run_token:
            return None
        if facts.ended:
            return run_ended(run_id)
        if (run_id, rank) in self.stopped and not session_wrote(run_id, rank, session):
            return Conflict(
                f"rank {rank} of run {run_id} has stopped; a sender that never wrote for it cannot "
                "write for it now",
                reason="rank_stopped",
            )
        return None

    # ---- updates (each returns how to undo it, for a group transaction that rolls back)

    def run_changed(self, run_id: str, workers: int, state: str) -> Callable[[], None]:
        before = self.runs.get(run_id)
        self.runs[run_id] = RunFacts(workers, state in TERMINAL)

        def undo() -> None:
            if before is None:
                self.runs.pop(run_id, None)
            else:
                self.runs[run_id] = before

        return undo

    def run_deleted(self, run_id: str) -> Callable[[], None]:
        before = self.runs.pop(run_id, None)
        stops = {key for key in self.stopped if key[0] == run_id}
        self.stopped -= stops

        def undo() -> None:
            if before is not None:
                self.runs[run_id] = before
            self.stopped |= stops

        return undo

    def events_stored(
        self, run_id: str, rank: int, rows: Iterable[tuple[Any, ...]]
    ) -> Callable[[], None] | None:
        """Note a rank's ``run_stop`` among event rows ``(run_id, rank, kind, payload, t)``."""
        key = (run_id, rank)
        if key in self.stopped or not any(row[2] == RUN_STOP for row in rows):
            return None
        self.stopped.add(key)
        return lambda: self.stopped.discard(key)


def rank_out_of_range(run_id: str, rank: int, workers: int) -> Conflict:
    return Conflict(
        f"rank {rank} is outside run {run_id}, which has {workers} rank(s): 0-{workers - 1}",
        reason="rank_out_of_range",
        status=422,
    )


def run_ended(run_id: str) -> Conflict:
    return Conflict(f"run {run_id} has ended: its write token no longer writes", reason="run_ended")
