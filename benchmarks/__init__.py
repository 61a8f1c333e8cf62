"""Side-by-side performance benchmarks (not tests): ``python -m benchmarks NAME [ARGS...]``.

Registry of name -> module; each module exposes ``main(argv)`` (or ``main()``) and prints ours
next to the peer with the ratio. A new benchmark is one module plus one line here.
"""

from __future__ import annotations

BENCHMARKS: dict[str, str] = {
    "ingest": "benchmarks.ingest",
    "cli_startup": "benchmarks.cli_startup",
    "allreduce_task": "benchmarks.allreduce_task",
    "resnet20_step": "benchmarks.resnet20_step",
    "resnet50_step": "benchmarks.resnet50_step",
    "gpu_step": "benchmarks.gpu_step",
    "gpu_suite": "benchmarks.gpu_suite",
    "gpu_check": "benchmarks.gpu_check",
    "graph_losses": "benchmarks.graph_losses",
    "cpu_suite": "benchmarks.cpu_suite",
    "tracker_overhead": "benchmarks.tracker_overhead",
    "telemetry_overhead": "benchmarks.telemetry_overhead",
    "task_steps": "benchmarks.task_steps",
    "powersgd": "benchmarks.powersgd",
    "translation": "benchmarks.translation",
    "tui_chart": "benchmarks.tui_chart",
    "tui_ingest": "benchmarks.tui_ingest",
    "tui_startup": "benchmarks.tui_startup",
    "scale": "benchmarks.scale",
    "tui_scale": "benchmarks.tui_scale",
    "report": "benchmarks.report",
    "warm_start": "benchmarks.warm_start",
    "network": "benchmarks.network",
    "spec_fuzz": "benchmarks.spec_fuzz",
    "spec_sweep": "benchmarks.spec_sweep",
    "wire_decode": "benchmarks.wire_decode",
    "verdicts": "benchmarks.verdicts",
}
