"""The report's network figure: time to accuracy, speedup and communication share against
bandwidth, one line per optimizer, backend and world size, and the links' achieved rates."""

from __future__ import annotations

from support.results import GOAL

from mlbench_tui.lifecycle import RunState
from mlbench_tui.report.build import build_figures
from mlbench_tui.report.draw import render
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.network import network_figure
from mlbench_tui.results.model import NetworkFigures, RunResult, TimeSplit

MBIT = 1_000_000


def _record(
    workers: int, bandwidth: int | None, tta: float, optimizer: str, comm: float, held: bool = True
) -> RunRecord:
    network = None
    if workers > 1:
        mean = None if bandwidth is None else 0.9 * bandwidth / 1e6
        peak = None if bandwidth is None else 0.95 * bandwidth / 1e6
        network = NetworkFigures(
            bandwidth_bps=bandwidth, mean_mbit_s=mean, peak_mbit_s=peak, held=held, method="emulated"
        )
    result = RunResult(
        name=f"n-{optimizer}-{workers}w-{bandwidth}",
        spec_name=f"net-{optimizer}",
        task="1a",
        backend="gloo",
        workers=workers,
        state=RunState.SUCCEEDED,
        goal=GOAL,
        reached=True,
        time_to_accuracy_s=tta,
        optimizer=optimizer,
        network=network,
        time_split=TimeSplit(communication_fraction=comm, compute=1.0, communication=1.0),
    )
    return RunRecord(result, "", {})


RECORDS = [
    _record(1, None, 40.0, "centralized_sgd", 0.0),
    _record(2, 10 * MBIT, 90.0, "centralized_sgd", 0.8),
    _record(2, 100 * MBIT, 30.0, "centralized_sgd", 0.3),
    _record(2, None, 24.0, "centralized_sgd", 0.1),
    _record(1, None, 41.0, "power_sgd", 0.0),
    _record(2, 10 * MBIT, 28.0, "power_sgd", 0.2, held=False),
    _record(2, 100 * MBIT, 25.0, "power_sgd", 0.05),
]


def test_lines_per_optimizer_against_bandwidth() -> None:
    figure = network_figure(RECORDS, {})
    assert figure is not None and figure.key == "network"
    tta = figure.panel("Time to accuracy")
    assert [(s.label, s.x, s.y) for s in tta.series] == [
        ("centralized_sgd gloo 2w", (10.0, 100.0, 1000.0), (90.0, 30.0, 24.0)),
        ("power_sgd gloo 2w", (10.0, 100.0), (28.0, 25.0)),
    ]
    assert tta.x_log and tta.x_ticks == ((10.0, "10Mbit"), (100.0, "100Mbit"), (1000.0, "unlimited"))
    speedup = figure.panel("Speedup")
    assert speedup.series[1].y == (41.0 / 28.0, 41.0 / 25.0)
    comm = figure.panel("Communication share")
    assert comm.series[0].y == (80.0, 30.0, 10.0)
    assert [s.colour for s in tta.series] == ["#0072B2", "#D55E00"]  # by optimizer
    link = figure.panel("Link rate")
    assert [(s.label, s.x, s.y) for s in link.series] == [
        ("configured rate", (10.0, 100.0), (10.0, 100.0)),
        ("centralized_sgd gloo 2w", (10.0, 100.0), (9.5, 95.0)),
        ("power_sgd gloo 2w", (10.0, 100.0), (9.5, 95.0)),
    ]
    assert [(m.x, m.label) for m in link.marks] == [(10.0, "not shaped")]
    assert any("links not shaped for the whole run" in note for note in figure.notes)


def test_the_report_draws_it_and_leaves_it_out_without_a_sweep() -> None:
    keys = [f.key for f in build_figures(RECORDS)]
    assert "network" in keys
    figure = network_figure(RECORDS, {})
    assert figure is not None
    assert render(figure)[:8] == b"\x89PNG\r\n\x1a\n"
    assert network_figure(RECORDS[:2], {}) is None  # one bandwidth: nothing to read against it
