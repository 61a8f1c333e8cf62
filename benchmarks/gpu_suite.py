"""Every task on this machine's GPUs through one ``mlbench apply``: one command that checks a GPU.

Each official task runs on synthetic data to its light goal, one rank per GPU (backend nccl),
once per precision the task allows, and once more with ``implementation: {cuda_graphs: true}``
where the task takes it (fp32 and bf16). All cases are documents of one spec file applied once
in a throw-away ``MLBENCH_HOME`` (one CLI process for all cases, not four per case; each case's
rank is forked from one process that imported torch and the tasks once, so a case pays for its
CUDA context, not for its imports), and their results are read once, typed (``RunResult``),
through the server. Then graph mode is checked against eager (``benchmarks.graph_losses``: the same losses
from the same seed). The table gives state, time to accuracy, median step time, the tracker's
phase sum over the training time, peak GPU memory, CUDA-graph capture time and the startup
(run created to the slowest rank's first step; its largest parts summarised below); ``n/a``
marks a figure the case has no such thing for (0a has no goal or steps; eager runs capture nothing).
Exits 1 when a run failed or missed its goal, a case did not run within the budget, or graph
mode's losses left the tolerance. On a machine without an NVIDIA GPU it says so and exits 0.

``--device cpu --smoke`` runs the same path on CPU: gloo ranks, tiny settings, fp32, and the
graph check through the replay stand-in (``mlbench_worker.devices.replay_capture``).

    python -m benchmarks gpu_suite [--budget 480] [--tasks 1a,3a] [--keep DIR] [--device cpu --smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from benchmarks import graph_losses  # noqa: E402
from benchmarks.gpu_step import no_gpu_message  # noqa: E402

if TYPE_CHECKING:
    from mlbench_tui.results.model import RunResult, StartupFigures

MAX_RUN_S = 75  # max_time of one run: the light goals take seconds on a GPU
CHECK_S = 40  # what the graph-vs-eager check is left at the end of the budget

# Synthetic data and hyperparameters that reach each light goal quickly (the tests' smoke specs).
SMOKE: dict[str, dict[str, Any]] = {
    "0a": {
        "hyperparameters": {"sizes_max_exp": 7, "num_sizes": 15, "repetitions": 20, "warmup": 3},
    },
    "1a": {
        "data": {"source": "synthetic", "options": {"train_samples": 4096, "val_samples": 512}},
        "hyperparameters": {"max_epochs": 20},
    },
    "1b": {  # ImageNet's image size, 10 classes: a few epochs of 12 steps of batch 128 per GPU
        "data": {
            "source": "synthetic",
            "options": {"train_samples": 1536, "val_samples": 256, "image_size": 224, "num_classes": 10},
        },
        "hyperparameters": {"batch_size": 128, "max_epochs": 10},
    },
    "2a": {
        "data": {"source": "synthetic", "options": {"train_samples": 8192, "val_samples": 1024}},
        "hyperparameters": {"max_epochs": 10},
    },
    "3a": {
        "data": {
            "source": "synthetic",
            "options": {"train_tokens": 20000, "val_tokens": 4000, "vocab_size": 200}
            | {"emb_size": 96, "hidden_size": 96, "num_layers": 3, "bptt": 15},
        },
        "hyperparameters": {"batch_size": 16, "max_epochs": 10},
    },
    "4a": {
        "data": {
            "source": "synthetic",
            "options": {"train_samples": 2400, "val_samples": 100, "vocab_words": 8, "min_len": 2}
            | {"max_len": 5, "hidden_size": 64, "num_layers": 2, "dropout": 0.0}
            | {"init_weight": 0.3, "embedding_init_std": 1.0},
        },
        "hyperparameters": {"global_batch_size": 64, "lr": 0.01, "warmup_steps": 10, "max_epochs": 6},
    },
    "4b": {
        "data": {
            "source": "synthetic",
            "options": {"train_samples": 2400, "val_samples": 100, "vocab_words": 8, "min_len": 2}
            | {"max_len": 5, "d_model": 64, "heads": 4, "ffn_dim": 128}
            | {"encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0},
        },
        "hyperparameters": {"global_batch_tokens": 512, "lr": 0.005, "warmup_steps": 30, "max_epochs": 10},
    },
}
# The CPU mode's settings: the same tasks, small enough that a run takes seconds on one core.
TINY: dict[str, dict[str, Any]] = {
    "0a": {"hyperparameters": {"sizes_max_exp": 3, "num_sizes": 4, "repetitions": 5, "warmup": 1}},
    "1b": {
        "data": {
            "source": "synthetic",
            "options": {"train_samples": 32, "val_samples": 16, "image_size": 32, "num_classes": 4},
        },
        "hyperparameters": {"batch_size": 8, "lr": 0.05, "max_epochs": 8},
    },
    "2a": {
        "data": {"source": "synthetic", "options": {"train_samples": 2048, "val_samples": 256}},
        "hyperparameters": {"max_epochs": 10, "timing_warmup_steps": 4},  # 16 steps to its goal: time 12
    },
}
GRAPH_PRECISIONS = ("fp32", "bf16")
SUITE_PRECISIONS = {"1b": ("fp32", "bf16")}  # 1b's steps are long: the precisions worth the budget
ORDER = ("fp32", "bf16", "fp16", "amp")
REFERENCE_SIZES = 4  # 0a sizes in the reference row: the smallest, the largest and two between


class CaseFigures(BaseModel):
    """One case's figures for a reference table (``--json``; ``gpu_check`` reads them)."""

    task: str
    precision: str
    cuda_graphs: bool
    state: str
    step_ms: float | None = None
    time_to_accuracy_s: float | None = None


class SizeFigures(BaseModel):
    """One all-reduce message size of a 0a case."""

    dtype: str
    size: int
    latency_p50_s: float | None = None
    busbw_gbps: float | None = None


class LossFigures(BaseModel):
    task: str
    precision: str
    max_rel_diff: float | None = None
    ok: bool = False


class SuiteFigures(BaseModel):
    """What one suite run measured, typed for ``gpu_check``'s summary and reference row."""

    device: str
    torch: str
    workers: int
    cases: list[CaseFigures]
    allreduce: list[SizeFigures]
    graph_losses: list[LossFigures]
    reference_csv: str = ""  # rows for mlbench_tui/spec/reference.csv (results.reference)


@dataclass
class Case:
    """One run of the suite and, once applied, what it measured."""

    task: str
    precision: str
    cuda_graphs: bool
    result: RunResult | None = None
    step_ms: float | None = None
    sizes: list[SizeFigures] | None = None
    not_run: bool = False

    @property
    def name(self) -> str:
        return f"gpu-{self.task}-{self.precision}" + ("-graphs" if self.cuda_graphs else "")

    @property
    def state(self) -> str:
        if self.result is None:
            return "not run" if self.not_run else "no result"
        return str(self.result.state)

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.succeeded and self.result.reached is not False


def cases(tasks: Sequence[str], *, device: str = "cuda") -> list[Case]:
    """Every task x each precision it allows, plus CUDA graphs where the task takes them; fp32
    of every task first, then bf16 and so on, so a spent budget leaves out the least telling.
    On CPU: fp32 only, no graphs (the graph check runs in-process instead)."""
    from mlbench_tui.spec.tasks import TASKS

    tasks = list(tasks)
    out: list[Case] = []
    for task_id in tasks:
        task = TASKS[task_id]
        if device == "cpu":
            out.append(Case(task_id, "fp32", False))
            continue
        precisions = SUITE_PRECISIONS.get(task_id, task.precisions)
        out += [Case(task_id, precision, False) for precision in precisions]
        if task.no_cuda_graphs is None:
            out += [Case(task_id, p, True) for p in precisions if p in GRAPH_PRECISIONS]
    return sorted(out, key=lambda c: (ORDER.index(c.precision), c.cuda_graphs, tasks.index(c.task)))


def spec_document(
    case: Case, workers: int, max_time_s: int, *, device: str = "cuda", smoke: bool = False
) -> str:
    """The case's spec as one YAML document (written as JSON, which is YAML)."""
    from mlbench_tui.spec.tasks import TASKS

    settings = (TINY if smoke else SMOKE)[case.task]
    body: dict[str, Any] = {
        "task": case.task,
        "workers": workers,
        "backend": "nccl" if device == "cuda" else "gloo",
        "max_time": f"{max_time_s}s",
        "target": "local",
        **settings,
    }
    if device == "cuda":
        body["hardware"] = {"gpu": 1, "precision": case.precision}
    if TASKS[case.task].goal is not None:
        body["goal"] = "light"
    if case.cuda_graphs:
        body["implementation"] = {"cuda_graphs": True}
    doc = {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": case.name}, "spec": body}
    return json.dumps(doc, indent=2)


def spec_file(all_cases: Sequence[Case], workers: int, max_time_s: int, **kw: Any) -> str:
    """One spec file holding every case, one document each."""
    return "\n---\n".join(spec_document(c, workers, max_time_s, **kw) for c in all_cases) + "\n"


@contextlib.contextmanager
def _home(path: Path) -> Iterator[None]:
    """``MLBENCH_HOME`` set to ``path`` for this process (and the commands it starts)."""
    before = os.environ.get("MLBENCH_HOME")
    os.environ["MLBENCH_HOME"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLBENCH_HOME", None)
        else:
            os.environ["MLBENCH_HOME"] = before


def apply_all(spec: Path, timeout_s: float) -> int | None:
    """``mlbench apply`` of the suite's spec and its exit status; on overrun it is stopped like
    Ctrl-C (the run in flight is cancelled) and None says so."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", "--force", "--quiet", str(spec)],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return None


def read_results(spec: Path, all_cases: Sequence[Case]) -> None:
    """Each case's stored result (with its median step time over every rank's report windows),
    read once through the server, and a 0a case's curve at a few sizes."""
    from mlbench_tui.errors import MlbenchError
    from mlbench_tui.results.allreduce import PREFIX, run_curves
    from mlbench_tui.results.scoring import is_sweep
    from mlbench_tui.runs.reads import read_metrics
    from mlbench_tui.runs.results import collect_results
    from mlbench_tui.server.daemon import ensure_server

    client = ensure_server().client()
    try:
        results = collect_results(client, str(spec))
    except MlbenchError:  # nothing ran: every case stays without a result
        return
    by_name = {r.spec_name: r for r in results}
    for case in all_cases:
        case.result = by_name.get(case.name)
        if case.result is None or case.result.run_id is None:
            continue
        run_id = case.result.run_id
        if is_sweep(case.result):
            names = [m.name for m in client.metric_names(run_id) if m.name.startswith(PREFIX)]
            case.sizes = reference_sizes(run_curves(read_metrics(client, run_id, names)))
            continue
        case.step_ms = None if case.result.step_time_s is None else case.result.step_time_s * 1e3


def reference_sizes(curves: dict[str, Any]) -> list[SizeFigures]:
    """A few sizes of each dtype's curve, smallest to largest, for a reference row."""
    out: list[SizeFigures] = []
    for dtype, points in curves.items():
        n = len(points)
        picks = (
            sorted({round(i * (n - 1) / (REFERENCE_SIZES - 1)) for i in range(REFERENCE_SIZES)}) if n else []
        )
        out += [
            SizeFigures(
                dtype=dtype,
                size=points[i].size,
                latency_p50_s=points[i].latency_p50_s,
                busbw_gbps=points[i].busbw_gbps,
            )
            for i in picks
        ]
    return out


def figures(
    all_cases: Sequence[Case], checks: Sequence[graph_losses.LossCheck], device: str, workers: int
) -> SuiteFigures:
    import torch

    from mlbench_tui.results.reference import csv_text, reference_rows

    today = datetime.now(UTC).date().isoformat()
    results = [c.result for c in all_cases if c.result is not None]
    return SuiteFigures(
        reference_csv=csv_text(reference_rows(results, source="gpu_suite", measured=today), header=False),
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        torch=torch.__version__,
        workers=workers,
        cases=[
            CaseFigures(
                task=c.task,
                precision=c.precision,
                cuda_graphs=c.cuda_graphs,
                state=c.state,
                step_ms=c.step_ms,
                time_to_accuracy_s=c.result.time_to_accuracy_s if c.result else None,
            )
            for c in all_cases
        ],
        allreduce=[size for c in all_cases for size in (c.sizes or [])],
        graph_losses=[
            LossFigures(task=c.task, precision=c.precision, max_rel_diff=c.max_rel_diff, ok=c.ok)
            for c in checks
        ],
    )


def phase_share(result: RunResult | None) -> float | None:
    """The tracker's phases (compute, communication, data, metrics) over the training time."""
    if result is None or result.time_split is None or not result.time_to_accuracy_s:
        return None
    split = result.time_split
    return (
        split.compute + split.communication + split.preprocess + split.metrics
    ) / result.time_to_accuracy_s


def _cell(value: float | None, spec: str, width: int, applies: bool = True) -> str:
    text = ("-" if value is None else format(value, spec)) if applies else "n/a"
    return f"{text:>{width}}"


def table(all_cases: Sequence[Case], header: str) -> str:
    from mlbench_tui.spec.tasks import TASKS

    lines = [
        header,
        f"  {'task':<5} {'precision':<9} {'graphs':<6} {'state':<10} {'TTA s':>7} {'step ms':>8} "
        f"{'phases/wall':>11} {'mem GiB':>8} {'capture s':>9} {'start s':>7}",
    ]
    for case in all_cases:
        r = case.result
        goal = TASKS[case.task].goal is not None
        hw = r.telemetry if r is not None else None
        memory = None
        if hw is not None:
            mib = hw.peak_gpu_mem_mib if hw.peak_gpu_mem_mib is not None else hw.peak_rss_mib
            memory = None if mib is None else mib / 1024
        lines.append(
            f"  {case.task:<5} {case.precision:<9} {'yes' if case.cuda_graphs else 'no':<6} {case.state:<10} "
            + _cell(r.time_to_accuracy_s if r else None, ".1f", 7, goal)
            + " "
            + _cell(case.step_ms, ".2f", 8, goal)
            + " "
            + _cell(phase_share(r), ".2f", 11, goal)
            + " "
            + _cell(memory, ".2f", 8)
            + " "
            + _cell(r.graph_capture_s if r else None, ".1f", 9, case.cuda_graphs)
            + " "
            + _cell(startup_s(r), ".1f", 7)
        )
    return "\n".join([*lines, *startup_summary(all_cases)])


def _startup(result: RunResult | None) -> StartupFigures | None:
    """The run's start when its ranks reported one (a case that never started has none)."""
    startup = result.startup if result is not None else None
    return startup if startup is not None and startup.phases else None


def startup_s(result: RunResult | None) -> float | None:
    """Seconds from the run's creation to the end of its slowest rank's first step."""
    startup = _startup(result)
    return None if startup is None else startup.total_s


def startup_summary(all_cases: Sequence[Case]) -> list[str]:
    """Where a case's seconds go besides training: the median startup and its largest parts."""
    import statistics

    startups = [s for s in (_startup(c.result) for c in all_cases) if s is not None]
    if not startups:
        return []
    parts: dict[str, list[float]] = {}
    for startup in startups:
        if startup.launcher_s is not None:
            parts.setdefault(startup.launcher, []).append(startup.launcher_s)
        for name, seconds in startup.phases.items():
            parts.setdefault(name, []).append(seconds)
    medians = {name: statistics.median(values) for name, values in parts.items()}
    largest = ", ".join(
        f"{name} {sec:.1f}" for name, sec in sorted(medians.items(), key=lambda kv: -kv[1])[:4]
    )
    median = statistics.median([s.total_s for s in startups])
    return [f"  startup per case (median of {len(startups)}): {median:.1f} s; largest parts (s): {largest}"]


def _header(workers: int, device: str) -> str:
    import torch

    if device == "cpu":
        where = f"{workers} CPU rank(s), gloo, tiny settings"
    else:
        where = f"{workers} x {torch.cuda.get_device_name()}, one rank per GPU, nccl"
    return f"\nmlbench GPU suite on {where}, torch {torch.__version__}, synthetic data, light goals"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for everything (default 8 min)")
    parser.add_argument("--tasks", help="comma-separated task ids (default: every task)")
    parser.add_argument("--keep", type=Path, help="keep the store, spec and logs in this directory")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny settings (with --device cpu)")
    parser.add_argument("--steps", type=int, help="graph check steps (default 50; 6 with --smoke)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (SuiteFigures)")
    args = parser.parse_args(argv)
    if args.smoke and args.device != "cpu":
        parser.error("--smoke runs the CPU twin: add --device cpu")
    if args.device == "cuda":
        reason = no_gpu_message()
        if reason is not None:
            print(f"gpu_suite: nothing to run: {reason}")
            return 0
    import torch

    settings = TINY if args.smoke else SMOKE
    tasks = [t.strip() for t in (args.tasks or ",".join(settings)).split(",") if t.strip()]
    unknown = [t for t in tasks if t not in settings]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(settings)}")
    workers = torch.cuda.device_count() if args.device == "cuda" else 1
    steps = args.steps or (graph_losses.SMOKE_STEPS if args.smoke else 50)
    todo = cases(tasks, device=args.device)
    deadline = time.monotonic() + args.budget
    with tempfile.TemporaryDirectory(prefix="mlbench-gpu-suite-") as tmp:
        home = (args.keep or Path(tmp)).resolve()
        home.mkdir(parents=True, exist_ok=True)
        spec = home / "gpu-suite.yaml"
        spec.write_text(spec_file(todo, workers, MAX_RUN_S, device=args.device, smoke=args.smoke))
        with _home(home):
            print(f"gpu_suite: applying {len(todo)} cases from {spec} ...", file=sys.stderr, flush=True)
            status = apply_all(spec, deadline - time.monotonic() - CHECK_S)
            if status == 2:
                print("gpu_suite: mlbench apply refused the spec (above): nothing ran", file=sys.stderr)
            else:
                read_results(spec, todo)
        for case in todo:
            case.not_run = case.result is None and status is None
        print(table(todo, _header(workers, args.device)), flush=True)
        if status is None:
            print("  the budget ran out: the cases marked 'not run' did not run", flush=True)
    device = torch.device(args.device)
    precisions = GRAPH_PRECISIONS if args.device == "cuda" else ("fp32",)
    checks = [
        graph_losses.check(t, p, device, steps) for t, p in graph_losses.graphed_cases(tasks, precisions)
    ]
    print(graph_losses.table(checks, steps), flush=True)
    if args.json is not None:
        args.json.write_text(figures(todo, checks, args.device, workers).model_dump_json(indent=1))
    failed = [c.name for c in todo if not c.ok] + [
        f"graphs {c.task} {c.precision}" for c in checks if not c.ok
    ]
    if failed:
        print(f"gpu_suite: FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
