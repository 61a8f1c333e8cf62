"""The memory and CPU limits of this process's cgroup: a Kubernetes pod's own limits, read from inside.

A container's limits are its cgroup's: ``memory.max`` and ``cpu.max`` under cgroup v2 (GKE, EKS,
KIND on current kernels), ``memory.limit_in_bytes`` and ``cpu.cfs_quota_us``/``cpu.cfs_period_us``
under v1. Reading them needs no change to the manifests and also finds the limits of a local
container or a Slurm job step. The tightest limit on the way from this cgroup up to the root
applies. ``None`` means unlimited (or no cgroup files to read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_V1_UNLIMITED = 2**62  # v1 writes "no limit" as a page-rounded 2**63-1


@dataclass(frozen=True)
class Limits:
    """Memory in bytes and CPU in cores, each None when unlimited."""

    memory_bytes: int | None = None
    cpu_cores: float | None = None


def cgroup_limits(proc_cgroup: str | None = None, root: Path = Path("/sys/fs/cgroup")) -> Limits:
    """This process's limits; ``proc_cgroup`` is the text of ``/proc/self/cgroup`` (read when None)."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text(encoding="utf-8")
        except OSError:
            return Limits()
    memory: list[float] = []
    cpu: list[float] = []
    for line in proc_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path:
            continue
        if hid == "0" and not controllers:  # the v2 (unified) hierarchy
            for d in _dirs(root, path):
                memory += _read_v2_memory(d / "memory.max")
                cpu += _read_v2_cpu(d / "cpu.max")
            continue
        names = controllers.split(",")
        if "memory" in names:
            for d in _dirs(root / "memory", path):
                memory += _read_v1_memory(d / "memory.limit_in_bytes")
        if "cpu" in names:
            for base in (root / controllers, root / "cpu"):
                if base.is_dir():
                    for d in _dirs(base, path):
                        cpu += _read_v1_cpu(d)
                    break
    return Limits(
        memory_bytes=int(min(memory)) if memory else None,
        cpu_cores=min(cpu) if cpu else None,
    )


def _dirs(base: Path, path: str) -> list[Path]:
    """The cgroup's directory and its ancestors under ``base``; just ``base`` when this mount
    namespace does not show the path (a container without its own cgroup namespace)."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    found = [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
    return [d for d in found if d.is_dir()] if found[0].is_dir() else [base]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _read_v2_memory(path: Path) -> list[float]:
    text = _read(path)
    return [float(text)] if text and text != "max" and text.isdigit() else []


def _read_v2_cpu(path: Path) -> list[float]:
    quota, _, period = (_read(path) or "").partition(" ")
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        return [int(quota) / int(period)]
    return []


def _read_v1_memory(path: Path) -> list[float]:
    text = _read(path)
    return [float(text)] if text and text.isdigit() and int(text) < _V1_UNLIMITED else []


def _read_v1_cpu(d: Path) -> list[float]:
    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    if quota and period and quota.isdigit() and period.isdigit() and int(period) > 0:
        return [int(quota) / int(period)]
    return []  # -1: no quota
