"""The report's figure data (not pixels): which series, points, marks and labels each figure holds,
built from hand-written run records, so every number can be checked by hand."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import GoalPlan
from mlbench_tui.report.anchors import ANCHORS
from mlbench_tui.report.build import build_figures
from mlbench_tui.report.figure import BACKEND_COLOURS, GOAL_COLOUR, Figure
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.training import stragglers
from mlbench_tui.results.model import RunResult, TimeSplit
from mlbench_tui.results.time_to_accuracy import MetricPoint

GOAL = GoalPlan(kind="light", metric="val_global_Prec@1", target=70.0, direction="max")


def trained(
    backend: str,
    workers: int,
    repeat: int,
    tta: float | None,
    *,
    state: RunState = RunState.SUCCEEDED,
    metrics: Iterable[MetricPoint] = (),
    message: str | None = None,
    wall: float | None = None,
) -> RunRecord:
    result = RunResult(
        run_id=f"r-{backend}{workers}{repeat}",
        name=f"spec-{backend}-{workers}w-r{repeat}",
        spec_name="spec",
        spec_hash="abc123",
        task="1a",
        task_name="resnet20-cifar10",
        backend=backend,
        workers=workers,
        repeat=repeat,
        state=state,
        message=message,
        goal=GOAL,
        reached=tta is not None if state is RunState.SUCCEEDED else None,
        time_to_accuracy_s=tta,
        best_value=75.0 if tta is not None else 55.5,
        wall_time_s=wall if wall is not None else (tta or 0.0) + 5.0,
        time_split=TimeSplit(compute=8.0 * workers, communication=2.0 * workers, preprocess=1.0, metrics=0.5),
    )
    points = {}
    for point in metrics:
        points.setdefault(point.name, []).append(point)
    return RunRecord(result, "spec: text", {k: tuple(v) for k, v in points.items()})


def sweep(
    backend: str, workers: int, repeat: int, busbw: dict[int, float], latency: dict[int, float]
) -> RunRecord:
    result = RunResult(
        run_id=f"r-ar-{backend}{workers}{repeat}",
        name=f"ar-{backend}-{workers}w-r{repeat}",
        spec_name="ar",
        task="0a",
        backend=backend,
        workers=workers,
        repeat=repeat,
        state=RunState.SUCCEEDED,
    )
    points = {
        "allreduce_fp32_busbw": tuple(MetricPoint("allreduce_fp32_busbw", v, 0, s) for s, v in busbw.items()),
        "allreduce_fp32_latency_p50": tuple(
            MetricPoint("allreduce_fp32_latency_p50", v, 0, s) for s, v in latency.items()
        ),
        "allreduce_fp32_latency_p99": tuple(
            MetricPoint("allreduce_fp32_latency_p99", 2 * v, 0, s) for s, v in latency.items()
        ),
    }
    return RunRecord(result, "", points)


def by_key(figures: list[Figure]) -> dict[str, Figure]:
    return {f.key: f for f in figures}


def test_scaling_points_are_olympic_means_with_min_max_and_speedup_against_one_worker() -> None:
    records = [
        trained("gloo", 1, 0, 100.0),
        trained("gloo", 1, 1, 120.0),
        trained("gloo", 1, 2, 110.0),
        trained("gloo", 2, 0, 60.0),
        trained("gloo", 2, 1, 50.0),
        trained("mpi", 1, 0, 90.0),
        trained("mpi", 2, 0, 45.0),
    ]
    figure = by_key(build_figures(records))["scaling-spec"]
    tta = figure.panel("Time to accuracy")
    gloo, mpi = tta.series
    assert (gloo.label, gloo.x, gloo.y) == ("gloo", (1.0, 2.0), (110.0, 55.0))  # 3 repeats: the middle one
    assert (gloo.low, gloo.high) == ((100.0, 50.0), (120.0, 60.0))
    assert (mpi.label, mpi.x, mpi.y) == ("mpi", (1.0, 2.0), (90.0, 45.0))
    speedup = figure.panel("Speedup")
    assert [(s.label, s.y) for s in speedup.series] == [("gloo", (1.0, 2.0)), ("mpi", (1.0, 2.0))]
    assert [r.label for r in speedup.refs] == ["ideal (linear)"]
    efficiency = figure.panel("Parallel efficiency")
    assert [s.y for s in efficiency.series] == [(1.0, 1.0), (1.0, 1.0)]
    assert [r.y for r in efficiency.refs] == [1.0]
    split = figure.panel("Where the time went")
    assert split.categories == ("gloo 1w", "gloo 2w", "mpi 1w", "mpi 2w")
    assert [s.label for s in split.stacks] == ["compute", "communication", "data loading", "other"]
    assert split.stacks[0].values == (8.0, 16.0, 8.0, 16.0)
    assert split.stacks[1].values == (2.0, 4.0, 2.0, 4.0)
    # no time_train recorded: "other" is the metrics phase
    assert split.stacks[3].values == (0.5, 0.5, 0.5, 0.5)


def test_failed_and_missed_runs_are_marked_and_named_never_dropped() -> None:
    records = [
        trained("gloo", 1, 0, 100.0),
        trained("gloo", 2, 0, None, wall=300.0),  # ran to the end, never reached 70
        trained("gloo", 4, 0, None, state=RunState.FAILED, message="rank 3 exited with code 1", wall=12.0),
    ]
    figures = by_key(build_figures(records))
    scaling = figures["scaling-spec"]
    marks = scaling.panel("Time to accuracy").marks
    assert [(m.x, m.y, m.label) for m in marks] == [
        (2.0, 300.0, "not reached (300 s)"),
        (4.0, 12.0, "failed (12 s)"),
    ]
    assert "spec-gloo-2w-r0: never reached the goal (best 55.5, goal >= 70)" in scaling.notes
    assert "spec-gloo-4w-r0: failed: rank 3 exited with code 1" in scaling.notes
    # their own figures say so in the title and the notes
    assert figures["run-spec-gloo-4w-r0"].title == "spec-gloo-4w-r0 (gloo, 4 workers, failed)"
    assert figures["run-spec-gloo-2w-r0"].title == "spec-gloo-2w-r0 (gloo, 2 workers, succeeded, goal missed)"
    assert figures["run-spec-gloo-4w-r0"].notes[0] == "spec-gloo-4w-r0: failed: rank 3 exited with code 1"


def test_published_baselines_are_drawn_with_source_hardware_and_their_own_goal() -> None:
    figure = by_key(build_figures([trained("gloo", 1, 0, 100.0)]))["scaling-spec"]
    refs = figure.panel("Time to accuracy").refs
    assert [(r.label, r.y) for r in refs] == [
        ("MLBench 1x T4, PyTorch 1.5: 407 s", 407.0),
        ("MLBench 1x T4, TensorFlow: 1,191 s", 1191.0),
        ("MLBench 3 vCPUs, PyTorch 1.5: 5,895 s", 5895.0),
    ]
    assert (
        "MLBench's published baseline, GCP n1-standard-4, 1x T4, PyTorch 1.5, 1 worker(s): 407 s to Prec@1 80"
        in (figure.notes)
    )
    # the runs' goal (70) is not the baseline's (80): the report says the times are not like for like
    assert any("not like for like" in note for note in figure.notes)
    # 100 s next to 5,895 s spans decades: a log axis
    assert figure.panel("Time to accuracy").y_log
    assert {a.task for a in ANCHORS} == {"1a"}


def test_without_a_one_worker_run_speedup_says_why_it_is_empty() -> None:
    figure = by_key(build_figures([trained("gloo", 2, 0, 60.0), trained("gloo", 4, 0, 40.0)]))["scaling-spec"]
    speedup = figure.panel("Speedup")
    assert speedup.empty
    assert speedup.note == "speedup needs a 1-worker run that reached the goal"


def test_allreduce_curves_per_backend_and_world_size_with_repeats_aggregated() -> None:
    records = [
        sweep("gloo", 2, 0, {1: 0.001, 1000: 0.5}, {1: 100e-6, 1000: 200e-6}),
        sweep("gloo", 2, 1, {1: 0.003, 1000: 0.7}, {1: 300e-6, 1000: 400e-6}),
        sweep("mpi", 2, 0, {1: 0.002, 1000: 1.5}, {1: 5e-6, 1000: 50e-6}),
        sweep("mpi", 4, 0, {1: 0.001, 1000: 1.2}, {1: 8e-6, 1000: 90e-6}),
    ]
    figures = by_key(build_figures(records))
    fp32 = figures["allreduce-fp32"]
    assert [p.title for p in fp32.panels] == ["Latency p50", "Latency p99", "Bus bandwidth"]
    assert all(p.x_log and p.y_log for p in fp32.panels)
    bw = fp32.panel("Bus bandwidth")
    assert [(s.label, s.style) for s in bw.series] == [("gloo 2w", "-"), ("mpi 2w", "-"), ("mpi 4w", "--")]
    gloo = bw.series[0]
    assert gloo.x == (4.0, 4000.0)  # bytes: elements x 4 for fp32
    assert gloo.y == pytest.approx((0.002, 0.6))  # mean of two repeats
    assert (gloo.low, gloo.high) == ((0.001, 0.5), (0.003, 0.7))
    assert bw.series[1].low is None  # one repeat: no band
    p50 = fp32.panel("Latency p50").series[0]
    assert p50.y == pytest.approx((200.0, 300.0))  # microseconds
    assert fp32.panel("Latency p99").series[0].y == pytest.approx((400.0, 600.0))
    best = figures["allreduce-best-busbw"].panel("Best bus bandwidth")
    assert [(s.label, s.x, s.y) for s in best.series] == [
        ("gloo fp32", (2.0,), (0.6,)),
        ("mpi fp32", (2.0, 4.0), (1.5, 1.2)),
    ]


def test_a_backend_keeps_its_colour_in_every_figure() -> None:
    records = [
        trained("mpi", 1, 0, 100.0),
        trained("gloo", 1, 0, 100.0),
        sweep("gloo", 2, 0, {1: 0.1}, {1: 1e-4}),
        sweep("mpi", 2, 0, {1: 0.1}, {1: 1e-4}),
    ]
    colours: dict[str, set[str]] = {}
    for figure in build_figures(records):
        for panel in figure.panels:
            for series in panel.series:
                if series.label.split()[0] in ("gloo", "mpi"):
                    colours.setdefault(series.label.split()[0], set()).add(series.colour)
    assert colours == {"gloo": {BACKEND_COLOURS["gloo"]}, "mpi": {BACKEND_COLOURS["mpi"]}}


def test_run_figure_goal_metric_against_training_time_with_goal_line_and_stragglers() -> None:
    metrics = [
        *(MetricPoint("val_global_Prec@1", v, 0, s) for s, v in ((10, 40.0), (20, 65.0), (30, 72.0))),
        *(MetricPoint("time_train", t, 0, s) for s, t in ((10, 11.0), (20, 22.0), (30, 33.0))),
        *(MetricPoint("train_loss", 2.0 / s, 0, s) for s in (10, 20, 30)),
        *(MetricPoint("step_time", 0.1, r, s) for r in (0, 1, 2) for s in (10, 20, 30)),
        *(MetricPoint("step_time", 0.15, 3, s) for s in (10, 20, 30)),
    ]
    figure = by_key(build_figures([trained("gloo", 4, 0, 33.0, metrics=metrics)]))["run-spec-gloo-4w-r0"]
    goal = figure.panel("Validation Prec@1")
    assert goal.x_label == "training time (s)"
    assert (goal.series[0].x, goal.series[0].y) == ((11.0, 22.0, 33.0), (40.0, 65.0, 72.0))
    assert [(r.label, r.y, r.colour) for r in goal.refs] == [("goal >= 70", 70.0, GOAL_COLOUR)]
    assert [(m.x, m.y, m.label) for m in goal.marks] == [(33.0, 72.0, "reached in 33.0 s")]
    assert figure.panel("Loss").series[0].y == pytest.approx((0.2, 0.1, 2 / 30))
    steps = figure.panel("Step time per rank")
    assert [s.label for s in steps.series] == ["rank 0", "rank 1", "rank 2", "rank 3 (straggler, +50%)"]
    assert steps.series[3].y == pytest.approx((150.0, 150.0, 150.0))  # milliseconds
    assert figure.notes == ("spec-gloo-4w-r0: rank 3 held the others up, busy time +50%",)
    assert [p.title for p in figure.panels] == ["Validation Prec@1", "Loss", "Step time per rank"]


def test_many_ranks_draw_their_median_and_band_plus_the_stragglers_only() -> None:
    metrics = [MetricPoint("step_time", 0.2 if r == 7 else 0.1, r, s) for r in range(16) for s in (1, 2)]
    figure = build_figures([trained("gloo", 16, 0, 10.0, metrics=metrics)])[-1]
    steps = figure.panel("Step time per rank")
    assert [s.label for s in steps.series] == ["median of 16 ranks", "rank 7 (straggler, +100%)"]
    assert steps.series[0].high == (200.0, 200.0)


def test_gpu_telemetry_panels_appear_only_when_recorded() -> None:
    plain = build_figures([trained("nccl", 1, 0, 10.0)])[-1]
    assert [p.title for p in plain.panels] == ["Validation Prec@1", "Loss", "Step time per rank"]
    metrics = [
        *(MetricPoint("sys/gpu0_util", 90.0, r, s) for r in (0, 1) for s in (1, 2)),
        *(MetricPoint("sys/gpu0_mem_used", 1e9, 0, s) for s in (1, 2)),
        MetricPoint("sys/cpu_percent", 50.0, 0, 1),
    ]
    figure = build_figures([trained("nccl", 2, 0, 10.0, metrics=metrics)])[-1]
    assert [p.title for p in figure.panels][3:] == ["GPU utilisation", "GPU memory"]
    assert [s.label for s in figure.panel("GPU utilisation").series] == [
        "rank 0 gpu0_util",
        "rank 1 gpu0_util",
    ]


def _ranked(step_s: float, comm_s: dict[int, float]) -> RunRecord:
    """A run whose ranks all took ``step_s`` a step (synchronous training) and spent ``comm_s``
    of their 10 s of tracked time communicating."""
    metrics = []
    for rank, comm in comm_s.items():
        metrics += [
            MetricPoint("step_time", step_s, rank, 10),
            MetricPoint("time_compute", 10.0 - comm, rank, 10),
            MetricPoint("time_communication", comm, rank, 10),
        ]
    return trained("gloo", len(comm_s), 0, 10.0, metrics=metrics)


def test_straggler_rule_names_the_rank_the_others_waited_for() -> None:
    """Every rank's step takes as long as the slowest one's; the straggler is the rank that
    waited least in the all-reduce, so its busy time stands out against the fastest ranks'."""
    two = stragglers(_ranked(0.1, {0: 4.3, 1: 0.8}))  # busy 57 ms and 92 ms a step
    assert list(two) == [1] and two[1] == pytest.approx(0.92 / 0.57 - 1)
    assert stragglers(_ranked(0.1, {0: 4.0, 1: 3.8, 2: 4.1, 3: 0.5})).keys() == {3}
    assert stragglers(_ranked(0.1, {0: 4.0, 1: 3.9})) == {}  # even: nobody held up
    assert stragglers(_ranked(0.1, {0: 1.0})) == {}  # one rank: nobody to hold up


def test_a_failed_sweep_is_named_even_when_no_curve_was_recorded() -> None:
    record = sweep("gloo", 2, 0, {}, {})
    failed = RunRecord(
        record.result.model_copy(update={"state": RunState.FAILED, "message": "rank 1 lost"}), "", {}
    )
    (figure,) = build_figures([failed])
    assert figure.key == "allreduce"
    assert figure.panels[0].empty and figure.panels[0].note == "no all-reduce curve was recorded"
    assert figure.notes == ("ar-gloo-2w-r0: failed: rank 1 lost",)


def test_a_runs_figure_notes_its_gpu_utilisation_as_status_and_results_show_it() -> None:
    from mlbench_tui.report.training import run_figure
    from mlbench_tui.results.model import TelemetryFigures
    from mlbench_tui.results.table import results_rows, telemetry_lines

    for telemetry, shown in (
        (
            TelemetryFigures(gpu_util_readings=26, gpu_util_note="n/a: 26 readings in 1.3 s"),
            "n/a: 26 readings in 1.3 s",
        ),
        (TelemetryFigures(mean_gpu_util=51.4, gpu_util_readings=300), "51%"),
    ):
        result = RunResult(
            name="short-1w",
            task="1a",
            backend="nccl",
            state=RunState.SUCCEEDED,
            goal=GOAL,
            telemetry=telemetry,
        )
        figure = run_figure(RunRecord(result, "", {}), {})
        assert f"short-1w: GPU utilisation {shown} (mean over ranks while the run was timed)" in figure.notes
        assert dict(telemetry_lines(telemetry))["gpu util"].startswith(f"{shown} mean")  # status, the TUI
        assert results_rows([result])[0]["GPU UTIL"] == shown  # mlbench results
