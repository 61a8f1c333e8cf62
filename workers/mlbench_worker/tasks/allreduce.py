"""Task 0a: all-reduce latency and bandwidth over a sweep of tensor sizes.

Sizes are the unique integers of ``np.logspace(sizes_min_exp, sizes_max_exp, num_sizes)``
(MLBench: 0, 8, 80). For every dtype and size: one preallocated tensor (a view of a buffer of the
largest size), ``warmup`` untimed all-reduces, a barrier, then ``repetitions`` timed all-reduces.
A repetition's latency is the slowest rank's (the collective is done when the last rank is), and
the reported bandwidths use the median latency: algbw = bytes / latency, busbw = algbw * 2(n-1)/n
(nccl-tests' definition), in GB/s (1e9 bytes). Metrics: ``allreduce_<dtype>_latency_p50``,
``_latency_p99`` and ``_latency_max`` (seconds), ``_algbw`` and ``_busbw``, each with ``step`` =
size in elements, and every timed repetition's latency after the warm-up as
``allreduce_<dtype>_iteration_s`` (one value per repetition at that step, as nccl-tests' ``-I``
records each iteration), so a comparison of two sweeps rests on the repetitions themselves.

One rank moves no data: its all-reduce time is launch and synchronisation only, so a world of
one reports latency and no bandwidth. A bandwidth above the rank's plausibility ceiling
(``busbw_ceiling``) cannot be a transfer and is flagged where it is printed; the ``allreduce_sweep``
event tells the results both facts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mlbench_worker import hyperparams as hps
from mlbench_worker.comm import Comm
from mlbench_worker.context import RunContext
from mlbench_worker.faults import maybe_inject_fault
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.wire import ALLREDUCE_ITERATION, AllreduceSweep, RunStart, allreduce_metric, emit

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def sweep_sizes(min_exp: float, max_exp: float, num: int) -> list[int]:
    """Unique element counts of ``np.logspace(min_exp, max_exp, num)``, ascending, at least 1."""
    if num < 1:
        raise ValueError(f"num_sizes must be >= 1, got {num}")
    if max_exp < min_exp:
        raise ValueError(f"sizes_max_exp ({max_exp}) is below sizes_min_exp ({min_exp})")
    return sorted({max(1, int(x)) for x in np.logspace(min_exp, max_exp, num)})


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: algbw * 2(n-1)/n (equals algbw for n = 1)."""
    if world_size <= 1:
        return algbw
    return algbw * 2.0 * (world_size - 1) / world_size


# CPU ranks: host memory bandwidth bounds any transfer between them; 1,000 GB/s is above a
# dual-socket, 12-channel DDR5 server (~920 GB/s), so only impossible values pass it.
CPU_BUSBW_CEILING_GBPS = 1000.0
# A GPU whose memory clock torch does not report: above the fastest HBM shipped (~8,000 GB/s).
GPU_FALLBACK_CEILING_GBPS = 10_000.0
ONE_RANK_NOTE = "one rank: an all-reduce moves no data, so only latency is reported (no bandwidth)"


@dataclass(frozen=True)
class Ceiling:
    """The largest bus bandwidth this rank's device could carry, and where the number comes from."""

    gbps: float
    basis: str


def busbw_ceiling(
    device_type: str, memory_clock_khz: int | None = None, bus_width_bits: int | None = None
) -> Ceiling:
    """The plausibility ceiling of an all-reduce's bus bandwidth on a device kind (GB/s).

    No link moves data into or out of a device faster than the device's own memory can read and
    write it, so a GPU's ceiling is its peak memory bandwidth (double data rate: 2 x clock x bus
    width; 3,350 GB/s for an H100 SXM); CPU ranks use ``CPU_BUSBW_CEILING_GBPS``.
    """
    if device_type != "cuda":
        return Ceiling(CPU_BUSBW_CEILING_GBPS, "host memory bandwidth (CPU ranks)")
    if memory_clock_khz and bus_width_bits:
        gbps = 2 * memory_clock_khz * 1e3 * bus_width_bits / 8 / 1e9
        return Ceiling(round(gbps, 1), "the GPU's peak memory bandwidth")
    return Ceiling(GPU_FALLBACK_CEILING_GBPS, "fastest GPU memory made (this GPU's clock is unknown)")


def device_ceiling(device: torch.device) -> Ceiling:
    """``busbw_ceiling`` for ``device`` (asks CUDA for the memory clock and bus width)."""
    if device.type != "cuda":
        return busbw_ceiling(device.type)
    props = torch.cuda.get_device_properties(device)
    return busbw_ceiling(
        "cuda", getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    )


@dataclass(frozen=True)
class SizeResult:
    """The measurement of one (dtype, size)."""

    dtype: str
    size: int
    nbytes: int
    latency_p50: float
    latency_p99: float
    latency_max: float
    algbw: float
    busbw: float
    latencies: tuple[float, ...] = ()  # every timed repetition, in order


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def time_allreduce(
    comm: Comm, tensor: torch.Tensor, repetitions: int, warmup: int, sync: Callable[[], None]
) -> np.ndarray:
    """Per-repetition latencies (seconds), each the maximum over ranks."""
    for _ in range(warmup):
        comm.all_reduce(tensor, "sum")
    sync()
    comm.barrier()
    times = torch.empty(repetitions, dtype=torch.float64)
    clock = time.perf_counter
    for i in range(repetitions):
        start = clock()
        comm.all_reduce(tensor, "sum")
        sync()
        times[i] = clock() - start
    slowest = times.to(comm.control_device)
    comm.all_reduce(slowest, "max")
    return slowest.cpu().numpy()


def measure(
    comm: Comm,
    dtype_name: str,
    buffer: torch.Tensor,
    size: int,
    repetitions: int,
    warmup: int,
    sync: Callable[[], None],
) -> SizeResult:
    """Time the all-reduce of the first ``size`` elements of ``buffer``."""
    tensor = buffer[:size]
    latencies = time_allreduce(comm, tensor, repetitions, warmup, sync)
    p50 = float(np.percentile(latencies, 50))
    p99 = float(np.percentile(latencies, 99))
    nbytes = size * buffer.element_size()
    algbw = nbytes / p50 / 1e9 if p50 > 0 else float("inf")
    busbw = bus_bandwidth(algbw, comm.world_size)
    every = tuple(float(x) for x in latencies)
    return SizeResult(dtype_name, size, nbytes, p50, p99, float(latencies.max()), algbw, busbw, every)


def format_row(result: SizeResult, moves_data: bool, ceiling: Ceiling) -> str:
    """One progress line of the sweep: no bandwidth for one rank, a flag above the ceiling."""
    head = (
        f"{result.dtype:>5} {result.size:>10} {result.nbytes:>12} {result.latency_p50 * 1e6:>10.1f} "
        f"{result.latency_p99 * 1e6:>10.1f}"
    )
    if not moves_data:
        return f"{head} {'-':>10} {'-':>10}"
    row = f"{head} {result.algbw:>10.3f} {result.busbw:>10.3f}"
    if result.busbw > ceiling.gbps:
        row += f"  ! above the {ceiling.gbps:,.0f} GB/s ceiling ({ceiling.basis}): not a transfer rate"
    return row


def run(ctx: RunContext) -> Outcome:
    """Run the sweep on every rank; rank 0 reports the metrics."""
    hp = ctx.hyperparameters(hps.AllReduce)
    sizes = sweep_sizes(float(hp.sizes_min_exp), float(hp.sizes_max_exp), hp.num_sizes)
    repetitions, warmup = hp.repetitions, hp.warmup
    dtype_names = list(hp.dtypes)
    sync = _synchronizer(ctx.device)
    moves_data = ctx.world_size > 1
    ceiling = device_ceiling(ctx.device)
    if ctx.is_main:
        sweep = AllreduceSweep(
            world_size=ctx.world_size,
            latency_only=not moves_data,
            note=None if moves_data else ONE_RANK_NOTE,
            busbw_ceiling_gbps=ceiling.gbps,
            ceiling_basis=ceiling.basis,
        )
        emit(ctx.reporter, sweep)
    measurable = sum(ctx.comm.supports_dtype(DTYPES[d]) for d in dtype_names)
    # MLPerf's sample counts for a sweep: every timed all-reduce, and the repetitions behind each point
    ctx.mark_run_start(
        RunStart(train_samples=len(sizes) * measurable * repetitions, eval_samples=repetitions)
    )
    maybe_inject_fault(ctx.rank, 0)
    ctx.log(
        f"all-reduce sweep: {len(sizes)} sizes from {sizes[0]} to {sizes[-1]} elements, "
        f"{repetitions} repetitions (+{warmup} warm-up), dtypes {', '.join(dtype_names)}, "
        f"{ctx.world_size} rank(s) on {ctx.config.backend}"
    )
    if not moves_data:
        ctx.log(ONE_RANK_NOTE)
    measured = 0
    for dtype_name in dtype_names:
        dtype = DTYPES[dtype_name]
        if not ctx.comm.supports_dtype(dtype):
            ctx.log(f"skipping {dtype_name}: the {ctx.config.backend} backend cannot all-reduce it")
            continue
        buffer = torch.zeros(sizes[-1], dtype=dtype, device=ctx.device)
        ctx.log(
            f"{'dtype':>5} {'elements':>10} {'bytes':>12} {'p50 (us)':>10} {'p99 (us)':>10} "
            f"{'algbw GB/s':>10} {'busbw GB/s':>10}"
        )
        for size in sizes:
            ctx.comm.barrier()
            result = measure(ctx.comm, dtype_name, buffer, size, repetitions, warmup, sync)
            measured += 1
            if ctx.is_main:
                ctx.reporter.metric(
                    allreduce_metric(dtype_name, "latency_p50"), result.latency_p50, step=size
                )
                ctx.reporter.metric(
                    allreduce_metric(dtype_name, "latency_p99"), result.latency_p99, step=size
                )
                ctx.reporter.metric(
                    allreduce_metric(dtype_name, "latency_max"), result.latency_max, step=size
                )
                iteration = allreduce_metric(dtype_name, ALLREDUCE_ITERATION)
                for latency in result.latencies:
                    ctx.reporter.metric(iteration, latency, step=size)
                if moves_data:
                    ctx.reporter.metric(allreduce_metric(dtype_name, "algbw"), result.algbw, step=size)
                    ctx.reporter.metric(allreduce_metric(dtype_name, "busbw"), result.busbw, step=size)
            ctx.log(format_row(result, moves_data, ceiling))
        del buffer
    if measured == 0:
        raise ValueError(f"none of the dtypes {dtype_names} can be all-reduced on {ctx.config.backend}")
    return Outcome("success", f"measured {measured} (dtype, size) points", points=measured)
