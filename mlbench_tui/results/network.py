"""A run's links against what was configured: the rate its nodes' links achieved, whether the
shaping held, and the bounds a link sets on the run's other figures (pure).

Each rank on an emulated node (or a Kubernetes pod with a network) samples its link's byte
counters (``sys/link_*``, also at run_start and run_stop); the node's link is read through its
lowest rank. The achieved rate is each node's bytes over the timed run (the busier direction),
averaged over nodes; the peak is the fastest sampling interval of any node. A link that carried
more than its rate (beyond the token bucket's burst) was not shaped then; task 0a's bus bandwidth
cannot exceed one link's rate when each node holds one rank, and is shown as a fraction of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

from mlbench_tui.lifecycle import NetworkCheck
from mlbench_tui.plan import RunPlan, link_burst_bytes
from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import NetworkFigures, RunResult, Suspect
from mlbench_tui.results.time_to_accuracy import MetricPoint

LINK_SERIES = (sm.LINK_SENT_BYTES, sm.LINK_RECV_BYTES)
RATE_SLACK = 1.05
"""tbf counts a frame's bytes when it leaves; a sampling interval can end mid-frame: 5% of slack."""
MIN_INTERVAL_S = 0.2
"""Counter pairs closer than this (a boundary read beside a periodic one) give no rate."""


def network_method(plan: RunPlan, check: NetworkCheck | None) -> str | None:
    """How the run's links were made: what the executor said, else what the target does."""
    if plan.network is None:
        return None
    if check is not None:
        return check.method
    if plan.target.kind == "kubernetes":
        return "tc" if plan.network.kubernetes_bandwidth == "tc" else "cni"
    return plan.target.kind


def _window(events: Sequence[EventRecord]) -> tuple[float, float] | None:
    starts = ev.times(events, wire.RunStart)
    stops = ev.times(events, wire.RunStop, wire.GoalReached)
    if not starts or not stops:
        return None
    return min(starts), max(stops)


def _node_counters(
    plan: RunPlan, metrics: Iterable[MetricPoint]
) -> dict[int, dict[str, list[tuple[float, float]]]]:
    """Per node, its lowest reporting rank's counter samples ``(t, bytes)`` by series, in time order."""
    by_rank: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for point in metrics:
        if point.name in LINK_SERIES and point.t is not None:
            by_rank.setdefault(point.rank, {}).setdefault(point.name, []).append((point.t, point.value))
    nodes: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for rank in sorted(by_rank):
        nodes.setdefault(
            plan.node_of(rank), {name: sorted(samples) for name, samples in by_rank[rank].items()}
        )
    return nodes


def _inside(
    samples: list[tuple[float, float]], window: tuple[float, float] | None
) -> list[tuple[float, float]]:
    if window is None:
        return samples
    start, stop = window
    return [(t, value) for t, value in samples if start - 0.5 <= t <= stop + 0.5]


def _busbw_fraction(result: RunResult, plan: RunPlan) -> float | None:
    """Task 0a's best bus bandwidth (any dtype) over one link's rate, where a node holds one rank."""
    network = plan.network
    if network is None or network.bandwidth_bps is None or not result.allreduce:
        return None
    if (plan.ranks_per_node or 1) != 1 or plan.workers < 2:
        return None
    best = max((f.peak_busbw_gbps for f in result.allreduce.values() if f.peak_busbw_gbps), default=None)
    return None if best is None else best * 1e9 * 8 / network.bandwidth_bps


def network_figures(
    plan: RunPlan,
    result: RunResult,
    metrics: Iterable[MetricPoint],
    events: Sequence[EventRecord],
    check: NetworkCheck | None = None,
) -> NetworkFigures | None:
    """The run's network figures (None for a run without ``spec.network``)."""
    network = plan.network
    if network is None:
        return None
    figures = NetworkFigures(
        bandwidth_bps=network.bandwidth_bps,
        latency_s=network.latency_s,
        method=network_method(plan, check),
        nodes=check.nodes if check is not None and check.nodes else plan.emulated_nodes(),
        nccl_socket=plan.backend == "nccl" and plan.target.kind == "local",
        held=check.held if check is not None else None,
        problems=list(check.problems) if check is not None else [],
        setup_s=check.setup_s if check is not None else None,
        teardown_s=check.teardown_s if check is not None else None,
    )
    window = _window(events)
    nodes = _node_counters(plan, metrics)
    means: list[float] = []
    peak: float | None = None
    over: list[str] = []
    total = 0.0
    for node, series in sorted(nodes.items()):
        directions = []
        for name in LINK_SERIES:
            samples = _inside(series.get(name, []), window)
            if len(samples) < 2:
                continue
            (t0, first), (t1, last) = samples[0], samples[-1]
            if name == sm.LINK_SENT_BYTES:
                total += last - first
            if t1 > t0:
                directions.append((last - first) * 8 / (t1 - t0))
            for (ta, a), (tb, b) in itertools.pairwise(samples):
                if tb - ta < MIN_INTERVAL_S or b < a:
                    continue
                rate = (b - a) * 8 / (tb - ta)
                peak = rate if peak is None else max(peak, rate)
                if network.bandwidth_bps is not None:
                    bound = network.bandwidth_bps * RATE_SLACK + link_burst_bytes(
                        network.bandwidth_bps
                    ) * 8 / (tb - ta)
                    if rate > bound:
                        over.append(
                            f"node {node} {'sent' if name == sm.LINK_SENT_BYTES else 'received'} "
                            f"{rate / 1e6:,.1f} Mbit/s"
                        )
        if directions:
            means.append(max(directions))
    if nodes:
        figures.sent_bytes = int(total)
        figures.mean_mbit_s = sum(means) / len(means) / 1e6 if means else None
        figures.peak_mbit_s = peak / 1e6 if peak is not None else None
    elif plan.telemetry_interval_s is None:
        figures.note = "link counters not recorded: telemetry is off"
    else:
        figures.note = "no rank reported its link's counters"
    if over:
        figures.held = False
        figures.problems.append(
            f"{', '.join(over[:3])}{' ...' if len(over) > 3 else ''}: above the configured "
            f"{figures.label}, so the shaping was not in place then"
        )
    figures.busbw_fraction = _busbw_fraction(result, plan)
    return figures


def network_suspects(result: RunResult) -> list[Suspect]:
    """What a run's links make impossible or unmeasured: a link that was not shaped for the whole
    run, and a 0a bus bandwidth above the rate of the link it crossed."""
    figures = result.network
    if figures is None:
        return []
    found = []
    if figures.held is False:
        found.append(
            Suspect(figure="network", reason="; ".join(figures.problems) or "the shaping did not hold")
        )
    if figures.busbw_fraction is not None and figures.busbw_fraction > RATE_SLACK:
        found.append(
            Suspect(
                figure="bus bandwidth (link)",
                reason=f"{figures.busbw_fraction:.0%} of the {figures.label} link each rank sends over: "
                "impossible through that link",
            )
        )
    return found
