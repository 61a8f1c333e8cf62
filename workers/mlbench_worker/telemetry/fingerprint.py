"""The environment fingerprint stored with every run: what produced these numbers.

Rank 0 reports it once, with a short entry per rank (host, device, GPU model and count) that
every rank contributes, so a run whose ranks ran on different GPUs says so.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from mlbench_worker import __version__, rank_env
from mlbench_worker.context import RunContext, python_version

_DRIVER_RE = re.compile(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s")


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
    return os.environ.get(rank_env.SLURMD_NODENAME) or socket.gethostname()


def parse_driver_version(text: str) -> str | None:
    """The version in ``/proc/driver/nvidia/version``'s text (``... Kernel Module  550.54.15 ...``,
    or ``... Open Kernel Module for x86_64  570.133.20 ...``)."""
    match = _DRIVER_RE.search(text)
    return match.group(1) if match else None


def driver_version() -> str | None:
    """The NVIDIA driver's version: from the kernel module, else from ``nvidia-smi``; None if neither."""
    try:
        found = parse_driver_version(Path("/proc/driver/nvidia/version").read_text(encoding="utf-8"))
    except OSError:
        found = None
    smi = None if found is not None else shutil.which("nvidia-smi")
    if smi is None:
        return found
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


def rank_facts(ctx: RunContext) -> dict[str, Any]:
    """What this rank ran on: host, device and, on a GPU, its model, memory and how many it sees."""
    facts: dict[str, Any] = {
        "rank": ctx.rank,
        "local_rank": ctx.rendezvous.local_rank,
        "hostname": socket.gethostname(),
        "node": node_name(),
        "device": str(ctx.device),
        "host_allocator_tuned": bool(ctx.host_allocator.get("tuned")),
    }
    placement = ctx.placement
    if placement is not None and placement.gpu is not None:
        gpu = placement.gpu
        facts.update(
            gpu_model=gpu.name,
            gpu_memory_gib=round(gpu.memory_bytes / 2**30, 1),
            gpu_uuid=gpu.uuid,
            gpu_count=placement.visible_gpus,
            gpu_type_matches=placement.mismatch is None,
        )
    return facts


def gpu_summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-wide GPU facts from the per-rank entries: distinct GPUs used and their models."""
    used = {(r["hostname"], r.get("gpu_uuid") or r["device"]) for r in ranks if r.get("gpu_model")}
    return {
        "gpus_used": len(used),
        "gpu_models": sorted({str(r["gpu_model"]) for r in ranks if r.get("gpu_model")}),
    }


def fingerprint(ctx: RunContext, ranks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Versions, hardware and thread settings of this rank, plus ``ranks`` (every rank's
    ``rank_facts``, gathered by the runtime) when given; rank 0 reports it for the run."""
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
        "omp_num_threads": os.environ.get(rank_env.OMP_NUM_THREADS),
        "device": str(ctx.device),
        "precision": ctx.config.precision,
        "cuda_graphs": ctx.config.implementation.cuda_graphs,
        "host_allocator": ctx.host_allocator,
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
        info["nvidia_driver"] = driver_version()
    else:
        info["gpu_model"] = None
    if ranks is not None:
        info["ranks"] = ranks
        info["rank_nodes"] = [r["node"] for r in ranks]  # where each rank landed (placement checks)
        info.update(gpu_summary(ranks))
    return info
