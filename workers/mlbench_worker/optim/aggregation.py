"""Gradient aggregation for centralized (all-reduce) optimizers.

``ByModelAllReduce`` binds every parameter's ``.grad`` to a view of one flat buffer per dtype, so
backward accumulates straight into it and aggregation is a few large in-place all-reduces over
buckets of that buffer: no per-step flatten/unflatten copies (MLBench's by-model mode flattened
and unflattened every step). New strategies (by layer, compressed) implement ``Aggregator`` and
register in ``AGGREGATORS``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import torch

from mlbench_worker.comm import Comm, Pending


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
    """All-reduce the whole model's gradients as flat buckets (``aggregation: by_model``).

    With ``overlap=True`` the buffer is laid out in reverse parameter order (backward produces
    the last layers' gradients first) and cut into buckets of ``bucket_mb`` (default 0.5 MB);
    a bucket's all-reduce starts, non-blocking, as soon as backward has accumulated every
    gradient in it, so communication overlaps the rest of backward the way DDP does, and
    ``aggregate()`` only waits. Only for one backward per step: with gradient accumulation over
    several backward passes, leave it off (the hooks would reduce after the first pass).
    """

    def __init__(
        self,
        comm: Comm,
        params: Sequence[torch.nn.Parameter],
        *,
        bucket_mb: float = 0.0,
        overlap: bool = False,
    ) -> None:
        super().__init__(comm, params)
        self.overlap = overlap and comm.world_size > 1
        if self.overlap and bucket_mb <= 0:
            bucket_mb = 0.5
        ordered = list(reversed(self.params)) if self.overlap else self.params
        self._flats: list[torch.Tensor] = []
        self._views: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        spans: list[tuple[torch.nn.Parameter, int, int, int]] = []  # param, flat index, start, end
        by_key: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
        for p in ordered:
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
                spans.append((p, len(self._flats), offset, offset + p.numel()))
                offset += p.numel()
            self._flats.append(flat)
        # buckets: (flat index, start, end) slices of the flat buffers
        ranges: list[tuple[int, int, int]] = []
        for index, flat in enumerate(self._flats):
            per = flat.numel() if bucket_mb <= 0 else max(1, int(bucket_mb * 2**20) // flat.element_size())
            ranges += [(index, lo, min(lo + per, flat.numel())) for lo in range(0, flat.numel(), per)]
        self._buckets = [self._flats[i][lo:hi] for i, lo, hi in ranges]
        self._pending: dict[int, Pending] = {}
        if self.overlap:
            self._needed = [0] * len(ranges)
            touches: dict[int, list[int]] = {}
            for p, index, lo, hi in spans:
                hit = [b for b, (i, blo, bhi) in enumerate(ranges) if i == index and blo < hi and lo < bhi]
                touches[id(p)] = hit
                for b in hit:
                    self._needed[b] += 1
            self._remaining = list(self._needed)
            for p in self.params:
                p.register_post_accumulate_grad_hook(self._make_hook(touches[id(p)]))

    def _make_hook(self, buckets: list[int]) -> Callable[[torch.Tensor], None]:
        def hook(_param: torch.Tensor) -> None:
            for b in buckets:
                self._remaining[b] -= 1
                if self._remaining[b] == 0 and b not in self._pending:
                    self._pending[b] = self.comm.all_reduce_async(self._buckets[b], "avg")

        return hook

    def _rebind(self) -> None:
        """Someone replaced a ``.grad`` (e.g. ``zero_grad(set_to_none=True)``): copy back into the views."""
        for p, view in self._views:
            if p.grad is not view:
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad)
                p.grad = view

    def _wait(self) -> None:
        for pending in self._pending.values():
            pending.wait()
        self._pending.clear()
        if self.overlap:
            self._remaining = list(self._needed)

    def aggregate(self) -> None:
        for p, view in self._views:
            if p.grad is not view:
                if self._pending:  # gradients moved away from the buckets mid-flight: start over
                    self._wait()
                self._rebind()
                self._pending.clear()
                break
        if self.comm.world_size == 1:
            return
        for b, bucket in enumerate(self._buckets):  # buckets no hook started (unused parameters)
            if b not in self._pending:
                self._pending[b] = self.comm.all_reduce_async(bucket, "avg")
        self._wait()

    def zero_grad(self) -> None:
        if self._pending:
            self._wait()
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
