"""The shared training loop and rank lifecycle drive any framework's trainer: PyTorch's, TensorFlow's,
and here a plain-Python one (host floats), in a process that never imports torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlbench_worker import config as worker_config
from mlbench_worker import wire
from mlbench_worker.rank_context import RankContext
from mlbench_worker.rank_run import RankRun
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.training import HostStep, HostSums, run_training
from mlbench_worker.timing.tracker import Record, Tracker
from support.trainers import RecordingReporter

ROOT = Path(__file__).resolve().parents[2]


class Solo:
    """One rank's collectives."""

    rank, world_size = 0, 1

    def share_from_rank0(self, value: int) -> int:
        return value


class CountingTrainer:
    """A trainer whose validation accuracy climbs 30 points an epoch (host floats, no framework)."""

    train_samples, eval_samples, comm_precision = 40, 10, "fp32"

    def __init__(self) -> None:
        self.epochs = 0
        self.steps: list[int] = []
        self.lr = 0.1

    def train_batches(self, epoch: int) -> Iterator[int]:
        self.epochs = epoch
        yield from range(4)

    def before_step(self, step: int) -> None:
        self.steps.append(step)

    def train_step(self, batch: int, record: Record | None) -> HostStep:
        if record:
            record("batch_load")
        return HostStep(loss=1.0 / (batch + 1), samples=10, correct=5.0)

    def validate(self) -> dict[str, float]:
        return {wire.VAL_GLOBAL_LOSS: 1.0 / self.epochs, wire.VAL_GLOBAL_PREC1: 30.0 * self.epochs}

    def after_validation(self, epoch: int, metrics: dict[str, float], step: int) -> None:
        self.lr /= 2

    def train_mode(self) -> None:
        return None

    def window_sums(self) -> HostSums:
        return HostSums()

    def synchronize(self) -> None:
        return None

    def memory_peak_gib(self) -> float | None:
        return None


def _context(reporter: RecordingReporter, goal: float | None) -> RankContext:
    doc = {"run_id": "r", "task": "1a", "backend": "gloo", "world_size": 1}
    if goal is not None:
        doc["goal"] = {"metric": wire.VAL_GLOBAL_PREC1, "target": goal}
    return RankContext(worker_config.parse_config(doc), None, Solo(), "cpu", reporter)


def test_a_framework_free_trainer_runs_on_the_shared_loop_until_its_goal() -> None:
    reporter, trainer = RecordingReporter(), CountingTrainer()
    outcome = run_training(_context(reporter, 80.0), trainer, max_epochs=5, tracker=Tracker(seed=1))
    assert outcome.status == "success" and outcome.progress.epoch == 3 and outcome.progress.step == 12
    assert trainer.steps == list(range(12))
    kinds = [kind for kind, _ in reporter.events]
    assert kinds.count(wire.EPOCH_START) == 3 and kinds.count(wire.EPOCH_END) == 3
    assert kinds[0] == wire.RUN_START and kinds[-1] == wire.GOAL_REACHED
    names = {name for name, _, _ in reporter.metrics}
    assert {wire.TRAIN_LOSS, wire.TRAIN_PREC1, wire.LR, wire.STEP_TIME, wire.TIME_TRAIN} <= names
    assert wire.GPU_MEMORY_PEAK_GIB not in names  # the trainer has no GPU memory to report
    top1 = [value for name, value, _ in reporter.metrics if name == wire.TRAIN_PREC1]
    assert top1 and all(v == pytest.approx(50.0) for v in top1)  # 5 of 10 correct in every step
    lrs = [value for name, value, _ in reporter.metrics if name == wire.LR]
    assert lrs[0] == 0.1 and lrs[-1] == pytest.approx(0.025)  # halved after epochs 1 and 2


def test_without_a_goal_the_loop_completes_its_epochs() -> None:
    reporter = RecordingReporter()
    outcome = run_training(_context(reporter, None), CountingTrainer(), max_epochs=2, tracker=Tracker(seed=1))
    assert (outcome.status, outcome.reason) == ("success", "completed 2 epochs")


@pytest.mark.parametrize(
    ("raised", "code", "status"),
    [
        (None, 0, "success"),
        (RuntimeError("boom"), 1, "failed"),
        (worker_config.ConfigError("bad"), 2, "failed"),
    ],
)
def test_the_rank_lifecycle_reports_how_a_rank_ended(
    raised: BaseException | None, code: int, status: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reporter, done = RecordingReporter(), []
    run = RankRun(reporter, 0)
    run.after_success.append(lambda: done.append("closed"))
    run.on_failure.append(lambda: done.append("aborted"))

    def task() -> Outcome:
        if raised is not None:
            raise raised
        return Outcome("success", "goal reached", wire.Progress(epoch=1))

    assert run.run(task) == code
    events: dict[str, Any] = dict(reporter.events)
    assert reporter.events[0][0] == wire.INIT_START
    stop = wire.RunStop.from_payload(events[wire.RUN_STOP])
    assert (stop.status, stop.exit_code) == (status, code)
    assert done == (["closed"] if code == 0 else ["aborted"])
    assert (wire.RANK_FAILED in events) == (code != 0)
    err = capsys.readouterr().err
    assert ("Traceback" in err) == (code == 1)  # a user error is its message, not a traceback


def test_the_loop_the_schedule_and_the_tensorflow_task_import_no_torch() -> None:
    """A TensorFlow worker image needs no torch: the loop drives a trainer in a process without it."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch fails
        from mlbench_worker import config as worker_config
        from mlbench_worker import wire
        from mlbench_worker.optim.schedules import WarmupPlateau
        from mlbench_worker.rank_context import RankContext
        from mlbench_worker.tasks import tf_resnet20
        from mlbench_worker.tasks.training import HostStep, HostSums, run_training
        from mlbench_worker.timing.tracker import Tracker

        class Solo:
            rank, world_size = 0, 1
            def share_from_rank0(self, value):
                return value

        class Trainer:
            train_samples = eval_samples = None
            comm_precision = "fp32"
            def __init__(self):
                self.schedule = WarmupPlateau(base_lr=0.1, target_lr=0.2, warmup_epochs=1, steps_per_epoch=2)
            lr = property(lambda self: self.schedule.lr)
            def train_batches(self, epoch):
                return [1, 2]
            def before_step(self, step):
                self.schedule.on_step(step)
            def train_step(self, batch, record):
                return HostStep(1.0 / batch, 4)
            def validate(self):
                return {wire.VAL_GLOBAL_LOSS: 0.5}
            def after_validation(self, epoch, metrics, step):
                self.schedule.on_validation(metrics[wire.VAL_GLOBAL_LOSS], step)
            def train_mode(self): pass
            def window_sums(self): return HostSums()
            def synchronize(self): pass
            def memory_peak_gib(self): return None

        class Sink:
            def metric(self, *args, **kwargs): pass
            def event(self, kind, payload): pass

        config = worker_config.parse_config({"run_id": "r", "task": "1a", "backend": "gloo", "world_size": 1})
        ctx = RankContext(config, None, Solo(), "cpu", Sink())
        outcome = run_training(ctx, Trainer(), max_epochs=2, tracker=Tracker(seed=0))
        print(outcome.status, outcome.progress.step)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["success", "4"]
