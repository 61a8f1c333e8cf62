"""Rendezvous ports of local runs: a free port for a run, claimed in a file under the runs
directory so two runs started at the same moment cannot be handed the same one, and given back
when the run ends."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.local import processes

CLAIMS = ".ports"
STALE_S = 60.0  # a claim this old belongs to a run that has long bound its port


def reserve(runs_dir: Path, run_id: str) -> int:
    """A free port on 127.0.0.1, claimed for ``run_id``."""
    claims = runs_dir / CLAIMS
    claims.mkdir(parents=True, exist_ok=True)
    for _ in range(50):
        port = processes.free_port()
        claim = claims / str(port)
        if claim.exists() and time.time() - claim.stat().st_mtime > STALE_S:
            claim.unlink(missing_ok=True)
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        os.write(fd, run_id.encode())
        os.close(fd)
        return port
    raise ExecutorError("no free TCP port found on 127.0.0.1")


def release(runs_dir: Path, run_id: str, port: int | None) -> None:
    """Give back ``run_id``'s claim on ``port`` (another run's claim is left alone)."""
    if port is None:
        return
    claim = runs_dir / CLAIMS / str(port)
    with contextlib.suppress(OSError):
        if claim.read_text() == run_id:
            claim.unlink()
