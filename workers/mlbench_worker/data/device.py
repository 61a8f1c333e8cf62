"""Host batches onto the GPU without stalling it: pinned staging and non-blocking copies.

A copy from pageable host memory makes the host wait for the device (torch synchronises the
stream after it); staged through page-locked memory it is queued like a kernel, and torch's
pinned-memory cache keeps the staging block until the copy has finished.
"""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (in host memory) on ``device``: itself on the CPU, a queued copy on a GPU."""
    if device.type == "cpu":
        return tensor
    if not tensor.is_pinned():
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def copy_into(target: torch.Tensor, host: torch.Tensor) -> None:
    """Copy the host tensor ``host`` into ``target`` (queued, through pinned memory, on a GPU)."""
    if target.device.type != "cpu" and not host.is_pinned():
        host = host.pin_memory()
    target.copy_(host, non_blocking=target.device.type != "cpu")
