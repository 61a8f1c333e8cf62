"""Launch, rerun and cancel by running the ``mlbench`` CLI as a subprocess.

The TUI reads everything through the HTTP API; starting or stopping ranks is the executor's job,
which the CLI already does (``mlbench apply --detach``, ``mlbench cancel``). Running it as a
child process (argv list, never a shell string) keeps the TUI free of executor imports and
pointed at the same server (``MLBENCH_SERVER_URL`` and ``MLBENCH_TOKEN`` in its environment).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlbench_tui.errors import MlbenchError


class LaunchError(MlbenchError):
    """A CLI command started by the TUI failed; the message is its stderr."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Launcher:
    """Runs ``python -m mlbench_tui ...`` against the TUI's server."""

    def __init__(self, server_url: str, token: str | None = None, *, timeout: float = 120.0) -> None:
        self.server_url = server_url
        self.token = token
        self.timeout = timeout

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "mlbench_tui", *args]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["MLBENCH_SERVER_URL"] = self.server_url
        if self.token:
            env["MLBENCH_TOKEN"] = self.token
        return env

    def run(self, *args: str) -> CommandResult:
        """Run one CLI command to completion; raises ``LaunchError`` with its stderr on failure."""
        argv = self.argv(*args)
        try:
            proc = subprocess.run(
                argv,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LaunchError(f"'mlbench {' '.join(args)}' did not finish within {self.timeout:g}s") from None
        except OSError as exc:
            raise LaunchError(f"cannot run mlbench: {exc}") from None
        result = CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        if proc.returncode != 0:
            message = proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}"
            said = [line for line in message.splitlines() if line.startswith(("error: ", "hint: "))]
            raise LaunchError("\n".join(said) if said else message.splitlines()[-1])
        return result

    def apply(self, path: Path, *, force: bool = False) -> CommandResult:
        """Launch every run of a spec file or directory and return at once (``--detach``)."""
        args = ["apply", str(path), "--detach"]
        if force:
            args.append("--force")
        return self.run(*args)

    def cancel(self, run_id: str) -> CommandResult:
        return self.run("cancel", run_id)

    def rerun(self, name: str, spec_text: str, state_dir: Path) -> CommandResult:
        """Write the run's stored spec to ``state_dir`` and apply it again with ``--force``."""
        if not spec_text.strip():
            raise LaunchError(f"run {name} has no stored spec to run again")
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / f"{safe}.yaml"
        path.write_text(spec_text, encoding="utf-8")
        return self.apply(path, force=True)
