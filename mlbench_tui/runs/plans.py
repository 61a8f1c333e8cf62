"""What ``apply`` will run: specs loaded and expanded into planned runs, their dry run, the runs
skipped because an unchanged spec already succeeded, and whether a run fits beside the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlbench_tui.executors import executor_for
from mlbench_tui.executors.api import REDACTED, DryRun, Executor, LaunchContext
from mlbench_tui.lifecycle import STARTS, UNCHANGED, already_succeeded
from mlbench_tui.results.model import RunResult
from mlbench_tui.spec.limits import MAX_RUNS

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunInfo

PLAN_HEADER = "plan: "


@dataclass
class PlannedRun:
    """One plan to apply, with the spec text it came from and what apply will do with it."""

    plan: RunPlan
    spec_text: str
    source: str
    existing: RunInfo | None = None  # the stored run that already succeeded (then the plan is skipped)

    @property
    def skipped(self) -> bool:
        return self.existing is not None

    def existing_result(self) -> RunResult:
        """The stored result of the run that already succeeded (its identity when it has none)."""
        assert self.existing is not None
        return self.existing.result or RunResult(name=self.plan.name, state=self.existing.state)


def load_plans(paths: Sequence[str], *, max_runs: int = MAX_RUNS) -> list[PlannedRun]:
    """Load every spec under ``paths`` (raising one SpecError with all issues, runs over
    ``max_runs`` and runs sharing a name among them) and expand it."""
    from mlbench_tui.plan import expand
    from mlbench_tui.spec import load_paths

    planned: list[PlannedRun] = []
    for loaded in load_paths(list(paths), max_runs=max_runs):
        for plan in expand(loaded.spec):
            planned.append(PlannedRun(plan=plan, spec_text=loaded.text, source=loaded.file))
    return planned


def check_placement(plans: Sequence[RunPlan]) -> None:
    """Refuse, before any run starts, a plan its target cannot place (``ExecutorError``)."""
    cache: dict[str, Executor[Any]] = {}
    for plan in plans:
        executor_for(plan, cache).check_placement(plan)


def render_dry_run(dry: DryRun[Any]) -> str:
    """The exact commands (or manifests, or files as heredocs) of a dry run, shell-quoted, the token
    redacted."""
    return dry.text()


def dry_run_text(planned: Sequence[PlannedRun], server_url: str, server_socket: str | None = None) -> str:
    """What ``apply --dry-run`` prints: every run's exact launch, with placeholder run ids."""
    cache: dict[str, Executor[Any]] = {}
    blocks = []
    for index, item in enumerate(planned):
        launch = LaunchContext(
            run_id=f"r-dryrun{index:05d}",
            server_url=server_url,
            write_token=REDACTED,
            server_socket=server_socket,
        )
        blocks.append(render_dry_run(executor_for(item.plan, cache).dryrun(item.plan, launch)))
    return "\n\n".join(blocks)


def mark_unchanged(planned: Sequence[PlannedRun], client: MlbenchClient, *, force: bool) -> None:
    """Attach the stored successful run to each plan that has one with the same name and spec
    hash (unless ``force``): applying an unchanged spec again does nothing."""
    if force:
        return
    runs = [run for name in {p.plan.spec_name for p in planned} for run in client.list_runs(spec_name=name)]
    done = already_succeeded(((p.plan.name, p.plan.spec_hash) for p in planned), runs)
    for item in planned:
        item.existing = done.get(item.plan.name)


def plan_summary(planned: Sequence[PlannedRun]) -> str:
    lines = [f"{PLAN_HEADER}{len(planned)} run(s)"]
    for item in planned:
        plan = item.plan
        goal = (
            f"{plan.goal.metric} {'>=' if plan.goal.direction == 'max' else '<='} {plan.goal.target}"
            if plan.goal
            else "sweep"
        )
        what = UNCHANGED if item.skipped else STARTS
        lines.append(
            f"  {plan.name}: task {plan.task} ({plan.task_name}), "
            f"{plan.workers} x {plan.backend}, {goal} -- {what}"
        )
    return "\n".join(lines)


def _cores(plan: RunPlan) -> int:
    return plan.workers * max(1, plan.resources.threads_per_rank)


def fits(plan: RunPlan, running: Sequence[RunPlan], *, parallel: bool, cpu_count: int) -> bool:
    """Whether ``plan`` may start now: always when nothing runs; with ``parallel``, while the
    ranks x threads of everything running, plus its own, fit in the machine's cores, and never
    two GPU runs at once (each one's ranks count GPUs from the first)."""
    if not running:
        return True
    if not parallel or (plan.resources.gpus and any(p.resources.gpus for p in running)):
        return False
    return sum(_cores(p) for p in running) + _cores(plan) <= cpu_count
