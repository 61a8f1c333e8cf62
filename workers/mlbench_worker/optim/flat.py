"""Gradients as views of one flat buffer per dtype and device, shared by the aggregators.

Binding every ``p.grad`` to a view of a flat buffer lets backward accumulate straight into it, so
an all-reduce, a cast, a norm or a zeroing is one pass over one tensor instead of one per
parameter. Each view keeps its parameter's strides when they are dense (channels_last weights
get channels_last gradients), so autograd accumulates in place instead of warning and copying.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s strides are a permutation of a dense layout (contiguous, channels_last, ...)."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda d: d[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def view_like(chunk: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A view of the 1-D ``chunk`` shaped like ``p``, with ``p``'s strides when they are dense."""
    if p.is_contiguous() or not is_dense(p):
        return chunk.view(p.shape)
    return chunk.as_strided(p.shape, p.stride())


class FlatGradients:
    """The gradients of ``params`` bound to views of flat buffers (one per dtype and device).

    ``reverse`` lays the parameters out last first, the order backward produces their
    gradients in (for buckets all-reduced during backward). ``spans`` gives, per parameter,
    its buffer index and ``[start, end)`` range.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], *, reverse: bool = False) -> None:
        self.params = [p for p in params if p.requires_grad]
        ordered = list(reversed(self.params)) if reverse else self.params
        by_key: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
        for p in ordered:
            by_key.setdefault((p.dtype, p.device), []).append(p)
        self.flats: list[torch.Tensor] = []
        self.views: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        self.spans: list[tuple[torch.nn.Parameter, int, int, int]] = []
        for (dtype, device), group in by_key.items():
            flat = torch.zeros(sum(p.numel() for p in group), dtype=dtype, device=device)
            offset = 0
            for p in group:
                view = view_like(flat[offset : offset + p.numel()], p)
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view
                self.views.append((p, view))
                self.spans.append((p, len(self.flats), offset, offset + p.numel()))
                offset += p.numel()
            self.flats.append(flat)

    def bound(self) -> bool:
        """Whether every ``p.grad`` is still its view (nobody replaced or cleared it)."""
        return all(p.grad is view for p, view in self.views)

    def rebind(self) -> None:
        """Copy gradients someone replaced (``zero_grad(set_to_none=True)``, ...) back into the views."""
        for p, view in self.views:
            if p.grad is not view:
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad)
                p.grad = view

    def zero_(self) -> None:
        for flat in self.flats:
            flat.zero_()

    def clip_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradients so their global 2-norm is at most ``max_norm`` (the arithmetic of
        ``torch.nn.utils.clip_grad_norm_``, over the flat buffers); returns the norm before."""
        total = torch.nn.utils.get_total_norm(self.flats)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for flat in self.flats:
            flat.mul_(coef.to(flat.dtype))
        return total
