"""Ingest throughput with the TUI open on the run being ingested vs with the TUI closed.

Goal (issue 5): with ``mlbench tui`` open on a run's live charts (4 updates/s, the default
``update_interval`` of 0.25 s), the server's ingest throughput stays at least 0.95x of what it is
with no TUI. Everything is a real process: ``mlbench server``, a load generator posting batches
of 100 metrics from 2 ranks as fast as the server acknowledges them, and the TUI (headless: it
renders every frame, only the terminal writes are skipped) following the run over SSE. Closed and
open phases alternate (closed, open, closed, ..., closed); each open phase is compared with the
mean of the closed phases on either side of it, which cancels slow drifts of a shared machine's
load, and the median of these ratios is the result.

    python -m benchmarks tui_ingest [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LOADGEN = """
import resource, sys, threading, time
from mlbench_tui.server.client import MlbenchClient
url, run_id, token, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
counts = [0, 0]
def sender(rank):
    client = MlbenchClient(url, token)
    step = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = [{"name": "train_loss", "value": 1.0 / (1 + step + i), "step": step + i} for i in range(50)]
        batch += [{"name": "step_time", "value": 0.2 + 0.01 * rank, "step": step + i} for i in range(50)]
        client.post_metrics(run_id, batch, rank=rank)
        step += 50
        counts[rank] += 100
    client.close()
threads = [threading.Thread(target=sender, args=(r,)) for r in range(2)]
t0 = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
usage = resource.getrusage(resource.RUSAGE_SELF)
print((usage.ru_utime + usage.ru_stime) / sum(counts) * 1e6, flush=True)  # CPU us per metric
print(sum(counts) / (time.monotonic() - t0), flush=True)
"""

TUI = """
import resource, sys, threading
from mlbench_tui.tui.app import MlbenchApp
from mlbench_tui.tui.screens.run_detail import RunDetailScreen

class Watching(MlbenchApp):
    ready = False
    detail = None

    def on_mount(self):
        # Textual runs MlbenchApp.on_mount (which pushes the runs screen) after this handler:
        # open the run on top of the runs screen once that is the screen shown, as a user would.
        self.set_interval(0.05, self._check)

    def _check(self):
        if self.detail is None:
            if type(self.screen).__name__ == "RunsScreen":
                self.detail = RunDetailScreen(sys.argv[2])
                self.push_screen(self.detail)
                threading.Thread(target=self._stdin, daemon=True).start()
            return
        if not self.ready and self.detail.run is not None:
            self.ready = True
            self.detail.action_show_tab(sys.argv[3] if len(sys.argv) > 3 else "charts")
            print("ready", flush=True)

    def _stdin(self):
        sys.stdin.read()
        self.call_from_thread(self._finish)

    def _finish(self):
        charts = self.detail.query("MetricChart")
        self.charted = sum(len(s) for c in charts for s in c.series.values())
        self.loads = self.detail.feed.loads if self.detail.feed else 0
        self.exit()

app = Watching(sys.argv[1], update_interval=0.25)
app.run(headless=True, size=(160, 50))
usage = resource.getrusage(resource.RUSAGE_SELF)
print("cpu", usage.ru_utime + usage.ru_stime, flush=True)
print("points", getattr(app, "charted", 0), flush=True)
print("loads", getattr(app, "loads", 0), flush=True)
"""


READY_TIMEOUT_S = 30.0


def _ready(tui: subprocess.Popen[str], timeout: float) -> bool:
    """Whether the TUI printed "ready" (its run screen shows the run) within ``timeout``."""
    assert tui.stdout is not None
    line: list[str] = []
    stdout = tui.stdout
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return bool(line) and line[0].strip() == "ready"


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loadgen(
    url: str, run_id: str, token: str, seconds: float, env: dict[str, str], cpu: list[float] | None = None
) -> float:
    """Metrics per second the load generator got acknowledged; its CPU per metric goes to ``cpu``."""
    out = subprocess.run(
        [sys.executable, "-c", LOADGEN, url, run_id, token, str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    lines = out.stdout.strip().splitlines()
    if cpu is not None:
        cpu.append(float(lines[-2]))
    return float(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tui_ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--repeats", type=int, default=3, help="closed/open phase pairs")
    parser.add_argument("--tab", default="charts", choices=("overview", "ranks", "charts", "logs"))
    args = parser.parse_args(argv)

    from mlbench_worker import wire

    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunCreate

    tmp = Path(tempfile.mkdtemp(prefix="mlbench-bench-"))
    env = dict(os.environ, MLBENCH_HOME=str(tmp / "home"), MLBENCH_TOKEN="bench-admin-token")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", "--db", str(tmp / "store.db")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    closed: list[float] = []
    opened: list[float] = []
    received: list[int] = []
    tui_cpu: list[float] = []
    tui_busy: list[float] = []  # TUI CPU seconds per second while the load generator runs
    loads: list[int] = []
    server_cpu_closed: list[float] = []
    server_cpu_open: list[float] = []
    load: list[float] = []  # 1-minute load average after each closed phase
    loadgen_cpu_closed: list[float] = []  # us per metric
    loadgen_cpu_open: list[float] = []
    tui_per_metric: list[float] = []
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        with MlbenchClient(url, "bench-admin-token") as client:
            goal = {"metric": wire.VAL_GLOBAL_PREC1, "target": 80.0, "direction": "max", "kind": "full"}
            created = client.create_run(
                RunCreate(name="ingest-bench", task="1a", backend="gloo", workers=2, goal=goal)
            )
            client.update_run(created.run.id, state="running")
        run_id, token = created.run.id, created.write_token
        _loadgen(url, run_id, token, 1.0, env)  # warm the server
        for i in range(args.repeats + 1):
            c0 = _proc_cpu(server.pid)
            closed.append(_loadgen(url, run_id, token, args.seconds, env, loadgen_cpu_closed))
            server_cpu_closed.append((_proc_cpu(server.pid) - c0) / (closed[-1] * args.seconds) * 1e6)
            load.append(os.getloadavg()[0])
            if i == args.repeats:
                break
            tui_err = tempfile.TemporaryFile()  # noqa: SIM115 (read back only when the TUI fails)
            tui = subprocess.Popen(
                [sys.executable, "-c", TUI, url, run_id, args.tab],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=tui_err,
                text=True,
            )
            assert tui.stdout is not None and tui.stdin is not None
            if not _ready(tui, READY_TIMEOUT_S):
                tui.kill()
                tui.wait()
                tui_err.seek(0)
                print(f"the TUI did not show the run within {READY_TIMEOUT_S:g} s", file=sys.stderr)
                print(tui_err.read().decode(errors="replace")[-3000:], file=sys.stderr)
                return 1
            time.sleep(1.0)  # let it settle on the live charts
            c0, t0, w0 = _proc_cpu(server.pid), _proc_cpu(tui.pid), time.monotonic()
            opened.append(_loadgen(url, run_id, token, args.seconds, env, loadgen_cpu_open))
            server_cpu_open.append((_proc_cpu(server.pid) - c0) / (opened[-1] * args.seconds) * 1e6)
            tui_busy.append((_proc_cpu(tui.pid) - t0) / (time.monotonic() - w0))
            tui_per_metric.append((_proc_cpu(tui.pid) - t0) / (opened[-1] * args.seconds) * 1e6)
            out, _ = tui.communicate("", timeout=60)
            stats = dict(
                line.split() for line in out.splitlines() if line.startswith(("cpu", "points", "loads"))
            )
            loads.append(int(stats.get("loads", 0)))
            received.append(int(stats.get("points", 0)))
            tui_cpu.append(float(stats.get("cpu", "nan")))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)
    c, o = statistics.median(closed), statistics.median(opened)
    pairs = [x / ((closed[i] + closed[i + 1]) / 2) for i, x in enumerate(opened)]
    ratio = statistics.median(pairs)
    print(f"ingest with the TUI closed vs open on the run (4 updates/s), {args.repeats} x {args.seconds:g} s")
    print(f"load average (1 min) during the run: {min(load):.1f} to {max(load):.1f}, {os.cpu_count()} cores")
    print(f"{'TUI closed':28} median {c:10,.0f} metrics/s   runs: {', '.join(f'{x:,.0f}' for x in closed)}")
    runs = ", ".join(f"{x:,.0f}" for x in opened)
    print(f"{'TUI open (' + args.tab + ' tab)':28} median {o:10,.0f} metrics/s   runs: {runs}")
    print(f"points charted by the TUI per open phase: {received}")
    print(f"run loads by the TUI per open phase (1 = no resync): {loads}")
    print(f"TUI process CPU per open phase (incl. start-up): {', '.join(f'{x:.2f} s' for x in tui_cpu)}")
    print(f"TUI process CPU while following the run: {', '.join(f'{x:.1%}' for x in tui_busy)} of one core")
    print(
        f"server CPU per metric: closed {statistics.median(server_cpu_closed):.1f} us, "
        f"open {statistics.median(server_cpu_open):.1f} us"
    )
    closed_us = statistics.median(server_cpu_closed) + statistics.median(loadgen_cpu_closed)
    open_us = (
        statistics.median(server_cpu_open)
        + statistics.median(loadgen_cpu_open)
        + statistics.median(tui_per_metric)
    )
    print(
        f"CPU per metric, server + load generator (+ TUI): closed {closed_us:.1f} us, open {open_us:.1f} us"
        f" -> {closed_us / open_us:.3f}x when CPU-bound (robust to other load; supporting figure)"
    )
    print(f"open / mean of the closed phases around it: {', '.join(f'{x:.3f}' for x in pairs)}")
    print(
        f"ratio open / closed: {ratio:.3f}x (median; ratio of medians {o / c:.3f}x)"
        f"   goal >= 0.95x: {'PASS' if ratio >= 0.95 else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
