"""Time of ``mlbench report`` on the 16-run fixture sweep, side by side with a plain script.

Goal (issue 19): ``mlbench report`` of the fixture store's 16-run sweep (ResNet-20 and all-reduce
runs, gloo and MPI) in under 3 s. The peer is the straightforward way to make the same page: one
process reads the same store, builds the same figures and draws them one after another with
matplotlib (what the command does on one core). Each runs in a fresh interpreter on a copy of the
store, interleaved; medians of wall time are printed with the ratio.

    python -m benchmarks report [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "fixtures" / "report" / "store.sqlite3"
GOAL_S = 3.0

PEER = """
import sys
from pathlib import Path
from mlbench_tui.report.build import build_figures
from mlbench_tui.report.draw import render
from mlbench_tui.report.inputs import load_records
from mlbench_tui.report.page import render_page
from mlbench_tui.runs.results import report_run_ids
from mlbench_tui.store.reader import StoreReader

reader = StoreReader.open(sys.argv[1])
records = load_records(reader, report_run_ids(reader, []))
figures = build_figures(records)
images = {f.key: render(f, "png") for f in figures}
Path(sys.argv[2]).write_text(render_page(records, figures, images, title="report"))
"""


def measure(argv: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--store", type=Path, default=STORE, help="a store to report on")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store.sqlite3"
        shutil.copyfile(args.store, store)
        env = {**os.environ, "MLBENCH_HOME": str(Path(tmp) / "home"), "MLBENCH_DB": str(store)}
        commands = {
            "mlbench report": [sys.executable, "-m", "mlbench_tui", "report", "--out", f"{tmp}/ours.html"],
            "peer: serial matplotlib": [sys.executable, "-c", PEER, str(store), f"{tmp}/peer.html"],
        }
        for command in commands.values():  # warm the page cache and bytecode
            measure(command, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, command in commands.items():
                samples[name].append(measure(command, env))
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, {args.runs} runs each")
    print(f"{'command':26} {'wall median':>12} {'wall min':>9}")
    for name, values in samples.items():
        print(f"{name:26} {statistics.median(values):11.2f}s {min(values):8.2f}s")
    ours, peer = (statistics.median(samples[n]) for n in commands)
    print(f"report vs peer: {peer / ours:.2f}x (>1: ours faster)")
    verdict = "OK" if ours < GOAL_S else "OVER"
    print(f"goal < {GOAL_S:.0f} s: mlbench report {ours:.2f} s wall median -> {verdict}")


if __name__ == "__main__":
    main()
