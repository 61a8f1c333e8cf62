"""The pre-flight: is this machine healthy before the run spends its hours on it?

Before training, every rank checks (``run_preflight``): on a GPU, NVML's view of its board
(uncorrected ECC errors and rows waiting to be remapped, the clock-slowdown reasons NVML reports,
other processes computing on it) and its SM clock under the GEMM probe against its maximum; on
every device, a short all-reduce (one element, the smallest message) and a matrix-multiply probe
(``GEMM_SIZE``, in the run's precision) against the expected values of its machine class (the
reference table's, or the spec's own limits), judged like the verdicts: outside the expectation's
band it warns, beyond ``FAIL_RATIO`` of it it fails. Each rank sends its checks as one
``preflight`` event. The ranks then agree: when any rank failed a check and the spec says
``on_failure: stop``, every rank stops before training with the reasons of all of them; with
``warn`` the run trains and its result says what failed.

The judging is pure functions over readings (``HealthReadings``, the probes' numbers), so a CPU
runs them on recorded, NVML-shaped readings exactly as a GPU rank runs them on live ones;
``read_health`` is the one function that calls NVML. Torch is imported only by the probes.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mlbench_worker.preflight_config import Expectation, PreflightConfig, device_class
from mlbench_worker.wire import (
    PROBE_ALLREDUCE,
    PROBE_GEMM,
    CheckStatus,
    Preflight,
    PreflightCheck,
    emit,
)

if TYPE_CHECKING:
    import torch

    from mlbench_worker.context import RunContext

FAIL_RATIO = 2.0
"""A probe this many times slower than expected fails (outside its band, it warns)."""
DEFAULT_BAND = 0.25
"""The band of an expectation that carries none (a spec's own limit is a limit, not a band)."""
GEMM_SIZE = {"cuda": 4096, "cpu": 512}
GEMM_REPEATS, GEMM_WARMUP = 10, 3
ALLREDUCE_REPEATS, ALLREDUCE_WARMUP = 30, 5
CLOCK_WARN, CLOCK_FAIL = 0.8, 0.5
"""The SM clock under load as a share of its maximum below which the check warns, fails."""

# NVML's clock-slowdown ("throttle") reasons: the ones that mean the board is held back
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x8, 0x20, 0x40, 0x80
SW_POWER_CAP = 0x4
SLOWDOWN_REASONS = {
    HW_SLOWDOWN: "hardware slowdown",
    SW_THERMAL: "software thermal slowdown",
    HW_THERMAL: "hardware thermal slowdown",
    HW_POWER_BRAKE: "power brake",
}


class PreflightFailed(RuntimeError):
    """A failed pre-flight stopped the run (``on_failure: stop``); the message has every reason."""


@dataclass(frozen=True)
class HealthReadings:
    """What NVML says of one GPU's health; None where the board does not report it."""

    ecc_uncorrected: int | None = None  # volatile: since the driver loaded
    remapped_pending: bool | None = None
    remapped_failed: bool | None = None
    slowdown_reasons: int | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    processes: tuple[tuple[int, float | None], ...] | None = None  # (pid, MiB) computing on it


def read_health(nvml: ModuleType, handle: Any) -> HealthReadings:
    """Read one GPU's health through NVML (``pynvml``); a value the board does not report (or
    whose read fails) is None."""

    def read(fn: str, *args: Any) -> Any:
        with contextlib.suppress(nvml.NVMLError, AttributeError):
            return getattr(nvml, fn)(handle, *args)
        return None

    ecc = read("nvmlDeviceGetTotalEccErrors", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
    remapped = read("nvmlDeviceGetRemappedRows")  # (corrected, uncorrected, pending, failure)
    reasons = read("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = read("nvmlDeviceGetCurrentClocksThrottleReasons")
    running = read("nvmlDeviceGetComputeRunningProcesses")
    processes = None
    if running is not None:
        processes = tuple(
            (int(p.pid), None if p.usedGpuMemory is None else p.usedGpuMemory / 2**20) for p in running
        )
    clock = read("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
    top = read("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM)
    return HealthReadings(
        ecc_uncorrected=None if ecc is None else int(ecc),
        remapped_pending=None if remapped is None else bool(remapped[2]),
        remapped_failed=None if remapped is None else bool(remapped[3]),
        slowdown_reasons=None if reasons is None else int(reasons),
        sm_clock_mhz=None if clock is None else float(clock),
        max_sm_clock_mhz=None if top is None else float(top),
        processes=processes,
    )


def judge_health(readings: HealthReadings, own_pids: Iterable[int]) -> list[PreflightCheck]:
    """The GPU's ECC, clock-slowdown and other-process checks from its readings."""
    checks = []
    bad = []
    if readings.ecc_uncorrected:
        bad.append(f"{readings.ecc_uncorrected} uncorrected ECC error(s) since the driver loaded")
    if readings.remapped_failed:
        bad.append("a row remapping failed (the board needs service)")
    elif readings.remapped_pending:
        bad.append("rows wait to be remapped (reset the GPU)")
    known = readings.ecc_uncorrected is not None or readings.remapped_pending is not None
    checks.append(
        PreflightCheck(name="ecc", status="fail", detail="; ".join(bad))
        if bad
        else PreflightCheck(
            name="ecc",
            status="pass" if known else "skip",
            detail="no uncorrected errors" if known else "the board reports no ECC counters",
        )
    )
    checks.append(_throttle(readings.slowdown_reasons))
    checks.append(_processes(readings.processes, set(own_pids)))
    return checks


def _throttle(reasons: int | None) -> PreflightCheck:
    if reasons is None:
        return PreflightCheck(name="throttle", status="skip", detail="NVML reports no slowdown reasons")
    held = [words for bit, words in SLOWDOWN_REASONS.items() if reasons & bit]
    if held:
        return PreflightCheck(name="throttle", status="fail", detail="clocks held back: " + ", ".join(held))
    if reasons & SW_POWER_CAP:
        return PreflightCheck(name="throttle", status="warn", detail="at its power cap before any work")
    return PreflightCheck(name="throttle", status="pass", detail="no slowdown")


def _processes(processes: tuple[tuple[int, float | None], ...] | None, mine: set[int]) -> PreflightCheck:
    if processes is None:
        return PreflightCheck(name="processes", status="skip", detail="NVML lists no processes")
    others = [(pid, mib) for pid, mib in processes if pid not in mine]
    if not others:
        return PreflightCheck(name="processes", status="pass", detail="no other process on this GPU")
    shown = ", ".join(f"pid {pid}" + ("" if mib is None else f" ({mib:,.0f} MiB)") for pid, mib in others[:4])
    detail = f"other processes compute on this GPU: {shown}"
    return PreflightCheck(name="processes", status="fail", detail=detail)


def judge_clocks(readings: HealthReadings) -> PreflightCheck:
    """The SM clock, read while the GEMM probe ran, against the board's maximum."""
    clock, top = readings.sm_clock_mhz, readings.max_sm_clock_mhz
    if clock is None or not top:
        return PreflightCheck(name="clocks", status="skip", detail="NVML reports no SM clocks")
    share = clock / top
    status: CheckStatus = "fail" if share < CLOCK_FAIL else "warn" if share < CLOCK_WARN else "pass"
    detail = f"SM clock {clock:.0f} of {top:.0f} MHz under load ({share:.0%})"
    return PreflightCheck(name="clocks", status=status, detail=detail, value=clock, expected=top, unit="MHz")


def judge_probe(
    name: str, value: float | None, unit: str, expectation: Expectation | None, *, higher_is_better: bool
) -> PreflightCheck:
    """A probe's figure against its machine's expectation: within the band passes, outside it
    warns, ``FAIL_RATIO`` times slower fails; without an expectation it only reports."""
    if value is None or value <= 0:
        return PreflightCheck(name=name, status="skip", detail="the probe measured nothing", unit=unit)
    shown = f"{value:.3g} {unit}"
    if expectation is None:
        detail = f"{shown} (no expected value for this machine)"
        return PreflightCheck(name=name, status="pass", detail=detail, value=value, unit=unit)
    expected = expectation.value
    slower = expected / value if higher_is_better else value / expected
    band = expectation.band if expectation.band is not None else DEFAULT_BAND
    deviation = value / expected - 1
    side = "above" if deviation > 0 else "below"
    where = f"{shown}, {abs(deviation):.0%} {side} expected {expected:.3g} {unit}"
    source = f" ({expectation.source})" if expectation.source else ""
    status: CheckStatus
    detail = f"{where}, band +-{band:.0%}{source}"
    if expectation.limit:
        status = "fail" if slower > 1 else "pass"
        detail = f"{shown}, limit {expected:.3g} {unit}{source}"
    elif slower >= FAIL_RATIO:
        status = "fail"
    elif slower > 1 + band:
        status = "warn"
    else:
        status = "pass"
    return PreflightCheck(name=name, status=status, detail=detail, value=value, expected=expected, unit=unit)


def expectation_for(
    expectations: Sequence[Expectation], figure: str, gpu_name: str | None, cpu_class: str | None
) -> Expectation | None:
    """The first expectation of ``figure`` for this rank's machine: the spec's own limit (machine
    ``*``) first, then its GPU model's, else its CPU's (``cpu: MODEL xN``)."""
    mine = [e for e in expectations if e.figure == figure]
    for e in mine:
        if e.machine == "*":
            return e
    if gpu_name:
        model = device_class(gpu_name, [e.machine for e in mine if not e.machine.startswith("cpu: ")])
        return next((e for e in mine if e.machine == model), None)
    return next((e for e in mine if e.machine == cpu_class), None)


def gemm_probe(device: torch.device, precision: str, size: int | None = None) -> float:
    """The median rate (TFLOP/s) of ``size`` x ``size`` matrix products in the run's precision."""
    import torch

    n = size or GEMM_SIZE.get(device.type, GEMM_SIZE["cpu"])
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    if device.type == "cpu" and dtype is torch.float16:
        dtype = torch.bfloat16  # CPUs multiply half precision as bfloat16 (or slowly)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rates = []
    for i in range(GEMM_WARMUP + GEMM_REPEATS):
        sync()
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        seconds = time.perf_counter() - start
        if i >= GEMM_WARMUP and seconds > 0:
            rates.append(2 * n**3 / seconds / 1e12)
    return statistics.median(rates)


def allreduce_probe(ctx: RunContext) -> float:
    """The median latency (us) of a one-element all-reduce across the run's ranks (the slowest
    rank's, as task 0a measures)."""
    import torch

    tensor = torch.zeros(1, device=ctx.device)
    sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
    for _ in range(ALLREDUCE_WARMUP):
        ctx.comm.all_reduce(tensor, "sum")
    sync()
    ctx.comm.barrier()
    times = []
    for _ in range(ALLREDUCE_REPEATS):
        start = time.perf_counter()
        ctx.comm.all_reduce(tensor, "sum")
        sync()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor([statistics.median(times)], dtype=torch.float64, device=ctx.comm.control_device)
    ctx.comm.all_reduce(slowest, "max")
    return float(slowest.item()) * 1e6


def find_gpu_handle(nvml: ModuleType, ctx: RunContext) -> Any:
    """This rank's GPU as NVML knows it (by the UUID torch reports)."""
    import torch

    uuid = str(torch.cuda.get_device_properties(ctx.device).uuid)
    return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid[:4] in ("GPU-", "MIG-") else f"GPU-{uuid}")


def rank_checks(
    ctx: RunContext, config: PreflightConfig, nvml: ModuleType | None
) -> tuple[list[PreflightCheck], str | None]:
    """This rank's checks (NVML health on a GPU, the GEMM probe with the clocks under it, the
    all-reduce probe) and its device's name."""
    from mlbench_worker.telemetry.fingerprint import cpu_model

    checks: list[PreflightCheck] = []
    gpu_name = None
    handle = None
    on_gpu = ctx.device.type == "cuda"
    if on_gpu:
        import torch

        gpu_name = torch.cuda.get_device_name(ctx.device)
        if nvml is None:
            checks.append(PreflightCheck(name="nvml", status="skip", detail="nvidia-ml-py is not installed"))
        else:
            try:
                nvml.nvmlInit()
                handle = find_gpu_handle(nvml, ctx)
            except nvml.NVMLError as exc:
                why = f"NVML cannot read this GPU: {exc}"
                checks.append(PreflightCheck(name="nvml", status="skip", detail=why))
            else:
                checks += judge_health(read_health(nvml, handle), own_pids={os.getpid()})
    cpu_class = f"cpu: {cpu_model()} x{os.cpu_count()}"
    expectations = config.expectations
    gemm = gemm_probe(ctx.device, ctx.config.precision)
    if handle is not None and nvml is not None:
        checks.append(judge_clocks(_under_load(ctx, nvml, handle)))
    gemm_expected = expectation_for(expectations, PROBE_GEMM, gpu_name, cpu_class)
    checks.append(judge_probe(PROBE_GEMM, gemm, "TFLOP/s", gemm_expected, higher_is_better=True))
    latency = allreduce_probe(ctx)
    latency_expected = expectation_for(expectations, PROBE_ALLREDUCE, gpu_name, cpu_class)
    checks.append(judge_probe(PROBE_ALLREDUCE, latency, "us", latency_expected, higher_is_better=False))
    return checks, gpu_name or cpu_class


def _under_load(ctx: RunContext, nvml: ModuleType, handle: Any) -> HealthReadings:
    """The GPU's clocks read while matrix products keep it busy."""
    import torch

    n = GEMM_SIZE["cuda"]
    a = torch.randn(n, n, device=ctx.device)
    for _ in range(20):
        torch.mm(a, a)
    readings = read_health(nvml, handle)
    torch.cuda.synchronize(ctx.device)
    return readings


def failures_text(failed: Sequence[tuple[int, PreflightCheck]]) -> str:
    """``rank 0: ecc: 3 uncorrected ECC error(s) ...; rank 1: ...``"""
    return "; ".join(f"rank {rank}: {check.name}: {check.detail}" for rank, check in failed)


def run_preflight(
    ctx: RunContext, nvml_import: Callable[[], ModuleType | None] | None = None
) -> Preflight | None:
    """Run the pre-flight on this rank, send its ``preflight`` event and agree with the other
    ranks; raises ``PreflightFailed`` on every rank when one failed and the run stops for it."""
    config = ctx.config.preflight
    if config is None:
        return None
    started = time.perf_counter()
    nvml = (nvml_import or _import_nvml)() if ctx.device.type == "cuda" else None
    checks, device = rank_checks(ctx, config, nvml)
    everyone = ctx.comm.allgather_object([(ctx.rank, c) for c in checks if c.status == "fail"])
    failed = [pair for pairs in everyone for pair in pairs]
    stop = bool(failed) and config.on_failure == "stop"
    seconds = time.perf_counter() - started
    report = Preflight(rank=ctx.rank, device=device, checks=tuple(checks), stopped=stop, seconds=seconds)
    emit(ctx.reporter, report)
    words = ", ".join(f"{c.name} {c.status}" for c in checks)
    ctx.log(f"pre-flight: {words}", all_ranks=True)
    if stop:
        raise PreflightFailed(f"pre-flight failed: {failures_text(failed)}")
    if failed:
        ctx.log(f"pre-flight failed, training anyway (on_failure: warn): {failures_text(failed)}")
    return report


def _import_nvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml
