"""What each chart of a run screen is titled and how its values are scaled to the title's unit."""

from __future__ import annotations

from mlbench_worker import sysmetrics as sm

from mlbench_tui.tui.run_charts import look


def test_charts_read_in_the_units_people_use() -> None:
    assert look("step_time") == look("step_time").__class__("step time (ms)", 1e3)
    latency = look("allreduce_fp16_latency_p50")
    assert latency.title == "all-reduce fp16 latency p50 (us)" and 2.565e-05 * latency.scale == 25.65
    busbw = look("allreduce_fp32_busbw")
    assert busbw.title == "all-reduce fp32 bus bandwidth" and busbw.scale == 1.0
    assert busbw.y_format is not None  # its axis reads 34.7KB/s, never 34.7µ (GB/s)
    labels = [busbw.y_format(v) for v in (3.47e-05, 0.5, 12.3, 0.897)]
    assert labels == ["35KB/s", "500MB/s", "12GB/s", "897MB/s"]  # seven characters, the axis's room
    assert look(sm.GPU_MEM_USED_MIB).scale * 2048 == 2.0  # GiB
    assert look("train_loss").title == "train_loss" and look("train_loss").scale == 1.0
