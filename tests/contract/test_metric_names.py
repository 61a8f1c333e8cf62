"""Metric names are written once, as constants of the wire contract: no literal elsewhere.

Every reporter, reader, chart and report names a metric through ``mlbench_worker.wire`` (or
``sysmetrics`` for the ``sys/`` telemetry series), so a renamed metric cannot leave a reader
silently reading nothing. This scans the source of the engine, the worker and the benchmarks for
string literals (f-string parts included) equal to a metric name or starting with a metric prefix.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("mlbench_tui", "workers", "benchmarks")
CONTRACT = {ROOT / "workers/mlbench_worker/wire.py", ROOT / "workers/mlbench_worker/sysmetrics.py"}
NAMES = frozenset(wire.METRIC_NAMES) | {s.name for s in sm.SERIES}
PREFIXES = (*wire.METRIC_PREFIXES, sm.PREFIX)

# Literals that spell a metric's name but mean something else: (file, literal) -> why.
NOT_METRICS = {
    ("workers/mlbench_worker/optim/centralized.py", "lr"): "torch's param_group key",
    ("benchmarks/gpu_suite.py", "lr"): "a hyperparameter in a spec's hyperparameters",
    ("benchmarks/graph_losses.py", "lr"): "a hyperparameter in a spec's hyperparameters",
    ("benchmarks/resnet50_step.py", "lr"): "a hyperparameter in a worker config",
    ("workers/mlbench_worker/hyperparams.py", "lr"): "the hyperparameter a problem names",
    ("workers/mlbench_worker/optim/lars.py", "lr"): "torch's param_group key",
    ("benchmarks/resnet20_step.py", "lr"): "a hyperparameter in a worker config",
    ("benchmarks/task_steps.py", "lr"): "a hyperparameter and torch's param_group key",
    ("benchmarks/__init__.py", "allreduce_task"): "the name of a benchmark module",
    (
        "mlbench_tui/results/reference_figures.py",
        "allreduce_latency_min_size_us",
    ): "a reference table's column",
    ("mlbench_tui/results/reference_figures.py", "allreduce_peak_busbw_gbps"): "a reference table's column",
    ("mlbench_tui/runs/export.py", "step_time"): "a field of the export's result summary",
    ("mlbench_tui/results/mllog.py", "lr"): "a hyperparameter's name (MLPerf's key for it)",
    ("mlbench_tui/runs/ranks.py", "step_time"): "a field of `mlbench ranks -o json`",
}


def metric_literals(path: Path) -> list[tuple[int, str]]:
    """(line, literal) of every string constant in ``path`` that names a metric."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in NAMES or text.startswith(PREFIXES):
                found.append((node.lineno, text))
    return sorted(found)


def test_no_metric_name_is_written_as_a_literal_outside_the_contract() -> None:
    offenders = []
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            if path in CONTRACT:
                continue
            where = path.relative_to(ROOT).as_posix()
            for line, text in metric_literals(path):
                if (where, text) not in NOT_METRICS:
                    offenders.append(f"{where}:{line}: {text!r}")
    assert offenders == [], "name these metrics through mlbench_worker.wire's constants:\n" + "\n".join(
        offenders
    )


def test_the_scan_finds_literals_and_f_string_prefixes(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'reporter.metric("train_loss", 1.0)\n'
        'name = f"phase_{phase}"\n'
        'other = "sys/gpu_util"\n'
        'fine = wire.TRAIN_LOSS + "x"\n'
    )
    assert metric_literals(sample) == [(1, "train_loss"), (2, "phase_"), (3, "sys/gpu_util")]


def test_every_allowed_literal_is_still_there() -> None:
    """An entry of ``NOT_METRICS`` whose literal is gone is removed, so the list stays short."""
    for (where, text), why in NOT_METRICS.items():
        assert text in [t for _, t in metric_literals(ROOT / where)], (where, text, why)
