"""Startup cost of the light CLI paths, side by side with a generic schema validator.

Goal (issue 2): `mlbench --help` and `mlbench validate specs/quickstart.yaml` each under 0.3 s.
The peer is what a user would otherwise run to check a spec: PyYAML + jsonschema against the
committed `specs/mlbench.schema.json` (no line numbers, no catalog policy). Each command runs in
a fresh interpreter, interleaved, and the medians of wall and CPU time are printed with ratios.

    python benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = "specs/quickstart.yaml"

PEER = """
import json, sys, yaml, jsonschema
schema = json.load(open("specs/mlbench.schema.json"))
doc = yaml.safe_load(open(sys.argv[1]))
jsonschema.Draft202012Validator(schema).validate(doc)
"""

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "mlbench --help": [sys.executable, "-m", "mlbench_tui", "--help"],
    "mlbench validate": [sys.executable, "-m", "mlbench_tui", "validate", "-q", SPEC],
    "peer: pyyaml+jsonschema": [sys.executable, "-c", PEER, SPEC],
}


def measure(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (user+sys of the child) seconds of one run."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the page cache and bytecode
        measure(argv)
    for _ in range(args.runs):
        for name, argv in COMMANDS.items():
            samples[name].append(measure(argv))
    med = {
        n: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
        for n, s in samples.items()
    }
    print(f"{'command':28} {'wall median':>12} {'wall min':>9} {'cpu median':>11}")
    for name, s in samples.items():
        wall, cpu, best = med[name][0] * 1000, med[name][1] * 1000, min(w for w, _ in s) * 1000
        print(f"{name:28} {wall:10.0f}ms {best:7.0f}ms {cpu:9.0f}ms")
    ours, peer = med["mlbench validate"], med["peer: pyyaml+jsonschema"]
    ratios = f"wall ratio {peer[0] / ours[0]:.2f}x, cpu ratio {peer[1] / ours[1]:.2f}x"
    print(f"validate vs peer: {ratios} (>1: ours faster)")
    for name in ("mlbench --help", "mlbench validate"):
        verdict = "OK" if med[name][0] < 0.3 else "OVER"
        print(f"goal < 300 ms: {name}: {med[name][0] * 1000:.0f} ms wall median -> {verdict}")


if __name__ == "__main__":
    main()
