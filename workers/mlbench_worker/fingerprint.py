"""The environment fingerprint stored with every run: what produced these numbers."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import torch

from mlbench_worker import __version__
from mlbench_worker.context import RunContext, python_version


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux) or the platform module."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def node_name() -> str:
    """The node this rank runs on: Slurm's node name (several slurmd may share one host, and node
    names need not be host names), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def fingerprint(ctx: RunContext) -> dict[str, Any]:
    """Versions, hardware and thread settings of this rank (rank 0 reports it for the run)."""
    info: dict[str, Any] = {
        "worker_version": __version__,
        "python": python_version(),
        "torch": torch.__version__,
        "backend": ctx.config.backend,
        "backend_version": ctx.comm.version(),
        "launcher": ctx.rendezvous.launcher,
        "world_size": ctx.world_size,
        "hostname": socket.gethostname(),
        "node": node_name(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads_per_rank": ctx.config.threads_per_rank,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "device": str(ctx.device),
        "precision": ctx.config.precision,
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    if ctx.config.backend == "mpi":
        try:
            import mpi4py
            from mpi4py import MPI

            info["mpi4py"] = mpi4py.__version__
            info["mpi_library"] = MPI.Get_library_version().strip().splitlines()[0]
            info["mpi_standard"] = ".".join(str(v) for v in MPI.Get_version())
        except ImportError:
            pass
    if ctx.device.type == "cuda":
        props = torch.cuda.get_device_properties(ctx.device)
        info["gpu_model"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["gpu_count"] = torch.cuda.device_count()
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    else:
        info["gpu_model"] = None
    return info
