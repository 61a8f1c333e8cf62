"""``mlbench apply``: specs -> plans -> runs in the store -> executor -> live progress -> results.

The flow: load and validate specs, expand them into run plans, skip plans whose runs already
succeeded with the same spec hash (GitOps idempotence; ``force`` reruns), then for each plan in
order create the run in the store (which hands out its write token), submit it to the executor,
watch it (ship rank logs into the store, print progress), and when it ends compute its result
summary and store it. ``parallel`` starts the next run while the ones running leave enough cores.
Ctrl-C (or SIGTERM) cancels every active run before returning, so no rank outlives ``apply``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.errors import MlbenchError
from mlbench_tui.executors.api import DryRun, Executor, LaunchContext, RunHandle, RunState, RunStatus
from mlbench_tui.progress import ProgressPrinter, RunProgress

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.server.client import MlbenchClient

POLL_S = 0.5
MAX_TIME_GRACE_S = 120.0
DETACH_READY_S = 60.0
DESCRIBE_PATIENCE_S = 60.0
LOG_BATCH_LINES = 200  # x 16 KiB per line at most stays well under the server's 8 MiB body limit
PLAN_HEADER = "plan: "
REDACTED = "<write token>"
FILE_END = "MLBENCH_FILE_END"


@dataclass
class PlannedRun:
    """One plan to apply, with the spec text it came from and what apply will do with it."""

    plan: RunPlan
    spec_text: str
    source: str
    existing: Any = None  # the stored run that already succeeded (then the plan is skipped)

    @property
    def skipped(self) -> bool:
        return self.existing is not None


@dataclass
class ActiveRun:
    """A run that was submitted and is being watched."""

    planned: PlannedRun
    run_id: str
    token: str
    handle: RunHandle
    progress: RunProgress
    executor: Executor
    event_cursor: int = 0
    metric_cursor: int = 0
    tailer: Any = None
    last_poll: float = 0.0
    rank_seen: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # last state sent per rank
    started: float = field(default_factory=time.monotonic)
    timed_out: bool = False
    deleted: bool = False
    describe_failures: int = 0


# -- planning ----------------------------------------------------------------------------------


def load_plans(paths: Sequence[str]) -> list[PlannedRun]:
    """Load every spec under ``paths`` (raising one SpecError with all issues) and expand it."""
    from mlbench_tui.plan import expand
    from mlbench_tui.spec import load_paths

    planned: list[PlannedRun] = []
    for loaded in load_paths(list(paths)):
        for plan in expand(loaded.spec):
            planned.append(PlannedRun(plan=plan, spec_text=loaded.text, source=loaded.file))
    names = [p.plan.name for p in planned]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise MlbenchError(
            f"two specs produce runs with the same name: {', '.join(duplicates)}",
            hint="give each spec its own metadata.name",
        )
    return planned


def executor_for(plan: RunPlan, cache: dict[str, Executor] | None = None) -> Executor:
    """The executor for a plan's target kind (one instance per kind when ``cache`` is given)."""
    from mlbench_tui.executors import get_executor

    kind = str(plan.target.get("kind", "local"))
    if cache is not None and kind in cache:
        return cache[kind]
    executor = get_executor(kind)
    if cache is not None:
        cache[kind] = executor
    return executor


def render_dry_run(dry: DryRun) -> str:
    """The exact commands (or manifests) of a dry run, shell-quoted, the token redacted."""
    lines = [
        f"# {dry.plan.name}: {dry.plan.workers} rank(s), backend {dry.plan.backend}, executor {dry.executor}"
    ]
    for key, value in sorted(dry.env.items()):
        shown = REDACTED if key == "MLBENCH_RUN_TOKEN" else value
        lines.append(f"export {key}={shlex.quote(shown)}")
    for path, text in dry.files:  # written by schedule: shown as a heredoc, replayable
        end = FILE_END
        while end in text:
            end += "_"
        lines.extend([f"cat > {shlex.quote(path)} <<'{end}'", text.rstrip("\n"), end])
    for command in dry.commands:
        lines.append(shlex.join(command))
    if dry.manifests:
        import io

        from ruamel.yaml import YAML

        yaml = YAML()
        yaml.default_flow_style = False
        for manifest in dry.manifests:
            buf = io.StringIO()
            yaml.dump(manifest, buf)
            lines.extend(["---", buf.getvalue().rstrip()])
    return "\n".join(lines)


def dry_run_text(planned: Sequence[PlannedRun], server_url: str) -> str:
    """What ``apply --dry-run`` prints: every run's exact launch, with placeholder run ids."""
    cache: dict[str, Executor] = {}
    blocks = []
    for index, item in enumerate(planned):
        launch = LaunchContext(run_id=f"r-dryrun{index:05d}", server_url=server_url, write_token=REDACTED)
        blocks.append(render_dry_run(executor_for(item.plan, cache).dryrun(item.plan, launch)))
    return "\n\n".join(blocks)


def mark_unchanged(planned: Sequence[PlannedRun], client: MlbenchClient, *, force: bool) -> None:
    """Attach the stored successful run to each plan that has one with the same name and spec
    hash (unless ``force``): applying an unchanged spec again does nothing."""
    if force:
        return
    runs = [run for name in {p.plan.spec_name for p in planned} for run in client.list_runs(spec_name=name)]
    done = {
        (run.name, run.spec_hash): run
        for run in sorted(runs, key=lambda r: r.created)
        if run.state == RunState.SUCCEEDED
    }
    for item in planned:
        item.existing = done.get((item.plan.name, item.plan.spec_hash))


# -- running -----------------------------------------------------------------------------------


def _gone(exc: MlbenchError) -> bool:
    """The server answered 404: the run was deleted while it ran."""
    return getattr(exc, "status", None) == 404


def _now() -> datetime:
    return datetime.now(UTC)


def _max_epochs(plan: RunPlan) -> float | None:
    value = plan.hyperparameters.get("max_epochs")
    return float(value) if isinstance(value, (int, float)) else None


def _cores(plan: RunPlan) -> int:
    return plan.workers * max(1, plan.resources.threads_per_rank)


class Runner:
    """Runs planned runs through their executors and records everything in the store."""

    def __init__(
        self,
        client: MlbenchClient,
        printer: ProgressPrinter | None = None,
        *,
        server_url: str | None = None,
        poll_s: float = POLL_S,
        cpu_count: int | None = None,
    ) -> None:
        self.client = client
        self.printer = printer or ProgressPrinter()
        self.server_url = server_url or client.url
        self.poll_s = poll_s
        self.cpu_count = cpu_count or os.cpu_count() or 1
        self.executors: dict[str, Executor] = {}
        self.summaries: list[dict[str, Any]] = []
        self.states: dict[str, RunState] = {}
        self._launched: dict[str, tuple[Executor, RunHandle]] = {}  # submitted, not yet finished

    # one run -------------------------------------------------------------------------------

    def start(self, item: PlannedRun) -> ActiveRun | None:
        """Create the run in the store and submit it; a launch failure marks it failed."""
        from mlbench_tui.store.api_models import RunCreate, RunUpdate

        plan = item.plan
        created = self.client.create_run(RunCreate.from_plan(plan, spec_text=item.spec_text))
        run_id, token = created.run.id, created.write_token
        progress = RunProgress(
            name=plan.name,
            goal=plan.goal.model_dump() if plan.goal else None,
            max_epochs=_max_epochs(plan),
            state="pending",
        )
        launch = LaunchContext(run_id=run_id, server_url=self.server_url, write_token=token)
        try:
            executor = executor_for(plan, self.executors)
            handle = executor.submit(plan, launch)
        except MlbenchError as exc:
            self.client.update_run(
                run_id, RunUpdate(state=RunState.FAILED, error=exc.message, finished=_now())
            )
            self.printer.note(f"{plan.name}: failed to start: {exc.message}")
            self._record(plan, run_id, RunState.FAILED, [], [], message=exc.message)
            return None
        self._launched[run_id] = (executor, handle)
        self.client.update_run(run_id, RunUpdate(state=RunState.RUNNING, handle=str(handle), started=_now()))
        progress.state = "running"
        self.printer.note(f"{plan.name}: started run {run_id} ({handle}); logs: mlbench logs {run_id} -f")
        active = ActiveRun(item, run_id, token, handle, progress, executor)
        tailer_for = getattr(executor, "log_tailer", None)
        try:
            active.tailer = tailer_for(run_id) if callable(tailer_for) else None
        except MlbenchError as exc:  # the run goes on; its logs stay where the executor keeps them
            self.printer.note(f"{plan.name}: logs will not be stored: {exc.message}")
        return active

    def poll(self, active: ActiveRun) -> bool:
        """Ship new log lines, refresh progress; True when the run has ended."""
        self._ship_logs(active, final=False)
        try:
            status = active.executor.describe(active.handle)
        except MlbenchError as exc:
            # A cluster API can fail for a moment; keep watching unless it stays down.
            active.describe_failures += 1
            if active.describe_failures * self.poll_s < DESCRIBE_PATIENCE_S:
                return False
            self.printer.note(f"{active.progress.name}: cannot watch the run any more: {exc.message}")
            raise
        active.describe_failures = 0
        self._read_progress(active)
        self._update_ranks(active, status)
        if status is not None and not status.state.is_terminal():
            self._show_waiting(active, status)
        self.printer.update(active.progress)
        if status is None:
            return True
        limit = None if active.executor.enforces_max_time else active.planned.plan.max_time_s
        if limit is not None and time.monotonic() - active.started > limit + MAX_TIME_GRACE_S:
            # The worker stops itself at max_time; ranks that did not are stuck: stop them.
            self.printer.note(
                f"{active.progress.name}: still running {MAX_TIME_GRACE_S:.0f}s past max_time; cancelling"
            )
            active.executor.cancel(active.handle)
            active.timed_out = True
            return True
        return status.state.is_terminal() or status.state is RunState.UNKNOWN

    def _show_waiting(self, active: ActiveRun, status: RunStatus) -> None:
        """A run the target has not started yet (a queued Slurm job) shows why it waits."""
        progress = active.progress
        waiting = status.state is RunState.PENDING
        if waiting and status.message and status.message != progress.message:
            self.printer.note(f"{progress.name}: {status.message}")
        if waiting or progress.state == "pending":
            progress.state = "pending" if waiting else "running"
            progress.message = status.message if waiting else None

    def finish(self, active: ActiveRun) -> dict[str, Any]:
        """Ship the last logs, compute and store the result summary and the final state."""
        from mlbench_tui.store.api_models import RunUpdate

        self._ship_logs(active, final=True)
        try:
            status = active.executor.describe(active.handle)
        except MlbenchError:
            status = None
        self._launched.pop(active.run_id, None)
        state = status.state if status is not None else RunState.UNKNOWN
        message = status.message if status is not None else "the executor lost track of the run"
        if state is RunState.UNKNOWN:
            state = RunState.FAILED
        if active.timed_out:
            state, message = RunState.FAILED, "the ranks did not stop at max_time and were stopped"
        from mlbench_tui.runs import fetch_result_inputs

        try:
            metrics, events = fetch_result_inputs(self.client, active.run_id, active.planned.plan)
        except MlbenchError as exc:
            if not _gone(exc):
                raise
            active.deleted = True
            metrics, events = [], []
        stop = next((e for e in reversed(events) if e.kind == "run_stop"), None)
        if state is RunState.SUCCEEDED and stop is not None and stop.payload.get("status") == "failed":
            state, message = RunState.FAILED, str(stop.payload.get("reason"))
        if state is RunState.FAILED:
            failure = next((e for e in events if e.kind == "rank_failed"), None)
            if failure is not None:
                message = f"rank {failure.payload.get('rank')} failed: {failure.payload.get('exception')}"
        self._update_ranks(active, status, final_state=state)
        summary = self._record(active.planned.plan, active.run_id, state, metrics, events, message=message)
        self._add_speedup(summary, active.planned.plan)
        if active.deleted:
            active.progress.message = "deleted from the store while running"
        else:
            self.client.update_run(
                active.run_id,
                RunUpdate(
                    state=state,
                    finished=_now(),
                    result=summary,
                    error=message if state != RunState.SUCCEEDED else None,
                ),
            )
        active.progress.state = state.value
        if not active.deleted:
            active.progress.message = message if state is not RunState.SUCCEEDED else None
        self.printer.done(active.progress)
        return summary

    def cancel(self, active: ActiveRun) -> None:
        active.executor.cancel(active.handle)

    def _record(
        self,
        plan: RunPlan,
        run_id: str,
        state: RunState,
        metrics: list[Any],
        events: list[Any],
        *,
        message: str | None,
    ) -> dict[str, Any]:
        from mlbench_tui.results.report import host_fingerprint, summarize_run

        summary = summarize_run(
            plan.model_dump(mode="json"),
            state.value,
            metrics,
            events,
            host=host_fingerprint(plan.resources.threads_per_rank),
            message=message,
        )
        summary["run_id"] = run_id
        self.summaries.append(summary)
        self.states[run_id] = state
        return summary

    # helpers -------------------------------------------------------------------------------

    def _add_speedup(self, summary: dict[str, Any], plan: RunPlan) -> None:
        """Speedup and efficiency against the 1-worker runs of the same spec and backend that
        reached the goal (olympic mean over their repeats), stored with the result."""
        from mlbench_tui.results.scoring import olympic_mean, speedup_for

        times = [
            float(s["time_to_accuracy_s"])
            for s in self._one_worker_results(plan)
            if s.get("reached") and s.get("time_to_accuracy_s")
        ]
        if not times:
            return
        speedup, efficiency = speedup_for(summary, olympic_mean(times))
        summary.update(speedup=speedup, efficiency=efficiency, one_worker_time_s=olympic_mean(times))

    def _one_worker_results(self, plan: RunPlan) -> list[dict[str, Any]]:
        mine = [
            s
            for s in self.summaries
            if s.get("spec_hash") == plan.spec_hash
            and s.get("backend") == plan.backend
            and s.get("workers") == 1
        ]
        if mine:
            return mine
        try:
            runs = self.client.list_runs(spec_name=plan.spec_name)
        except MlbenchError:
            return []
        return [
            run.result
            for run in runs
            if run.result
            and run.spec_hash == plan.spec_hash
            and run.backend == plan.backend
            and run.workers == 1
            and run.state == RunState.SUCCEEDED
        ]

    def _ship_logs(self, active: ActiveRun, *, final: bool) -> None:
        """Send new lines of the rank log files to the store with the run's write token."""
        if active.tailer is None or active.deleted:
            return
        lines = active.tailer.poll(final=final)
        if not lines:
            return
        now = time.time()
        by_rank: dict[int, list[dict[str, Any]]] = {}
        for rank, text in lines:
            stream = "system" if rank < 0 else "stdout"
            by_rank.setdefault(max(rank, 0), []).append({"text": text[:16_000], "stream": stream, "t": now})
        for rank, batch_lines in by_rank.items():
            for start in range(0, len(batch_lines), LOG_BATCH_LINES):
                try:
                    self.client.post_logs(
                        active.run_id,
                        batch_lines[start : start + LOG_BATCH_LINES],
                        rank=rank,
                        token=active.token,
                    )
                except MlbenchError as exc:  # logs stay in the run directory; never stop the run for them
                    self.printer.note(f"{active.progress.name}: could not store logs: {exc.message}")

    def _read_progress(self, active: ActiveRun) -> None:
        progress = active.progress
        try:
            page = self.client.events(active.run_id, since=active.event_cursor)
            for event in page.events:
                progress.on_event(event.kind, event.payload, event.t)
            active.event_cursor = page.cursor
            if progress.goal:
                metrics = self.client.metrics(
                    active.run_id, names=[str(progress.goal["metric"])], since=active.metric_cursor
                )
                for series in metrics.series:
                    if series.rank != 0:
                        continue
                    for value, epoch, t in zip(series.value, series.epoch, series.t, strict=False):
                        progress.on_metric(series.name, value, epoch, t)
                active.metric_cursor = metrics.cursor
            else:
                names = self.client.metric_names(active.run_id)
                progress.done_steps = sum(
                    n.count for n in names if n.name.endswith("_latency_p50") and 0 in n.ranks
                )
                hp = active.planned.plan.hyperparameters
                dtypes = hp.get("dtypes") or ["fp32"]
                progress.total_steps = int(hp.get("num_sizes") or 0) * len(dtypes) or None
        except MlbenchError as exc:
            # Progress is best effort (the run is watched through the executor), but a run
            # deleted from the store (``mlbench delete``) must stop.
            if _gone(exc) and not active.deleted:
                active.deleted = True
                active.executor.cancel(active.handle)

    def _update_ranks(self, active: ActiveRun, status: Any, final_state: RunState | None = None) -> None:
        if status is None:
            return
        from mlbench_tui.store.api_models import RankUpdate

        for rank in status.ranks:
            seen = (rank.state, rank.host, rank.pid, rank.message)
            if final_state is None and active.rank_seen.get(rank.rank) == seen:
                continue
            state = final_state or rank.state
            try:
                self.client.update_rank(
                    active.run_id,
                    rank.rank,
                    RankUpdate(state=state, host=rank.host, pid=rank.pid, message=rank.message),
                )
            except MlbenchError:
                continue
            active.rank_seen[rank.rank] = seen

    # many runs -----------------------------------------------------------------------------

    def run_all(self, planned: Sequence[PlannedRun], *, parallel: bool = False) -> list[dict[str, Any]]:
        """Run the plans in order (several at once with ``parallel`` while cores allow)."""
        queue = [item for item in planned if not item.skipped]
        active: list[ActiveRun] = []
        try:
            while queue or active:
                while queue and self._fits(queue[0], active, parallel):
                    started = self.start(queue.pop(0))
                    if started is not None:
                        active.append(started)
                for run in list(active):
                    if self.poll(run):
                        self.finish(run)
                        active.remove(run)
                if active:
                    time.sleep(self.poll_s)
        except KeyboardInterrupt:
            self.printer.note("interrupted: cancelling active runs")
            self._cancel_launched()
            for run in active:
                self.finish(run)
            raise
        except BaseException:
            self._cancel_launched()  # never leave ranks behind, whatever went wrong here
            raise
        return self.summaries

    def _cancel_launched(self) -> None:
        for executor, handle in list(self._launched.values()):
            try:
                executor.cancel(handle)
            except MlbenchError as exc:
                self.printer.note(f"could not cancel {handle}: {exc.message}")

    def _fits(self, item: PlannedRun, active: list[ActiveRun], parallel: bool) -> bool:
        return fits(
            item.plan, [run.planned.plan for run in active], parallel=parallel, cpu_count=self.cpu_count
        )


def fits(plan: RunPlan, running: Sequence[RunPlan], *, parallel: bool, cpu_count: int) -> bool:
    """Whether ``plan`` may start now: always when nothing runs; with ``parallel``, while the
    ranks x threads of everything running, plus its own, fit in the machine's cores."""
    if not running:
        return True
    if not parallel:
        return False
    return sum(_cores(p) for p in running) + _cores(plan) <= cpu_count


# -- apply -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApplyOptions:
    dry_run: bool = False
    detach: bool = False
    force: bool = False
    parallel: bool = False
    quiet: bool = False


def plan_summary(planned: Sequence[PlannedRun]) -> str:
    lines = [f"{PLAN_HEADER}{len(planned)} run(s)"]
    for item in planned:
        plan = item.plan
        goal = (
            f"{plan.goal.metric} {'>=' if plan.goal.direction == 'max' else '<='} {plan.goal.target}"
            if plan.goal
            else "sweep"
        )
        what = "unchanged, already succeeded" if item.skipped else "will run"
        lines.append(
            f"  {plan.name}: task {plan.task} ({plan.task_name}), "
            f"{plan.workers} x {plan.backend}, {goal} -- {what}"
        )
    return "\n".join(lines)


def detach(paths: Sequence[str], options: ApplyOptions) -> tuple[int, Path]:
    """Start ``apply`` in the background (own session, output to a log file); returns its pid and log."""
    from mlbench_tui.settings import load_settings

    logs = load_settings().paths.state_dir / "apply"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"apply-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    argv = [sys.executable, "-m", "mlbench_tui", "apply", *[str(Path(p).resolve()) for p in paths]]
    if options.force:
        argv.append("--force")
    if options.parallel:
        argv.append("--parallel")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    # Wait until the background apply has reached the store and printed its plan, so a failure
    # at start (no server, locked store) is reported here instead of hidden in its log.
    deadline = time.monotonic() + DETACH_READY_S
    while time.monotonic() < deadline:
        code = proc.poll()
        text = log_path.read_text(errors="replace")
        if PLAN_HEADER in text or code == 0:
            return proc.pid, log_path
        if code is not None:
            tail = text.strip().splitlines()[-3:]
            raise MlbenchError(f"the background apply failed: {' / '.join(tail)}", hint=f"see {log_path}")
        time.sleep(0.1)
    return proc.pid, log_path


def apply(paths: Sequence[str], options: ApplyOptions, *, out: Any = None, err: Any = None) -> int:
    """Everything ``mlbench apply`` does; returns the exit code (1 when a run failed)."""

    out = out or sys.stdout
    printer = ProgressPrinter(err, quiet=options.quiet)
    planned = load_plans(paths)
    if options.dry_run:
        from mlbench_tui.settings import load_settings

        print(dry_run_text(planned, load_settings().server_url), file=out)
        return 0
    if options.detach:
        pid, log_path = detach(paths, options)
        text = log_path.read_text(errors="replace")
        if PLAN_HEADER in text:
            block = text[text.index(PLAN_HEADER) :].splitlines()
            printer.note(
                "\n".join([block[0], *[line for line in block[1:] if line.startswith("  ")][: len(planned)]])
            )
        printer.note(f"applying in the background (pid {pid}); its output: {log_path}")
        printer.note("watch with: mlbench status   (or mlbench tui)")
        return 0
    with _metrics_server(planned) as (client, server_url):
        return _apply_planned(planned, options, client, server_url, printer, out)


@contextlib.contextmanager
def _metrics_server(planned: Sequence[PlannedRun]) -> Iterator[tuple[MlbenchClient, str]]:
    """The server the runs report to: the in-cluster one (port-forwarded) for Kubernetes
    targets, otherwise the local one (reused, or started embedded in this process)."""
    if any(item.plan.target.get("kind") == "kubernetes" for item in planned):
        from mlbench_tui.infra.incluster import server_for_plans

        with server_for_plans([item.plan for item in planned]) as endpoint:
            if endpoint is not None:
                yield endpoint.client(), endpoint.url
                return
    from mlbench_tui.server.serve import ensure_server

    server = ensure_server()
    yield server.client(), server.url


def _apply_planned(
    planned: Sequence[PlannedRun],
    options: ApplyOptions,
    client: MlbenchClient,
    server_url: str,
    printer: ProgressPrinter,
    out: Any,
) -> int:
    from mlbench_tui.results.report import render_results

    mark_unchanged(planned, client, force=options.force)
    printer.note(plan_summary(planned))
    if all(item.skipped for item in planned):
        printer.note("nothing to do: every run of this spec already succeeded (use --force to run again)")
        print(
            render_results(
                [item.existing.result or {"name": item.plan.name, "state": "succeeded"} for item in planned]
            ),
            file=out,
        )
        return 0
    runner = Runner(client, printer, server_url=server_url)
    try:
        summaries = runner.run_all(planned, parallel=options.parallel)
    except KeyboardInterrupt:
        if runner.summaries:
            print(render_results(runner.summaries), file=out)
        raise
    earlier = [item.existing.result for item in planned if item.skipped and item.existing.result]
    print(render_results([*earlier, *summaries]), file=out)
    failed = [s for s in summaries if s.get("state") != RunState.SUCCEEDED.value]
    if failed:
        names = ", ".join(f"{s['name']} ({s['state']})" for s in failed)
        printer.note(f"{len(failed)} run(s) did not succeed: {names}")
        return 1
    return 0
