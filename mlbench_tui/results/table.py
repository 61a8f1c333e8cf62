"""The results table ``mlbench apply`` and ``mlbench results`` print: one row per run (a failed
run with its reason's first line), then the scores of configurations with a goal that ran more
than once: the olympic mean over the runs that count, its spread, and the runs left out and why.
Task 0a's repeats are aggregated per message size instead (``allreduce.sweep_tables``)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from mlbench_tui.formatting import (
    DEFAULT_CURRENCY,
    MISSING,
    fit_table,
    format_duration,
    format_energy,
    format_figure,
    format_latency,
    format_mebibytes,
    format_money,
    format_number,
    format_step,
    render_table,
    significant,
    without_empty,
)
from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import NetworkPlan
from mlbench_tui.results.bounds import nvls_note
from mlbench_tui.results.flops import flops_text
from mlbench_tui.results.model import (
    AllreduceFigures,
    NetworkFigures,
    RankTelemetryFigures,
    RunResult,
    StartupFigures,
    TelemetryFigures,
)
from mlbench_tui.results.network_sweep import network_lines, network_table
from mlbench_tui.results.preflight import preflight_short, preflight_text
from mlbench_tui.results.provenance import provenance_text
from mlbench_tui.results.reference import verdicts
from mlbench_tui.results.reference_figures import FIGURE_NAMES
from mlbench_tui.results.scoring import (
    SPREAD_LIMIT,
    ConfigKey,
    ConfigScore,
    config_key,
    is_sweep,
    reached_time,
    score_configs,
)
from mlbench_tui.results.step_time import step_time_text
from mlbench_tui.results.telemetry import gpu_util_text
from mlbench_tui.spec.network import format_bandwidth
from mlbench_tui.spec.network import format_latency as format_latency_spec

REASON_WIDTH = 100
"""A failed run's reason in a table row is its first line, cut to this many characters."""


def value_text(value: float | None) -> str:
    """A metric value as people quote it: four significant figures, trailing zeros dropped
    (``94.92``, ``71``, ``129.3``), never scientific notation."""
    if value is None:
        return "-"
    text = f"{value:.4g}"
    return significant(value, 4) if "e" in text else text


def reason_text(result: RunResult, width: int = REASON_WIDTH) -> str | None:
    """The first line of why a run did not succeed, cut at a word to ``width`` characters."""
    reason = result.reason
    if reason is None or len(reason) <= width:
        return reason
    return reason[: width - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."


def allreduce_text(dtype: str, figures: AllreduceFigures) -> str:
    """One dtype of a 0a result in a few words: the peak bandwidth, flagged when no link could
    carry it, or the latency with the reason there is no bandwidth."""
    peak = figures.peak_busbw_gbps
    if peak is None:
        if not figures.latency_only:
            return f"{dtype} -"
        return f"{dtype} latency {format_latency(figures.min_size_latency_p50_s)} (1 rank: no bandwidth)"
    text = f"{dtype} peak {format_number(peak)} GB/s"
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
    metric = goal.metric.removeprefix("val_global_")
    return f"{metric} {value_text(result.best_value)} (goal {op} {goal.target})"


def result_text(result: RunResult, *, sweep_tables: bool = False) -> str:
    """``outcome_text``, followed for a run that failed by the first line of its reason."""
    text = outcome_text(result, sweep_tables=sweep_tables)
    reason = reason_text(result) if result.state is RunState.FAILED else None
    return f"{text}: {reason}" if reason else text


def telemetry_lines(figures: TelemetryFigures, currency: str = DEFAULT_CURRENCY) -> list[tuple[str, str]]:
    """``(label, text)`` lines of a run's hardware figures for ``mlbench status`` and the TUI:
    peak memory (against the pod's limit), GPU utilisation, energy and its cost."""
    worst = max(
        (r for r in figures.ranks if r.peak_rss_mib is not None),
        key=lambda r: r.peak_rss_mib or 0.0,
        default=None,
    )
    lines: list[tuple[str, str]] = []
    if worst is not None:
        text = f"peak {format_mebibytes(worst.peak_rss_mib)} resident (rank {worst.rank}"
        text += f" of {len(figures.ranks)}"
        if worst.mem_limit_mib is not None:
            text += f", limit {format_mebibytes(worst.mem_limit_mib)}"
        lines.append(("memory", text + ")"))
    if figures.peak_gpu_mem_mib is not None:
        lines.append(("gpu memory", f"peak {format_mebibytes(figures.peak_gpu_mem_mib)} allocated"))
    util = gpu_util_text(figures)
    if util is not None:
        timed = " mean over ranks while the run was timed" if figures.mean_gpu_util is not None else ""
        lines.append(("gpu util", util + timed))
    source = {"counter": "NVML energy counter", "power": "integrated NVML power"}.get(
        figures.energy_source or ""
    )
    if figures.energy_to_accuracy_j is not None:
        text = f"{format_energy(figures.energy_to_accuracy_j)} to accuracy (all GPUs, {source})"
        if figures.energy_cost is not None and figures.price_per_kwh is not None:
            price = format_money(figures.price_per_kwh, currency)
            text += f", {format_money(figures.energy_cost, currency)} at {price}/kWh"
        lines.append(("energy", text))
    elif figures.energy_j is not None:
        text = f"{format_energy(figures.energy_j)} run_start to run_stop (all GPUs, {source})"
        lines.append(("energy", text))
    return lines


def rank_figures_text(figures: RankTelemetryFigures) -> str:
    """One rank's hardware figures on one line:
    ``rss 1.76 GiB/4.00 GiB  gpu mem 12.0 GiB  util 88%  42.1 kJ``."""
    parts = []
    if figures.peak_rss_mib is not None:
        limit = f"/{format_mebibytes(figures.mem_limit_mib)}" if figures.mem_limit_mib is not None else ""
        parts.append(f"rss {format_mebibytes(figures.peak_rss_mib)}{limit}")
    if figures.peak_gpu_mem_mib is not None:
        parts.append(f"gpu mem {format_mebibytes(figures.peak_gpu_mem_mib)}")
    util = gpu_util_text(figures)
    if util is not None:
        parts.append(f"util {util}")
    if figures.energy_j is not None:
        parts.append(format_energy(figures.energy_j))
    return "  ".join(parts)


SUSPECTS_SHOWN = 5  # per run in human output; JSON has them all


def launcher_text(figures: StartupFigures | None) -> str:
    """The launcher's part of a start, split where the target reported it: ``queued 3.00 s,
    spawned 1.30 s``, else ``spawn 0.412 s``; ``-`` when unknown."""
    if figures is None or figures.launcher_s is None:
        return MISSING
    if figures.launcher_parts:
        return ", ".join(f"{name} {format_duration(s)}" for name, s in figures.launcher_parts.items())
    return f"{figures.launcher} {format_duration(figures.launcher_s)}"


def startup_text(figures: StartupFigures) -> str:
    """``24.3 s before training; spawn 6.76 s; rank 0 (slowest of 2): imports 5.82 s, ...``; the
    launcher's part with its split where the target reported it (``queued 3.00 s, spawned ...``)."""
    parts = [f"{format_duration(figures.total_s)} before training"]
    if figures.launcher_s is not None:
        launcher = f"{figures.launcher} {format_duration(figures.launcher_s)}"
        if figures.launcher_parts:
            launcher += f" ({launcher_text(figures)})"
        parts.append(launcher)
    phases = ", ".join(f"{name.replace('_', ' ')} {format_duration(s)}" for name, s in figures.phases.items())
    who = f"rank {figures.slowest_rank}" + (f" (slowest of {figures.ranks})" if figures.ranks > 1 else "")
    return "; ".join(parts) + f"; {who}: {phases}"


def step_line(result: RunResult) -> str | None:
    """The run's step time as every view shows it (``results.step_time``), or why it has none."""
    if result.step_time is not None:
        return step_time_text(result.step_time)
    return result.step_time_note


def checks_lines(result: RunResult) -> list[tuple[str, str]]:
    """``(label, text)`` lines of a run's checks: each headline figure's verdict against its
    machine's expected value, each figure that fails a physical bound with the reason, and which
    rules recomputed a result stored by older ones."""
    lines = [("startup", startup_text(result.startup))] if result.startup is not None else []
    if result.computed_by is not None and result.computed_by.recomputed_from is not None:
        lines.append(("computed", provenance_text(result.computed_by)))
    if result.preflight is not None:
        lines.append(("preflight", preflight_text(result.preflight)))
    lines += [("verdict", verdict.text()) for verdict in verdicts(result)]
    if result.flops is not None:
        lines.append(("flops", flops_text(result.flops)))
    lines += [("suspect", f"! {s.figure}: {s.reason}") for s in result.suspects[:SUSPECTS_SHOWN]]
    if len(result.suspects) > SUSPECTS_SHOWN:
        more = len(result.suspects) - SUSPECTS_SHOWN
        lines.append(("suspect", f"! and {more} more (mlbench results -o json)"))
    note = nvls_note(result)
    if note is not None and result.allreduce:
        lines.append(("busbw", note))
    return lines


def reference_text(result: RunResult) -> str:
    """The run's verdicts in a cell: ``normal``, ``step slower +12%``, ``latency faster -30%``
    (every figure outside its band, else the first judged figure's verdict); ``-`` without a row
    for any figure (``status`` says "no reference for this hardware" in full)."""
    found = verdicts(result)
    if not found:
        return "-"
    flagged = [v for v in found if v.flagged]
    if flagged:
        return ", ".join(f"{FIGURE_NAMES[v.figure]} {v.short()}" for v in flagged)
    judged = [v for v in found if v.row is not None]
    return judged[0].short() if judged else "-"  # no row for this hardware: status says so in full


def check_notes(results: Sequence[RunResult]) -> list[str]:
    """One line per suspect figure and per figure outside its band around the expected value."""
    notes = []
    for r in results:
        notes += [f"! {r.name}: {s.figure}: {s.reason}" for s in r.suspects[:SUSPECTS_SHOWN]]
        if len(r.suspects) > SUSPECTS_SHOWN:
            notes.append(f"! {r.name}: and {len(r.suspects) - SUSPECTS_SHOWN} more suspect figures")
    notes += [
        f"! {r.name}: {v.text().replace(': ! ', ': ')}" for r in results for v in verdicts(r) if v.flagged
    ]
    return notes


def results_rows(results: Sequence[RunResult], *, sweep_tables: bool = False) -> list[dict[str, str]]:
    """One row per run, with speedup/efficiency against the 1-worker runs of its configuration
    among ``results`` (else, for a run of several workers, the figures stored with it when it
    finished); ``sweep_tables``: see ``outcome_text``."""
    scores = {config_key_of(s): s for s in score_configs(results)}
    several_frameworks = len({r.framework for r in results}) > 1
    rows = []
    for result in results:
        score = scores.get(config_key(result))
        speedup, efficiency = (result.speedup, result.efficiency) if result.workers > 1 else (None, None)
        if score is not None and score.speedup is not None:
            speedup, efficiency = score.speedup, score.efficiency
        if reached_time(result) is None:  # a run left out of its configuration's score
            speedup, efficiency = None, None
        row = {"RUN": result.name or "-"}
        if several_frameworks:  # PyTorch vs TensorFlow of one spec: say which is which
            row["FRAMEWORK"] = result.framework
        split, hw, start = result.time_split, result.telemetry or TelemetryFigures(), result.startup
        currency = result.currency or DEFAULT_CURRENCY
        rows.append(
            row
            | {
                "STATE": str(result.state),
                "IMPL": "-" if is_sweep(result) else result.variant,  # 0a sweeps its dtypes
                "NETWORK": result.network_label or MISSING,
                "LINK": link_text(result),
                "RESULT": result_text(result, sweep_tables=sweep_tables),
                "REACHED": {True: "yes", False: "no", None: "-"}[result.reached],
                "TIME TO ACC": format_duration(result.time_to_accuracy_s),
                "VAL TIME": format_duration(result.validation_time_s),
                "CAPTURE": format_duration(result.graph_capture_s),
                "EPOCHS": value_text(result.epochs_to_goal),
                "STEPS": format_figure(result.steps_to_goal),
                "STEP TIME": format_step(result.step_time_s),
                "COMM": format_figure(split.communication_fraction if split else None, "%"),
                "SPEEDUP": format_figure(speedup, "x"),
                "EFFICIENCY": format_figure(efficiency, "%"),
                "COST": format_money(result.cost_to_target, currency),
                "PEAK MEM": format_mebibytes(hw.peak_rss_mib),
                "GPU MEM": format_mebibytes(hw.peak_gpu_mem_mib),
                "GPU UTIL": gpu_util_text(hw) or "-",
                "ENERGY TO ACC": format_energy(hw.energy_to_accuracy_j),
                "ENERGY COST": format_money(hw.energy_cost, currency),
                "START": format_duration(start.total_s if start else None),
                "LAUNCHER": launcher_text(start),
                "WALL": format_duration(result.wall_time_s),
                "VS REF": reference_text(result),
                "PREFLIGHT": preflight_short(result.preflight),
            }
        )
    return rows


def link_text(result: RunResult) -> str:
    """What a run's links carried against their rate: ``9.4/10 Mbit/s (94%)``, the peak for a
    run that never filled them, ``!`` when the shaping did not hold; ``-`` without a network."""
    return MISSING if result.network is None else link_text_of(result.network)


def link_text_of(figures: NetworkFigures, *, flag_held: bool = True) -> str:
    """``link_text`` of a run's network figures (``flag_held``: with ``!`` when the shaping did
    not hold, for a table where no other line says so)."""
    flag = " !" if figures.held is False and flag_held else ""
    if figures.mean_mbit_s is None:
        return (figures.note or MISSING) + flag
    configured = figures.bandwidth_bps
    mean = significant(figures.mean_mbit_s, 3)
    if configured is None:
        return f"{mean} Mbit/s (unlimited){flag}"
    text = f"{mean}/{significant(configured / 1e6, 3)} Mbit/s ({figures.mean_fraction or 0:.0%})"
    if figures.peak_mbit_s is not None:
        text += f", peak {significant(figures.peak_mbit_s, 3)}"
    return text + flag


def network_detail_lines(
    network: NetworkPlan | None, figures: NetworkFigures | None
) -> list[tuple[str, str]]:
    """``(label, text)`` lines of a run's links for ``status`` and the TUI's overview: what was
    configured and how it was made, then what the links carried and whether the shaping held."""
    if network is None and figures is None:
        return []
    bandwidth = figures.bandwidth_bps if figures is not None else network.bandwidth_bps if network else None
    latency = figures.latency_s if figures is not None else network.latency_s if network else 0.0
    text = f"{format_bandwidth(bandwidth)} per rank and direction"
    if latency > 0:
        text += f", +{format_latency_spec(latency)} one way"
    if figures is not None:
        how = {
            "emulated": "emulated nodes (network namespaces, tc)",
            "cni": "bandwidth CNI annotations",
            "tc": "tc in an init container",
            "cni+tc": "bandwidth CNI annotations and tc in an init container",
        }
        if figures.method:
            nodes = f"{figures.nodes} " if figures.nodes and figures.method == "emulated" else ""
            text += f"; {nodes}{how.get(figures.method, figures.method)}"
        if figures.nccl_socket:
            text += "; NCCL on its socket transport between nodes"
    lines = [("network", text)]
    if figures is None:
        return lines
    carried = link_text_of(figures, flag_held=False)
    if figures.sent_bytes is not None:
        carried += f"; {format_number(figures.sent_bytes / 1e6)} MB sent"
    if figures.setup_s is not None:
        carried += f"; set up in {format_duration(figures.setup_s)}"
    if figures.teardown_s is not None:
        carried += f", removed in {format_duration(figures.teardown_s)}"
    lines.append(("links", carried))
    if figures.held is False:
        lines.append(("links", "! not shaped for the whole run: " + "; ".join(figures.problems)))
    if figures.busbw_fraction is not None:
        lines.append(("busbw", f"best bus bandwidth {figures.busbw_fraction:.0%} of one link's rate"))
    return lines


def config_key_of(score: ConfigScore) -> ConfigKey:
    """``config_key`` of the runs ``score`` was computed from."""
    return score.spec_name, score.framework, score.backend, score.workers, score.variant, score.network


ALWAYS_SHOWN = ("RUN", "STATE", "RESULT")
# What a narrow terminal keeps, most important first (``fit_table`` leaves out from the end).
PRIORITY = (
    "RUN", "STATE", "RESULT", "TIME TO ACC", "IMPL", "SPEEDUP", "EFFICIENCY", "VS REF", "FRAMEWORK",
    "COMM", "CAPTURE", "GPU UTIL", "ENERGY TO ACC", "COST", "STEPS", "EPOCHS", "VAL TIME", "PEAK MEM",
    "GPU MEM", "WALL", "ENERGY COST", "START", "LAUNCHER", "REACHED",
)  # fmt: skip


def cv_text(cv: float | None) -> str:
    """A coefficient of variation as a percentage, flagged ``!`` above ``SPREAD_LIMIT``."""
    if cv is None:
        return "-"
    return f"{100 * cv:.1f}%" + (" !" if cv > SPREAD_LIMIT else "")


def score_rows(scores: Sequence[ConfigScore]) -> list[dict[str, str]]:
    """One row per configuration: the runs it rests on, its olympic mean and spread."""
    return [
        {
            "CONFIG": s.label,
            "RUNS": f"{s.reached} of {s.runs}",
            "OLYMPIC MEAN": format_duration(s.time_to_accuracy_s),
            "MIN": format_duration(s.min_s),
            "MAX": format_duration(s.max_s),
            "CV": cv_text(s.cv),
            "SPEEDUP": format_figure(s.speedup, "x"),
            "EFFICIENCY": format_figure(s.efficiency, "%"),
            "VS": "-" if s.baseline_runs is None else f"1w x{s.baseline_runs}",  # what the speedup rests on
        }
        for s in scores
    ]


def score_notes(scores: Sequence[ConfigScore]) -> list[str]:
    """What a reader needs to trust the scores: what they rest on, the runs left out and why,
    and the configurations too noisy to compare."""
    lines = [
        "scores: olympic mean (fastest and slowest dropped from 3 runs up) of the succeeded runs that "
        "reached the goal; speedup against the 1-worker score of the same spec, backend and implementation"
    ]
    for score in scores:
        if score.left_out:
            named = ", ".join(f"{lo.name} ({lo.reason})" for lo in score.left_out)
            lines.append(f"left out of {score.label}: {named}")
    wide = [s.label for s in scores if s.too_wide]
    if wide:
        lines.append(f"! spread too wide to compare (CV above {100 * SPREAD_LIMIT:.0f}%): " + ", ".join(wide))
    return lines


def render_results(
    results: Sequence[RunResult], *, sweep_tables: bool = False, width: int | None = None
) -> str:
    """The results table, plus the repeat scores when a configuration ran more than once or some
    of its runs are left out of its score; ``sweep_tables`` says the all-reduce tables of 0a runs
    follow it. Columns empty in every row are left out; within ``width`` characters, outcomes
    fold and the least important columns are left out too, named under the table."""
    rows = without_empty(results_rows(results, sweep_tables=sweep_tables), ALWAYS_SHOWN)
    fitted = fit_table(rows, width, priority=PRIORITY, keep=ALWAYS_SHOWN, fold="RESULT")
    text = fitted.text
    notes = check_notes(results)
    if fitted.left_out:
        hidden = ", ".join(fitted.left_out)
        notes.insert(0, f"(left out to fit {width} columns: {hidden}; --wide shows every column)")
    if width is not None:  # a narrow terminal: the notes wrap too
        notes = [line for note in notes for line in textwrap.wrap(note, width, subsequent_indent="  ")]
    if notes:
        text += "\n" + "\n".join(notes)
    shown = [s for s in score_configs(results) if s.runs > 1 or (s.left_out and s.speedup is not None)]
    if shown:
        text += "\n\n" + render_table(without_empty(score_rows(shown), ("CONFIG", "RUNS", "OLYMPIC MEAN")))
        text += "\n" + "\n".join(score_notes(shown))
    lines = network_lines(results)
    if lines:
        text += "\n\n" + network_table(lines)
    return text
