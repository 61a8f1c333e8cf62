"""TUI start to first painted runs table, next to ``mlbench status`` printing the same runs.

Goal (issue 5): under 1 s from launching the process to the runs table painted with data. Each
sample is a fresh interpreter (imports included) against a running ``mlbench server`` whose store
holds the recorded fixture runs plus ``--runs`` more; the TUI runs headless (Textual renders the
same frames, only the terminal writes are skipped) and reports the wall time of its first paint
with data. The peer is the CLI's ``mlbench status``, the quickest other way to see the run list.

    python -m benchmarks tui_startup [--runs 200] [--samples 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tui" / "store.sqlite3"

CHILD = """
import sys, time
from mlbench_worker import wire
from mlbench_tui.tui.app import MlbenchApp

class Timed(MlbenchApp):
    def on_mount(self):  # MlbenchApp.on_mount runs too (Textual calls every class's handler)
        self.set_interval(0.002, self._check)

    def _check(self):
        if self.first_paint is not None:
            print(repr(self.first_paint), flush=True)
            self.exit()

Timed(sys.argv[1], token=sys.argv[2] or None).run(headless=True, size=(140, 45))
"""


def _server(db: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", "--db", str(db)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _seed(url: str, token: str, runs: int) -> None:
    from mlbench_worker import wire

    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunCreate

    goal = {"metric": wire.VAL_GLOBAL_PREC1, "target": 80.0, "direction": "max", "kind": "full"}
    with MlbenchClient(url, token) as client:
        for i in range(runs):
            request = RunCreate(
                name=f"seed-{i:04d}",
                spec_name="seed",
                task="1a",
                backend="gloo",
                workers=1 + i % 8,
                goal=goal,
            )
            created = client.create_run(request)
            client.update_run(created.run.id, state="succeeded" if i % 3 else "failed")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tui_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs added to the fixture store")
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="mlbench-bench-"))
    env = dict(os.environ, MLBENCH_HOME=str(tmp / "home"), MLBENCH_TOKEN="bench-admin-token")
    db = tmp / "store.db"
    shutil.copyfile(FIXTURE, db)
    server, url = _server(db, env)
    try:
        _seed(url, "bench-admin-token", args.runs)
        tui, status, tui_cpu, status_cpu = [], [], [], []
        for _ in range(args.samples):
            t0, c0 = time.time(), _children_cpu()
            out = subprocess.run(
                [sys.executable, "-c", CHILD, url, ""], env=env, capture_output=True, text=True, timeout=60
            )
            if out.returncode != 0 or not out.stdout.strip():
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            tui.append(float(out.stdout.strip().splitlines()[-1]) - t0)
            tui_cpu.append(_children_cpu() - c0)
            t0, c0 = time.time(), _children_cpu()
            subprocess.run(
                [sys.executable, "-m", "mlbench_tui", "status", "-n", "500"],
                env=dict(env, MLBENCH_SERVER_URL=url),
                capture_output=True,
                check=True,
                timeout=60,
            )
            status.append(time.time() - t0)
            status_cpu.append(_children_cpu() - c0)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)
        shutil.rmtree(tmp, ignore_errors=True)
    ours, peer = statistics.median(tui), statistics.median(status)
    print(f"TUI start to first painted runs table, {args.runs + 3} runs in the store, {args.samples} samples")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(
        f"{'ours: mlbench tui (headless), first paint':45} median {ours:6.3f} s   min {min(tui):6.3f} s"
        f"   process cpu {statistics.median(tui_cpu):6.3f} s (whole run incl. exit)"
    )
    print(
        f"{'peer: mlbench status (process exit)':45} median {peer:6.3f} s   min {min(status):6.3f} s"
        f"   process cpu {statistics.median(status_cpu):6.3f} s"
    )
    print(f"ratio tui / status: {ours / peer:.2f}x")
    verdict = {True: "PASS", False: "FAIL"}
    print(f"goal: < 1 s -> {verdict[ours < 1.0]} (median), {verdict[min(tui) < 1.0]} (min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
