"""The results table ``mlbench apply`` and ``mlbench results`` print: one row per run, then the
scores of configurations with a goal that ran more than once (olympic mean over their repeats).
Task 0a's repeats are aggregated per message size instead (``allreduce.sweep_tables``)."""

from __future__ import annotations

from collections.abc import Sequence

from mlbench_tui.formatting import format_figure, render_table
from mlbench_tui.results.bounds import nvls_note
from mlbench_tui.results.model import (
    AllreduceFigures,
    RankTelemetryFigures,
    RunResult,
    StartupFigures,
    TelemetryFigures,
)
from mlbench_tui.results.reference import compare
from mlbench_tui.results.scoring import config_key, score_configs
from mlbench_tui.results.telemetry import gpu_util_text


def allreduce_text(dtype: str, figures: AllreduceFigures) -> str:
    """One dtype of a 0a result in a few words: the peak bandwidth, flagged when no link could
    carry it, or the latency with the reason there is no bandwidth."""
    peak = figures.peak_busbw_gbps
    if peak is None:
        if not figures.latency_only:
            return f"{dtype} -"
        latency = figures.min_size_latency_p50_s
        shown = "-" if latency is None else f"{latency * 1e6:.3g} us"
        return f"{dtype} latency {shown} (1 rank: no bandwidth)"
    text = f"{dtype} peak {peak:.3g} GB/s"
    if figures.above_ceiling and figures.busbw_ceiling_gbps is not None:
        text += f" (! above the {figures.busbw_ceiling_gbps:,.0f} GB/s ceiling)"
    return text


def sizes_text(dtype: str, figures: AllreduceFigures) -> str:
    """One dtype of a 0a result when its per-size tables follow: what was measured, and a flag
    when one rank measured latency only or some bandwidth is above the device's ceiling."""
    text = f"{dtype} {figures.sizes} size{'' if figures.sizes == 1 else 's'}"
    if figures.latency_only:
        return text + ", latency only"
    if figures.above_ceiling and figures.busbw_ceiling_gbps is not None:
        text += f", ! {figures.above_ceiling} above the {figures.busbw_ceiling_gbps:,.0f} GB/s ceiling"
    return text


def outcome_text(result: RunResult, *, sweep_tables: bool = False) -> str:
    """``Prec@1 71 (goal >= 70.0)`` for a run with a goal; for 0a per dtype the peak bus bandwidth
    (or latency for one rank), or with ``sweep_tables`` (the per-size tables follow) what it
    measured."""
    goal = result.goal
    if goal is None:
        entries = sorted((result.allreduce or {}).items())
        if sweep_tables and entries:
            return ", ".join(sizes_text(dtype, entry) for dtype, entry in entries) + " (tables below)"
        return ", ".join(allreduce_text(dtype, entry) for dtype, entry in entries) or "-"
    op = ">=" if goal.direction == "max" else "<="
    best = "-" if result.best_value is None else f"{result.best_value:.4g}"
    return f"{goal.metric.removeprefix('val_global_')} {best} (goal {op} {goal.target})"


def telemetry_lines(figures: TelemetryFigures) -> list[tuple[str, str]]:
    """``(label, text)`` lines of a run's hardware figures for ``mlbench status`` and the TUI:
    peak memory (against the pod's limit), GPU utilisation, energy and its cost."""
    worst = max(
        (r for r in figures.ranks if r.peak_rss_mib is not None),
        key=lambda r: r.peak_rss_mib or 0.0,
        default=None,
    )
    lines: list[tuple[str, str]] = []
    if worst is not None:
        text = f"peak {format_figure(worst.peak_rss_mib, 'MiB')} resident (rank {worst.rank}"
        text += f" of {len(figures.ranks)}"
        if worst.mem_limit_mib is not None:
            text += f", limit {format_figure(worst.mem_limit_mib, 'MiB')}"
        lines.append(("memory", text + ")"))
    if figures.peak_gpu_mem_mib is not None:
        lines.append(("gpu memory", f"peak {format_figure(figures.peak_gpu_mem_mib, 'MiB')} allocated"))
    util = gpu_util_text(figures)
    if util is not None:
        lines.append(("gpu util", f"{util} mean over ranks while the run was timed"))
    source = {"counter": "NVML energy counter", "power": "integrated NVML power"}.get(
        figures.energy_source or ""
    )
    if figures.energy_to_accuracy_j is not None:
        text = f"{format_figure(figures.energy_to_accuracy_kwh, 'kWh')} to accuracy"
        text += f" ({figures.energy_to_accuracy_j / 1000:.3g} kJ, all GPUs, {source})"
        if figures.energy_cost is not None:
            text += f", {format_figure(figures.energy_cost, '$')} at {figures.price_per_kwh:g}/kWh"
        lines.append(("energy", text))
    elif figures.energy_j is not None:
        lines.append(
            ("energy", f"{figures.energy_j / 1000:.3g} kJ run_start to run_stop (all GPUs, {source})")
        )
    return lines


def rank_figures_text(figures: RankTelemetryFigures) -> str:
    """One rank's hardware figures on one line: ``rss 1.8G/4.0G  gpu mem 12G  util 88%  42.1 kJ``."""
    parts = []
    if figures.peak_rss_mib is not None:
        limit = f"/{format_figure(figures.mem_limit_mib, 'MiB')}" if figures.mem_limit_mib is not None else ""
        parts.append(f"rss {format_figure(figures.peak_rss_mib, 'MiB')}{limit}")
    if figures.peak_gpu_mem_mib is not None:
        parts.append(f"gpu mem {format_figure(figures.peak_gpu_mem_mib, 'MiB')}")
    util = gpu_util_text(figures)
    if util is not None:
        parts.append(f"util {util}")
    if figures.energy_j is not None:
        parts.append(f"{figures.energy_j / 1000:.3g} kJ")
    return "  ".join(parts)


SUSPECTS_SHOWN = 5  # per run in human output; JSON has them all


def startup_text(figures: StartupFigures) -> str:
    """``24.3 s before training; spawn 6.76 s; rank 0 (slowest of 2): imports 5.82 s, ...``."""
    total = figures.rank_s + (figures.launcher_s or 0.0)
    parts = [f"{_took(total)} before training"]
    if figures.launcher_s is not None:
        parts.append(f"{figures.launcher} {_took(figures.launcher_s)}")
    phases = ", ".join(f"{name.replace('_', ' ')} {_took(s)}" for name, s in figures.phases.items())
    who = f"rank {figures.slowest_rank}" + (f" (slowest of {figures.ranks})" if figures.ranks > 1 else "")
    return "; ".join(parts) + f"; {who}: {phases}"


def _took(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1000:.3g} ms"


def checks_lines(result: RunResult) -> list[tuple[str, str]]:
    """``(label, text)`` lines of a run's checks: each figure against its machine's reference
    row, and each figure that fails a physical bound with the reason."""
    lines = [("startup", startup_text(result.startup))] if result.startup is not None else []
    lines += [("reference", comparison.text()) for comparison in compare(result)]
    lines += [("suspect", f"! {s.figure}: {s.reason}") for s in result.suspects[:SUSPECTS_SHOWN]]
    if len(result.suspects) > SUSPECTS_SHOWN:
        more = len(result.suspects) - SUSPECTS_SHOWN
        lines.append(("suspect", f"! and {more} more (mlbench results -o json)"))
    note = nvls_note(result)
    if note is not None and result.allreduce:
        lines.append(("busbw", note))
    return lines


def reference_text(result: RunResult) -> str:
    """``0.98x H200`` (the step time, else 0a's latency, against the reference row), ``!`` when
    outside its tolerance; ``-`` without a row."""
    comparisons = compare(result)
    if not comparisons:
        return "-"
    first = comparisons[0]
    return f"{first.ratio:.2f}x {first.row.machine}" + ("" if first.within else " !")


def check_notes(results: Sequence[RunResult]) -> list[str]:
    """One line per suspect figure and per figure outside its reference's tolerance."""
    notes = []
    for r in results:
        notes += [f"! {r.name}: {s.figure}: {s.reason}" for s in r.suspects[:SUSPECTS_SHOWN]]
        if len(r.suspects) > SUSPECTS_SHOWN:
            notes.append(f"! {r.name}: and {len(r.suspects) - SUSPECTS_SHOWN} more suspect figures")
    notes += [f"! {r.name}: {c.text()}" for r in results for c in compare(r) if not c.within]
    return notes


def results_rows(results: Sequence[RunResult], *, sweep_tables: bool = False) -> list[dict[str, str]]:
    """One row per run, with speedup/efficiency against the 1-worker runs among ``results``
    (else the figures stored with the run when it finished); ``sweep_tables``: see ``outcome_text``."""
    scores = {(s.spec_name, s.framework, s.backend, s.workers): s for s in score_configs(results)}
    several_frameworks = len({r.framework for r in results}) > 1
    rows = []
    for result in results:
        score = scores.get(config_key(result))
        speedup, efficiency = result.speedup, result.efficiency
        if score is not None and score.speedup is not None:
            speedup, efficiency = score.speedup, score.efficiency
        row = {"RUN": result.name or "-"}
        if several_frameworks:  # PyTorch vs TensorFlow of one spec: say which is which
            row["FRAMEWORK"] = result.framework
        split, hw = result.time_split, result.telemetry or TelemetryFigures()
        rows.append(
            row
            | {
                "STATE": str(result.state),
                "RESULT": outcome_text(result, sweep_tables=sweep_tables),
                "REACHED": {True: "yes", False: "no", None: "-"}[result.reached],
                "TIME TO ACC": format_figure(result.time_to_accuracy_s, "s"),
                "VAL TIME": format_figure(result.validation_time_s, "s"),
                "EPOCHS": format_figure(result.epochs_to_goal),
                "STEPS": format_figure(result.steps_to_goal),
                "COMM": format_figure(split.communication_fraction if split else None, "%"),
                "SPEEDUP": format_figure(speedup, "x"),
                "EFFICIENCY": format_figure(efficiency, "%"),
                "COST": format_figure(result.cost_to_target, "$"),
                "PEAK MEM": format_figure(hw.peak_rss_mib, "MiB"),
                "GPU MEM": format_figure(hw.peak_gpu_mem_mib, "MiB"),
                "GPU UTIL": gpu_util_text(hw) or "-",
                "ENERGY TO ACC": format_figure(hw.energy_to_accuracy_kwh, "kWh"),
                "ENERGY COST": format_figure(hw.energy_cost, "$"),
                "WALL": format_figure(result.wall_time_s, "s"),
                "VS REF": reference_text(result),
            }
        )
    return rows


GPU_COLUMNS = ("GPU MEM", "GPU UTIL", "ENERGY TO ACC", "ENERGY COST")
"""Figures only GPU runs have: a table of CPU runs leaves them out rather than print four empty columns."""
OPTIONAL_COLUMNS = (*GPU_COLUMNS, "VS REF")
"""Columns left out when empty in every row (no run has a reference row on its machine)."""


def without_empty(rows: list[dict[str, str]], columns: Sequence[str]) -> list[dict[str, str]]:
    """``rows`` without those of ``columns`` that are "-" in every row."""
    empty = {c for c in columns if all(row.get(c, "-") == "-" for row in rows)}
    return [{k: v for k, v in row.items() if k not in empty} for row in rows] if empty else rows


def render_results(results: Sequence[RunResult], *, sweep_tables: bool = False) -> str:
    """The results table, plus the repeat scores when a configuration ran more than once;
    ``sweep_tables`` says the all-reduce tables of 0a runs follow it. The GPU columns show when
    some run has GPU figures."""
    text = render_table(without_empty(results_rows(results, sweep_tables=sweep_tables), OPTIONAL_COLUMNS))
    notes = check_notes(results)
    if notes:
        text += "\n" + "\n".join(notes)
    repeated = [s for s in score_configs(results) if s.runs > 1]
    if repeated:
        score_rows = [
            {
                "CONFIG": f"{s.spec_name} {s.framework} {s.backend} {s.workers}w",
                "RUNS": str(s.runs),
                "REACHED": str(s.reached),
                "OLYMPIC MEAN": format_figure(s.time_to_accuracy_s, "s"),
                "STDEV": format_figure(s.stdev_s, "s"),
                "MIN": format_figure(s.min_s, "s"),
                "MAX": format_figure(s.max_s, "s"),
                "SPEEDUP": format_figure(s.speedup, "x"),
            }
            for s in repeated
        ]
        text += "\n\n" + render_table(score_rows)
    return text
