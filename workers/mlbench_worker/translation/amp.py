"""Mixed precision for the translation tasks: ``torch.amp`` plus reduced-precision all-reduce.

``make_scaler`` builds ``torch.amp.GradScaler`` from the task's loss-scaling parameters:
``loss_scale_init`` (initial scale), ``loss_scale_factor`` (growth factor; the back-off is its
inverse), ``loss_scale_window`` (steps without overflow before growing: ``growth_interval``) and
``loss_scale_max`` (enforced after every update by ``ScaleCap``, as GradScaler has no ceiling).
The scaler is enabled for fp16/amp (GPU); bf16 needs no loss scaling (fp32's exponent range) and
fp32 none at all, but the object exists either way so the step code is the same.

``ReducedPrecisionAllReduce`` is a by-model aggregator that sends gradients in the compute
precision (fp16 or bf16) when the backend reduces that dtype natively (nccl and gloo do, MPI does
not): the fp32 gradients are pre-divided by the world size (no overflow in the sum), cast into
one flat low-precision buffer, all-reduced and copied back. It halves the bytes on the wire;
overflows still show as inf and the scaler skips the step on every rank alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.optim.aggregation import Aggregator

REDUCED = {"fp16": torch.float16, "amp": torch.float16, "bf16": torch.bfloat16}


def make_scaler(hp: Mapping[str, Any], precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A ``GradScaler`` configured with the task's loss scaling (enabled for fp16/amp only)."""
    factor = float(hp.get("loss_scale_factor", 2.0))
    if factor <= 1.0:
        raise ValueError(f"loss_scale_factor must be > 1, got {factor}")
    return torch.amp.GradScaler(
        device.type,
        init_scale=float(hp.get("loss_scale_init", 2.0**16)),
        growth_factor=factor,
        backoff_factor=1.0 / factor,
        growth_interval=int(hp.get("loss_scale_window", 2000)),
        enabled=precision in ("fp16", "amp"),
    )


class ScaleCap:
    """Keeps a ``GradScaler``'s scale at or below ``loss_scale_max`` (None: no ceiling)."""

    def __init__(self, scaler: torch.amp.GradScaler, max_scale: float | None) -> None:
        self.scaler = scaler
        self.max_scale = max_scale

    def update(self) -> None:
        """``scaler.update()`` then clamp the new scale to the ceiling."""
        self.scaler.update()
        if (
            self.max_scale is not None
            and self.scaler.is_enabled()
            and self.scaler.get_scale() > self.max_scale
        ):
            self.scaler.update(new_scale=float(self.max_scale))


def comm_dtype(comm: Comm, precision: str) -> torch.dtype:
    """The dtype gradients travel in: the compute precision where the backend reduces it, else fp32."""
    dtype = REDUCED.get(precision, torch.float32)
    if dtype is not torch.float32 and (comm.world_size == 1 or not comm.supports_dtype(dtype)):
        return torch.float32
    return dtype


class ReducedPrecisionAllReduce(Aggregator):
    """Average fp32 gradients over ranks through one flat buffer of ``dtype`` (by model).

    Like ``ByModelAllReduce``, every ``p.grad`` is a view of one flat fp32 tensor, so backward
    accumulates straight into it and the step is three vectorised passes (scale, cast, cast
    back) around a single all-reduce, with no per-parameter copies.
    """

    def __init__(self, comm: Comm, params: Sequence[torch.nn.Parameter], *, dtype: torch.dtype) -> None:
        super().__init__(comm, params)
        if any(p.dtype != torch.float32 for p in self.params):
            raise TypeError("reduced-precision all-reduce expects fp32 parameters (autocast keeps them fp32)")
        self.dtype = dtype
        total = sum(p.numel() for p in self.params)
        device = self.params[0].device if self.params else torch.device("cpu")
        self.flat = torch.zeros(total, dtype=torch.float32, device=device)
        self.buffer = torch.zeros(total, dtype=dtype, device=device)
        self._views: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        offset = 0
        for p in self.params:
            view = self.flat[offset : offset + p.numel()].view_as(p)
            if p.grad is not None:
                view.copy_(p.grad)
            p.grad = view
            self._views.append((p, view))
            offset += p.numel()

    def _rebind(self) -> None:
        for p, view in self._views:
            if p.grad is not view:
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad)
                p.grad = view

    def aggregate(self) -> None:
        self._rebind()
        if self.comm.world_size == 1:
            return
        self.flat.mul_(1.0 / self.comm.world_size)  # pre-divide: the low-precision sum cannot overflow
        self.buffer.copy_(self.flat)
        self.comm.all_reduce(self.buffer, "sum")
        self.flat.copy_(self.buffer)

    def zero_grad(self) -> None:
        self._rebind()
        self.flat.zero_()
