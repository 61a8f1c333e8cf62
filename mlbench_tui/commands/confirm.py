"""Asking before something that cannot be undone (deleting a run, a cluster, paying for one)."""

from __future__ import annotations

import sys
from typing import IO


def confirm(question: str, *, assume_yes: bool, action: str, stdin: IO[str] | None = None) -> bool:
    """Ask ``question`` on the terminal; True to go on. Without a TTY, only ``--yes`` goes on."""
    if assume_yes:
        return True
    from mlbench_tui.errors import UsageError

    stream = stdin if stdin is not None else sys.stdin
    if stream is None or not stream.isatty():
        raise UsageError(
            f"refusing to {action} without confirmation: stdin is not a terminal",
            hint="pass --yes to confirm",
        )
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = stream.readline()
    return answer.strip().lower() in ("y", "yes")
