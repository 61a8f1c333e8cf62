"""A run's links in its result: achieved against configured, shaping that did not hold, 0a's bus
bandwidth bounded by the link, and runs compared only with runs on the same links."""

from __future__ import annotations

from mlbench_worker import sysmetrics as sm
from support.results import GOAL, plan, series

from mlbench_tui.lifecycle import NetworkCheck, RunState
from mlbench_tui.plan import NetworkPlan
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import AllreduceFigures, NetworkFigures, RunResult, TimeSplit
from mlbench_tui.results.network import network_figures, network_suspects
from mlbench_tui.results.network_sweep import network_lines, network_table
from mlbench_tui.results.scoring import score_configs
from mlbench_tui.results.summary import summarize_run
from mlbench_tui.results.table import link_text, render_results
from mlbench_tui.results.time_to_accuracy import MetricPoint

MBIT = 1_000_000
EVENTS = [
    EventRecord("run_start", {}, rank=0, t=100.0),
    EventRecord("run_stop", {"reason": "goal reached", "status": "ok"}, rank=0, t=110.0),
]


def _links(rate_mbit: float, *, ranks: int = 2, jump: float = 0.0) -> list[MetricPoint]:
    """Each rank's link counters, read each second from t=100 to 110 at ``rate_mbit`` both ways;
    ``jump`` more Mbit in rank 1's last second."""
    points = []
    for rank in range(ranks):
        for second in range(11):
            sent = rate_mbit * 1e6 / 8 * second + (jump * 1e6 / 8 if rank == 1 and second == 10 else 0)
            points.append(MetricPoint(sm.LINK_SENT_BYTES, sent, rank=rank, t=100.0 + second))
            points.append(MetricPoint(sm.LINK_RECV_BYTES, sent, rank=rank, t=100.0 + second))
    return points


def _plan(bandwidth: int | None = 100 * MBIT, **extra: object):
    return plan(network=NetworkPlan(bandwidth_bps=bandwidth), **extra)


def test_achieved_rate_against_the_configured_one() -> None:
    check = NetworkCheck(method="emulated", nodes=2, held=True, setup_s=0.05, teardown_s=0.07)
    result = summarize_run(
        _plan(), RunState.SUCCEEDED, _links(90.0) + series([60, 75]), EVENTS, network=check
    )
    figures = result.network
    assert figures is not None
    assert (figures.method, figures.nodes, figures.held) == ("emulated", 2, True)
    assert figures.mean_mbit_s is not None and abs(figures.mean_mbit_s - 90.0) < 0.01
    assert figures.peak_mbit_s is not None and abs(figures.peak_mbit_s - 90.0) < 0.01
    assert figures.mean_fraction is not None and abs(figures.mean_fraction - 0.9) < 1e-4
    assert figures.sent_bytes == 2 * 90 * MBIT * 10 // 8
    assert result.suspects == []
    assert link_text(result) == "90.0/100 Mbit/s (90%), peak 90.0"
    assert result.network_label == "100Mbit"


def test_a_link_faster_than_its_rate_was_not_shaped_then() -> None:
    result = summarize_run(_plan(), RunState.SUCCEEDED, _links(90.0, jump=60.0), EVENTS)
    figures = result.network
    assert figures is not None and figures.held is False
    assert figures.problems == [
        "node 1 sent 150.0 Mbit/s, node 1 received 150.0 Mbit/s: above the configured 100Mbit, so the "
        "shaping was not in place then"
    ]
    assert [s.figure for s in result.suspects] == ["network"]
    assert link_text(result).endswith(" !")


def test_the_bucket_burst_is_not_mistaken_for_a_broken_shaping() -> None:
    # at 1 Mbit/s the 64 KiB bucket lets half a megabit more through in one second
    result = summarize_run(_plan(MBIT), RunState.SUCCEEDED, _links(0.0, jump=1.4), EVENTS)
    assert result.network is not None and result.network.held is None


def test_a_check_that_failed_is_a_suspect() -> None:
    check = NetworkCheck(
        method="emulated", nodes=2, held=False, problems=("node 1's sending qdisc is pfifo, not tbf",)
    )
    result = summarize_run(_plan(), RunState.SUCCEEDED, _links(50.0), EVENTS, network=check)
    assert [(s.figure, s.reason) for s in result.suspects] == [
        ("network", "node 1's sending qdisc is pfifo, not tbf")
    ]


def test_allreduce_bus_bandwidth_is_bounded_by_the_link() -> None:
    result = RunResult(
        name="ar",
        workers=2,
        allreduce={"fp32": AllreduceFigures(sizes=3, peak_busbw_gbps=0.0113)},
        network=NetworkFigures(bandwidth_bps=100 * MBIT),
    )
    ar_plan = _plan(task="0a", task_name="allreduce", goal=None, hyperparameters={})
    figures = network_figures(ar_plan, result, [], [])
    assert figures is not None and figures.busbw_fraction is not None
    assert abs(figures.busbw_fraction - 0.904) < 1e-9
    impossible = result.model_copy(
        update={"allreduce": {"fp32": AllreduceFigures(sizes=3, peak_busbw_gbps=0.05)}}
    )
    impossible.network = network_figures(ar_plan, impossible, [], [])
    assert [s.figure for s in network_suspects(impossible)] == ["bus bandwidth (link)"]


def test_telemetry_off_says_why_there_is_no_rate() -> None:
    result = summarize_run(_plan(telemetry_interval_s=None), RunState.SUCCEEDED, series([75]), EVENTS)
    assert (
        result.network is not None and result.network.note == "link counters not recorded: telemetry is off"
    )
    assert link_text(result) == "link counters not recorded: telemetry is off"


def test_nccl_on_emulated_links_is_its_own_comparison_axis() -> None:
    result = summarize_run(_plan(backend="nccl"), RunState.SUCCEEDED, series([75]), EVENTS)
    assert result.network is not None and result.network.nccl_socket
    assert result.network_label == "100Mbit sockets"


def _result(workers: int, bandwidth: int | None, tta: float, optimizer: str = "centralized_sgd") -> RunResult:
    network = None if workers == 1 else NetworkFigures(bandwidth_bps=bandwidth, mean_mbit_s=None)
    suffix = "" if network is None else f"-{bandwidth}"
    return RunResult(
        name=f"n-gloo-{workers}w{suffix}-{optimizer}",
        spec_name=f"n-{optimizer}",
        task="1a",
        backend="gloo",
        workers=workers,
        state=RunState.SUCCEEDED,
        goal=GOAL,
        reached=True,
        time_to_accuracy_s=tta,
        optimizer=optimizer,
        network=network,
        time_split=TimeSplit(communication_fraction=0.5),
    )


def test_runs_on_other_links_are_never_repeats_and_speedup_is_against_one_rank() -> None:
    results = [
        _result(1, None, 40.0),
        _result(2, 10 * MBIT, 80.0),
        _result(2, 1000 * MBIT, 25.0),
        _result(4, 10 * MBIT, 160.0),
    ]
    scores = {(s.workers, s.network): s for s in score_configs(results)}
    assert set(scores) == {(1, ""), (2, "10Mbit"), (2, "1Gbit"), (4, "10Mbit")}
    assert scores[(2, "10Mbit")].speedup == 0.5
    assert scores[(2, "1Gbit")].speedup == 1.6
    assert scores[(4, "10Mbit")].speedup == 0.25


def test_lines_against_bandwidth_agree_with_the_scores() -> None:
    results = [
        _result(1, None, 40.0),
        _result(2, 10 * MBIT, 80.0),
        _result(2, 1000 * MBIT, 25.0),
        _result(2, None, 22.0),
        _result(1, None, 40.0, "power_sgd"),
        _result(2, 10 * MBIT, 30.0, "power_sgd"),
        _result(2, 1000 * MBIT, 24.0, "power_sgd"),
    ]
    lines = network_lines(results)
    assert [(line.optimizer, [p.bandwidth_label for p in line.points]) for line in lines] == [
        ("centralized_sgd", ["10Mbit", "1Gbit", "unlimited"]),
        ("power_sgd", ["10Mbit", "1Gbit"]),
    ]
    assert [p.speedup for p in lines[1].points] == [40 / 30, 40 / 24]
    table = network_table(lines)
    rows = [line.split() for line in table.splitlines()]
    assert ["power_sgd", "gloo", "2w", "10Mbit", "1", "of", "1", "30.0", "s", "1.33x", "50%", "-"] in rows
    assert "by bandwidth" in render_results(results)


def test_a_single_network_point_draws_no_lines() -> None:
    assert network_lines([_result(1, None, 40.0), _result(2, 10 * MBIT, 80.0)]) == []
