"""Start a command in the background: in its own session (Ctrl-C in this terminal does not reach
it), its output appended to a log file, and wait until it is ready, so a failure at start is
reported to the user instead of hidden in the log. ``apply --detach`` and the local metrics
server start this way.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Detached:
    """A background process and the file its output goes to."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    def tail(self, lines: int = 3) -> list[str]:
        """The last lines of its output."""
        try:
            return self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return []


def start_detached(
    argv: Sequence[str],
    log_path: Path,
    ready: Callable[[Detached], bool],
    *,
    timeout: float,
    poll_s: float = 0.05,
    env: dict[str, str] | None = None,
) -> tuple[Detached, bool]:
    """Start ``argv`` detached and wait until ``ready`` says so, it exits, or ``timeout``
    passes; returns it with whether it is ready (False: it exited, or is still not ready).
    ``env``: its environment (default: this process's)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    detached = Detached(proc, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if ready(detached):
            return detached, True
        if proc.poll() is not None or time.monotonic() > deadline:
            return detached, ready(detached)
        time.sleep(poll_s)
