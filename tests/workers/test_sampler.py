"""The hardware sampler: real psutil samples per rank at the configured interval, stored by the
server and exported; ``off`` sends nothing; a missing library is one "not available" line."""

from __future__ import annotations

import csv
import io
import json
import mmap
import os
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from mlbench_worker import sysmetrics as sm
from mlbench_worker.reporting.spool import Spool
from mlbench_worker.telemetry.sampler import SampledReporter, Sampler
from support.smoke import apply_one, mlbench
from support.trainers import RecordingReporter

from mlbench_tui.formatting import format_mebibytes

HOST = (sm.CPU_PERCENT, sm.RSS_MIB, sm.HOST_MEM_AVAILABLE_MIB)


class Recorder(RecordingReporter):
    """The tests' recording reporter, which also notes that it was closed."""

    closed = False

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True

    def names(self) -> set[str]:
        return {name for name, _, _ in self.metrics}


def test_host_series_are_real_readings_of_this_process(tmp_path: Path) -> None:
    recorder = Recorder()
    sampler = Sampler(recorder, 1.0, gpu=False, cgroup_root=tmp_path)
    sampler.setup()
    first = dict(sampler.sample())
    # 64 MiB more resident memory: fresh pages of their own mapping, touched (a heap allocation
    # could reuse pages a long test process freed and kept, as a tuned allocator does)
    ballast = mmap.mmap(-1, 64 * 2**20)
    for offset in range(0, len(ballast), mmap.PAGESIZE):
        ballast[offset] = 1
    sum(i * i for i in range(300_000))  # some CPU time between the samples
    second = dict(sampler.sample())
    assert set(first) >= set(HOST) and set(second) >= set(HOST)
    assert second[sm.RSS_MIB] - first[sm.RSS_MIB] >= 60
    assert second[sm.CPU_PERCENT] > 0
    assert second[sm.HOST_MEM_AVAILABLE_MIB] > 0
    assert second[sm.NET_SENT_MIB_S] >= 0 and second[sm.NET_RECV_MIB_S] >= 0
    assert not any(name.startswith("sys/gpu") for name in recorder.names())  # a CPU rank
    assert recorder.names() <= set(sm.BY_NAME)  # every name is in the documented table
    ballast.close()


def test_closing_the_reporter_takes_a_last_sample_first(tmp_path: Path) -> None:
    recorder = Recorder()
    sampler = Sampler(recorder, 60.0, gpu=False, cgroup_root=tmp_path).start()
    reporter = SampledReporter(recorder, sampler)
    reporter.metric("train_loss", 1.5, step=3)
    reporter.close()
    assert recorder.closed and ("train_loss", 1.5, 3) in recorder.metrics
    # the interval is a minute: the only sample is the one taken at close
    assert [name for name, _, _ in recorder.metrics].count(sm.RSS_MIB) == 1


def test_missing_nvml_is_one_not_available_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    recorder = Recorder()
    sampler = Sampler(recorder, 1.0, gpu=True, rank=3, cgroup_root=tmp_path)
    sampler.setup()
    for _ in range(3):
        sampler.sample()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("[rank 3] telemetry: GPU series (NVIDIA's nvidia-ml-py) not available")
    assert sampler.gpu is None and recorder.names() >= set(HOST)
    assert not any(name.startswith("sys/gpu") for name in recorder.names())


def test_missing_psutil_leaves_the_gpu_side_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)
    recorder = Recorder()
    sampler = Sampler(recorder, 1.0, gpu=False, cgroup_root=tmp_path)
    sampler.setup()
    assert sampler.sample() == [] and sampler.sample() == []
    (line,) = capsys.readouterr().err.splitlines()
    assert "CPU, memory and network series (psutil) not available" in line


def _nvml_starts() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_starts(), reason="NVML starts on this machine (an NVIDIA driver is loaded)")
def test_nvml_without_a_driver_is_one_not_available_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pynvml")
    recorder = Recorder()
    sampler = Sampler(recorder, 1.0, gpu=True, cgroup_root=tmp_path)
    sampler.setup()
    sampler.sample()
    (line,) = capsys.readouterr().err.splitlines()
    assert "GPU series not available: NVML did not start" in line
    assert recorder.names() >= set(HOST)


@pytest.mark.gpu
@pytest.mark.skipif(not _nvml_starts(), reason="needs an NVIDIA GPU and driver (NVML)")
def test_gpu_series_from_nvml_and_torch(tmp_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("NVML starts but torch sees no CUDA device")
    torch.cuda.init()
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")
    recorder = Recorder()
    sampler = Sampler(recorder, 1.0, gpu=True, cgroup_root=tmp_path)
    sampler.setup()
    values = dict(sampler.sample())
    values.update(sampler.sample())
    assert sampler.poller is not None  # the GPU was found: its fast values are polled
    sampler.poller.stop()  # reports its last period
    values.update((name, value) for name, value, _ in recorder.metrics)
    del block
    for name in (sm.GPU_UTIL, sm.GPU_MEM_USED_MIB, sm.GPU_MEM_TOTAL_MIB, sm.GPU_POWER_W, sm.GPU_SM_CLOCK_MHZ):
        assert name in values, name
    assert values[sm.GPU_READINGS] >= 1 and values[sm.GPU_ENERGY_J] > 0
    assert (
        values[sm.GPU_MEM_PEAK_MIB] >= 256 and values[sm.GPU_MEM_TOTAL_MIB] > values[sm.GPU_MEM_USED_MIB] > 0
    )
    assert 0 <= values[sm.GPU_UTIL] <= 100 and values[sm.GPU_POWER_W] > 0


# ------------------------------------------------------------------------- real worker processes


def _spooled_metrics(tmp_path: Path, interval: float | None) -> list[dict[str, Any]]:
    """Run one rank of a short all-reduce sweep with no server (the reporter spools) and return
    the metric items it recorded."""
    spool = tmp_path / f"spool-{interval}"
    config = tmp_path / f"worker-{interval}.json"
    config.write_text(
        json.dumps(
            {
                "run_id": "r-000000000000",
                "task": "0a",
                "backend": "gloo",
                "world_size": 1,
                "telemetry_interval_s": interval,
                "data": {"source": "synthetic"},
                "hyperparameters": {
                    "sizes_min_exp": 0,
                    "sizes_max_exp": 5,
                    "num_sizes": 6,
                    "repetitions": 20,
                },
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLBENCH_", "RANK", "WORLD_SIZE"))}
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_worker", "--config", str(config)],
        env={**env, "MLBENCH_SPOOL_DIR": str(spool), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [
        item
        for path in sorted(spool.glob("rank0-*.jsonl"))
        for batch in Spool.read(path)
        if batch["kind"] == "metrics"
        for item in batch["items"]
    ]


@pytest.mark.slow
def test_a_rank_samples_by_default_and_not_when_off(tmp_path: Path) -> None:
    on = _spooled_metrics(tmp_path, 0.2)
    names = {item["name"] for item in on}
    assert names >= set(HOST) and {"allreduce_fp32_latency_p50"} <= names
    assert all("step" not in item for item in on if sm.is_sys(item["name"]))
    off = _spooled_metrics(tmp_path, None)
    assert "allreduce_fp32_latency_p50" in {item["name"] for item in off}
    assert not [item for item in off if sm.is_sys(item["name"])]


@pytest.mark.slow
def test_every_rank_stores_its_series_at_the_configured_interval(tmp_path: Path) -> None:
    interval = 0.25
    result = apply_one(
        tmp_path,
        f"""
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: tel}}
spec:
  task: 0a
  workers: 2
  backend: gloo
  data: synthetic
  telemetry: {{interval: {interval}s}}
  hyperparameters: {{sizes_min_exp: 0, sizes_max_exp: 6, num_sizes: 7, repetitions: 20}}
""",
    )
    archive = tmp_path / "tel.zip"
    assert mlbench("export", "tel-gloo-2w", "--out", str(archive)).returncode == 0
    with zipfile.ZipFile(archive) as zf:
        rows = list(csv.DictReader(io.StringIO(zf.read("metrics.csv").decode())))
        official = json.loads(zf.read("official_result.json"))
    # the result the server computed when the run ended: memory per rank, no GPU figures on CPU
    hardware = result["telemetry"]
    assert [r["rank"] for r in hardware["ranks"]] == [0, 1] and official["telemetry"] == hardware
    assert hardware["peak_rss_mib"] == max(r["peak_rss_mib"] for r in hardware["ranks"]) > 50
    assert hardware["energy_j"] is None and hardware["mean_gpu_util"] is None
    status = mlbench("status", "tel-gloo-2w").stdout
    assert f"memory:   peak {format_mebibytes(hardware['peak_rss_mib'])} resident" in status
    times: dict[tuple[int, str], list[float]] = defaultdict(list)
    for row in rows:
        if sm.is_sys(row["name"]):
            times[int(row["rank"]), row["name"]].append(float(row["t"]))
    for rank in (0, 1):
        for name in HOST:
            stamps = sorted(times[rank, name])
            # one at start and one when the rank closes, whatever the machine's speed (a fast
            # machine ends the sweep within one interval); the rest on a fixed schedule: the k-th
            # regular sample comes k intervals after the first or later, never sooner
            assert len(stamps) >= 2, (rank, name, stamps)
            regular = stamps[:-1]
            for k, t in enumerate(regular):
                assert t - regular[0] >= k * interval - 0.02, (rank, name, stamps)
