"""Where this rank stands: process group, device, seeds, threads, from its rendezvous.

The rendezvous itself is read from the launcher's environment in ``mlbench_worker.launch.detect``.
``RunContext`` is the one object a task receives.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from mlbench_worker import rank_env
from mlbench_worker.comm import Comm, MpiComm, SingleComm, TorchComm
from mlbench_worker.config import ConfigError, WorkerConfig
from mlbench_worker.devices.placement import CudaQuery, GpuQuery, Placement, place
from mlbench_worker.env_settings import parse_collective_timeout
from mlbench_worker.launch.rendezvous import Rendezvous
from mlbench_worker.rank_context import RankContext


class ReporterLike(Protocol):
    """What the runtime needs from ``mlbench_worker.reporting.reporter.Reporter`` (see its docs)."""

    def metric(
        self,
        name: str,
        value: float,
        *,
        step: int | None = None,
        epoch: float | None = None,
        t: float | None = None,
    ) -> None: ...

    def log(self, text: str, stream: str = "stdout") -> None: ...

    def event(self, kind: str, payload: dict[str, Any]) -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def close(self, timeout: float = 10.0) -> None: ...


def init_comm(config: WorkerConfig, rdv: Rendezvous, device: torch.device | None = None) -> Comm:
    """Join the process group of the configured backend and check the world size matches the plan.

    For nccl, ``device`` (this rank's GPU, from ``select_device``) is bound to the process group,
    so NCCL forms its communicator on that GPU at once instead of guessing it from the rank.
    """
    if rdv.world_size != config.world_size:
        raise ConfigError(
            f"the launcher started {rdv.world_size} rank(s) but the run plans {config.world_size} "
            f"(launcher: {rdv.launcher})"
        )
    if config.world_size == 1 and rdv.launcher == "single":
        return SingleComm(config.backend)
    if config.backend == "mpi":
        if rdv.launcher not in ("mpi", "slurm", "single"):
            raise ConfigError(
                "backend 'mpi' must be launched with mpiexec or srun --mpi=pmix "
                "(no MPI rank in the environment)"
            )
        return MpiComm()
    import torch.distributed as dist

    if config.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("backend 'nccl' needs CUDA GPUs, and none is visible to this rank")
    if rdv.master_addr is None or rdv.master_port is None:
        raise ConfigError("rendezvous needs MASTER_ADDR and MASTER_PORT (or PET_MASTER_ADDR/PORT)")
    try:
        seconds = parse_collective_timeout(os.environ.get(rank_env.COLLECTIVE_TIMEOUT_S))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    timeout = datetime.timedelta(seconds=seconds)
    bound = device if config.backend == "nccl" and device is not None and device.type == "cuda" else None
    dist.init_process_group(
        backend=config.backend,
        init_method=f"tcp://{rdv.master_addr}:{rdv.master_port}",
        rank=rdv.rank,
        world_size=rdv.world_size,
        timeout=timeout,
        device_id=bound,
    )
    return TorchComm(config.backend)


def select_device(config: WorkerConfig, rdv: Rendezvous, query: GpuQuery | None = None) -> Placement:
    """GPU ``LOCAL_RANK`` of the visible ones for GPU runs, checked against the spec's model; else CPU.

    Call it before ``init_comm`` so NCCL binds the right GPU and a wrong machine fails before any
    rendezvous. ``query`` stands in for CUDA in tests.
    """
    if config.device != "cuda":
        return Placement(torch.device("cpu"))
    placement = place(
        CudaQuery() if query is None else query,
        local_rank=rdv.local_rank,
        local_world_size=rdv.local_world_size,
        rank=rdv.rank,
        expected=config.gpu_type,
        strict=config.gpu_type_strict,
    )
    if placement.mismatch is not None:
        warning = f"[rank {rdv.rank}] warning: {placement.mismatch} (hardware.gpu.strict: false)"
        print(warning, file=sys.stderr, flush=True)
    return placement


def limit_threads(threads: int) -> None:
    """Cap intra-op threads so ranks sharing a machine do not oversubscribe its cores."""
    os.environ[rank_env.OMP_NUM_THREADS] = str(threads)
    os.environ[rank_env.MKL_NUM_THREADS] = str(threads)
    torch.set_num_threads(threads)
    # raises once the inter-op pool has started (a second call in-process): harmless
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(max(1, min(threads, 2)))


def seed_everything(seed: int) -> None:
    """Same seed on every rank: identical initial models; per-rank streams derive from it."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


@dataclass
class RunContext(RankContext):
    """What a PyTorch task gets: ``RankContext`` with the process group and the rank's device."""

    comm: Comm
    device: torch.device
    placement: Placement | None = None  # set by the runtime (None: a CPU context built by hand)
    host_allocator: dict[str, object] = field(default_factory=dict)  # what the runtime did to malloc

    def on_local_rank0(self, prepare: Callable[[], object]) -> None:
        """Run ``prepare`` (a download, an unpacking into a shared directory) on local rank 0
        while the other ranks wait; they are released even when it fails."""
        if self.rendezvous.local_rank == 0:
            try:
                prepare()
            finally:
                self.comm.barrier()
        else:
            self.comm.barrier()


def python_version() -> str:
    return sys.version.split()[0]
