"""Expected values: the shipped reference table, a run's machine class, a run against its row
(flagged outside the row's tolerance), and a suite's results turned into rows ready to add."""

from __future__ import annotations

import csv
import io

import pytest

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import ImplementationPlan
from mlbench_tui.results.model import AllreduceFigures, RunResult
from mlbench_tui.results.reference import (
    ReferenceRow,
    compare,
    csv_text,
    gpu_class,
    machine_class,
    reference_rows,
    table,
)
from mlbench_tui.results.table import check_notes, checks_lines, render_results

H200 = {"gpu_model": "NVIDIA H200", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16}


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
    return RunResult.model_validate(base | fields)


def test_the_shipped_table_has_the_gpu_anchors_and_reads_typed() -> None:
    rows = table()
    keys = {(r.machine, r.task, r.precision, r.implementation, r.figure) for r in rows}
    assert ("H200", "1a", "fp32", "eager", "step_time_ms") in keys
    assert ("H200", "1a", "bf16", "graphs", "step_floor_ms") in keys
    assert ("H100", "1a", "bf16", "eager", "step_time_ms") in keys
    assert ("cpu: AMD EPYC x2", "1a", "fp32", "eager", "step_time_ms") in keys  # this machine, from cpu_suite
    assert all(r.value > 0 and r.tolerance > 0 and r.measured[:4] == "2026" for r in rows)
    assert len({r.key() for r in rows}) == len(rows)  # one row per key


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


def test_a_run_is_set_against_its_row_and_flagged_outside_the_tolerance() -> None:
    near = compare(run(step_time_s=0.0102))
    assert [(c.figure, round(c.ratio, 2), c.within) for c in near] == [("step_time_ms", 1.04, True)]
    assert near[0].text().startswith("step 10.2 ms, 1.04x the H200 reference (9.84 ms; fp32 eager, gpu_suite")
    far = compare(run(step_time_s=0.0150))
    assert not far[0].within and far[0].text().endswith("! outside +-25%")
    assert "! gpu-1a-fp32-nccl-1w: step 15.0 ms, 1.53x the H200" in check_notes([run(step_time_s=0.0150)])[0]
    graphs = compare(run(step_time_s=0.0049, implementation=ImplementationPlan(cuda_graphs=True)))
    assert graphs[0].row.implementation == "graphs" and graphs[0].within
    # no row: another batch, another machine, a failed run
    assert compare(run(step_time_s=0.0102, batch_size=64)) == []
    assert compare(run(step_time_s=0.0102, fingerprint={"gpu_model": "Tesla T4"})) == []
    assert compare(run(step_time_s=0.0102, state=RunState.FAILED)) == []


def test_results_show_the_comparison_and_leave_the_column_out_when_no_run_has_one() -> None:
    text = render_results([run(step_time_s=0.0102)])
    assert "VS REF" in text and "1.04x H200" in text
    assert "VS REF" not in render_results([run(step_time_s=0.0102, fingerprint={})])
    assert checks_lines(run(step_time_s=0.0102))[0][0] == "reference"


def test_allreduce_latency_is_compared_at_the_smallest_size() -> None:
    zero_a = run(
        name="gpu-0a",
        task="0a",
        batch_size=None,
        allreduce={"fp32": AllreduceFigures(sizes=2, min_size_latency_p50_s=30e-6, latency_only=True)},
    )
    (latency,) = compare(zero_a)
    assert latency.figure == "allreduce_latency_min_size_us" and latency.within  # 1.21x, within 2x


def test_a_suite_s_results_become_rows_in_the_table_s_format() -> None:
    results = [
        run(
            step_time_s=0.0050,
            fingerprint={"cpu_model": "AMD EPYC", "cpu_count": 2},
            backend="gloo",
            workers=2,
        ),
        run(state=RunState.FAILED, step_time_s=1.0),  # not a reference
    ]
    assert machine_class(results[0]) == "cpu: AMD EPYC x2"
    rows = reference_rows(results, source="cpu_suite", measured="2026-11-27")
    assert rows == [
        ReferenceRow(
            "cpu: AMD EPYC x2",
            "1a",
            "fp32",
            "eager",
            2,
            128,
            "step_time_ms",
            5.0,
            0.25,
            "cpu_suite",
            "2026-11-27",
        )
    ]
    parsed = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert parsed[0]["machine"] == "cpu: AMD EPYC x2" and parsed[0]["value"] == "5.0"
    assert compare(results[0], rows)[0].ratio == pytest.approx(1.0)
