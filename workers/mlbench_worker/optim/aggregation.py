"""Gradient aggregation for centralized (all-reduce) optimizers.

``ByModelAllReduce`` binds every parameter's ``.grad`` to a view of one flat buffer per dtype, so
backward accumulates straight into it and aggregation is a few large in-place all-reduces over
buckets of that buffer: no per-step flatten/unflatten copies (MLBench's by-model mode flattened
and unflattened every step). New strategies (by layer, compressed) implement ``Aggregator`` and
register in ``AGGREGATORS``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch

from mlbench_worker.comm import Comm


class Aggregator(abc.ABC):
    """Averages the gradients of ``params`` over all ranks, in place."""

    def __init__(self, comm: Comm, params: Sequence[torch.nn.Parameter]) -> None:
        self.comm = comm
        self.params = [p for p in params if p.requires_grad]

    @abc.abstractmethod
    def aggregate(self) -> None:
        """After backward: every rank's ``p.grad`` becomes the mean over ranks."""

    def zero_grad(self) -> None:
        """Reset gradients before the next backward (kept allocated, never set to None)."""
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()


def _is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s strides are a permutation of a dense layout (contiguous, channels_last, ...)."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda d: d[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _grad_view(chunk: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A view of ``chunk`` shaped like ``p`` with ``p``'s strides when they are dense (so
    channels_last weights get channels_last gradients and autograd never copies), else contiguous."""
    if p.is_contiguous() or not _is_dense(p):
        return chunk.view(p.shape)
    return chunk.as_strided(p.shape, p.stride())


class ByModelAllReduce(Aggregator):
    """All-reduce the whole model's gradients as flat buckets (``aggregation: by_model``)."""

    def __init__(self, comm: Comm, params: Sequence[torch.nn.Parameter], *, bucket_mb: float = 0.0) -> None:
        super().__init__(comm, params)
        self._flats: list[torch.Tensor] = []
        self._views: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        by_key: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
        for p in self.params:
            by_key.setdefault((p.dtype, p.device), []).append(p)
        for (dtype, device), group in by_key.items():
            flat = torch.zeros(sum(p.numel() for p in group), dtype=dtype, device=device)
            offset = 0
            for p in group:
                view = _grad_view(flat[offset : offset + p.numel()], p)
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view
                self._views.append((p, view))
                offset += p.numel()
            self._flats.append(flat)
        self._buckets = [b for flat in self._flats for b in self._split(flat, bucket_mb)]

    @staticmethod
    def _split(flat: torch.Tensor, bucket_mb: float) -> list[torch.Tensor]:
        if bucket_mb <= 0:
            return [flat]
        per = max(1, int(bucket_mb * 2**20) // flat.element_size())
        return list(flat.split(per))

    def _rebind(self) -> None:
        """Someone replaced a ``.grad`` (e.g. ``zero_grad(set_to_none=True)``): copy back into the views."""
        for p, view in self._views:
            if p.grad is not view:
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad)
                p.grad = view

    def aggregate(self) -> None:
        for p, view in self._views:
            if p.grad is not view:
                self._rebind()
                break
        if self.comm.world_size == 1:
            return
        for bucket in self._buckets:
            self.comm.all_reduce(bucket, "avg")

    def zero_grad(self) -> None:
        for flat in self._flats:
            flat.zero_()


class ByLayerAllReduce(Aggregator):
    """One all-reduce per parameter tensor (``aggregation: by_layer``, MLBench's ``by_layer=True``).

    More, smaller messages than ``by_model``: it exposes per-message latency, which is what the
    option is for when comparing backends.
    """

    def __init__(self, comm: Comm, params: Sequence[torch.nn.Parameter], *, bucket_mb: float = 0.0) -> None:
        super().__init__(comm, params)

    def aggregate(self) -> None:
        if self.comm.world_size == 1:
            return
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self.comm.all_reduce(p.grad, "avg")


AGGREGATORS: dict[str, type[Aggregator]] = {"by_model": ByModelAllReduce, "by_layer": ByLayerAllReduce}
