"""A run's ranks as ``mlbench status RUN`` and ``mlbench results RUN`` show them.

Every rank's figures come in one request (the server's latest point per rank of step time and
the tracker totals). A small run lists each rank on a line; a large one is summarised: how many
ranks are in which state, the spread of step time, communication share and busy time across
ranks (median, p90, the extremes), the worst ranks first and the ranks not in the run's main
state. ``--ranks all`` or a rank set (``--ranks 0-7,512``) lists those ranks instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

from mlbench_tui.errors import MlbenchError
from mlbench_tui.formatting import format_step
from mlbench_tui.ranksets import EXAMPLE, RankSet, parse_ranks
from mlbench_tui.results.model import StepTimeFigures
from mlbench_tui.results.ranks import (
    RANK_METRICS,
    STRAGGLER_FACTOR,
    RankFigures,
    RanksSummary,
    settle_ranks,
    summarize_ranks,
)

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RankInfo, RunDetail

LIST_UP_TO = 16  # a run of at most this many ranks lists every rank
WORST = 5  # worst ranks shown in a summary
ODD_STATES = 10  # ranks outside the run's main state shown in a summary

RankChoice = Literal["all"] | RankSet | None
"""Which ranks to list: every one, a set, or None (every one for a small run, else a summary)."""


def parse_rank_choice(text: str) -> Literal["all"] | RankSet:
    """``all`` or a rank set (``RankSetError`` for anything else)."""
    return "all" if text.strip().lower() == "all" else parse_ranks(text)


def rank_figures(
    client: MlbenchClient, run_id: str, step_time: StepTimeFigures | None = None
) -> dict[int, RankFigures]:
    """Every rank's latest step time and tracker totals, in one request; with a finished run's
    ``step_time``, each rank's median step and busy time over its timed steps instead."""
    figures: dict[int, RankFigures] = {}
    for series in client.latest(run_id, RANK_METRICS).series:
        for rank, step, value in zip(series.rank, series.step, series.value, strict=True):
            figures.setdefault(rank, RankFigures(rank)).take(series.name, value, step)
    settle_ranks(figures, step_time)
    return figures


def ranks_lines(
    client: MlbenchClient,
    run: RunDetail,
    choice: RankChoice = None,
    hardware: Mapping[int, str] | None = None,
) -> list[str]:
    """``ranks_section`` of ``run`` with its figures read from the server; without them (a server
    too old to answer, or failing) the ranks' states alone, and why."""
    try:
        figures = rank_figures(client, run.id, run.result.step_time if run.result else None)
    except MlbenchError as exc:
        return [*ranks_section(run, {}, choice, hardware), f"(no per-rank figures: {exc.message})"]
    return ranks_section(run, figures, choice, hardware)


def _ms(seconds: float) -> str:
    return format_step(seconds)


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def figures_text(figures: RankFigures | None, straggler: bool = False) -> str:
    """``step 82.1 ms (median)  comm 21.0%  busy 64.8 ms`` (what is known of it; a running
    rank's step is its latest report window, and says so), flagged as a straggler."""
    if figures is None:
        return ""
    parts = []
    if figures.step_time is not None:
        label = "median" if figures.final else "latest window"
        parts.append(f"step {_ms(figures.step_time)} ({label})")
    if figures.comm_share is not None:
        parts.append(f"comm {_pct(figures.comm_share)}")
    if figures.busy is not None and (figures.comm_share is not None or figures.busy_s is not None):
        parts.append(f"busy {_ms(figures.busy)}")
    if straggler:
        parts.append("straggler")
    return "  ".join(parts)


def rank_line(
    rank: int,
    info: RankInfo | None,
    figures: RankFigures | None,
    straggler: bool,
    width: int = 3,
    hardware: str = "",
) -> str:
    """One rank: number, state, where it runs (host:pid), its figures, its hardware figures
    (``results.table.rank_figures_text``) and its message."""
    state = str(info.state) if info is not None else "-"
    where = "-"
    if info is not None:
        where = f"{info.host or '?'}:{info.pid}" if info.pid else info.host or "-"
    line = f"  {rank:>{width}}  {state:<10} {where}"
    shown = figures_text(figures, straggler)
    if shown:
        line += f"  {shown}"
    if hardware:
        line += f"  {hardware}"
    if info is not None and info.message:
        line += f"  {info.message}"
    return line


def _listed(
    ranks: Iterable[int],
    run: RunDetail,
    figures: Mapping[int, RankFigures],
    summary: RanksSummary,
    hardware: Mapping[int, str],
) -> list[str]:
    infos = {r.rank: r for r in run.ranks}
    width = max(3, len(str(max(run.workers - 1, 0))))
    return [
        rank_line(r, infos.get(r), figures.get(r), r in summary.stragglers, width, hardware.get(r, ""))
        for r in ranks
    ]


def _spread_lines(summary: RanksSummary) -> list[str]:
    lines = []
    if summary.step_time is not None:
        s = summary.step_time
        lines.append(f"step time p50 {_ms(s.p50)}  p90 {_ms(s.p90)}  max {_ms(s.max)} (rank {s.max_rank})")
    if summary.comm_share is not None:
        s = summary.comm_share
        lines.append(f"comm      p50 {_pct(s.p50)}  p10 {_pct(s.p10)}  min {_pct(s.min)} (rank {s.min_rank})")
    if summary.busy is not None and summary.comm_share is not None:
        s = summary.busy
        lines.append(f"busy      p50 {_ms(s.p50)}  p90 {_ms(s.p90)}  max {_ms(s.max)} (rank {s.max_rank})")
    if summary.stragglers:
        shown = ", ".join(str(r) for r in sorted(summary.stragglers))
        lines.append(f"stragglers (busy time over {STRAGGLER_FACTOR:g}x the other ranks' median): {shown}")
    return lines


def state_counts(run: RunDetail) -> str:
    """``1024: 1020 running, 3 failed, 1 pending`` (most common state first)."""
    counts = Counter(str(r.state) for r in run.ranks)
    unknown = run.workers - len(run.ranks)
    if unknown > 0:
        counts["unknown"] += unknown
    return f"{run.workers}: " + ", ".join(f"{n} {state}" for state, n in counts.most_common())


def ranks_section(
    run: RunDetail,
    figures: Mapping[int, RankFigures],
    choice: RankChoice = None,
    hardware: Mapping[int, str] | None = None,
) -> list[str]:
    """The lines about a run's ranks: every rank (or the chosen ones) on its own line, or for a
    run of more than ``LIST_UP_TO`` ranks the summary of their states and figures. ``hardware``:
    each listed rank's hardware figures as text (rank -> text)."""
    hardware = hardware or {}
    summary = summarize_ranks(figures.values(), run.workers, WORST)
    lines = [f"ranks:    {state_counts(run)}"]
    everyone = range(max(run.workers, max(figures, default=-1) + 1))
    if choice == "all" or (choice is None and run.workers <= LIST_UP_TO):
        return lines + _listed(everyone, run, figures, summary, hardware)
    lines += [f"          {line}" for line in _spread_lines(summary)]
    if isinstance(choice, RankSet):
        chosen = [r for r in everyone if r in choice]
        lines.append(f"ranks {choice}:" if chosen else f"ranks {choice}: none of this run's ranks")
        return lines + _listed(chosen, run, figures, summary, hardware)
    if summary.worst:
        lines.append("worst ranks (the most time per step outside communication: the others wait for them):")
        lines += _listed((f.rank for f in summary.worst), run, figures, summary, hardware)
    counts = Counter(str(r.state) for r in run.ranks)
    if len(counts) > 1:
        main = counts.most_common(1)[0][0]
        odd = [r.rank for r in run.ranks if str(r.state) != main]
        lines.append(f"ranks not {main}:")
        lines += _listed(odd[:ODD_STATES], run, figures, summary, hardware)
        if len(odd) > ODD_STATES:
            lines.append(f"  ... and {len(odd) - ODD_STATES} more")
    lines.append(f"(every rank: --ranks all; some: --ranks {EXAMPLE})")
    return lines


def ranks_json(
    run: RunDetail, figures: Mapping[int, RankFigures], choice: RankChoice = None
) -> dict[str, Any]:
    """The summary as JSON, with the figures of every rank (or the chosen ones) when asked."""
    summary = summarize_ranks(figures.values(), run.workers, WORST)
    document: dict[str, Any] = {
        "workers": run.workers,
        "states": dict(Counter(str(r.state) for r in run.ranks)),
        "reported": summary.reported,
        "step_time": asdict(summary.step_time) if summary.step_time else None,
        "comm_share": asdict(summary.comm_share) if summary.comm_share else None,
        "busy": asdict(summary.busy) if summary.busy else None,
        "worst": [f.rank for f in summary.worst],
        "stragglers": sorted(summary.stragglers),
    }
    if choice is not None:
        chosen = [f for r, f in sorted(figures.items()) if choice == "all" or r in choice]
        document["ranks"] = [{**asdict(f), "comm_share": f.comm_share, "busy": f.busy} for f in chosen]
    return document
