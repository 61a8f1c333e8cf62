"""Per-rank shim: point this rank's stdout and stderr at its own log file, then exec the worker.

Launchers (torchrun, mpiexec) start ``python -m mlbench_tui.executors.local.rank_exec --log-dir DIR
-- COMMAND...`` once per rank. The shim reads the rank from the launcher's environment, opens
``DIR/rank-<rank>.log`` and replaces itself with COMMAND (``os.execv``), so the worker runs as the
launcher's direct child with no extra process in between and signals reach it unchanged.
Stdlib only (and the stdlib-only rank environment contract): it runs before the worker and must
start fast.
"""

from __future__ import annotations

import os
import sys

from mlbench_worker.rank_env import rank_of


def log_path(log_dir: str, rank: int) -> str:
    return os.path.join(log_dir, f"rank-{rank}.log")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--log-dir" or argv[2] != "--":
        print(
            "usage: python -m mlbench_tui.executors.local.rank_exec --log-dir DIR -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    log_dir, command = argv[1], argv[3:]
    os.makedirs(log_dir, exist_ok=True)
    fd = os.open(log_path(log_dir, rank_of(os.environ)), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        print(f"mlbench: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
