"""The pre-flight's logic on a CPU: NVML-shaped readings (what pynvml returns for a healthy board,
one with ECC errors, one held back, one shared with another process, one that reports nothing)
go through the same reading and judging code a GPU rank runs; the probes are judged against
their machine's expectation; the real probes run on this CPU."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import torch
from mlbench_worker.preflight_config import Expectation
from mlbench_worker.telemetry import preflight
from mlbench_worker.telemetry.preflight import (
    PROBE_ALLREDUCE,
    PROBE_GEMM,
    HealthReadings,
    expectation_for,
    judge_clocks,
    judge_health,
    judge_probe,
    read_health,
)
from mlbench_worker.wire import Preflight, PreflightCheck, parse_event


class FakeNvml:
    """pynvml's surface for one board: its constants and error classes, and the device calls
    the pre-flight makes, answering with recorded values (``None``: not supported)."""

    NVMLError = pynvml.NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM

    def __init__(self, **readings: Any) -> None:
        self.readings = readings
        self.calls: list[tuple[Any, ...]] = []

    def _answer(self, name: str) -> Any:
        value = self.readings.get(name)
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int:
        self.calls.append(("ecc", kind, counter))
        return int(self._answer("ecc"))

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return tuple(self._answer("remapped"))  # type: ignore[return-value]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._answer("reasons"))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._answer("processes")]

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return int(self._answer("clock"))

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> int:
        return int(self._answer("max_clock"))


ME = os.getpid()
HEALTHY = {
    "ecc": 0,
    "remapped": (0, 0, 0, 0),
    "reasons": pynvml.nvmlClocksEventReasonGpuIdle,
    "processes": [(ME, 512 * 2**20)],
    "clock": 1980,
    "max_clock": 1980,
}


def statuses(checks: list[PreflightCheck]) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def test_a_healthy_board_passes_through_the_same_reads_a_gpu_makes() -> None:
    nvml = FakeNvml(**HEALTHY)
    readings = read_health(nvml, handle=object())  # type: ignore[arg-type]
    assert readings == HealthReadings(0, False, False, 1, 1980.0, 1980.0, ((ME, 512.0),))
    assert nvml.calls == [("ecc", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)]
    assert statuses(judge_health(readings, {ME})) == {"ecc": "pass", "throttle": "pass", "processes": "pass"}
    assert judge_clocks(readings).status == "pass"


@pytest.mark.parametrize(
    ("change", "check", "status", "words"),
    [
        ({"ecc": 3}, "ecc", "fail", "3 uncorrected ECC error(s) since the driver loaded"),
        ({"remapped": (0, 2, 1, 0)}, "ecc", "fail", "rows wait to be remapped (reset the GPU)"),
        ({"remapped": (0, 2, 0, 1)}, "ecc", "fail", "a row remapping failed"),
        (
            {"reasons": pynvml.nvmlClocksEventReasonHwSlowdown | 0x40},
            "throttle",
            "fail",
            "hardware slowdown, hardware thermal",
        ),
        ({"reasons": pynvml.nvmlClocksEventReasonSwPowerCap}, "throttle", "warn", "power cap"),
        ({"processes": [(ME, None), (4242, 30 * 2**30)]}, "processes", "fail", "pid 4242 (30,720 MiB)"),
        ({"ecc": None, "remapped": None}, "ecc", "skip", "no ECC counters"),
        ({"reasons": None}, "throttle", "skip", "no slowdown reasons"),
        ({"processes": None}, "processes", "skip", "no processes"),
    ],
)
def test_an_unhealthy_board_fails_the_check_that_reads_it(
    change: dict[str, Any], check: str, status: str, words: str
) -> None:
    readings = read_health(FakeNvml(**(HEALTHY | change)), handle=object())  # type: ignore[arg-type]
    (found,) = [c for c in judge_health(readings, {ME}) if c.name == check]
    assert found.status == status and words in found.detail
    others = [c for c in judge_health(readings, {ME}) if c.name != check]
    assert all(c.status == "pass" for c in others)


def test_clocks_under_load_against_their_maximum() -> None:
    assert judge_clocks(HealthReadings(sm_clock_mhz=1500, max_sm_clock_mhz=1980)).status == "warn"
    slow = judge_clocks(HealthReadings(sm_clock_mhz=600, max_sm_clock_mhz=1980))
    assert slow.status == "fail" and slow.detail == "SM clock 600 of 1980 MHz under load (30%)"
    assert judge_clocks(HealthReadings()).status == "skip"


def test_a_probe_is_judged_like_a_verdict_and_a_spec_limit_is_a_limit() -> None:
    h200 = Expectation("H200", PROBE_GEMM, 600.0, band=0.05, source="gpu_check 2026-11-28")
    assert judge_probe(PROBE_GEMM, 590.0, "TFLOP/s", h200, higher_is_better=True).status == "pass"
    low = judge_probe(PROBE_GEMM, 500.0, "TFLOP/s", h200, higher_is_better=True)
    assert low.status == "warn" and low.detail.startswith(
        "500 TFLOP/s, 17% below expected 600 TFLOP/s, band +-5%"
    )
    assert judge_probe(PROBE_GEMM, 250.0, "TFLOP/s", h200, higher_is_better=True).status == "fail"
    latency = Expectation("H200", PROBE_ALLREDUCE, 25.0, band=0.5)
    assert judge_probe(PROBE_ALLREDUCE, 60.0, "us", latency, higher_is_better=False).status == "fail"
    limit = Expectation("*", PROBE_ALLREDUCE, 100.0, source="the spec's limit", limit=True)
    assert judge_probe(PROBE_ALLREDUCE, 101.0, "us", limit, higher_is_better=False).status == "fail"
    assert judge_probe(PROBE_ALLREDUCE, 99.0, "us", limit, higher_is_better=False).status == "pass"
    none = judge_probe(PROBE_GEMM, 1.5, "TFLOP/s", None, higher_is_better=True)
    assert none.status == "pass" and "no expected value for this machine" in none.detail


def test_a_rank_picks_its_machine_s_expectation() -> None:
    rows = [
        Expectation("A100", PROBE_GEMM, 250.0),
        Expectation("A100-80GB", PROBE_GEMM, 280.0),
        Expectation("cpu: AMD EPYC x2", PROBE_GEMM, 0.05),
    ]
    assert expectation_for(rows, PROBE_GEMM, "NVIDIA A100-SXM4-80GB", None) == rows[1]
    assert expectation_for(rows, PROBE_GEMM, "NVIDIA A100-SXM4-40GB", None) == rows[0]
    assert expectation_for(rows, PROBE_GEMM, "NVIDIA H200", None) is None
    assert expectation_for(rows, PROBE_GEMM, None, "cpu: AMD EPYC x2") == rows[2]
    spec = Expectation("*", PROBE_GEMM, 1.0, limit=True)
    assert expectation_for([*rows, spec], PROBE_GEMM, "NVIDIA A100-SXM4-80GB", None) == spec


def test_the_probes_run_on_this_cpu() -> None:
    rate = preflight.gemm_probe(torch.device("cpu"), "fp32", size=128)
    assert 0 < rate < 100  # TFLOP/s: a CPU core does well under one
    assert preflight.gemm_probe(torch.device("cpu"), "fp16", size=64) > 0  # half precision as bf16 on a CPU


def test_the_event_round_trips_and_older_readers_keep_what_they_know() -> None:
    report = Preflight(
        rank=1, device="cpu: X x2", stopped=True, seconds=0.4,
        checks=(PreflightCheck(name="ecc", status="fail", detail="3 errors"),
                PreflightCheck(name=PROBE_GEMM, status="pass", detail="ok", value=1.5, unit="TFLOP/s")),
    )  # fmt: skip
    doc = report.to_payload()
    assert parse_event("preflight", doc) == report
    assert parse_event("preflight", {**doc, "checks": [1, {"name": "x", "status": "bogus"}]}) == Preflight(
        rank=1, device="cpu: X x2", stopped=True, seconds=0.4, checks=(PreflightCheck(name="x"),)
    )
