"""Watching submitted runs: create each in the store, submit it, ship its rank logs into the store,
print its progress, record its final state; ``parallel`` starts the next run while the ones
running leave enough cores. Any exit, Ctrl-C included, cancels every run still launched.

A run is created owned by this process and only when no other live process runs one of that name
(two applies of one spec run it once); an interrupt while it is created and launched waits until
it is known, so it is cancelled and recorded, never stranded; a failure before or during launch,
whatever it is, records the run failed with its reason. The client re-attaches to the store's
server when it went away (a restarted server), so watching goes on.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mlbench_worker.hyperparams import AllReduce, AnyHyperparameters
from mlbench_worker.wire import LogIn, parse_event

from mlbench_tui.errors import MlbenchError, NotFound, from_os_error
from mlbench_tui.executors import executor_for
from mlbench_tui.executors.api import Executor, LaunchContext, LogTailer
from mlbench_tui.lifecycle import LaunchMilestones, NetworkCheck, RunHandle, RunState, RunStatus
from mlbench_tui.owners import RunOwner
from mlbench_tui.plan import RunPlan
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.summary import host_fingerprint, summarize_run
from mlbench_tui.runs.interrupts import deferred_interrupts
from mlbench_tui.runs.plans import PlannedRun, fits
from mlbench_tui.runs.progress import ProgressPrinter, RunProgress
from mlbench_tui.runs.queue import queue_label
from mlbench_tui.spec.tasks import get_task
from mlbench_tui.store.api_models import (
    MAX_TEXT_LEN,
    RankUpdate,
    RunCreate,
    RunCreated,
    RunUpdate,
    Stream,
)

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient

POLL_S = 0.5
MAX_TIME_GRACE_S = 120.0
DESCRIBE_PATIENCE_S = 60.0
LOG_BATCH_LINES = 200  # x 16 KiB per line at most stays well under the server's 8 MiB body limit


@dataclass
class ActiveRun:
    """A run that was submitted and is being watched."""

    planned: PlannedRun
    run_id: str
    token: str
    handle: RunHandle
    progress: RunProgress
    executor: Executor[Any]
    event_cursor: int = 0
    metric_cursor: int = 0
    tailer: LogTailer | None = None
    rank_seen: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # last state sent per rank
    started: float = field(default_factory=time.monotonic)
    timed_out: bool = False
    deleted: bool = False
    describe_failures: int = 0
    milestones: LaunchMilestones | None = None  # what the target said of launching the run


def _gone(exc: MlbenchError) -> bool:
    """The server answered 404: the run was deleted while it ran."""
    return isinstance(exc, NotFound)


def _now() -> datetime:
    return datetime.now(UTC)


def _merged(known: LaunchMilestones | None, status: RunStatus | None) -> LaunchMilestones | None:
    """The milestones known so far with what ``status`` adds."""
    new = status.milestones if status is not None else None
    return new if known is None else known.merged(new)


def _launch_failure(exc: Exception) -> str:
    """Why a run could not be launched, in a sentence (never a traceback)."""
    if isinstance(exc, MlbenchError):
        return exc.message
    if isinstance(exc, OSError):
        error = from_os_error(exc)
        return f"{error.message} ({error.hint})" if error.hint else error.message
    return f"{type(exc).__name__}: {exc}"


def _under_way(exc: MlbenchError) -> bool:
    """The server refused the run: another live process runs one of that name."""
    return getattr(exc, "reason", None) == "run_under_way"


def _max_epochs(hp: AnyHyperparameters) -> float | None:
    return None if isinstance(hp, AllReduce) or hp.max_epochs is None else float(hp.max_epochs)


class Runner:
    """Runs planned runs through their executors and records everything in the store."""

    def __init__(
        self,
        client: MlbenchClient,
        printer: ProgressPrinter | None = None,
        *,
        server_url: str | None = None,
        server_socket: str | None = None,
        poll_s: float = POLL_S,
        cpu_count: int | None = None,
    ) -> None:
        self.client = client
        self.printer = printer or ProgressPrinter()
        self._server_url = server_url  # None: wherever the client's server is at launch time
        self.server_socket = server_socket
        self.poll_s = poll_s
        self.cpu_count = cpu_count or os.cpu_count() or 1
        self.executors: dict[str, Executor[Any]] = {}
        self.results: list[RunResult] = []  # of the runs that ended, in order
        self.under_way: list[str] = []  # plans another live process already runs (not started here)
        self.owner = RunOwner.this_process()
        self._launched: dict[str, tuple[Executor[Any], RunHandle]] = {}  # submitted, not yet finished
        self._active: list[ActiveRun] = []  # launched and watched, in order
        self._queued: dict[str, RunCreated] = {}  # by run name: registered pending, not yet submitted

    @property
    def server_url(self) -> str:
        """The URL ranks report to: the one given, else the client's server now."""
        return self._server_url or self.client.url

    # one run -------------------------------------------------------------------------------

    def start(self, item: PlannedRun) -> ActiveRun | None:
        """Create the run in the store and launch it; a launch failure marks it failed, a run of
        the same name under way elsewhere is left to it (None for both)."""
        with deferred_interrupts():  # an interrupt lands once the run is launched and known
            return self._start(item)

    def _start(self, item: PlannedRun) -> ActiveRun | None:
        plan = item.plan
        queued = self._queued.pop(plan.name, None)
        if queued is not None:
            created = queued
        else:
            request = RunCreate.from_plan(plan, spec_text=item.spec_text)
            request.owner, request.exclusive = self.owner, True
            try:
                created = self.client.create_run(request)
            except MlbenchError as exc:
                if not _under_way(exc):
                    raise
                self._note_under_way(plan.name, exc)
                return None
        run_id, token = created.run.id, created.write_token
        task = get_task(plan.task)
        sweep = task.sweep if task is not None else None
        hp = plan.typed_hyperparameters()
        progress = RunProgress(
            name=plan.name,
            goal=plan.goal,
            max_epochs=_max_epochs(hp),
            total_steps=sweep.total(hp) if sweep is not None else None,
            sweep=sweep,
            state="pending",
        )
        launch = LaunchContext(
            run_id=run_id, server_url=self.server_url, write_token=token, server_socket=self.server_socket
        )
        try:
            executor = executor_for(plan, self.executors)
            handle = executor.submit(plan, launch)
        except Exception as exc:  # whatever it is, the run is recorded failed with why
            reason = _launch_failure(exc)
            self.printer.note(f"{plan.name}: failed to start: {reason}")
            with contextlib.suppress(MlbenchError):  # no rank started: none stays "pending"
                never = RankUpdate(state=RunState.FAILED, message="not started")
                self.client.update_ranks(run_id, [(rank, never) for rank in range(plan.workers)])
            failed = self._end(plan, run_id, RunState.FAILED, f"failed to start: {reason}")
            self._keep(failed or summarize_run(plan, RunState.FAILED, [], [], message=reason))
            return None
        self._launched[run_id] = (executor, handle)
        spool = executor.spool_dir(handle)
        update = RunUpdate(
            state=RunState.RUNNING,
            handle=str(handle),
            started=_now(),
            spool=None if spool is None else str(spool),
        )
        dequeued = LaunchMilestones(dequeued=time.time()) if queued is not None else None
        if dequeued is not None:  # its start is timed from leaving the queue, not from being queued
            update.launch = dequeued
        recorded = self.client.update_run(run_id, update)
        if recorded.state is RunState.CANCELLED:  # `mlbench cancel` came before the run had a handle
            executor.cancel(handle)
        progress.state = "running"
        self.printer.note(f"{plan.name}: started run {run_id} ({handle}); logs: mlbench logs {run_id} -f")
        active = ActiveRun(item, run_id, token, handle, progress, executor, milestones=dequeued)
        self._active.append(active)
        try:
            active.tailer = executor.log_tailer(handle)
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
        self._record_milestones(active, status)
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

    def finish(self, active: ActiveRun) -> RunResult:
        """Ship the last logs and record the final state as the executor saw it; the server
        settles it against what the ranks reported and computes the run's result."""
        self._ship_logs(active, final=True)
        try:
            status = active.executor.describe(active.handle)
        except MlbenchError:
            status = None
        self._launched.pop(active.run_id, None)
        if active in self._active:
            self._active.remove(active)
        active.milestones = _merged(active.milestones, status)
        # UNKNOWN (the launcher's exit status was lost) is settled by the server from what the
        # ranks reported: a run every rank says ended normally is a success.
        state = status.state if status is not None else RunState.UNKNOWN
        message = status.message if status is not None else "the executor lost track of the run"
        if active.timed_out:
            state, message = RunState.FAILED, "the ranks did not stop at max_time and were stopped"
        result = self._end(
            active.planned.plan,
            active.run_id,
            state,
            message,
            deleted=active.deleted,
            milestones=active.milestones,
            network=status.network if status is not None else None,
        )
        if result is None:
            active.deleted = True
            result = summarize_run(active.planned.plan, state, [], [], message=message)
            active.progress.message = "deleted from the store while running"
        else:
            self._update_ranks(active, status, final_state=result.state)
            active.progress.message = result.message if not result.succeeded else None
        active.progress.state = result.state.value
        self.printer.done(active.progress)
        return self._keep(result)

    def cancel(self, active: ActiveRun) -> None:
        active.executor.cancel(active.handle)

    def _end(
        self,
        plan: RunPlan,
        run_id: str,
        state: RunState,
        message: str | None,
        *,
        deleted: bool = False,
        milestones: LaunchMilestones | None = None,
        network: NetworkCheck | None = None,
    ) -> RunResult | None:
        """Record that a run ended, with what its target said of launching it; its result as
        the server computed it (None: deleted)."""
        if deleted:
            return None
        update = RunUpdate(
            state=state,
            finished=_now(),
            error=message if state is not RunState.SUCCEEDED else None,
            host=host_fingerprint(plan.resources.threads_per_rank),
        )
        if milestones is not None:  # set only when known: a null would clear the stored ones
            update.launch = milestones
        if network is not None:
            update.network = network
        try:
            detail = self.client.update_run(run_id, update)
        except MlbenchError as exc:
            if _gone(exc):
                return None
            raise
        return detail.result or summarize_run(plan, detail.state, [], [], message=detail.error)

    def _keep(self, result: RunResult) -> RunResult:
        self.results.append(result)
        return result

    # helpers -------------------------------------------------------------------------------

    def _ship_logs(self, active: ActiveRun, *, final: bool) -> None:
        """Send new lines of the rank log files to the store with the run's write token."""
        if active.tailer is None or active.deleted:
            return
        lines = active.tailer.poll(final=final)
        if not lines:
            return
        now = time.time()
        by_rank: dict[int, list[LogIn]] = {}
        for rank, text in lines:
            stream: Stream = "system" if rank < 0 else "stdout"
            by_rank.setdefault(max(rank, 0), []).append(LogIn(text=text[:MAX_TEXT_LEN], stream=stream, t=now))
        for rank, batch_lines in by_rank.items():
            for start in range(0, len(batch_lines), LOG_BATCH_LINES):
                try:
                    self.client.post_logs(  # the engine's own token: a stopped rank's last lines too
                        active.run_id, batch_lines[start : start + LOG_BATCH_LINES], rank=rank
                    )
                except MlbenchError as exc:  # logs stay in the run directory; never stop the run for them
                    self.printer.note(f"{active.progress.name}: could not store logs: {exc.message}")

    def _record_milestones(self, active: ActiveRun, status: RunStatus | None) -> None:
        """Store the target's launch milestones when it tells more than before (a few times a run)."""
        if status is None or status.milestones is None or active.deleted:
            return
        known = _merged(active.milestones, status)
        if known is None or known == active.milestones or not known.known():
            return
        try:
            self.client.update_run(active.run_id, RunUpdate(launch=known))
        except MlbenchError:
            return  # sent again at the next poll, and with the final state
        active.milestones = known

    def _read_progress(self, active: ActiveRun) -> None:
        progress = active.progress
        try:
            page = self.client.events(active.run_id, since=active.event_cursor)
            for event in page.events:
                progress.on_event(parse_event(event.kind, event.payload), event.t)
            active.event_cursor = page.cursor
            if progress.goal:
                metrics = self.client.metrics(
                    active.run_id, names=[progress.goal.metric], since=active.metric_cursor
                )
                for series in metrics.series:
                    if series.rank != 0:
                        continue
                    for value, epoch, t in zip(series.value, series.epoch, series.t, strict=False):
                        progress.on_metric(series.name, value, epoch, t)
                active.metric_cursor = metrics.cursor
            elif progress.sweep is not None:
                names = self.client.metric_names(active.run_id)
                sweep = progress.sweep
                progress.done_steps = sum(n.count for n in names if sweep.counts(n.name) and 0 in n.ranks)
        except MlbenchError as exc:
            # Progress is best effort (the run is watched through the executor), but a run
            # deleted from the store (``mlbench delete``) must stop.
            if _gone(exc) and not active.deleted:
                active.deleted = True
                active.executor.cancel(active.handle)

    def _update_ranks(
        self, active: ActiveRun, status: RunStatus | None, final_state: RunState | None = None
    ) -> None:
        """Send the ranks whose state changed since the last poll, all in one request."""
        if status is None:
            return
        changed: dict[int, tuple[Any, ...]] = {}
        updates = []
        for rank in status.ranks:
            seen = (rank.state, rank.host, rank.pid, rank.message)
            if final_state is None and active.rank_seen.get(rank.rank) == seen:
                continue
            state = final_state or rank.state
            changed[rank.rank] = seen
            updates.append(
                (rank.rank, RankUpdate(state=state, host=rank.host, pid=rank.pid, message=rank.message))
            )
        if not updates:
            return
        try:
            self.client.update_ranks(active.run_id, updates)
        except MlbenchError:
            return  # sent again at the next poll
        active.rank_seen.update(changed)

    # many runs -----------------------------------------------------------------------------

    def run_all(self, planned: Sequence[PlannedRun], *, parallel: bool = False) -> list[RunResult]:
        """Run the plans in order (several at once with ``parallel`` while cores allow)."""
        queue = [item for item in planned if not item.skipped]
        try:
            queue = self._register(queue)
            while queue or self._active:
                while queue and self._fits(queue[0], self._active, parallel):
                    self.start(queue.pop(0))
                for run in list(self._active):
                    if self.poll(run):
                        self.finish(run)
                if self._active:
                    time.sleep(self.poll_s)
        except KeyboardInterrupt:
            self.printer.note("interrupted: cancelling active runs")
            self._cancel_launched()
            self._unqueue("apply was interrupted before it started this run")
            for run in list(self._active):
                self.finish(run)
            raise
        except BaseException:
            self._cancel_launched()  # never leave ranks behind, whatever went wrong here
            self._unqueue("apply stopped before it started this run")
            raise
        return self.results

    def _register(self, queue: list[PlannedRun]) -> list[PlannedRun]:
        """Register the runs that will wait for earlier ones, as pending and owned by this apply,
        so the store shows the queue; each is submitted later under the same run (``start``).
        Returns the queue less the runs another live apply already has under way."""
        kept = queue[:1]
        for item in queue[1:]:
            request = RunCreate.from_plan(item.plan, spec_text=item.spec_text)
            request.labels.update(queue_label())
            request.owner, request.exclusive = self.owner, True
            try:
                self._queued[item.plan.name] = self.client.create_run(request)
            except MlbenchError as exc:
                if not _under_way(exc):
                    raise
                self._note_under_way(item.plan.name, exc)
                continue
            kept.append(item)
        return kept

    def _note_under_way(self, name: str, exc: MlbenchError) -> None:
        why = exc.message.split(": ", 1)[-1]  # past "server answered 409 (run_under_way)"
        self.printer.note(f"{name}: not started: {why} (watch it with: mlbench status {name})")
        self.under_way.append(name)

    def _unqueue(self, why: str) -> None:
        """End the queued runs that will not start now: cancelled, with ``why``."""
        for name, created in list(self._queued.items()):
            del self._queued[name]
            update = RunUpdate(state=RunState.CANCELLED, finished=_now(), error=why)
            try:
                self.client.update_run(created.run.id, update)
            except MlbenchError as exc:  # the next command that reads it ends it (runs.queue)
                self.printer.note(f"{name}: could not record that it will not start: {exc.message}")

    def _cancel_launched(self) -> None:
        for executor, handle in list(self._launched.values()):
            try:
                executor.cancel(handle)
            except Exception as exc:  # a full disk, a cluster API down: say so, cancel the others
                self.printer.note(f"could not cancel {handle}: {_launch_failure(exc)}")

    def _fits(self, item: PlannedRun, active: list[ActiveRun], parallel: bool) -> bool:
        return fits(
            item.plan, [run.planned.plan for run in active], parallel=parallel, cpu_count=self.cpu_count
        )
