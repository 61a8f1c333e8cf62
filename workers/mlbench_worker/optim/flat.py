"""Gradients as views of one flat buffer per dtype and device, shared by the aggregators.

With every gradient in a flat buffer, an all-reduce, a cast, a norm or the optimizer's read is
one pass over one tensor instead of one per parameter. Each view keeps its parameter's strides
when they are dense (channels_last weights get channels_last gradients), so nothing is copied
into another layout and autograd never warns about mismatched strides.
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
    """The gradients of ``params`` as views of flat buffers (one per dtype and device).

    By default ``zero_()`` clears every ``p.grad``, backward hands over fresh gradients without
    launching anything, and ``gather()`` copies them into the views with one foreach copy; with
    ``accumulate`` (for hooks that read the buffers during backward) the views stay bound and
    backward adds into them, one kernel per parameter (the GPU step is bound by launches).
    ``reverse`` lays the parameters out last first, the order backward produces their gradients
    in. ``spans`` gives, per parameter, its buffer index and ``[start, end)`` range.
    """

    def __init__(
        self, params: Iterable[torch.nn.Parameter], *, reverse: bool = False, accumulate: bool = False
    ) -> None:
        self.accumulate = accumulate
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
        """Whether every ``p.grad`` is its view (gathered, or never replaced)."""
        return all(p.grad is view for p, view in self.views)

    def gather(self) -> None:
        """After backward: every gradient into its view (one foreach copy), ``p.grad`` the view.

        A parameter without a gradient this step gets zeros; one replaced by someone else
        (``zero_grad(set_to_none=True)``) is copied in too."""
        targets: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        for p, view in self.views:
            grad = p.grad
            if grad is view:
                continue
            if grad is None:
                view.zero_()
            else:
                targets.append(view)
                grads.append(grad)
            p.grad = view
        if targets:
            torch._foreach_copy_(targets, grads)

    def zero_(self) -> None:
        """Reset the gradients before the next backward: clear them, or zero the buffers when
        backward accumulates into the views."""
        if self.accumulate:
            for flat in self.flats:
                flat.zero_()
        else:
            for p in self.params:
                p.grad = None

    def clip_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale the gradients so their global 2-norm is at most ``max_norm`` (the arithmetic of
        ``torch.nn.utils.clip_grad_norm_``, over the flat buffers); returns the norm before."""
        total = torch.nn.utils.get_total_norm(self.flats)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for flat in self.flats:
            flat.mul_(coef.to(flat.dtype))
        return total
