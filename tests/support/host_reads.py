"""Counting what would make the host wait for a GPU, on a CPU: tensor values read into Python.

``HostReads`` is a ``TorchFunctionMode`` that records every call that needs a tensor's value on
the host (``.item()``, ``float(t)``, ``if t:``, ``.tolist()``, printing) or whose output size
depends on the data (``nonzero``, ``masked_select``, boolean-mask indexing): on a GPU each of
these waits for the device to finish everything queued before it. Copies to the host count when
the tensor is not there already; on a CPU-only run every tensor is, so such copies of would-be
device tensors are the one kind of wait this cannot see.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_READS = {
    "item",
    "tolist",
    "numpy",
    "__array__",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__complex__",
    "__format__",
    "__repr__",
    "__str__",
    "is_nonzero",
    "equal",
    "allclose",
    "nonzero",
    "argwhere",
    "masked_select",
    "unique",
    "unique_consecutive",
    "bincount",
    "repeat_interleave",
}
_INDEXING = {"__getitem__", "__setitem__", "index_put", "index_put_"}
_COPIES = {"cpu", "to"}


def _bool_index(args: tuple[Any, ...]) -> bool:
    indices = args[1] if len(args) > 1 else ()
    items = indices if isinstance(indices, tuple | list) else (indices,)
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in items)


def _to_host(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if tensor is None or tensor.device.type == "cpu":
        return False
    if func.__name__ == "cpu":
        return True
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return (
        target is not None and torch.device(target).type == "cpu"
        if isinstance(target, str | torch.device)
        else False
    )


class HostReads(TorchFunctionMode):
    """Records ``(function name, where it was called)`` for each host read while active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", repr(func))
        if (
            name in _READS
            or (name in _INDEXING and _bool_index(args))
            or (name in _COPIES and _to_host(func, args, kwargs))
        ):
            frame = traceback.extract_stack(limit=2)[0]
            self.calls.append((name, f"{frame.filename}:{frame.lineno}"))
        return func(*args, **kwargs)
