"""Which GPU a rank uses, whether it is the model the run asked for, and what it is.

A rank uses GPU ``LOCAL_RANK`` of the GPUs visible to it. CUDA applies ``CUDA_VISIBLE_DEVICES``
itself, so torch's index ``i`` already is the i-th visible GPU; ranks that share a machine thus
never share a GPU, and a machine showing fewer GPUs than it runs ranks is refused at start
(NCCL would die later with "Duplicate GPU detected"). The device query is the only part that
needs CUDA: it sits behind ``GpuQuery`` so the placement and model rules are plain functions.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mlbench_worker.config import ConfigError

if TYPE_CHECKING:
    import torch

_WORD = re.compile(r"[A-Z0-9]+")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as a rank sees it."""

    index: int  # torch's index, within the visible set
    name: str  # e.g. 'NVIDIA H100 80GB HBM3'
    memory_bytes: int
    uuid: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where a rank computes: its device and, on a GPU run, which GPU that is."""

    device: torch.device
    gpu: GpuInfo | None = None
    visible_gpus: int = 0
    mismatch: str | None = None  # the model differs from the spec's and the spec tolerates it


class GpuQuery(Protocol):
    """The CUDA calls placement needs (``CudaQuery``; tests pass a stand-in)."""

    def count(self) -> int: ...

    def info(self, index: int) -> GpuInfo: ...

    def use(self, index: int) -> None: ...


class CudaQuery:
    """``GpuQuery`` through ``torch.cuda``."""

    def count(self) -> int:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def info(self, index: int) -> GpuInfo:
        import torch

        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        return GpuInfo(index, props.name, int(props.total_memory), str(uuid) if uuid is not None else None)

    def use(self, index: int) -> None:
        """Make GPU ``index`` this process's and create its CUDA context now: ``set_device`` alone
        is lazy, so the context's seconds landed in the first allocation, inside the startup's
        ``model`` phase (6.0 s median per gpu_suite case on an H200, not split further)."""
        import torch

        torch.cuda.set_device(index)
        torch.empty(1, device=torch.device("cuda", index))  # the first allocation creates the context


def gpu_index(local_rank: int, local_world_size: int, visible: int, cuda_visible_devices: str | None) -> int:
    """The GPU of local rank ``local_rank``: index ``local_rank`` of the ``visible`` GPUs.

    Refuses a machine that shows fewer GPUs than its ranks need, one each, naming both numbers.
    """
    shown = "" if cuda_visible_devices is None else f" (CUDA_VISIBLE_DEVICES={cuda_visible_devices!r})"
    if visible < 1:
        raise ConfigError(f"the run asks for GPUs but no GPU is visible to this rank{shown}")
    ranks_here = max(local_world_size, local_rank + 1)
    if ranks_here > visible:
        raise ConfigError(
            f"{ranks_here} ranks run on this machine, one GPU each, but only {visible} GPU(s) are "
            f"visible{shown}; this is local rank {local_rank}"
        )
    return local_rank


def model_matches(expected: str, device_name: str) -> bool:
    """Whether a device called ``device_name`` is a GPU of model ``expected``.

    Every word of the model must be a word of the name: ``A100-80GB`` matches ``NVIDIA
    A100-SXM4-80GB``, ``T4`` matches ``Tesla T4``, ``H100`` matches ``NVIDIA H100 80GB HBM3``;
    ``L4`` does not match ``NVIDIA L40S`` and ``A100-80GB`` not ``NVIDIA A100-SXM4-40GB``.
    """
    wanted = _WORD.findall(expected.upper())
    words = set(_WORD.findall(device_name.upper()))
    return bool(wanted) and all(word in words for word in wanted)


def model_mismatch(expected: str | None, gpu: GpuInfo, rank: int) -> str | None:
    """Why ``gpu`` is not the model the spec asked for, or None when it is (or none was asked)."""
    if expected is None or model_matches(expected, gpu.name):
        return None
    return (
        f"rank {rank} got GPU {gpu.index} '{gpu.name}', but the spec asks for {expected} "
        f"(hardware.gpu); the result would be labelled with the wrong GPU"
    )


def place(
    query: GpuQuery,
    *,
    local_rank: int,
    local_world_size: int,
    rank: int,
    expected: str | None,
    strict: bool,
) -> Placement:
    """Pick this rank's GPU, check its model and make it the current device.

    A mismatch the spec tolerates (``strict: false``) is kept in the placement for the log and
    the fingerprint; under ``strict`` (the default) it raises ``ConfigError``.
    """
    import torch

    visible = query.count()
    index = gpu_index(local_rank, local_world_size, visible, os.environ.get("CUDA_VISIBLE_DEVICES"))
    gpu = query.info(index)
    mismatch = model_mismatch(expected, gpu, rank)
    if mismatch is not None and strict:
        raise ConfigError(
            f"{mismatch}; run it where the GPUs are {expected}, or set hardware.gpu to "
            f"{{count: N, type: {expected}, strict: false}} to accept any GPU"
        )
    query.use(index)
    return Placement(torch.device("cuda", index), gpu, visible, mismatch)
