"""The report's figure data (not pixels): which series, points, marks and labels each figure holds,
built from hand-written run records, so every number can be checked by hand."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from mlbench_worker import sysmetrics as sm

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import GoalPlan, ImplementationPlan
from mlbench_tui.report.anchors import ANCHORS
from mlbench_tui.report.build import build_figures
from mlbench_tui.report.configs import time_rows
from mlbench_tui.report.figure import BACKEND_COLOURS, GOAL_COLOUR, Figure
from mlbench_tui.report.inputs import RunClock, RunRecord
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
    with_communication = [(s.label, s.y) for s in speedup.series if "without" not in s.label]
    assert with_communication == [("gloo", (1.0, 2.0)), ("mpi", (1.0, 2.0))]
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
    # the task's training figure names them too
    training = figures["training-1a"]
    assert "spec-gloo-4w-r0: failed: rank 3 exited with code 1" in training.notes
    assert "spec-gloo-2w-r0: never reached the goal (best 55.5, goal >= 70)" in training.notes


def test_a_point_says_how_many_repeats_it_rests_on_and_names_the_ones_left_out() -> None:
    records = [
        trained("gloo", 1, 0, 100.0),
        trained("gloo", 1, 1, 110.0),
        trained("gloo", 1, 2, 120.0),
        trained("gloo", 1, 3, None, state=RunState.CANCELLED, wall=5.0),
    ]
    (row,) = time_rows(records)  # one worker count: a row of the table, not a one-point scaling figure
    assert (row.runs, row.left_out) == ("3 of 4", "spec-gloo-1w-r3 (cancelled)")
    assert row.time_to_accuracy == "1 m 50 s (1 m 40 s to 2 m 00 s)"  # olympic mean, min to max
    notes = by_key(build_figures([*records, trained("gloo", 2, 0, 60.0)]))["scaling-spec"].notes
    assert (
        "spec gloo fp32 1w: olympic mean of 3 of 4 runs, speedup against 3 one-worker run(s); left out: "
        "spec-gloo-1w-r3 (cancelled)" in notes
    )


def test_published_baselines_are_drawn_with_source_hardware_and_their_own_goal() -> None:
    figure = by_key(build_figures([trained("gloo", 1, 0, 100.0), trained("gloo", 2, 0, 60.0)]))[
        "scaling-spec"
    ]
    refs = figure.panel("Time to accuracy").refs
    assert [(r.label, r.y) for r in refs] == [
        ("MLBench 1x T4, PyTorch 1.5: 407 s (Prec@1 80)", 407.0),
        ("MLBench 1x T4, TensorFlow: 1,191 s (Prec@1 80)", 1191.0),
        ("MLBench 3 vCPUs, PyTorch 1.5: 5,895 s (Prec@1 80)", 5895.0),
    ]
    # the panel itself says the runs' light goal is not the baselines' full one
    assert figure.panel("Time to accuracy").corner == (
        "runs: Prec@1 >= 70 (light goal); baselines: Prec@1 80, not like for like"
    )
    assert figure.title == "spec: scaling (resnet20-cifar10, goal Prec@1 >= 70 (light goal))"
    (row,) = time_rows([trained("gloo", 1, 0, 100.0)])  # the table says it too
    assert row.goal == "Prec@1 >= 70 (light goal)"
    assert row.baseline == "MLBench 1x T4: 6 m 47 s to Prec@1 80 (another goal: not comparable)"
    assert (
        "MLBench's published baseline, GCP n1-standard-4, 1x T4, PyTorch 1.5, 1 worker(s): 407 s to Prec@1 80"
        in (figure.notes)
    )
    # the runs' goal (70) is not the baseline's (80): the report says the times are not like for like
    assert any("not like for like" in note for note in figure.notes)
    # 100 s next to 5,895 s spans decades: a log axis
    assert figure.panel("Time to accuracy").y_log
    assert {a.task for a in ANCHORS} == {"1a"}


def test_mlbench_published_loss_and_costs_are_drawn_for_their_tasks() -> None:
    loss = [MetricPoint("train_loss", 0.5, 0, s) for s in (1, 2)]
    run = trained("gloo", 1, 0, 10.0, metrics=loss)
    two = trained("gloo", 2, 0, 6.0)

    def as_task(record: RunRecord, task: str, **update: object) -> RunRecord:
        return RunRecord(record.result.model_copy(update={"task": task, **update}), "", record.metrics)

    figures = by_key(build_figures([as_task(run, "2a"), as_task(two, "2a")]))
    refs = figures["training-2a"].panel("Loss").refs
    assert [(r.label, r.y) for r in refs] == [("MLBench's target loss 0.2828", 0.2828)]
    assert "MLBench's published result for task 2a: target loss 0.2828" in figures["scaling-spec"].notes
    gnmt = [as_task(run, "4a"), as_task(two, "4a")]
    cost = by_key(build_figures(gnmt))["scaling-spec"].panel("Cost per run")
    assert [(m.x, m.y, m.label) for m in cost.marks] == [
        (1.0, 10.0, "MLBench 1x T4: $10 per run"),
        (4.0, 18.0, "MLBench 4x T4: $18 per run"),
    ]
    assert cost.y_label == "cost to the goal (USD)"
    assert cost.corner == "no run had a price per hour: MLBench's cost alone"  # the PNG says it too
    priced = [as_task(r, "4a", cost_to_target=12.5, currency="EUR") for r in (run, two)]
    cost = by_key(build_figures(priced))["scaling-spec"].panel("Cost per run")
    assert [(s.x, s.y) for s in cost.series] == [((1.0, 2.0), (12.5, 12.5))]
    assert cost.y_label == "cost to the goal (EUR)" and cost.marks == ()  # MLBench's dollars are not euros
    assert cost.corner == ""


def test_speedup_without_communication_step_phases_and_price_index_across_worker_counts() -> None:
    phases = [MetricPoint("phase_fwd_pass", 0.5 * w, 0, 10) for w in (1,)]
    records = [
        trained("gloo", 1, 0, 100.0, metrics=phases),  # communication 2 s: 98 s without it
        trained("gloo", 2, 0, 60.0),  # communication 4 s: 56 s without it
    ]
    figure = by_key(build_figures(records))["scaling-spec"]
    speedup = figure.panel("Speedup")
    assert [s.label for s in speedup.series] == ["gloo", "gloo without communication"]
    assert speedup.series[1].y == pytest.approx((1.0, 98 / 56))
    price = figure.panel("Price index")
    # worker-seconds 100 -> 120 (1.2x the price) for a speedup of 100/60: 0.72
    assert price.series[0].y == pytest.approx((1.0, 0.72))
    assert price.y_label == "price increase / speedup (worker-seconds to the goal)"
    step = figure.panel("Step time per phase")
    assert step.categories == ("gloo 1w",)  # the 2-worker run reported no phases
    assert [(b.label, b.values) for b in step.stacks] == [("forward", (50.0,))]  # 0.5 s over 10 steps


def test_a_spec_of_one_worker_count_is_a_table_row_not_a_one_point_scaling_figure() -> None:
    records = [trained("gloo", 1, 0, 10.0), trained("gloo", 1, 1, 12.0)]
    assert "scaling-spec" not in by_key(build_figures(records))
    (row,) = time_rows(records)
    assert (row.spec, row.task, row.configuration, row.runs) == (
        "spec",
        "1a resnet20-cifar10",
        "gloo 1w fp32",
        "2 of 2",
    )
    assert row.reached and row.left_out == ""


def test_without_a_one_worker_run_speedup_says_why_it_is_empty() -> None:
    figure = by_key(build_figures([trained("gloo", 2, 0, 60.0), trained("gloo", 4, 0, 40.0)]))["scaling-spec"]
    assert "Speedup" not in [p.title for p in figure.panels]
    assert (
        "Speedup, Parallel efficiency and Price index are left out: "
        "speedup needs a 1-worker run that reached the goal." in figure.notes
    )


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


def test_a_tasks_runs_overlay_one_line_per_run_and_a_multi_rank_run_shows_its_stragglers() -> None:
    metrics = [
        *(MetricPoint("val_global_Prec@1", v, 0, s) for s, v in ((10, 40.0), (20, 65.0), (30, 72.0))),
        *(MetricPoint("time_train", t, 0, s) for s, t in ((10, 11.0), (20, 22.0), (30, 33.0))),
        *(MetricPoint("train_loss", 2.0 / s, 0, s) for s in (10, 20, 30)),
        *(MetricPoint("step_time", 0.1, r, s) for r in (0, 1, 2) for s in (10, 20, 30)),
        *(MetricPoint("step_time", 0.15, 3, s) for s in (10, 20, 30)),
    ]
    other = [
        *(MetricPoint("val_global_Prec@1", v, 0, s) for s, v in ((10, 50.0), (20, 71.0))),
        *(MetricPoint("time_train", t, 0, s) for s, t in ((10, 9.0), (20, 18.0))),
        *(MetricPoint("step_time", 0.08, 0, s) for s in (10, 20)),
    ]
    runs = [trained("gloo", 4, 0, 33.0, metrics=metrics), trained("gloo", 1, 0, 18.0, metrics=other)]
    figures = by_key(build_figures(runs))
    figure = figures["training-1a"]
    assert figure.title == "Task 1a (resnet20-cifar10): training, 2 runs"
    goal = figure.panel("Validation Prec@1")
    assert goal.x_label == "training time (s)"
    # one line per run, named without the prefix they share, in spec/backend/workers order
    assert [(s.label, s.x, s.y) for s in goal.series] == [
        ("1w-r0", (9.0, 18.0), (50.0, 71.0)),
        ("4w-r0", (11.0, 22.0, 33.0), (40.0, 65.0, 72.0)),
    ]
    assert len({s.colour for s in goal.series}) == 2
    assert [(r.label, r.y, r.colour) for r in goal.refs] == [("goal >= 70 (light)", 70.0, GOAL_COLOUR)]
    assert [(m.x, m.y, m.label) for m in goal.marks] == [(18.0, 71.0, "18.0 s"), (33.0, 72.0, "33.0 s")]
    assert figure.panel("Loss").series[0].y == pytest.approx((0.2, 0.1, 2 / 30))
    steps = figure.panel("Step time")
    assert [(s.label, s.y) for s in steps.series] == [
        ("1w-r0", (80.0, 80.0)),
        ("4w-r0", (100.0, 100.0, 100.0)),
    ]
    assert "spec-gloo-4w-r0: rank 3 (+50%) held the others up (its ranks figure below)" in figure.notes
    ranks = figures["ranks-spec-gloo-4w-r0"]  # only the multi-rank run has a ranks figure
    assert "ranks-spec-gloo-1w-r0" not in figures
    per_rank = ranks.panel("Step time per rank")
    assert [s.label for s in per_rank.series] == ["rank 0", "rank 1", "rank 2", "rank 3 (straggler, +50%)"]
    assert per_rank.series[3].y == pytest.approx((150.0, 150.0, 150.0))  # milliseconds
    assert ranks.notes == ("spec-gloo-4w-r0: rank 3 held the others up, busy time +50%",)


def test_many_ranks_draw_their_median_and_band_plus_the_stragglers_only() -> None:
    metrics = [MetricPoint("step_time", 0.2 if r == 7 else 0.1, r, s) for r in range(16) for s in (1, 2)]
    figure = by_key(build_figures([trained("gloo", 16, 0, 10.0, metrics=metrics)]))["ranks-spec-gloo-16w-r0"]
    steps = figure.panel("Step time per rank")
    assert [s.label for s in steps.series] == ["median of 16 ranks", "rank 7 (straggler, +100%)"]
    assert steps.series[0].high == (200.0, 200.0)


def test_gpu_telemetry_panels_appear_only_when_recorded() -> None:
    plain = by_key(build_figures([trained("nccl", 1, 0, 10.0)]))["training-1a"]
    assert [p.title for p in plain.panels] == []  # nothing recorded: the figure is its notes
    assert plain.notes == (  # a CPU run: no GPU panels to leave out
        "Validation Prec@1 is left out: no evaluation recorded.",
        "Loss is left out: no loss was recorded.",
        "Step time is left out: no step time was recorded.",
    )


def gpu_run() -> RunRecord:
    """A one-rank GPU run whose telemetry is sampled each second from 3 s before training starts
    (t = 1000) to 3 s after; the goal is reached at t = 1002.5."""
    start, times = 1000.0, [997.0 + i for i in range(7)]
    metrics = [
        *(MetricPoint(sm.GPU_UTIL, 0.0 if t < start else 50.0, 0, None, t=t) for t in times),
        *(MetricPoint(sm.GPU_MEM_USED_MIB, 1024.0 if t < start else 2048.0, 0, None, t=t) for t in times),
        *(MetricPoint(sm.GPU_MEM_PEAK_MIB, 0.0 if t < start else 512.0, 0, None, t=t) for t in times),
        MetricPoint(sm.GPU_MEM_TOTAL_MIB, 143771.0, 0, None, t=times[0]),
        *(MetricPoint(sm.GPU_POWER_W, 100.0 if t < start else 200.0, 0, None, t=t) for t in times),
        *(MetricPoint(sm.GPU_ENERGY_J, 5000.0 + 200.0 * max(0.0, t - start), 0, None, t=t) for t in times),
    ]
    record = trained("nccl", 1, 0, 2.5, metrics=metrics)
    return RunRecord(record.result, record.spec_text, record.metrics, RunClock(start, 1002.5, 1003.0))


def test_gpu_panels_plot_utilisation_memory_and_power_against_time_since_training_started() -> None:
    figure = by_key(build_figures([gpu_run()]))["training-1a"]
    assert [p.title for p in figure.panels] == [
        "GPU utilisation", "GPU memory", "GPU power", "Energy since training started",
    ]  # fmt: skip
    times = (-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0)
    util = figure.panel("GPU utilisation")
    assert (util.x_label, util.y_label) == ("time since training started (s)", "utilisation (%)")
    assert [(s.label, s.x, s.y) for s in util.series] == [
        ("spec-nccl-1w-r0", times, (0.0,) * 3 + (50.0,) * 4)
    ]
    memory = figure.panel("GPU memory")
    assert memory.y_label == "memory in use (GiB)"
    assert [s.y for s in memory.series] == [(1.0,) * 3 + (2.0,) * 4]
    assert memory.corner == "GPU total: 140.4 GiB"  # a label, not a line beside a 2 GiB curve
    power = figure.panel("GPU power")
    assert (power.y_label, power.series[0].y[-1]) == ("power (W)", 200.0)


def test_a_gpu_run_marks_the_energy_to_its_goal_in_the_tasks_energy_panel() -> None:
    figure = by_key(build_figures([gpu_run()]))["training-1a"]
    energy = figure.panel("Energy since training started")
    assert (energy.x_label, energy.y_label) == ("time since training started (s)", "energy (J)")
    (used,) = energy.series
    assert used.x == (0.0, 1.0, 2.0, 2.5, 3.0)
    assert used.y == pytest.approx((0.0, 200.0, 400.0, 500.0, 600.0))  # the counter, from the start
    assert [(m.x, m.y, m.label) for m in energy.marks] == [(2.5, 500.0, "500 J")]
    assert "spec-nccl-1w-r0: energy to the goal 500 J (all ranks)" in figure.notes
    assert not [f for f in build_figures([gpu_run()]) if f.key.startswith("energy-")]  # no figure of its own


def test_a_run_with_one_gpu_sample_says_why_it_has_no_gpu_panels() -> None:
    one = [MetricPoint(sm.GPU_UTIL, 10.0, 0, None, t=5.0), MetricPoint(sm.GPU_POWER_W, 80.0, 0, None, t=5.0)]
    figure = by_key(build_figures([trained("nccl", 1, 0, None, metrics=one)]))["training-1a"]
    assert not [p for p in figure.panels if p.title.startswith("GPU")]
    assert (
        "GPU utilisation, GPU memory and GPU power are left out: fewer than two GPU samples were taken."
        in figure.notes
    )


def test_without_an_energy_counter_the_power_of_every_rank_is_integrated() -> None:
    power = [MetricPoint(sm.GPU_POWER_W, 100.0, r, None, t=1000.0 + i) for r in (0, 1) for i in range(4)]
    record = trained("nccl", 2, 0, 2.0, metrics=power)
    record = RunRecord(record.result, "", record.metrics, RunClock(1000.0, 1002.0, 1003.0))
    energy = by_key(build_figures([record]))["training-1a"].panel("Energy since training started")
    (used,) = energy.series
    assert used.y == pytest.approx((0.0, 200.0, 400.0, 600.0))  # two GPUs at 100 W
    assert [(m.x, m.y) for m in energy.marks] == [(2.0, pytest.approx(400.0))]


def test_every_axis_of_every_figure_names_its_unit() -> None:
    records = [gpu_run(), trained("gloo", 1, 0, 100.0), trained("gloo", 2, 0, 60.0)]
    for figure in build_figures(records):
        for panel in figure.panels:
            assert panel.x_label and panel.y_label, (figure.key, panel.title)


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


def test_a_one_rank_sweep_says_one_rank_moves_no_data() -> None:
    figures = by_key(build_figures([sweep("nccl", 1, 0, {}, {1: 2e-5, 10: 2e-5})]))
    fp32 = figures["allreduce-fp32"]
    assert [p.title for p in fp32.panels] == ["Latency p50", "Latency p99"]
    assert fp32.notes == (
        "Bus bandwidth is left out: one rank moves no data, so a one-rank all-reduce has no bus bandwidth.",
    )
    assert figures["allreduce-best-busbw"].panels == ()


def test_a_failed_sweep_is_named_even_when_no_curve_was_recorded() -> None:
    record = sweep("gloo", 2, 0, {}, {})
    failed = RunRecord(
        record.result.model_copy(update={"state": RunState.FAILED, "message": "rank 1 lost"}), "", {}
    )
    (figure,) = build_figures([failed])
    assert figure.key == "allreduce"
    assert figure.panels == ()  # nothing to draw: the figure is its notes
    assert figure.notes == (
        "ar-gloo-2w-r0: failed: rank 1 lost",
        "Bus bandwidth is left out: no all-reduce curve was recorded.",
    )


def test_implementation_is_a_comparison_axis_with_time_to_accuracy_and_step_time() -> None:
    def run(tta: float | None, step_s: float, graphs: bool, precision: str, state: RunState) -> RunRecord:
        steps = [MetricPoint("step_time", step_s, 0, s) for s in (1, 2, 3)]
        base = trained("nccl", 1, 0, tta, metrics=steps, state=state, message="CUDA error: x\nat line 2")
        implementation = ImplementationPlan(cuda_graphs=graphs)
        update = {"implementation": implementation, "precision": precision, "step_time_s": step_s}
        result = base.result.model_copy(update=update)  # the run's step time, as every view shows it
        return RunRecord(result, "", base.metrics)

    records = [
        run(10.0, 0.010, False, "fp32", RunState.SUCCEEDED),
        run(4.0, 0.004, True, "fp32", RunState.SUCCEEDED),
        run(None, 0.002, True, "bf16", RunState.FAILED),
    ]
    records[1].result.graph_capture_s = 2.0
    figure = by_key(build_figures(records))["implementations-1a"]
    tta, step = figure.panel("Time to accuracy, end to end"), figure.panel("Step time")
    assert tta.categories == ("nccl 1w CUDA graphs bf16", "nccl 1w CUDA graphs fp32", "nccl 1w eager fp32")
    assert [(s.label, s.values) for s in tta.stacks] == [
        ("time to accuracy", (0.0, 4.0, 10.0)),
        ("CUDA graph capture", (0.0, 2.0, 0.0)),  # stacked: end to end, graphs cost 6 s, not 4 s
    ]
    assert tta.labels == ("", "6.00 s (1.67x)", "10.0 s")  # the value, and how much faster than eager
    # the failed way has no bar in any panel (it never trained: its fast steps mean nothing), a cross
    assert [(m.x, m.label) for m in tta.marks] == [(0.0, "failed")] and step.marks == tta.marks
    assert step.stacks[0].values == pytest.approx((0.0, 4.0, 10.0))  # milliseconds
    assert step.labels == ("", "4.00 ms (2.50x)", "10.0 ms")
    assert figure.notes == (
        "nccl 1w CUDA graphs bf16: no run reached the goal (failed: CUDA error: x); no bar is drawn",
    )
    assert "olympic mean" in figure.caption
    one_way = [r for r in records if not r.result.implementation.cuda_graphs]
    assert "implementations-1a" not in by_key(build_figures(one_way))


def test_a_spec_run_two_ways_scales_each_way_on_its_own_line() -> None:
    def graphs(record: RunRecord) -> RunRecord:
        update = {"implementation": ImplementationPlan(cuda_graphs=True), "precision": "bf16"}
        return RunRecord(record.result.model_copy(update=update), "", record.metrics)

    records = [
        trained("gloo", 1, 0, 100.0),
        trained("gloo", 2, 0, 60.0),
        graphs(trained("gloo", 1, 1, 40.0)),
        graphs(trained("gloo", 2, 1, 30.0)),
    ]
    figure = by_key(build_figures(records))["scaling-spec"]
    tta = figure.panel("Time to accuracy")
    assert [(s.label, s.y) for s in tta.series] == [
        ("gloo bf16 graphs", (40.0, 30.0)),
        ("gloo fp32", (100.0, 60.0)),
    ]
    speedup = [(s.label, s.y) for s in figure.panel("Speedup").series if "without" not in s.label]
    split = figure.panel("Where the time went").categories
    assert split == ("gloo bf16 graphs 1w", "gloo bf16 graphs 2w", "gloo fp32 1w", "gloo fp32 2w")
    # each variant against its own one-worker run, never eager against graphs
    assert speedup == [
        ("gloo bf16 graphs", (1.0, pytest.approx(40 / 30))),
        ("gloo fp32", (1.0, pytest.approx(100 / 60))),
    ]


def test_a_runs_figure_notes_its_gpu_utilisation_as_status_and_results_show_it() -> None:
    from mlbench_tui.report.overlays import task_figure
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
        figure = task_figure("1a", [RunRecord(result, "", {})])
        timed = " (mean over ranks while the run was timed)" if telemetry.mean_gpu_util is not None else ""
        assert f"short-1w: GPU utilisation {shown}{timed}" in figure.notes
        assert dict(telemetry_lines(telemetry))["gpu util"].startswith(shown)  # status, the TUI
        assert results_rows([result])[0]["GPU UTIL"] == shown  # mlbench results
