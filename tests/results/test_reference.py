"""Expected values: the shipped reference table, a run's machine class, a verdict per headline figure
(matched like for like, judged by a band from measured spread, stated in one direction), and a
suite's results (repeats included) turned into rows ready to add."""

from __future__ import annotations

import csv
import io

import pytest

from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.model import AllreduceFigures, RunResult, StepTimeFigures, SweepShape
from mlbench_tui.results.reference import (
    BUSBW,
    LATENCY,
    STEP_TIME,
    ReferenceRow,
    csv_text,
    gpu_class,
    machine_class,
    read_rows,
    reference_rows,
    table,
    verdicts,
)
from mlbench_tui.results.table import check_notes, checks_lines, render_results

H200 = {"gpu_model": "NVIDIA H200", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16}
CPU = {"cpu_model": "AMD EPYC", "cpu_count": 2}


def steps(median_ms: float, spread: float = 0.02) -> StepTimeFigures:
    """Step-time figures with p10/p90 at -/+ ``spread`` of the median."""
    m = median_ms / 1000
    return StepTimeFigures(
        median_s=m, p10_s=m * (1 - spread), p90_s=m * (1 + spread), p99_s=m * 1.1, steps=100, warmup_steps=20
    )


def run(**fields: object) -> RunResult:
    base: dict[str, object] = {
        "name": "gpu-1a-fp32-nccl-1w",
        "task": "1a",
        "backend": "nccl",
        "workers": 1,
        "state": RunState.SUCCEEDED,
        "precision": "fp32",
        "batch_size": 128,
        "fingerprint": H200,
    }
    result = RunResult.model_validate(base | fields)
    if result.step_time_s is not None and "step_time" not in fields:
        result.step_time = steps(result.step_time_s * 1000)
    return result


def row(**fields: object) -> ReferenceRow:
    base: dict[str, object] = {
        "machine": "cpu: AMD EPYC x2",
        "task": "1a",
        "precision": "fp32",
        "implementation": "eager",
        "workers": 2,
        "batch": 64,
        "figure": STEP_TIME,
        "value": 200.0,
        "source": "cpu_suite",
        "measured": "2026-11-28",
        "backend": "gloo",
    }
    return ReferenceRow(**(base | fields))  # type: ignore[arg-type]


def sweep_row(figure: str, value: float, **fields: object) -> ReferenceRow:
    """A 0a row of a sweep from 1 to 1e6 elements, 50 repetitions."""
    return row(task="0a", figure=figure, batch=None, value=value, sizes="1-1000000", repetitions=50, **fields)


def cpu_run(step_ms: float, **fields: object) -> RunResult:
    base: dict[str, object] = {
        "name": "cpu-1a-gloo-2w", "backend": "gloo", "workers": 2, "batch_size": 64, "fingerprint": CPU,
        "step_time_s": step_ms / 1000,
    }  # fmt: skip
    return run(**(base | fields))


def test_the_shipped_table_reads_typed_one_row_per_key_with_what_moves_each_figure() -> None:
    rows = table()
    keys = {(r.machine, r.task, r.precision, r.implementation, r.figure) for r in rows}
    assert ("H200", "1a", "fp32", "eager", "step_time_ms") in keys
    assert ("H200", "1a", "bf16", "graphs", "step_floor_ms") in keys
    assert ("H100", "1a", "bf16", "eager", "step_time_ms") in keys
    assert all(r.value > 0 and r.measured[:4] == "2026" for r in rows)
    assert all(r.backend in ("gloo", "nccl") for r in rows if r.figure != "gemm_tflops")
    assert len({r.key() for r in rows}) == len(rows)
    assert all(r.size_range is not None and r.repetitions for r in rows if r.figure in (LATENCY, BUSBW))
    assert any(r.repeats > 1 and r.spread is not None for r in rows)  # some rows carry their repeats' spread


def test_a_file_of_the_earlier_format_still_reads_and_its_fixed_tolerance_is_ignored() -> None:
    old = (
        "# a comment\n"
        "machine,task,precision,implementation,workers,batch,figure,value,tolerance,source,measured\n"
        "H200,1a,fp32,eager,1,128,step_time_ms,9.835,0.25,gpu_suite,2026-11-27\n"
    )
    (only,) = read_rows(old)
    assert (only.value, only.backend, only.host, only.spread, only.repeats) == (9.835, None, None, None, 1)
    assert read_rows(csv_text([only])) == (only,)  # and the new format round-trips


@pytest.mark.parametrize(
    ("device", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("Tesla T4", "T4"),
        ("NVIDIA L40S", None),  # L4 is not L40S
    ],
)
def test_a_device_name_is_its_catalog_model(device: str, model: str | None) -> None:
    assert gpu_class(device) == model


def test_the_verdict_says_normal_slower_or_faster_with_the_band_in_the_same_direction() -> None:
    rows = [row(value=200.0, spread=0.02, repeats=5)]  # band 2 x 2% x sqrt(1 + 1/5) = 4.4%
    (normal,) = verdicts(cpu_run(206.0), rows)
    assert normal.outcome == "normal" and normal.band is not None
    assert normal.band.half_width == pytest.approx(0.0438, abs=1e-4)
    assert normal.text().startswith(
        "step 206 ms: normal: 3% above expected 200 ms (band +-4%, from the reference's 5"
    )
    (slow,) = verdicts(cpu_run(224.0), rows)
    assert (slow.outcome, round(slow.deviation or 0, 2)) == ("slower", 0.12)
    assert "! slower: 12% above expected 200 ms (band +-4%" in slow.text()
    (fast,) = verdicts(cpu_run(180.0), rows)
    assert fast.outcome == "faster" and "! faster: 10% below expected 200 ms" in fast.text()


def test_a_bandwidth_below_expected_is_slower() -> None:
    rows = [sweep_row(BUSBW, 2.0, spread=0.05, repeats=4)]
    zero_a = run(
        name="cpu-0a", task="0a", backend="gloo", workers=2, batch_size=None, fingerprint=CPU,
        sweep=SweepShape(min_size=1, max_size=1_000_000, sizes=7, repetitions=50),
        allreduce={"fp32": AllreduceFigures(sizes=7, peak_busbw_gbps=1.5, peak_busbw_size=1_000_000)},
    )  # fmt: skip
    (bw,) = verdicts(zero_a, rows)
    assert bw.outcome == "slower" and "! slower: 25% below expected 2.00 GB/s" in bw.text()


def test_rows_match_only_like_for_like() -> None:
    rows = [sweep_row(LATENCY, 250.0, spread=0.1, repeats=3)]

    def sweep(min_size: int, max_size: int, repetitions: int) -> RunResult:
        return run(
            name="cpu-0a", task="0a", backend="gloo", workers=2, batch_size=None, fingerprint=CPU,
            sweep=SweepShape(min_size=min_size, max_size=max_size, sizes=7, repetitions=repetitions),
            allreduce={"fp32": AllreduceFigures(sizes=7, min_size_latency_p50_s=120e-6, latency_only=False)},
        )  # fmt: skip

    # the case: a reduced sweep (to 1e5, 20 repetitions) set against one to 1e6 with 50
    (reduced,) = verdicts(sweep(1, 100_000, 20), rows)
    assert reduced.row is None and reduced.outcome == "no reference"
    assert reduced.text() == (
        "latency 120 us: no reference for this hardware (cpu: AMD EPYC x2): its rows differ in repetitions"
    )
    # latency is read at the smallest size: another largest size does not move it
    (latency,) = verdicts(sweep(1, 100_000, 50), rows)
    assert latency.row is not None and latency.outcome == "faster"
    # another backend, batch, machine or host: no reference
    assert verdicts(cpu_run(200.0, backend="mpi"), [row()])[0].row is None
    assert verdicts(cpu_run(200.0, batch_size=128), [row()])[0].missing == "batch"
    assert verdicts(cpu_run(200.0), [row(machine="cpu: AMD EPYC x4")])[0].missing is None
    gpu = [
        row(
            machine="H200",
            workers=1,
            batch=128,
            backend="nccl",
            host="Intel(R) Xeon(R) Processor x16",
            value=9.8,
        )
    ]
    assert verdicts(run(step_time_s=0.0098), gpu)[0].row is not None
    other_host = {**H200, "cpu_model": "AMD EPYC 9654"}
    assert verdicts(run(step_time_s=0.0098, fingerprint=other_host), gpu)[0].missing == "host"
    assert verdicts(run(step_time_s=0.0098, state=RunState.FAILED), gpu) == []


def test_a_row_measured_once_is_judged_by_within_run_spread_and_says_so() -> None:
    rows = [row(value=200.0, step_spread=0.03)]
    (wide,) = verdicts(cpu_run(215.0, step_time=steps(215.0, spread=0.10)), rows)  # this run: +-10%
    assert wide.outcome == "normal" and wide.band is not None and wide.band.half_width == pytest.approx(0.10)
    assert "this run's spread of its steps (p10-p90; the reference was measured once)" in wide.text()
    (narrow,) = verdicts(cpu_run(215.0, step_time=steps(215.0, spread=0.01)), rows)  # the row's 3% is wider
    assert narrow.outcome == "slower" and "the reference run's spread of its steps" in narrow.text()
    (unjudged,) = verdicts(cpu_run(215.0, step_time=None), [row(value=200.0)])  # no spread anywhere
    assert unjudged.outcome == "no band" and "no measured spread to judge it by" in unjudged.text()


def test_results_and_status_show_the_verdicts() -> None:
    rows = table()
    h200 = next(
        r
        for r in rows
        if r.machine == "H200"
        and r.task == "1a"
        and r.figure == STEP_TIME
        and r.implementation == "eager"
        and r.precision == "fp32"
    )
    near = run(step_time_s=h200.value / 1000 * 1.01)
    text = render_results([near])
    assert "VS REF" in text and "normal" in text
    assert "VS REF" not in render_results([run(step_time_s=0.0102, fingerprint={})])
    assert checks_lines(near)[0][0] == "verdict"
    far = run(step_time_s=h200.value / 1000 * 1.6)
    assert "step slower +60%" in render_results([far])
    assert check_notes([far])[0].startswith("! gpu-1a-fp32-nccl-1w: step ")


def test_a_suite_s_repeats_become_one_row_with_their_spread_in_the_table_s_format() -> None:
    results = [cpu_run(ms) for ms in (200.0, 204.0, 196.0)]
    results.append(cpu_run(1000.0, state=RunState.FAILED))  # not a reference
    assert machine_class(results[0]) == "cpu: AMD EPYC x2"
    (made,) = reference_rows(results, source="cpu_suite", measured="2026-11-28")
    assert (made.machine, made.backend, made.workers, made.batch, made.value, made.repeats) == (
        "cpu: AMD EPYC x2", "gloo", 2, 64, 200.0, 3,
    )  # fmt: skip
    assert made.spread == pytest.approx(0.02, abs=1e-4) and made.step_spread == pytest.approx(0.02)
    assert made.host is None  # a CPU run's host is its machine
    parsed = list(csv.DictReader(io.StringIO(csv_text([made]))))
    assert parsed[0]["machine"] == "cpu: AMD EPYC x2" and parsed[0]["repeats"] == "3"
    (verdict,) = verdicts(results[0], [made])
    assert verdict.outcome == "normal" and verdict.deviation == pytest.approx(0.0)
