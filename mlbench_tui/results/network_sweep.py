"""Runs swept over the network, read against bandwidth: one line per optimizer, backend and world
size (and latency), one point per bandwidth, with its time to accuracy, speedup and communication
share (pure).

``network_lines`` is what ``mlbench results``, the report's network figure and the TUI's compare
screen all show, so they agree: repeats of a point are scored as everywhere (``score_configs``:
olympic mean, the runs that count), the speedup is against the 1-worker score (one rank has no
link, so its run is every bandwidth's baseline), and unlimited links sort after every rate.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from mlbench_tui.formatting import MISSING, format_duration, format_figure, render_table
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import config_key, is_sweep, score_configs
from mlbench_tui.spec.network import format_bandwidth, format_latency


@dataclass(frozen=True)
class NetworkPoint:
    """One bandwidth of one line: its runs' scores."""

    bandwidth_bps: int | None  # None: unlimited
    runs: int
    reached: int
    time_to_accuracy_s: float | None
    speedup: float | None
    communication_fraction: float | None  # mean over the runs that reported their split
    link_mbit_s: float | None  # the runs' mean achieved link rate
    peak_mbit_s: float | None = None  # the fastest second any of its runs' links carried

    @property
    def bandwidth_label(self) -> str:
        return format_bandwidth(self.bandwidth_bps)


@dataclass(frozen=True)
class NetworkLine:
    """Runs of one optimizer, backend, world size and latency over bandwidths."""

    spec_name: str
    optimizer: str | None
    backend: str
    workers: int
    latency_s: float
    nccl_socket: bool
    points: tuple[NetworkPoint, ...]

    def label(self, *, with_spec: bool = False, with_latency: bool = False) -> str:
        words = [
            self.optimizer or "",
            self.backend + (" sockets" if self.nccl_socket else ""),
            f"{self.workers}w",
        ]
        if with_latency:
            words.append(f"+{format_latency(self.latency_s)}")
        if with_spec:
            words.insert(0, self.spec_name)
        return " ".join(w for w in words if w)


def _bandwidth_order(bps: int | None) -> float:
    return float("inf") if bps is None else float(bps)


def network_lines(results: Sequence[RunResult]) -> list[NetworkLine]:
    """The lines of runs with a network and a goal, when they span more than one bandwidth or
    latency (empty otherwise: nothing to read against the network)."""
    swept = [r for r in results if r.network is not None and not is_sweep(r)]
    points = {(r.network.bandwidth_bps, r.network.latency_s) for r in swept if r.network is not None}
    if len(points) < 2:
        return []
    scores = {
        (s.spec_name, s.framework, s.backend, s.workers, s.variant, s.network): s
        for s in score_configs(results)
    }
    groups: dict[tuple[str, str | None, str, int, float, bool], dict[int | None, list[RunResult]]] = {}
    for r in swept:
        assert r.network is not None
        key = (r.spec_name, r.optimizer, r.backend, r.workers, r.network.latency_s, r.network.nccl_socket)
        groups.setdefault(key, {}).setdefault(r.network.bandwidth_bps, []).append(r)
    lines = []
    for (spec_name, optimizer, backend, workers, latency, socket), by_bandwidth in sorted(
        groups.items(), key=lambda item: (item[0][0], item[0][1] or "", item[0][2], item[0][3], item[0][4])
    ):
        line_points = []
        for bandwidth, members in sorted(by_bandwidth.items(), key=lambda item: _bandwidth_order(item[0])):
            score = scores.get(config_key(members[0]))
            fractions = [m.time_split.communication_fraction for m in members if m.time_split is not None]
            rates = [
                m.network.mean_mbit_s for m in members if m.network and m.network.mean_mbit_s is not None
            ]
            peaks = [
                m.network.peak_mbit_s for m in members if m.network and m.network.peak_mbit_s is not None
            ]
            line_points.append(
                NetworkPoint(
                    bandwidth_bps=bandwidth,
                    runs=len(members),
                    reached=score.reached if score is not None else 0,
                    time_to_accuracy_s=score.time_to_accuracy_s if score is not None else None,
                    speedup=score.speedup if score is not None else None,
                    communication_fraction=statistics.fmean(fractions) if fractions else None,
                    link_mbit_s=statistics.fmean(rates) if rates else None,
                    peak_mbit_s=max(peaks) if peaks else None,
                )
            )
        lines.append(NetworkLine(spec_name, optimizer, backend, workers, latency, socket, tuple(line_points)))
    return lines


def labels(lines: Sequence[NetworkLine]) -> list[str]:
    """Each line's label: the spec's name only where two lines would read the same without it."""
    latencies = len({line.latency_s for line in lines}) > 1
    bare = [line.label(with_latency=latencies) for line in lines]
    return [
        line.label(with_spec=bare.count(text) > 1, with_latency=latencies)
        for line, text in zip(lines, bare, strict=True)
    ]


def network_table(lines: Sequence[NetworkLine]) -> str:
    """Time to accuracy, speedup and communication share per line and bandwidth (``mlbench results``)."""
    rows = []
    for line, label in zip(lines, labels(lines), strict=True):
        for point in line.points:
            rows.append(
                {
                    "LINE": label,
                    "BANDWIDTH": point.bandwidth_label,
                    "RUNS": f"{point.reached} of {point.runs}",
                    "TIME TO ACC": format_duration(point.time_to_accuracy_s),
                    "SPEEDUP": format_figure(point.speedup, "x"),
                    "COMM": format_figure(point.communication_fraction, "%"),
                    "LINK": MISSING if point.link_mbit_s is None else f"{point.link_mbit_s:.3g} Mbit/s",
                }
            )
    return "by bandwidth (speedup against 1 worker, which has no link):\n" + render_table(rows)
