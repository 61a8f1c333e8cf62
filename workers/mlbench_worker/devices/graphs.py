"""A trainer's step replayed from CUDA graphs (``implementation: {cuda_graphs: true}``).

Each phase of the step (forward, loss, backward, the gradient all-reduce, the optimizer, the
batch metrics) is captured in its own graph and the graphs are replayed back to back: the
tracker's CUDA events go between the replays (an event cannot be recorded inside a capture), so
the compute/communication split survives at the cost of a few microseconds of launch per phase.
A set of graphs is captured per graph key (``PhasedTrainer.graph_key``: the input shapes, or None
for a step the task runs eagerly, such as a rare BPTT length), when the key first appears. Each
set has a memory pool of its own and keeps every tensor it captured alive, so no other capture
can be handed memory a set's replays still write. The warm-up trains for a few steps on the batch
at hand; everything a step changes (parameters, buffers, optimizer and scaler state, gradients)
is put back after the capture, so the captured run starts where the eager run would, and a
capture that moved a parameter's storage (a module re-allocating its weights inside the step) is
refused, since its replays would update memory nothing reads. Warming up and capturing are set
aside from training time and summarised once per run. Random streams (dropout) differ from the
eager run's: graphs draw from the device generator's replay-safe offsets. On a CPU,
``mlbench_worker.devices.replay_capture.ReplayCapture`` stands in for the capture.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from mlbench_worker.tasks.steps import PhasedTrainer, Step, StepResult
from mlbench_worker.timing.tracker import Record

Replay = Callable[[], None]
WARMUP_STEPS = 3  # eager steps on a side stream before capture (torch's recipe: lazy state, cuDNN plans)


class Capture(Protocol):
    """How phases are captured: CUDA graphs on a GPU, ``ReplayCapture`` standing in on a CPU."""

    def warmup(self, run: Callable[[], None]) -> None:
        """Run ``run`` eagerly where captures will run (a side stream), then rejoin."""

    def capture(self, phases: Sequence[Callable[[], None] | None]) -> list[Replay | None]:
        """Capture each phase (None: nothing to capture) in order; return their replays."""


class CudaCapture:
    """One CUDA graph per phase on one capture stream; each ``capture`` call (a set of phases)
    gets a memory pool of its own, shared by its phases, which always replay in capture order."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device)

    def warmup(self, run: Callable[[], None]) -> None:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            run()
        torch.cuda.current_stream().wait_stream(self.stream)

    def capture(self, phases: Sequence[Callable[[], None] | None]) -> list[Replay | None]:
        replays: list[Replay | None] = []
        pool = torch.cuda.graph_pool_handle()
        for run in phases:
            if run is None:
                replays.append(None)
                continue
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=self.stream):
                run()
            replays.append(graph.replay)
        return replays


class TrainingState:
    """What a training step changes, saved so that warm-up and capture leave no trace.

    Optimizer state created by the warm-up (momentum buffers, Adam's moments and step count) is
    zeroed on restore: for SGD without dampening and for Adam that is the fresh state.
    """

    def __init__(self, trainer: PhasedTrainer[Any]) -> None:
        for group in trainer.optimizer.param_groups:
            if group.get("dampening", 0) and group.get("momentum", 0):
                raise ValueError("CUDA graphs restore SGD momentum as fresh only without dampening")
        self.trainer = trainer
        model = trainer.model
        self.named = list(itertools.chain(model.named_parameters(), model.named_buffers()))
        self.tensors = [t.detach() for _, t in self.named]
        self.saved = [t.clone() for t in self.tensors]
        self.storages = [t.untyped_storage().data_ptr() for t in self.tensors]
        self.optimizer_saved = {id(t): t.clone() for t in self._optimizer_tensors()}
        scaler = trainer.scaler
        self.scaler_saved = scaler.state_dict() if scaler.is_enabled() else None

    def _optimizer_tensors(self) -> Iterator[torch.Tensor]:
        for state in self.trainer.optimizer.optimizer.state.values():
            yield from (t for t in state.values() if isinstance(t, torch.Tensor))

    def check_storage_kept(self) -> None:
        """Refuse a capture that moved a parameter or buffer to other memory: the replays would
        update the new memory while the captured reads of the old one stay stale."""
        for (name, t), before in zip(self.named, self.storages, strict=True):
            if t.untyped_storage().data_ptr() != before:
                raise RuntimeError(
                    f"capturing the step moved {name!r} to other memory (a module re-allocated its "
                    "weights inside the step, e.g. an RNN re-flattening them): it cannot be replayed "
                    "from CUDA graphs"
                )

    @torch.no_grad()
    def restore(self) -> None:
        for tensor, saved in zip(self.tensors, self.saved, strict=True):
            tensor.copy_(saved)
        for tensor in self._optimizer_tensors():
            before = self.optimizer_saved.get(id(tensor))
            if before is None:
                tensor.zero_()
            else:
                tensor.copy_(before)
        if self.scaler_saved is not None:
            self.trainer.scaler.load_state_dict(self.scaler_saved)
        self.trainer.optimizer.zero_grad()


@dataclass
class _Graphs:
    step: Step  # static inputs and outputs (kept: the replays write them)
    replays: list[tuple[str, Replay | None]]


def _shape_text(step: Step) -> str:
    return ", ".join("x".join(map(str, t.shape)) for t in step.inputs)


class GraphedStep:
    """Runs ``trainer``'s steps from graphs of its phases, one set per graph key."""

    def __init__(
        self,
        trainer: PhasedTrainer[Any],
        capture: Capture,
        *,
        warmup_steps: int = WARMUP_STEPS,
        aside: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> None:
        if warmup_steps < 1:
            raise ValueError(
                "CUDA graphs need at least one warm-up step: the first step creates optimizer state"
            )
        aggregator = trainer.optimizer.aggregator
        if not aggregator.capturable:
            raise ValueError(
                f"{type(aggregator).__name__} cannot run inside a CUDA graph (host-side steps or "
                "collectives started during backward): use centralized_sgd or centralized_adam "
                "without overlap_comm"
            )
        self.trainer = trainer
        self.capture = capture
        self.warmup_steps = warmup_steps
        self.aside = aside
        self.capture_s = 0.0
        self.steps = 0
        self.eager_steps = 0
        self._graphs: dict[Hashable, _Graphs] = {}
        trainer.optimizer.make_capturable()

    @property
    def captured(self) -> int:
        """How many graph keys (input shapes) have graphs."""
        return len(self._graphs)

    def train_step(self, batch: Any, record: Record | None) -> StepResult:
        """One step from the graphs for this batch's key (captured now if there are none), or
        eagerly when the trainer gives the step no key."""
        trainer = self.trainer
        step = trainer.begin_step(batch)
        self.steps += 1
        key = trainer.graph_key(step)
        if key is None:
            self.eager_steps += 1
            trainer.run_phases(step, record)
            return trainer.end_step(step)
        graphs = self._graphs.get(key) or self._capture(key, step)
        for static, fresh in zip(graphs.step.inputs, step.inputs, strict=True):
            static.copy_(fresh, non_blocking=True)
        for name, replay in graphs.replays:
            if replay is not None:
                replay()
            if record:
                record(name)
        return trainer.end_step(graphs.step)

    def _capture(self, key: Hashable, step: Step) -> _Graphs:
        trainer = self.trainer
        with self.aside():
            start = time.perf_counter()
            static = step.with_inputs(tuple(t.detach().clone() for t in step.inputs))
            state = TrainingState(trainer)
            trainer.optimizer.zero_grad()  # capture from the state every step starts in
            idle = trainer.idle_phases()
            phases = [
                (name, None if name in idle else functools.partial(run, static))
                for name, run in trainer.phases()
            ]

            def warmup() -> None:
                for _ in range(self.warmup_steps):
                    for _, run in phases:
                        if run is not None:
                            run()

            self.capture.warmup(warmup)
            replays = self.capture.capture([run for _, run in phases])
            state.check_storage_kept()
            state.restore()
            graphs = _Graphs(static, [(name, r) for (name, _), r in zip(phases, replays, strict=True)])
            self._graphs[key] = graphs
            self.capture_s += time.perf_counter() - start
        return graphs

    def summary(self) -> str:
        """One line on what ran from graphs: the sets captured, their cost, the eager steps."""
        if not self._graphs:
            return f"CUDA graphs: none captured ({self.eager_steps} of {self.steps} steps ran eagerly)"
        shapes = "; ".join(_shape_text(g.step) for g in self._graphs.values())
        phases = sum(r is not None for g in self._graphs.values() for _, r in g.replays)
        return (
            f"CUDA graphs: {phases} graphs in {len(self._graphs)} set(s) for inputs {shapes}, warm-up "
            f"and capture {self.capture_s:.2f}s (initialisation, not training); {self.eager_steps} of "
            f"{self.steps} steps ran eagerly (inputs without graphs)"
        )
