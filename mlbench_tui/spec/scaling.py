"""Values that pass alone but not after the plan's arithmetic, each reported at the line that
caused it.

A run does not use the hyperparameters as written: the task scales them with the world size
(``lr x workers``, warm-up over ``3 x workers`` epochs) and splits global batches over the ranks.
Every distinct world size and backend a spec sweeps is worked out here with the same functions
the plan uses (``for_workers``, ``on_backend``) and checked with the ranks' own parser, so a run
``validate`` accepts is one its ranks accept. Repeat ``i`` seeds with ``seed + i``, which must
stay a seed too.
"""

from __future__ import annotations

from collections.abc import Iterator

from mlbench_worker.hyperparams import (
    HYPERPARAMETERS,
    TaskHyperparameters,
    check_hyperparameters,
    plan_values,
)
from mlbench_worker.knobs import ALL_POLICIES, HyperparameterProblem

from mlbench_tui.spec.diagnostics import Loc, PolicyIssue
from mlbench_tui.spec.hyperparameters import OVERRIDE
from mlbench_tui.spec.limits import MAX_SEED
from mlbench_tui.spec.models import BenchmarkSpec
from mlbench_tui.spec.tasks import TaskInfo


def scaling_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    """Every problem of the runs' effective values, once per place in the spec."""
    body = spec.spec
    last_seed = body.seed + body.repeats - 1
    if last_seed > MAX_SEED:
        yield PolicyIssue(
            ("spec", "seed"),
            f"repeat i seeds with seed + i: seed {body.seed} with {body.repeats} repeats reaches "
            f"{last_seed}, above the largest seed ({MAX_SEED})",
            f"use a seed of at most {MAX_SEED - body.repeats + 1}",
        )
    overrides = body.hyperparameters
    typed, problems = check_hyperparameters(task.id, overrides, OVERRIDE)
    if problems:
        return  # the overrides themselves are wrong: reported as written
    written = HYPERPARAMETERS[task.id](**typed)
    if next(written.problems(), None) is not None:
        return
    given = frozenset(typed)
    as_written = plan_values(written)
    by_backend = type(written).on_backend is not TaskHyperparameters.on_backend
    reported: set[Loc] = set()
    for index, workers in enumerate(body.workers):
        scaled = written.for_workers(workers, given)
        runs = [scaled.on_backend(b) for b in dict.fromkeys(body.backend)] if by_backend else [scaled]
        for run in runs:
            for problem in _run_problems(task.id, run, workers, as_written):
                written_here = problem.name in overrides
                loc: Loc = (
                    ("spec", "hyperparameters", problem.name)
                    if written_here
                    else ("spec", "workers", index)
                    if len(body.workers) > 1
                    else ("spec", "workers")
                )
                if loc in reported:
                    continue
                reported.add(loc)
                yield PolicyIssue(
                    loc,
                    f"in the runs of {workers} worker(s): {problem.message}",
                    problem.hint or "lower it, or sweep fewer workers (the task scales it with them)",
                )


def _run_problems(
    task: str, run: TaskHyperparameters, workers: int, as_written: dict[str, object]
) -> list[HyperparameterProblem]:
    """What the ranks of one run would refuse in its effective values (those the scaling changed:
    the rest were checked as written), and what they cannot split."""
    changed = {k: v for k, v in plan_values(run).items() if k not in as_written or as_written[k] != v}
    _typed, problems = check_hyperparameters(task, changed, ALL_POLICIES)
    return [*problems, *run.world_problems(workers)]
