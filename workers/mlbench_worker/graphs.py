"""A trainer's step replayed from CUDA graphs (``implementation: {cuda_graphs: true}``).

Each phase of the step (forward, loss, backward, the gradient all-reduce, the optimizer, the
batch metrics) is captured in its own graph, all sharing one memory pool and one capture stream,
and the graphs are replayed back to back: the tracker's CUDA events go between the replays (an
event cannot be recorded inside a capture), so the compute/communication split survives at the
cost of a few microseconds of launch per phase. Graphs are captured per input shape, when a
shape first appears (a short last batch, a new BPTT length); warming up and capturing are set
aside from training time. The warm-up trains for a few steps on the batch at hand; everything a
step changes (parameters, buffers, optimizer and scaler state, gradients) is put back after the
capture, so the captured run starts where the eager run would. Random streams (dropout) differ
from the eager run's: graphs draw from the device generator's replay-safe offsets.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from mlbench_worker.tasks.training import PhasedTrainer, Step, StepResult
from mlbench_worker.tracker import Record

Replay = Callable[[], None]
WARMUP_STEPS = 3  # eager steps on a side stream before capture (torch's recipe: lazy state, cuDNN plans)


class Capture(Protocol):
    """How phases are captured: CUDA graphs on a GPU (tests stand in a recording one on CPU)."""

    def warmup(self, run: Callable[[], None]) -> None:
        """Run ``run`` eagerly where captures will run (a side stream), then rejoin."""

    def capture(self, phases: Sequence[Callable[[], None] | None]) -> list[Replay | None]:
        """Capture each phase (None: nothing to capture) in order; return their replays."""


class CudaCapture:
    """One CUDA graph per phase, on one capture stream and one shared memory pool.

    Sharing the pool is safe because the graphs of a step always replay in capture order and
    never concurrently, and the graphs of different input shapes are never interleaved."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()

    def warmup(self, run: Callable[[], None]) -> None:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            run()
        torch.cuda.current_stream().wait_stream(self.stream)

    def capture(self, phases: Sequence[Callable[[], None] | None]) -> list[Replay | None]:
        replays: list[Replay | None] = []
        for run in phases:
            if run is None:
                replays.append(None)
                continue
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
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
        self.tensors = [t.detach() for t in itertools.chain(model.parameters(), model.buffers())]
        self.saved = [t.clone() for t in self.tensors]
        self.optimizer_saved = {id(t): t.clone() for t in self._optimizer_tensors()}
        scaler = trainer.scaler
        self.scaler_saved = scaler.state_dict() if scaler.is_enabled() else None

    def _optimizer_tensors(self) -> Iterator[torch.Tensor]:
        for state in self.trainer.optimizer.optimizer.state.values():
            yield from (t for t in state.values() if isinstance(t, torch.Tensor))

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
    step: Step  # static inputs and outputs
    replays: list[tuple[str, Replay | None]]


def shape_key(step: Step) -> tuple[Any, ...]:
    """What a set of graphs is captured for: the shapes and dtypes of the step's inputs."""
    return tuple((tuple(t.shape), t.dtype) for t in step.inputs)


class GraphedStep:
    """Runs ``trainer``'s steps from graphs of its phases, captured per input shape."""

    def __init__(
        self,
        trainer: PhasedTrainer[Any],
        capture: Capture,
        *,
        warmup_steps: int = WARMUP_STEPS,
        aside: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
        log: Callable[[str], None] = print,
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
        self.log = log
        self.capture_s = 0.0
        self._graphs: dict[tuple[Any, ...], _Graphs] = {}
        trainer.optimizer.make_capturable()

    @property
    def captured(self) -> int:
        """How many input shapes have graphs."""
        return len(self._graphs)

    def train_step(self, batch: Any, record: Record | None) -> StepResult:
        """One step from the graphs for this batch's shapes (captured now if there are none)."""
        trainer = self.trainer
        step = trainer.begin_step(batch)
        graphs = self._graphs.get(shape_key(step)) or self._capture(step)
        for static, fresh in zip(graphs.step.inputs, step.inputs, strict=True):
            static.copy_(fresh, non_blocking=True)
        for name, replay in graphs.replays:
            if replay is not None:
                replay()
            if record:
                record(name)
        return trainer.end_step(graphs.step)

    def _capture(self, step: Step) -> _Graphs:
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
            # The model output lives only between phases: released, its memory returns to the
            # shared pool (other shapes' graphs may reuse it; their replays never interleave with
            # these). What end_step reads after a replay (loss, metrics, carried state) stays.
            static.output = None
            state.restore()
            named = [(name, replay) for (name, _), replay in zip(phases, replays, strict=True)]
            graphs = _Graphs(static, named)
            self._graphs[shape_key(step)] = graphs
            seconds = time.perf_counter() - start
            self.capture_s += seconds
        shapes = ", ".join("x".join(map(str, t.shape)) for t in static.inputs)
        self.log(
            f"captured {sum(r is not None for _, r in graphs.replays)} CUDA graphs for inputs {shapes} "
            f"in {seconds:.2f}s (warm-up and capture count as initialisation, not training)"
        )
        return graphs
