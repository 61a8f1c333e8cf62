"""A CPU stand-in for CUDA-graph capture that checks what a real capture would get wrong.

``TapeCapture`` implements ``mlbench_worker.devices.graphs.Capture``. "Capturing" runs each phase once
while recording every aten op it dispatches: the op, its non-tensor arguments, and for each
tensor argument whether its storage existed before the step (its address) or was made by the
step's phases. A "replay" re-runs the phase under the same recorder and raises ``GraphBreak`` at
the first difference, because a real graph replays the captured kernels on the captured
addresses: a Python number that changes between steps (a learning rate passed as a float), a
branch taken differently, or a tensor replaced instead of refilled would silently be wrong on a
GPU. What this cannot check is whether CUDA allows an op inside a capture (host syncs are
checked apart, by ``support.host_reads``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

Entry = tuple[str, tuple[Any, ...]]


class GraphBreak(AssertionError):
    """A replay did not run what the capture recorded."""


class _Recorder(TorchDispatchMode):
    def __init__(self, made: set[int]) -> None:
        super().__init__()
        self.made = made
        self.entries: list[Entry] = []

    def _describe(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            ptr = value.untyped_storage().data_ptr()
            return ("step", None) if ptr in self.made else ("kept", ptr)
        if isinstance(value, float | int | bool | str | torch.dtype | torch.device | torch.memory_format):
            return value
        if value is None:
            return None
        return type(value).__name__

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        described = tuple(self._describe(v) for v in tree_leaves((args, kwargs)))
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made.add(t.untyped_storage().data_ptr())
        self.entries.append((str(func), described))
        return out


class TapeCapture:
    """Records each phase at capture; every replay re-runs it and must match the recording."""

    def __init__(self) -> None:
        self.replays = 0

    def warmup(self, run: Callable[[], None]) -> None:
        run()

    def capture(self, phases: Sequence[Callable[[], None] | None]) -> list[Callable[[], None] | None]:
        made: set[int] = set()
        tapes: list[list[Entry] | None] = []
        for run in phases:
            if run is None:
                tapes.append(None)
                continue
            with _Recorder(made) as recorder:
                run()
            tapes.append(recorder.entries)
        state = {"made": set[int]()}
        first = next(i for i, run in enumerate(phases) if run is not None)

        def replay_of(index: int, run: Callable[[], None], tape: list[Entry]) -> Callable[[], None]:
            def replay() -> None:
                if index == first:
                    state["made"] = set()
                    self.replays += 1
                with _Recorder(state["made"]) as recorder:
                    run()
                _compare(tape, recorder.entries, index)

            return replay

        return [
            None if run is None or tape is None else replay_of(i, run, tape)
            for i, (run, tape) in enumerate(zip(phases, tapes, strict=True))
        ]


def _compare(captured: list[Entry], replayed: list[Entry], phase: int) -> None:
    for n, (want, got) in enumerate(zip(captured, replayed, strict=False)):
        if want != got:
            raise GraphBreak(f"phase {phase}, op {n}: captured {want}, replayed {got}")
    if len(captured) != len(replayed):
        raise GraphBreak(f"phase {phase}: captured {len(captured)} ops, replayed {len(replayed)}")
