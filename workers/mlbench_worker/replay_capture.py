"""A CPU stand-in for CUDA-graph capture that replays like a graph: recorded ops on fixed tensors.

``ReplayCapture`` implements ``mlbench_worker.graphs.Capture``. Capturing runs each phase once
while recording every aten op it dispatches with the very tensors it read and wrote (the
recording keeps them alive, as a graph's pool keeps its memory). A replay never runs the phase's
Python again: it re-executes the recorded ops on those tensors, writing each op's result into the
tensor the capture produced, which is what a CUDA graph does with its kernels and addresses. So
on a CPU, a static input not refilled before a replay, state not carried through the graphs'
outputs, a Python number baked into an op (a learning rate), a parameter whose storage moved, or
the wrong graphs for a shape give different numbers than eager, and tests comparing losses fail.
A host read inside a phase (``.item()``) is refused at capture, as a real capture would fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

Replay = Callable[[], None]


class CaptureError(RuntimeError):
    """A phase did something a CUDA graph cannot hold."""


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

    def replay(self) -> None:
        with torch.set_grad_enabled(self.grad):
            fresh = tree_leaves(self.func(*self.args, **self.kwargs))
        with torch.no_grad():
            for captured, new in zip(self.outputs, fresh, strict=True):
                if not isinstance(captured, torch.Tensor):
                    continue
                if not isinstance(new, torch.Tensor):
                    raise CaptureError(f"{self.func} gave no tensor at replay where the capture had one")
                if new.untyped_storage().data_ptr() != captured.untyped_storage().data_ptr():
                    captured.copy_(new)  # a functional op: its result lands where the capture put it


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[_Op] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if any(isinstance(v, int | float | complex) for v in tree_leaves(out)):  # bools are ints
            raise CaptureError(f"{func} reads a device value on the host inside a captured phase")
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
        replays: list[Replay | None] = []
        for run in phases:
            if run is None:
                replays.append(None)
                continue
            with _Recorder() as recorder:
                run()
            replays.append(self._replay_of(recorder.ops))
        return replays

    def _replay_of(self, ops: list[_Op]) -> Replay:
        def replay() -> None:
            self.replays += 1
            for op in ops:
                op.replay()

        return replay
