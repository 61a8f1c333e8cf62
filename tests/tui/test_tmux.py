"""The real ``mlbench tui`` in tmux, following a live local run launched with ``mlbench apply``.

A real server process, a real run (task 0a on 2 gloo ranks), the real CLI entry point in a real
terminal: keys go in with ``send-keys`` and the screen comes back with ``capture-pane``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tmux import Tmux

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: tmux-live
spec:
  task: 0a
  max_time: 5m
  workers: 2
  backend: gloo
  hardware:
    cpu: "1"
  target: local
  data: synthetic
  hyperparameters:
    sizes_max_exp: 6
    num_sizes: 14
    repetitions: 30
    warmup: 2
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``mlbench server`` in its own process, recorded in MLBENCH_HOME so the CLI commands find it."""
    env = dict(os.environ, MLBENCH_DB=str(tmp_path / "store.db"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url, env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)


def test_tui_follows_a_live_run(tmp_path: Path, server: tuple[str, dict[str, str]]) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (./dev test installs it; or: apt-get install -y tmux)")
    _url, env = server
    spec = tmp_path / "tmux-live.yaml"
    spec.write_text(SPEC)
    mlbench = [sys.executable, "-m", "mlbench_tui"]
    tmux = Tmux(tmp_path / "tmux.sock")
    env_args = [f"{k}={v}" for k, v in env.items() if k.startswith("MLBENCH_") or k in ("PATH", "HOME")]
    tmux(
        "new-session", "-d", "-s", tmux.name, "-x", "140", "-y", "40",
        "env", *env_args, "TERM=xterm-256color", *mlbench, "tui",
    )  # fmt: skip
    try:
        tmux.wait(lambda s: "No benchmark runs yet" in s, "the first-run screen of an empty store")
        subprocess.run([*mlbench, "apply", str(spec), "--detach"], env=env, check=True, capture_output=True)
        screen = tmux.wait(lambda s: "tmux-live-gloo-2w" in s, "the run in the runs table")
        assert "0a" in screen and "gloo" in screen
        tmux.keys("Enter")
        states = ("pending", "running", "succeeded", "failed", "cancelled")
        screen = tmux.wait(
            lambda s: "run tmux-live-gloo-2w" in s and any(w in s.splitlines()[0] for w in states),
            "the run screen",
        )
        title = screen.splitlines()[0]
        assert "running" in title or "pending" in title, f"opened while live: {title}"
        tmux.keys("4")
        tmux.wait(lambda s: "[r0] +" in s, "rank-tagged log lines")
        tmux.keys("3")
        tmux.wait(lambda s: "allreduce_fp32_busbw" in s and "log10 size" in s, "the bandwidth chart")
        screen = tmux.wait(lambda s: "succeeded" in s.splitlines()[0], "the run to finish, live", timeout=120)
        tmux.keys("Escape")
        screen = tmux.wait(
            lambda s: "tmux-live-gloo-2w" in s and "succeeded" in s, "the finished run in the table"
        )
        tmux.keys("?")
        tmux.wait(lambda s: "mlbench tui — keys" in s, "the help screen")
        tmux.keys("Escape")  # (a separate send: ESC followed at once by q would read as alt+q)
        tmux.wait(lambda s: "mlbench tui — keys" not in s, "the help screen to close")
        tmux.keys("q")
        deadline = time.monotonic() + 60
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tmux.alive(), "q quits"
    finally:
        if tmux.alive():
            tmux("kill-session", "-t", tmux.name)
        subprocess.run([*tmux.base, "kill-server"], capture_output=True)
