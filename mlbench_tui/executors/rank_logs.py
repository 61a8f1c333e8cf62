"""Rank log files of a run directory (``rank-<r>.log``): read as they grow, and followed.

The local and Slurm executors both write one log file per rank; ``RankLogTailer`` ships their new
complete lines to the store and ``follow_rank_logs`` is their ``log_iter``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mlbench_tui.executors.api import log_filter


def follow_rank_logs(
    tailer: RankLogTailer,
    finished: Callable[[], bool],
    *,
    rank: int | None,
    follow: bool,
    since: float | None,
    regex: str | None,
) -> Iterator[str]:
    """``log_iter`` over rank log files: one rank's lines, or every rank's prefixed ``[rank N]``,
    filtered by ``regex``; ``follow`` reads on until ``finished()``."""
    pattern = log_filter(regex)
    while True:
        done = not follow or finished()
        for line_rank, line in tailer.poll(final=done, since=since):
            if pattern is not None and not pattern.search(line):
                continue
            yield line if rank is not None else f"[rank {line_rank}] {line}"
        if done:
            return
        time.sleep(0.2)


_RANK_FILE = re.compile(r"^rank-(\d+)\.log$")


class RankLogTailer:
    """Reads new complete lines from ``rank-<r>.log`` files as they grow (used to ship logs to
    the store and to follow them); a partial last line is held back until it is complete or the
    run is over (``final=True``)."""

    def __init__(
        self, log_dir: str | Path, ranks: list[int] | None = None, extra: dict[int, Path] | None = None
    ) -> None:
        self.log_dir = Path(log_dir)
        self.ranks = ranks
        self.extra = dict(extra or {})
        self._offsets: dict[int, int] = {}
        self._partial: dict[int, bytes] = {}

    def _files(self) -> list[tuple[int, Path]]:
        try:
            entries = list(self.log_dir.iterdir())
        except OSError:
            return []
        found = []
        for entry in entries:
            match = _RANK_FILE.fullmatch(entry.name)
            if match and (self.ranks is None or int(match[1]) in self.ranks):
                found.append((int(match[1]), entry))
        found.extend((rank, path) for rank, path in self.extra.items() if path.exists())
        return sorted(found)

    def poll(self, *, final: bool = False, since: float | None = None) -> list[tuple[int, str]]:
        """New lines since the last call, as ``(rank, text)``, in rank order."""
        out: list[tuple[int, str]] = []
        for rank, path in self._files():
            try:
                if since is not None and rank not in self._offsets and path.stat().st_mtime < since:
                    self._offsets[rank] = path.stat().st_size
                    continue
                with open(path, "rb") as fh:
                    fh.seek(self._offsets.get(rank, 0))
                    chunk = fh.read()
            except OSError:
                continue
            self._offsets[rank] = self._offsets.get(rank, 0) + len(chunk)
            data = self._partial.pop(rank, b"") + chunk
            *complete, rest = data.split(b"\n")
            if rest:
                if final:
                    complete.append(rest)
                else:
                    self._partial[rank] = rest
            out.extend((rank, line.decode(errors="replace").rstrip("\r")) for line in complete)
        return out
