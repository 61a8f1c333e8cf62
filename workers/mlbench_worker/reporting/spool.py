"""A local spool of unsent batches: JSON lines on disk, re-sent when the server is back.

Each line is one complete batch ``{"kind", "rank", "session", "seq", "items"}``. Batches keep
their session and sequence number, so re-sending one the server already stored is a no-op on
the server (it dedupes on ``(rank, session, kind, seq)``). Files are named per rank and sender
session, so a restarted rank also re-sends what a crashed predecessor left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

Batch = dict[str, Any]


class Spool:
    """Append-only batch file for one sender session, plus discovery of leftover files."""

    def __init__(self, directory: str | os.PathLike[str], rank: int, session: str) -> None:
        self.dir = Path(directory)
        self.rank = rank
        self.path = self.dir / f"rank{rank}-{session}.jsonl"

    def append(self, batches: list[Batch]) -> None:
        """Persist batches (fsync'd: they were not acknowledged by anyone)."""
        if not batches:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(b, separators=(",", ":"), allow_nan=False) + "\n" for b in batches)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def files(self) -> list[Path]:
        """Spool files of this rank (own session and leftovers of earlier ones), oldest first."""
        if not self.dir.is_dir():
            return []
        found = [p for p in self.dir.glob(f"rank{self.rank}-*.jsonl") if p.is_file()]
        return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))

    @staticmethod
    def read(path: Path) -> list[Batch]:
        """Batches in a spool file; a torn last line (crash mid-write) is skipped."""
        out: list[Batch] = []
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            return out
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict) and "kind" in item and "items" in item:
                    out.append(item)
        return out

    @staticmethod
    def rewrite(path: Path, batches: list[Batch]) -> None:
        """Replace a spool file with the batches still unsent (remove it when none are left)."""
        if not batches:
            with contextlib.suppress(OSError):
                path.unlink()
            return
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for b in batches:
                fh.write(json.dumps(b, separators=(",", ":"), allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def pending(self) -> int:
        """Number of spooled batches of this rank (all sessions)."""
        return sum(len(self.read(p)) for p in self.files())
