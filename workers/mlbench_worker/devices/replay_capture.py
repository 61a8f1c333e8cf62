"""A CPU stand-in for CUDA-graph capture that replays like a graph: recorded ops on fixed tensors.

``ReplayCapture`` implements ``mlbench_worker.devices.graphs.Capture``. Capturing runs each phase once
while recording every aten op it dispatches with the very tensors it read and wrote (the
recording keeps them alive, as a graph's pool keeps its memory). A replay never runs the phase's
Python again: it re-executes the recorded ops on those tensors, writing each op's result into the
tensor the capture produced, which is what a CUDA graph does with its kernels and addresses. So
on a CPU, a static input not refilled before a replay, state not carried through the graphs'
outputs, a Python number baked into an op (a learning rate), a parameter whose storage moved, or
the wrong graphs for a shape give different numbers than eager, and tests comparing losses fail.
A host read inside a phase (``.item()``) is refused at capture, as a real capture would fail.

Like a graph, the recording owns only the memory its phases allocated; what existed before
(parameters, optimizer state, static inputs) it holds weakly, by storage. A replay that would
touch such memory after its owner let it go fails (``CaptureError``), where a CUDA graph would
silently write into memory since handed to someone else (gpu_step's whole-step side once freed
its model that way, and its replays overwrote another side's labels).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

# The documented extension point for ``__torch_dispatch__`` modes ("Extending PyTorch"); torch
# 2.11-2.13 export it from no public module, and a torch-function mode never sees backward's ops.
from torch.utils._python_dispatch import TorchDispatchMode

Replay = Callable[[], None]


class CaptureError(RuntimeError):
    """A phase did something a CUDA graph cannot hold."""


class _Outside:
    """A tensor the capture did not allocate, held by a weak reference to its storage (and to the
    tensor object, whose metadata a replay prefers while it lives)."""

    __slots__ = ("dtype", "offset", "shape", "storage", "stride", "tensor")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = weakref.ref(t)
        self.storage = weakref.ref(t.untyped_storage())
        self.shape, self.stride, self.offset, self.dtype = t.shape, t.stride(), t.storage_offset(), t.dtype

    def resolve(self, func: Any) -> torch.Tensor:
        tensor = self.tensor()
        if tensor is not None:
            return tensor
        storage = self.storage()
        if storage is None:
            raise CaptureError(
                f"{func} replays on a {'x'.join(map(str, self.shape)) or 'scalar'} {self.dtype} tensor "
                "that was freed after capture: a graph holds addresses, not tensors, so whoever owns "
                "the parameters, optimizer state and static inputs must keep them while it replays"
            )
        with torch.no_grad():  # the tensor object was a temporary view: the same memory, re-viewed
            view = torch.empty(0, dtype=self.dtype, device=storage.device)
            return view.set_(storage, self.offset, self.shape, self.stride)


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` (an op's args, kwargs or outputs: nested tuples, lists, dicts) with ``fn``
    applied to every leaf."""
    if isinstance(value, tuple | list):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return fn(value)


def tree_leaves(value: Any) -> list[Any]:
    """The leaves of ``value``, in order."""
    leaves: list[Any] = []
    _map(value, leaves.append)
    return leaves


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _Op:
    """One recorded op: what to call, on which tensors, in which grad mode (some kernels return
    what backward needs only when grad is on), and the tensors it produced."""

    __slots__ = ("args", "func", "grad", "kwargs", "outputs")

    def __init__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.grad = torch.is_grad_enabled()
        self.outputs = tree_leaves(out)

    def hold_weakly(self, inside: set[int]) -> None:
        """Keep strong references only to tensors whose storage the capture allocated (``inside``)."""

        def weaken(leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor) or _key(leaf) in inside or _key(leaf) == 0:
                return leaf
            return _Outside(leaf)

        self.args = _map(self.args, weaken)
        self.kwargs = _map(self.kwargs, weaken)
        self.outputs = _map(self.outputs, weaken)

    def replay(self) -> None:
        def resolve(leaf: Any) -> Any:
            return leaf.resolve(self.func) if isinstance(leaf, _Outside) else leaf

        args, kwargs, outputs = (_map(v, resolve) for v in (self.args, self.kwargs, self.outputs))
        with torch.set_grad_enabled(self.grad):
            fresh = tree_leaves(self.func(*args, **kwargs))
        with torch.no_grad():
            for captured, new in zip(outputs, fresh, strict=True):
                if not isinstance(captured, torch.Tensor):
                    continue
                if not isinstance(new, torch.Tensor):
                    raise CaptureError(f"{self.func} gave no tensor at replay where the capture had one")
                if new.untyped_storage().data_ptr() != captured.untyped_storage().data_ptr():
                    captured.copy_(new)  # a functional op: its result lands where the capture put it


class _Recorder(TorchDispatchMode):
    """Records the ops of one capture call; ``inside`` collects the storages they allocated (seen
    first as an output), ``seen`` every storage met so far."""

    def __init__(self, ops: list[_Op], seen: set[int], inside: set[int]) -> None:
        super().__init__()
        self.ops, self.seen, self.inside = ops, seen, inside

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                self.seen.add(_key(t))
        out = func(*args, **kwargs)
        if any(isinstance(v, int | float | complex) for v in tree_leaves(out)):  # bools are ints
            raise CaptureError(f"{func} reads a device value on the host inside a captured phase")
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and _key(t) not in self.seen:
                self.seen.add(_key(t))
                self.inside.add(_key(t))
        self.ops.append(_Op(func, tuple(args), dict(kwargs), out))
        return out


class ReplayCapture:
    """Records each phase at capture; a replay re-executes the recording on the same tensors."""

    def __init__(self) -> None:
        self.replays = 0
        self.captures = 0

    def warmup(self, run: Callable[[], None]) -> None:
        run()

    def capture(self, phases: Sequence[Callable[[], None] | None]) -> list[Replay | None]:
        self.captures += 1
        seen: set[int] = set()
        inside: set[int] = set()  # one pool per capture call, shared by its phases
        recorded: list[list[_Op] | None] = []
        for run in phases:
            if run is None:
                recorded.append(None)
                continue
            ops: list[_Op] = []
            with _Recorder(ops, seen, inside):
                run()
            recorded.append(ops)
        for phase in recorded:
            for op in phase or ():
                op.hold_weakly(inside)
        return [None if phase is None else self._replay_of(phase) for phase in recorded]

    def _replay_of(self, ops: list[_Op]) -> Replay:
        def replay() -> None:
            self.replays += 1
            for op in ops:
                op.replay()

        return replay
