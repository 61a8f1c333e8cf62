"""What each chart of a run screen is titled and how its values are scaled to the title's unit."""

from __future__ import annotations

from mlbench_worker import sysmetrics as sm

from mlbench_tui.tui.run_charts import look


def test_charts_read_in_the_units_people_use() -> None:
    assert look("step_time") == look("step_time").__class__("step time (ms)", 1e3)
    latency = look("allreduce_fp16_latency_p50")
    assert latency.title == "all-reduce fp16 latency p50 (us)" and 2.565e-05 * latency.scale == 25.65
    assert look("allreduce_fp32_busbw").title == "all-reduce fp32 bus bandwidth (GB/s)"
    assert look("allreduce_fp32_busbw").scale == 1.0
    assert look(sm.GPU_MEM_USED_MIB).scale * 2048 == 2.0  # GiB
    assert look("train_loss").title == "train_loss" and look("train_loss").scale == 1.0
