"""A tmux session driving a real terminal program: keys in with ``send-keys``, the screen back
with ``capture-pane``."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class Tmux:
    """One detached tmux session with its own server socket."""

    def __init__(self, socket_path: Path, name: str = "tui") -> None:
        self.base = ["tmux", "-S", str(socket_path)]
        self.name = name

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], check=True, capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", self.name, *keys)

    def alive(self) -> bool:
        return (
            subprocess.run([*self.base, "has-session", "-t", self.name], capture_output=True).returncode == 0
        )

    def wait(self, predicate: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")
