"""Task 0a in one process: one rank reports latency only and says why; a bandwidth no link could
carry is flagged where it is printed."""

from __future__ import annotations

import pytest
import torch
from mlbench_worker.tasks import allreduce
from mlbench_worker.tasks.allreduce import SizeResult, busbw_ceiling, format_row
from support.trainers import single_rank_context

TINY = {
    "sizes_min_exp": 0,
    "sizes_max_exp": 3,
    "num_sizes": 4,
    "repetitions": 3,
    "warmup": 1,
    "dtypes": ["fp32"],
}


def test_one_rank_reports_latency_only_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    ctx, reporter = single_rank_context("0a", TINY, {"source": "synthetic"}, None)
    outcome = allreduce.run(ctx)
    assert outcome.status == "success"
    names = {name for name, _, _ in reporter.metrics}
    summary = {"allreduce_fp32_latency_p50", "allreduce_fp32_latency_p99", "allreduce_fp32_latency_max"}
    assert names == {*summary, "allreduce_fp32_iteration_s"}  # no algbw/busbw
    # every timed repetition after the warm-up, at its size: 3 per size, as nccl-tests' -I records them
    iterations = [(v, s) for n, v, s in reporter.metrics if n == "allreduce_fp32_iteration_s"]
    assert sorted({s for _, s in iterations}) == [1, 10, 100, 1000] and len(iterations) == 4 * 3
    at_one = sorted(v for v, s in iterations if s == 1)
    maxima = {s: v for n, v, s in reporter.metrics if n == "allreduce_fp32_latency_max"}
    assert maxima[1] == at_one[-1] and all(v > 0 for v in at_one)
    (sweep,) = [payload for kind, payload in reporter.events if kind == "allreduce_sweep"]
    assert sweep["latency_only"] is True and sweep["world_size"] == 1
    assert "moves no data" in sweep["note"]
    out = capsys.readouterr().out
    assert "moves no data, so only latency is reported" in out
    rows = [line for line in out.splitlines() if line.split()[2:3] == ["fp32"]]
    assert len(rows) == 4 and all(line.split()[-2:] == ["-", "-"] for line in rows)


def test_the_ceiling_is_the_devices_memory_bandwidth() -> None:
    h100 = busbw_ceiling("cuda", memory_clock_khz=2_619_000, bus_width_bits=5120)  # H100 SXM
    assert h100.gbps == pytest.approx(3352.3, abs=0.1) and "memory bandwidth" in h100.basis
    assert busbw_ceiling("cuda").gbps == allreduce.GPU_FALLBACK_CEILING_GBPS  # clock unknown
    assert busbw_ceiling("cpu").gbps == allreduce.CPU_BUSBW_CEILING_GBPS
    assert allreduce.device_ceiling(torch.device("cpu")) == busbw_ceiling("cpu")


def test_a_bandwidth_above_the_ceiling_is_flagged_where_it_is_printed() -> None:
    ceiling = busbw_ceiling("cuda", memory_clock_khz=2_619_000, bus_width_bits=5120)
    seen = SizeResult(
        "fp32", 1 << 26, 1 << 28, 3.0e-5, 3.2e-5, 3.3e-5, 9021.0, 9021.0
    )  # the H100's 9,021 GB/s
    assert "! above the 3,352 GB/s ceiling" in format_row(seen, True, ceiling)
    real = SizeResult("fp32", 1 << 26, 1 << 28, 1.0e-3, 1.1e-3, 1.2e-3, 268.0, 402.0)
    assert "!" not in format_row(real, True, ceiling)
    assert format_row(seen, False, ceiling).split()[-2:] == ["-", "-"]
