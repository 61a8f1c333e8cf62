"""Commented starter specs (``mlbench init TASK``): valid as written, every knob explained.

The text is built from the task catalog so a new task gets a template for free; a test loads
the template of every task to keep it valid.
"""

from __future__ import annotations

import json

from mlbench_tui.spec.tasks import TaskInfo


def _yaml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _line(text: str, comment: str, width: int = 38) -> str:
    return f"{text.ljust(width)}# {comment}" if comment else text


def _precision_comment(task: TaskInfo) -> str:
    """What ``hardware.precision`` may be; for a sweep of element types, where those are set."""
    allowed = f"allowed for this task: {', '.join(task.precisions)}"
    dtypes = task.defaults.get("dtypes")
    return allowed + (
        "; the element types it measures: hyperparameters.dtypes" if isinstance(dtypes, list) else ""
    )


def spec_template(task: TaskInfo, *, name: str | None = None) -> str:
    """A commented spec for ``task`` that validates as written (local target, 2 gloo workers)."""
    name = name or task.name
    lines = [
        "# yaml-language-server: $schema=./mlbench.schema.json",
        f"# Task {task.id} ({task.name}): {task.title}.",
        f"# Written by `mlbench init {task.id}`. Check it with `mlbench validate FILE`, preview the runs",
        "# with `mlbench plan FILE`. Editor completion: `mlbench schema > mlbench.schema.json`.",
        "apiVersion: mlbench/v1",
        "kind: Benchmark",
        "metadata:",
        _line(f"  name: {name}", "DNS-1123 label; runs are <name>-<backend>-<workers>w"),
        _line("  labels: {}", "free-form key: value labels"),
        f"  description: {json.dumps(task.title + ' on 2 local workers.')}",
        "spec:",
        _line(f"  task: {task.id}", f"or its name: {task.name}"),
    ]
    if task.goal:
        op = ">=" if task.goal.direction == "max" else "<="
        lines.append(
            _line(
                "  goal: full",
                f"full ({task.goal.metric} {op} {task.goal.full:g}), light ({op} {task.goal.light:g}) "
                "or {metric, target, direction}",
            )
        )
    else:
        lines.append("  # no goal: this task is a measurement sweep")
    lines += [
        _line(f"  max_time: {task.template_max_time}", "stop a run after this wall time: 30m, 2h, 1h30m"),
        _line("  workers: 2", "world size, or a sweep: [1, 2, 4, 8]"),
        _line("  backend: gloo", f"{' | '.join(task.backends)} (nccl needs GPUs), or a sweep: [gloo, mpi]"),
        "  hardware:",
        _line('    cpu: "1"', "per rank (Kubernetes quantity); threads per rank = ceil(cpu)"),
        _line("    memory: 4Gi", "per rank"),
        _line("    # gpu: 1xT4", "GPUs per rank; needed by nccl and fp16"),
        _line("    precision: fp32", _precision_comment(task)),
        _line("  target: local", "or {kind: kubernetes, namespace: mlbench, image: IMAGE}"),
    ]
    if not task.reads_data:
        lines.append(_line("  data: synthetic", "the task generates its inputs"))
    else:
        lines += [
            "  data:",
            _line("    source: download", "download (cached) | path (a prepared directory) | synthetic"),
            _line("    # path: ~/datasets", "dataset directory (path) or cache directory (download)"),
        ]
    lines += [
        f"  # What task {task.id} lets a spec override, at its defaults (the rest is fixed; see: mlbench "
        f"tasks {task.id}):",
        "  hyperparameters: {}",
    ]
    for key in sorted(task.overridable):
        lines.append(_line(f"  #   {key}: {_yaml_value(task.defaults[key])}", task.knobs[key].description))
    lines += [
        _line("  seed: 42", "repeat i uses seed + i"),
        _line("  repeats: 1", "runs per configuration, scored with an olympic mean"),
        _line("  env: {}", "extra environment variables for every rank"),
        _line("  # price_per_hour: 0.35", "hardware price per hour, for cost to target"),
        _line("  # price_per_kwh: 0.30", "energy price, for the energy cost to target (GPU runs)"),
        _line("  # telemetry: off", "hardware samples per rank, default {interval: 1s}"),
    ]
    return "\n".join(lines) + "\n"
