"""The server side of the scale benchmark: ``mlbench server`` started as users start it, the run
registered as ``mlbench apply`` registers it, and what is measured from outside the server
process: its CPU (``/proc``), the store's size and the rows it holds (the SQLite file itself).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.scale_model import SPEC_TEXT

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    """A server process under measurement."""

    proc: subprocess.Popen[bytes]
    url: str
    host: str
    port: int
    admin_token: str
    db: Path
    group: bool  # its CPU is that of its whole process group (MLflow's workers)

    def cpu_s(self) -> float:
        return group_cpu_s(self.proc.pid) if self.group else process_cpu_s(self.proc.pid)

    def cpu_wait_s(self) -> float:
        """Seconds its threads were runnable but waited for a CPU (other processes had them)."""
        pids = group_pids(self.proc.pid) if self.group else [self.proc.pid]
        return sum(cpu_wait_s(pid) for pid in pids)

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0


def start_ours(home: Path, db: Path | None = None) -> Server:
    """``mlbench server --port 0`` on a fresh ``MLBENCH_HOME`` (127.0.0.1, the default host), over
    its default store or ``db``; the admin token comes from the state file it writes."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLBENCH_")}
    env["MLBENCH_HOME"] = str(home)
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    log = open(home / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", *(["--db", str(db)] if db else [])],
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise RuntimeError(f"mlbench server did not start: {(home / 'server.log').read_text()[-2000:]}")
    from mlbench_tui.server.daemon import read_state

    recorded = sorted((home / "state" / "servers").glob("*.json"))
    info = read_state(recorded[0]) if recorded else None
    if info is None:
        raise RuntimeError(f"no server state file under {home / 'state' / 'servers'}")
    port = int(url.rsplit(":", 1)[1])
    return Server(proc, url, "127.0.0.1", port, info.admin_token, Path(info.store), group=False)


def create_run(server: Server, ranks: int, started: float | None = None) -> tuple[RunPlan, str, str]:
    """Register the simulated run from its spec as ``mlbench apply`` does and mark it running
    (since ``started``, default now); returns (plan, run id, write token)."""
    from datetime import UTC, datetime

    from mlbench_tui.executors.api import RunState
    from mlbench_tui.plan import expand
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.spec import load_text
    from mlbench_tui.store.api_models import RunUpdate

    text = SPEC_TEXT.format(ranks=ranks)
    (plan,) = expand(load_text(text, f"scale-{ranks}.yaml")[0].spec)
    with MlbenchClient(server.url, server.admin_token) as client:
        created = client.create_run(plan, text)
        since = datetime.fromtimestamp(started, UTC) if started is not None else datetime.now(UTC)
        client.update_run(created.run.id, RunUpdate(state=RunState.RUNNING, started=since))
    return plan, created.run.id, created.write_token


def stop_ours(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(60)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(10)
        raise RuntimeError("mlbench server did not stop within 60 s of SIGTERM") from None
    if code != 0:
        raise RuntimeError(f"mlbench server exited with {code}")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def group_pids(pgid: int) -> list[int]:
    """The live processes of a process group."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry.name))
    return pids


def group_cpu_s(pgid: int) -> float:
    """CPU seconds of every live process of a process group."""
    total = 0.0
    for pid in group_pids(pgid):
        with contextlib.suppress(OSError):
            total += process_cpu_s(pid)
    return total


def cpu_wait_s(pid: int | str = "self") -> float:
    """Seconds the live threads of a process spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def store_bytes(db: Path) -> int:
    """Bytes the store's pages use (page count less free pages, WAL frames included)."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def stored_rows(db: Path, run_id: str) -> tuple[dict[str, int], int]:
    """Rows of the run in the store file, per kind, and how many ranks have metric rows."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        series = "SELECT id FROM series WHERE run_id = ?"
        metrics = conn.execute(f"SELECT count(*) FROM metrics WHERE series IN ({series})", (run_id,))
        counts = {"metrics": metrics.fetchone()[0]}
        for kind in ("logs", "events"):
            counts[kind] = conn.execute(
                f"SELECT count(*) FROM {kind} WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
        ranks = conn.execute(
            f"SELECT count(DISTINCT rank) FROM metrics WHERE series IN ({series})", (run_id,)
        ).fetchone()[0]
    return counts, int(ranks)


def mlflow_rows(db: Path, run_id: str) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        n = conn.execute("SELECT count(*) FROM metrics WHERE run_uuid = ?", (run_id,)).fetchone()[0]
    return {"metrics": int(n), "logs": 0, "events": 0}


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (all sockets)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=True))
            return int(table.get("ListenOverflows", 0))
    return 0
