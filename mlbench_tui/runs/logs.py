"""``mlbench logs``: a run's stored log lines, of every rank or one, filtered and followed."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from mlbench_tui.errors import UsageError
from mlbench_tui.runs.lookup import resolve_run

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient


def _log_line(line_rank: int, text: str, only_rank: int | None) -> str:
    """Prefix a line with its rank when several ranks are shown (unless the worker already did)."""
    prefix = f"[rank {line_rank}]"
    if only_rank is not None or text.startswith(prefix):
        return text
    return f"{prefix} {text}"


def no_lines_note(ref: str, rank: int | None, grep: str | None) -> str:
    """What an empty ``mlbench logs`` means, said on stderr: the rank (or run) wrote nothing, or
    nothing it wrote matches ``--grep``."""
    who = f"rank {rank} of {ref}" if rank is not None else ref
    if grep is not None:
        return f"note: no log line of {who} matches {grep!r}"
    where = "" if rank is None else f" (mlbench logs {ref} shows every rank's)"
    return f"note: {who} wrote no log lines{where}"


def iter_logs(
    client: MlbenchClient,
    ref: str,
    *,
    follow: bool = False,
    rank: int | None = None,
    grep: str | None = None,
    poll_s: float = 0.5,
) -> Iterator[str]:
    """Stored log lines of a run (``[rank N]``-prefixed unless one rank is asked for); with
    ``follow``, keeps reading until the run has ended."""
    if grep is not None:
        try:
            re.compile(grep)
        except re.error as exc:
            raise UsageError(f"invalid --grep expression {grep!r}: {exc}") from None
    run = resolve_run(client, ref)
    if rank is not None and rank >= run.workers:
        ranks = "rank 0" if run.workers == 1 else f"ranks 0-{run.workers - 1}"
        raise UsageError(
            f"run {run.name} has no rank {rank}: it ran {ranks}",
            hint=f"choose --rank {ranks.removeprefix('ranks ').removeprefix('rank ')}, or leave --rank out "
            "for every rank's lines",
        )
    cursor = 0
    while True:
        page = client.logs(run.id, cursor, rank=rank, regex=grep, limit=5000)
        for line in page.lines:
            yield _log_line(line.rank, line.text, rank)
        cursor = page.cursor
        if page.lines:
            continue
        if not follow:
            return
        current = client.get_run(run.id)
        if current.state.is_terminal():
            tail = client.logs(run.id, cursor, rank=rank, regex=grep, limit=5000)
            for line in tail.lines:
                yield _log_line(line.rank, line.text, rank)
            if not tail.lines:
                return
            cursor = tail.cursor
            continue
        time.sleep(poll_s)
