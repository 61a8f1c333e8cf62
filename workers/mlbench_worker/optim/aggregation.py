"""Gradient aggregation for centralized (all-reduce) optimizers.

``ByModelAllReduce`` all-reduces the whole model's gradients, gathered in flat buffers
(``FlatGradients``), as a few large in-place collectives over buckets of those buffers: one
copy in, none back (MLBench's by-model mode flattened and unflattened every step). New
strategies (by layer, compressed) implement ``Aggregator`` and register in ``AGGREGATORS``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import torch

from mlbench_worker.comm import Comm, Pending
from mlbench_worker.optim.flat import FlatGradients


class Aggregator(abc.ABC):
    """Averages the gradients of ``params`` over all ranks, in place."""

    #: the flat gradient buffers, when the aggregator keeps the gradients in them
    flat: FlatGradients | None = None
    #: whether ``aggregate`` can be captured in a CUDA graph (device work only, all of it inside
    #: the call: no host-side steps, no collectives started by hooks during backward)
    capturable: bool = True

    def __init__(self, comm: Comm, params: Sequence[torch.nn.Parameter]) -> None:
        self.comm = comm
        self.params = [p for p in params if p.requires_grad]

    @property
    def does_work(self) -> bool:
        """Whether ``aggregate`` changes anything: averaging over one rank does not, but gathering
        fresh gradients into the flat buffers does."""
        return self.comm.world_size > 1 or (self.flat is not None and not self.flat.accumulate)

    @abc.abstractmethod
    def aggregate(self) -> None:
        """After backward: every rank's ``p.grad`` becomes the mean over ranks."""

    def zero_grad(self) -> None:
        """Reset gradients before the next backward (kept allocated, never set to None)."""
        if self.flat is not None:
            self.flat.zero_()
            return
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Clip the global gradient norm to ``max_norm`` (one pass over the flat buffers if any)."""
        if self.flat is not None:
            self.flat.clip_norm_(max_norm)
        else:
            torch.nn.utils.clip_grad_norm_(self.params, max_norm, foreach=True)


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
        self.capturable = not self.overlap
        if self.overlap and bucket_mb <= 0:
            bucket_mb = 0.5
        self.flat = FlatGradients(self.params, reverse=self.overlap, accumulate=self.overlap)
        flats = self.flat.flats
        # buckets: (flat index, start, end) slices of the flat buffers
        ranges: list[tuple[int, int, int]] = []
        for index, flat in enumerate(flats):
            per = flat.numel() if bucket_mb <= 0 else max(1, int(bucket_mb * 2**20) // flat.element_size())
            ranges += [(index, lo, min(lo + per, flat.numel())) for lo in range(0, flat.numel(), per)]
        self._buckets = [flats[i][lo:hi] for i, lo, hi in ranges]
        self._pending: dict[int, Pending] = {}
        if self.overlap:
            self._needed = [0] * len(ranges)
            touches: dict[int, list[int]] = {}
            for p, index, lo, hi in self.flat.spans:
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

    def _wait(self) -> None:
        for pending in self._pending.values():
            pending.wait()
        self._pending.clear()
        if self.overlap:
            self._remaining = list(self._needed)

    def aggregate(self) -> None:
        assert self.flat is not None
        if self._pending and not self.flat.bound():  # gradients moved away mid-flight: start over
            self._wait()
            self._pending.clear()
        self.flat.gather()
        if self.comm.world_size == 1:
            return
        for b, bucket in enumerate(self._buckets):  # buckets no hook started (unused parameters)
            if b not in self._pending:
                self._pending[b] = self.comm.all_reduce_async(bucket, "avg")
        self._wait()

    def zero_grad(self) -> None:
        if self._pending:
            self._wait()
        super().zero_grad()


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
