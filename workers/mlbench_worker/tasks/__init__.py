"""The official tasks, by id: a lazy registry (``task id -> "module:function"``).

Adding a task is one module plus one line in ``TASKS``. A task is a function::

    def run(ctx: RunContext) -> Outcome

called on every rank after the runtime (``python -m mlbench_worker``) has joined the process
group, chosen the device, seeded every RNG with the run's seed, capped the threads and sent the
``environment`` event. The runtime sends ``run_stop`` from the returned ``Outcome`` and turns an
exception into ``rank_failed`` + ``run_stop`` failed + a non-zero exit, so a task just raises.

What a task uses from ``ctx`` (``mlbench_worker.context.RunContext``):

- ``ctx.config`` (``WorkerConfig``): ``task``, ``goal``, ``max_time_s``, ``precision``,
  ``data`` (``source``/``path``/``options``), ``seed``; ``ctx.hyperparameters(hps.ResNet20)``
  for the task's typed hyperparameters (``mlbench_worker.hyperparams``, parsed once from the config).
- ``ctx.comm`` (``mlbench_worker.comm.Comm``): ``all_reduce(t, "sum"|"avg"|"max"|"min")``,
  ``broadcast``, ``barrier``, ``allgather_object``; the same code runs on gloo, nccl and MPI.
- ``ctx.rank``, ``ctx.world_size``, ``ctx.is_main``, ``ctx.device``, ``ctx.log(text)``.
- ``ctx.reporter``: ``metric(name, value, step=, epoch=)`` and ``event(kind, payload)``, with the
  metric and event names of the shared contract (``train_loss``, ``val_global_Prec@1``, ...).
- ``ctx.mark_run_start(facts)``: call it when setup (data download, model build) is done, so the
  timed part starts there (the training helper does this for you, with the trainer's
  ``train_samples``, ``eval_samples`` and ``comm_precision`` for the run's MLPerf log).

Training tasks should not write their own loop: subclass ``tasks.training.PhasedTrainer`` (its
step split into MLBench's phases, which ``implementation: {cuda_graphs: true}`` can capture), or
``ClassificationTrainer`` for ``(inputs, labels)`` batches, and call
``tasks.training.run_training(ctx, trainer, max_epochs=...)``. It times MLBench's phases with the
tracker, reports ``train_loss``/``train_Prec@1``/``lr``/``step_time`` every few steps, validates
each epoch on global (all-reduced) metrics, reports ``val_global_*``, ``time_*``, ``phase_*``,
``epoch_start``, ``eval_start`` and ``epoch_end`` (as the validation ends), checks the goal and
``max_time`` collectively so all ranks stop at the same step, and returns the ``Outcome``. See
``tasks/resnet20.py`` for a complete example.

Data: a ``synthetic`` source must be learnable (the light goal is reachable on it) so smoke runs
prove something; ``path`` reads the standard prepared files; ``download`` fetches the official
archive and verifies its checksum. Shard data disjointly per rank, with the same number of train
steps on every rank (collectives would otherwise deadlock).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlbench_worker.tasks.base import Outcome

if TYPE_CHECKING:
    from mlbench_worker.context import RunContext

TASKS: dict[str, str] = {
    "0a": "mlbench_worker.tasks.allreduce:run",
    "1a": "mlbench_worker.tasks.resnet20:run",
    "1b": "mlbench_worker.tasks.resnet50:run",
    "2a": "mlbench_worker.tasks.logreg:run",
    "3a": "mlbench_worker.tasks.awd_lstm:run",
    "4a": "mlbench_worker.tasks.gnmt:run",
    "4b": "mlbench_worker.tasks.transformer:run",
}

TaskFn = Callable[["RunContext"], Outcome]


class UnknownTaskError(LookupError):
    """The configured task id has no implementation in this worker."""


def load_task(task_id: str) -> TaskFn:
    """Import and return the task function registered for ``task_id``."""
    try:
        target = TASKS[task_id]
    except KeyError:
        known = ", ".join(sorted(TASKS))
        raise UnknownTaskError(f"this worker has no task {task_id!r} (it has: {known})") from None
    module_name, _, func_name = target.partition(":")
    fn: TaskFn = getattr(importlib.import_module(module_name), func_name)
    return fn


__all__ = ["TASKS", "Outcome", "TaskFn", "UnknownTaskError", "load_task"]
