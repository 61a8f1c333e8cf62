"""One command that checks a GPU machine: gpu_step (tasks 1a and 1b), the GPU-only tests and
gpu_suite in a budget.

The parts run one after the other, each as its own process with its share of the budget (at
most: gpu_step 16% for 1a and 12% for 1b's shorter rounds, the tests marked ``gpu`` 14%; gpu_suite
what is left); a part that overruns
its share is stopped and the summary says so. When the tests find that ranks forked by a warm
start cannot use the GPU, gpu_suite starts its ranks cold (``MLBENCH_WARM_START=0``), so one
check still measures the machine. Their output streams through; then one summary:
each part's verdict and time, and the machine's reference rows (GPU model, step time per task,
precision and implementation, 0a latency and bus bandwidth at a few sizes, the pre-flight's GEMM
rate and one-element all-reduce) ready for ``mlbench_tui/spec/reference.csv``. Each case runs
once, so its rows carry ``repeats`` 1 and the within-run spread (``step_spread``: half the p10-p90
range of its timed steps, or of 0a's repetitions, over the median), which the verdicts' bands use;
rows with a ``spread`` over repeats come from ``cpu_suite --repeats N`` or from adding runs. The
summary is also written to a file (``--out``, default ``$OUT/gpu-check-summary.txt`` when ``OUT``
is set, else ``gpu-check-summary.txt``). Exits 1 when
a part failed or was stopped. Without an NVIDIA GPU it says so and exits 0; ``--smoke`` then
runs every part's code on the CPU (gpu_step --smoke, the gpu tests collected and skipped,
gpu_suite --device cpu --smoke).

    python -m benchmarks gpu_check [--budget 480] [--out FILE] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from benchmarks.gpu_step import no_gpu_message  # noqa: E402
from benchmarks.gpu_suite import SuiteFigures  # noqa: E402

STEP_SHARE, TESTS_SHARE = 0.16, 0.14  # caps: on an H200 they took 49.6 s and 18.8 s of 480 (before
# the tests gained two forked nccl runs)
WARM_GPU_TEST = "test_forked_ranks_use_cuda_and_nccl"  # the gpu test of warm starts (forked ranks)
STEP_ARGS = ["--rounds", "3", "--steps", "30"]  # gpu_step's medians from fewer, shorter rounds
STEP_1B_SHARE = 0.12  # a cap (unused seconds go to gpu_suite): ResNet-50 at 224x224, fewer, smaller rounds
STEP_1B_ARGS = ["--task", "1b", "--rounds", "2", "--steps", "10", "--batch", "64"]
SUITE_MARGIN_S = 15.0  # gpu_suite's own budget stops this much before its hard stop
GPU_MARK = "@pytest.mark.gpu"
TAIL_LINES = 14  # gpu_step's last lines (its table and ratios) kept for the summary
DRAIN_S = 5.0  # how long the output of a finished part may still arrive


@dataclass
class Part:
    """One part of the check: its command and, once run, how it went."""

    name: str
    argv: list[str]
    status: str = "not run"
    seconds: float = 0.0
    output: tuple[str, ...] = ()
    env: dict[str, str] | None = None  # added to this process's environment for the part

    @property
    def tail(self) -> tuple[str, ...]:
        """Its last lines (gpu_step's table and ratios, for the summary)."""
        return self.output[-TAIL_LINES:]

    @property
    def ok(self) -> bool:
        return self.status == "passed"


def run_part(part: Part, timeout_s: float) -> None:
    """Run ``part`` with its output streamed through; stop its process group past ``timeout_s``."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, *part.argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=None if part.env is None else {**os.environ, **part.env},
    )
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        with contextlib.suppress(ProcessLookupError):  # it ended just now
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    lines: list[str] = []

    def stream() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    timer = threading.Timer(max(1.0, timeout_s), stop)
    timer.start()
    code = proc.wait()
    timer.cancel()
    # a process the part left behind may hold the pipe open: the part's own exit is what counts
    reader.join(DRAIN_S)
    part.seconds = time.monotonic() - start
    part.output = tuple(lines)
    if stopped.is_set():
        part.status = f"STOPPED: overran its {timeout_s:.0f} s"
    elif code == 0 or (part.name == "gpu tests" and code == 5):  # 5: no test collected
        part.status = "passed"
    else:
        part.status = f"FAILED (exit {code})"


def gpu_test_files(root: Path = ROOT) -> list[str]:
    """The test modules that hold tests marked ``gpu``: only they are collected, so a GPU machine
    without the other tests' dependencies still runs them."""
    return sorted(
        str(path.relative_to(root))
        for path in (root / "tests").rglob("test_*.py")
        if GPU_MARK in path.read_text()
    )


def parts(smoke: bool, figures: Path) -> list[Part]:
    step = ["-m", "benchmarks", "gpu_step", *(["--smoke"] if smoke else STEP_ARGS)]
    step_1b = ["-m", "benchmarks", "gpu_step", *(["--smoke", "--task", "1b"] if smoke else STEP_1B_ARGS)]
    tests = ["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *gpu_test_files()]
    suite = ["-m", "benchmarks", "gpu_suite", "--json", str(figures)]
    if smoke:
        suite += ["--device", "cpu", "--smoke"]
    return [
        Part("gpu_step", step),
        Part("gpu_step 1b", step_1b),
        Part("gpu tests", tests),
        Part("gpu_suite", suite),
    ]


def forked_ranks_failed(tests: Part) -> bool:
    """Whether the gpu tests found that ranks forked by a warm start cannot use this GPU: then
    gpu_suite starts its ranks cold, so the rest of the check still measures the machine."""
    return any("FAILED" in line and WARM_GPU_TEST in line for line in tests.output)


def reference_row(figures: SuiteFigures | None) -> list[str]:
    """The machine's figures: rows for ``mlbench_tui/spec/reference.csv`` (step time per task,
    precision and implementation; 0a's smallest-size latency and peak bus bandwidth), 0a's
    curve at a few sizes, and the graph-vs-eager verdicts."""
    if figures is None:
        return ["  (gpu_suite wrote no figures)"]
    device = f"{figures.workers} x {figures.device}" if figures.workers > 1 else figures.device
    lines = [f"  machine: {device}, torch {figures.torch}"]
    rows = figures.reference_csv.splitlines()
    lines += ["  reference rows (mlbench_tui/spec/reference.csv):", *(f"    {row}" for row in rows)]
    if not rows:
        lines.append("    (none: no case succeeded)")
    if figures.graph_losses:
        checks = ", ".join(
            f"{c.task} {c.precision} {'ok' if c.ok else 'MISMATCH'}"
            + ("" if c.max_rel_diff is None else f" ({c.max_rel_diff:.1e})")
            for c in figures.graph_losses
        )
        lines.append(f"  graph mode vs eager losses (max relative difference): {checks}")
    if figures.allreduce:
        lines += ["  0a at a few sizes:", f"    {'dtype':<6} {'elements':>10} {'p50 us':>9} {'bus GB/s':>9}"]
        for s in figures.allreduce:
            latency = "-" if s.latency_p50_s is None else f"{s.latency_p50_s * 1e6:.1f}"
            busbw = "-" if s.busbw_gbps is None else f"{s.busbw_gbps:.2f}"
            lines.append(f"    {s.dtype:<6} {s.size:>10} {latency:>9} {busbw:>9}")
    return lines


def summary(all_parts: Sequence[Part], figures: SuiteFigures | None, budget: float, took: float) -> str:
    failed = [p.name for p in all_parts if not p.ok]
    lines = [
        "",
        f"GPU check: {'FAILED: ' + ', '.join(failed) if failed else 'passed'} "
        f"({took:.0f} s of a {budget:.0f} s budget)",
        f"  {'part':<11} {'status':<28} {'seconds':>7}",
    ]
    lines += [f"  {p.name:<11} {p.status:<28} {p.seconds:7.1f}" for p in all_parts]
    if any(p.env and p.env.get("MLBENCH_WARM_START") == "0" for p in all_parts):
        lines.append("  gpu_suite started its ranks cold: forked ranks failed in the gpu tests (above)")
    for step in (p for p in all_parts if p.name.startswith("gpu_step")):
        if step.tail:
            lines += [f"  last lines of {step.name}:", *(f"    {line}" for line in step.tail)]
    return "\n".join(lines + reference_row(figures))


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu-check-summary.txt" if out else Path("gpu-check-summary.txt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all parts (default 8 min)")
    parser.add_argument("--out", type=Path, help="summary file (default: $OUT/gpu-check-summary.txt)")
    parser.add_argument("--smoke", action="store_true", help="run every part's code on the CPU")
    args = parser.parse_args(argv)
    if args.budget < 60:
        parser.error(f"--budget {args.budget:g}: give it at least 60 seconds")
    reason = no_gpu_message()
    if reason is not None and not args.smoke:
        print(f"gpu_check: nothing to check: {reason}")
        return 0
    start = time.monotonic()
    deadline = start + args.budget
    with tempfile.TemporaryDirectory(prefix="mlbench-gpu-check-") as tmp:
        figures_path = Path(tmp) / "suite.json"
        todo = parts(args.smoke, figures_path)
        step, step_1b, tests, suite = todo
        run_part(step, STEP_SHARE * args.budget)
        run_part(step_1b, STEP_1B_SHARE * args.budget)
        if importlib.util.find_spec("pytest") is None:
            tests.status = "FAILED: pytest not installed"  # bring its wheels (pytest, pluggy, iniconfig)
        else:
            run_part(tests, TESTS_SHARE * args.budget)
        if forked_ranks_failed(tests):
            suite.env = {"MLBENCH_WARM_START": "0"}
            print("gpu_check: forked ranks failed on this GPU: gpu_suite starts its ranks cold", flush=True)
        left = deadline - time.monotonic()
        suite.argv += ["--budget", f"{max(30.0, left - SUITE_MARGIN_S):.0f}"]
        run_part(suite, left)
        figures = (
            SuiteFigures.model_validate_json(figures_path.read_text()) if figures_path.exists() else None
        )
    text = summary(todo, figures, args.budget, time.monotonic() - start)
    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text.lstrip("\n") + "\n")
    print(text)
    print(f"gpu_check: summary written to {out.resolve()}")
    return 0 if all(p.ok for p in todo) else 1


if __name__ == "__main__":
    sys.exit(main())
