"""Background commands: detached from this session, output in a log, started only when ready."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from mlbench_tui.detached import Detached, start_detached


def _says(word: str) -> Callable[[Detached], bool]:
    def ready(started: Detached) -> bool:
        return word in started.log_path.read_text(errors="replace")

    return ready


def test_a_command_that_gets_ready_keeps_running_in_its_own_session(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "job.log"
    argv = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
    started, ready = start_detached(argv, log, _says("up"), timeout=30)
    try:
        assert ready and started.proc.poll() is None
        assert os.getsid(started.proc.pid) == started.proc.pid != os.getsid(0)  # Ctrl-C here misses it
        assert started.tail() == ["up"]
    finally:
        os.killpg(started.proc.pid, signal.SIGTERM)
        started.proc.wait(10)


def test_a_command_that_fails_at_start_shows_why(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('no store here'); sys.exit(3)"]
    started, ready = start_detached(argv, tmp_path / "job.log", _says("up"), timeout=30)
    assert not ready and started.proc.returncode == 3 and started.tail() == ["no store here"]


def test_a_command_still_not_ready_at_the_timeout_is_left_running(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    started, ready = start_detached(argv, tmp_path / "job.log", _says("up"), timeout=0.2)
    try:
        assert not ready and started.proc.poll() is None
    finally:
        os.killpg(started.proc.pid, signal.SIGTERM)
        started.proc.wait(10)
