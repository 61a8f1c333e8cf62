"""The Ranks tab's telemetry columns and the idle-GPU rule: pure logic, no Textual."""

from __future__ import annotations

from mlbench_worker import sysmetrics as sm

from mlbench_tui.results.model import RankTelemetryFigures
from mlbench_tui.results.telemetry import gpu_util_text
from mlbench_tui.tui.goal import find_underused
from mlbench_tui.tui.rank_telemetry import COLUMNS, SERIES, RankTelemetry


def test_cells_show_the_latest_values_against_their_limits() -> None:
    telemetry = RankTelemetry()
    assert telemetry.cells() == ("—",) * len(COLUMNS)
    samples = [
        (sm.CPU_PERCENT, 97.4),
        (sm.RSS_MIB, 700.0),
        (sm.RSS_MIB, 1843.2),  # the latest counts
        (sm.GPU_UTIL, 88.6),
        (sm.GPU_MEM_USED_MIB, 12400.0),
        (sm.GPU_MEM_TOTAL_MIB, 81559.0),
        (sm.GPU_POWER_W, 312.4),
    ]
    for name, value in samples:
        assert telemetry.update(name, value)
    assert telemetry.cells() == ("97%", "1.8G", "89%", "12G/80G", "312 W")
    telemetry.update(sm.MEM_LIMIT_MIB, 4096.0)  # a pod's limit: memory reads against it
    assert telemetry.cells()[1] == "1.8G/4.0G"
    assert not telemetry.update(sm.GPU_TEMP_C, 60.0) and not telemetry.update("train_loss", 1.0)


def test_the_series_the_table_reads_are_documented() -> None:
    assert set(SERIES) <= set(sm.BY_NAME)
    telemetry = RankTelemetry()
    assert all(telemetry.update(name, 1.0) for name in SERIES)


def test_idle_gpus_are_far_below_the_median() -> None:
    assert find_underused({0: 90.0, 1: 88.0, 2: 91.0, 3: 40.0}) == {3}
    assert find_underused({0: 90.0, 1: 80.0}) == set()  # within the factor of each other
    assert find_underused({0: 90.0, 1: 0.0, 2: 85.0}) == {1}
    assert find_underused({0: 0.0, 1: 0.0}) == set()  # all idle: no rank stands out
    assert find_underused({0: 50.0}) == set()


def test_a_finished_runs_gpu_column_is_the_results_figure_not_the_last_sample() -> None:
    telemetry = RankTelemetry()
    telemetry.update(sm.GPU_UTIL, 51.0)  # the last sample, taken after training
    assert telemetry.cells()[2] == "51%"
    timed = RankTelemetryFigures(rank=0, gpu_util_readings=1, gpu_util_note="n/a: 1 reading in 1.3 s")
    telemetry.finished(timed)
    assert telemetry.cells()[2] == gpu_util_text(timed) == "n/a: 1 reading in 1.3 s"
    measured = RankTelemetryFigures(rank=0, mean_gpu_util=87.6, gpu_util_readings=400)
    telemetry.finished(measured)
    telemetry.update(sm.GPU_UTIL, 3.0)  # a late sample does not replace the run's figure
    assert telemetry.cells()[2] == "88%" == gpu_util_text(measured)
