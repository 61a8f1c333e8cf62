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
