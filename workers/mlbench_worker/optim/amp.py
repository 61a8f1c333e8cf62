"""Mixed precision: a loss scaler that never waits for the device, and reduced-precision all-reduce.

``make_scaler`` builds a ``GradScaler`` from the task's loss-scaling parameters:
``loss_scale_init`` (initial scale), ``loss_scale_factor`` (growth factor; the back-off is its
inverse), ``loss_scale_window`` (steps without overflow before growing: ``growth_interval``) and
``loss_scale_max`` (a ceiling GradScaler lacks, applied on the device after each update). It is
enabled for fp16/amp only (bf16 has fp32's exponent range), but exists for every precision so
the step code is the same.

``ReducedPrecisionAllReduce`` sends the flat fp32 gradients in the compute precision (fp16 or
bf16) when the backend reduces that dtype natively (nccl and gloo do, MPI does not): pre-divided
by the world size (no overflow in the sum), cast into one low-precision buffer, all-reduced and
cast back. Half the bytes on the wire; an overflow still shows as inf and every rank's scaler
skips the step alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.hyperparams import TaskHyperparameters
from mlbench_worker.optim.aggregation import Aggregator
from mlbench_worker.optim.flat import FlatGradients

REDUCED = {"fp16": torch.float16, "amp": torch.float16, "bf16": torch.bfloat16}


class CappedGradScaler(torch.amp.GradScaler):
    """A ``GradScaler`` whose scale never exceeds ``max_scale`` (None: no ceiling).

    The cap is a clamp of the scale tensor after each update, on the device: reading the scale
    back (``get_scale()``) would stall the host every step.
    """

    def __init__(self, device: str, *, max_scale: float | None = None, **kwargs: Any) -> None:
        super().__init__(device, **kwargs)
        self.max_scale = max_scale

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        super().update(new_scale)
        if self.max_scale is not None and self.is_enabled() and self._scale is not None:
            self._scale.clamp_(max=self.max_scale)


def make_scaler(hp: TaskHyperparameters, precision: str, device: torch.device) -> CappedGradScaler:
    """A scaler configured with the task's loss scaling (enabled for fp16/amp only)."""
    scaling = hp.loss_scaling()
    if scaling.factor <= 1.0:
        raise ValueError(f"loss_scale_factor must be > 1, got {scaling.factor}")
    return CappedGradScaler(
        device.type,
        max_scale=scaling.max_scale,
        init_scale=scaling.init_scale,
        growth_factor=scaling.factor,
        backoff_factor=1.0 / scaling.factor,
        growth_interval=scaling.window,
        enabled=precision in ("fp16", "amp"),
    )


def comm_dtype(comm: Comm, precision: str) -> torch.dtype:
    """The dtype gradients travel in: the compute precision where the backend reduces it, else fp32."""
    dtype = REDUCED.get(precision, torch.float32)
    if dtype is not torch.float32 and (comm.world_size == 1 or not comm.supports_dtype(dtype)):
        return torch.float32
    return dtype


class ReducedPrecisionAllReduce(Aggregator):
    """Average fp32 gradients over ranks through one flat buffer of ``dtype`` (by model)."""

    def __init__(self, comm: Comm, params: Sequence[torch.nn.Parameter], *, dtype: torch.dtype) -> None:
        super().__init__(comm, params)
        if any(p.dtype != torch.float32 for p in self.params):
            raise TypeError("reduced-precision all-reduce expects fp32 parameters (autocast keeps them fp32)")
        self.dtype = dtype
        self.flat = FlatGradients(self.params)
        self.buffer = torch.zeros(sum(p.numel() for p in self.params), dtype=dtype, device=self._device())

    def _device(self) -> torch.device:
        return self.params[0].device if self.params else torch.device("cpu")

    def aggregate(self) -> None:
        assert self.flat is not None
        self.flat.gather()
        if self.comm.world_size == 1 or not self.flat.flats:
            return
        (flat,) = self.flat.flats  # fp32 parameters on one device: one buffer
        flat.mul_(1.0 / self.comm.world_size)  # pre-divide: the low-precision sum cannot overflow
        self.buffer.copy_(flat)
        self.comm.all_reduce(self.buffer, "sum")
        flat.copy_(self.buffer)
