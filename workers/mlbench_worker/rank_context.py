"""What every framework's rank context shares: the config, the rank's place, the reporter, the
run's timed start (``run_start``) and progress lines. ``context.RunContext`` is PyTorch's (its
process group and device); the TensorFlow task's adds its strategy's collective. Imports no
framework, so the shared training loop and the TensorFlow task use it without torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from mlbench_worker.config import ConfigError, WorkerConfig
from mlbench_worker.hyperparams import TaskHyperparameters
from mlbench_worker.timing.startup import CLOCK
from mlbench_worker.wire import RunStart, emit

if TYPE_CHECKING:
    from mlbench_worker.context import ReporterLike
    from mlbench_worker.goals import Collective
    from mlbench_worker.launch.rendezvous import Rendezvous

H = TypeVar("H", bound=TaskHyperparameters)


@dataclass
class RankContext:
    """What a task gets: config, rank, collectives, device and the reporter."""

    config: WorkerConfig
    rendezvous: Rendezvous
    comm: Collective
    device: Any  # the framework's device (a torch.device; "cpu" or "cuda" for TensorFlow)
    reporter: ReporterLike
    started_at: float = field(default_factory=time.time)
    run_started: bool = False

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    @property
    def is_main(self) -> bool:
        """Rank 0 reports the run-wide facts (global metrics, run events) once."""
        return self.comm.rank == 0

    def hyperparameters(self, kind: type[H]) -> H:
        """The run's typed hyperparameters, as the task's own class ``kind`` (parsed once, from the
        config); a config for another task is a ``ConfigError``."""
        hp = self.config.hyperparameters
        if not isinstance(hp, kind):
            got, expected = type(hp).__name__, kind.__name__
            raise ConfigError(f"task {self.config.task} got hyperparameters of {got}, expected {expected}")
        return hp

    def log(self, text: str, *, all_ranks: bool = False) -> None:
        """A progress line on stdout (the executor captures it per rank); rank 0 only by default."""
        if all_ranks or self.is_main:
            print(f"[rank {self.rank}] {text}", flush=True)

    def mark_run_start(self, facts: RunStart | None = None) -> None:
        """Emit ``run_start`` once, when setup is done and the timed part begins (MLPerf rule).

        ``facts`` ride on the event: what the setup found that the run's MLPerf log reports (the
        sizes of the whole training and validation sets, the dtype gradients are all-reduced in).
        """
        if self.run_started:
            return
        self.run_started = True
        self.started_at = time.time()
        CLOCK.mark("model")  # setup done: the data (when the task marked it) and then the model
        if self.is_main:
            emit(self.reporter, facts or RunStart())

    def elapsed(self) -> float:
        """Seconds since ``run_start`` (or since the context was made)."""
        return time.time() - self.started_at
