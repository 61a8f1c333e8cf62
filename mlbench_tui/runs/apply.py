"""``mlbench apply``: specs -> plans -> runs in the store -> executor -> live progress -> results.

Plans whose runs already succeeded with the same spec hash are skipped (GitOps idempotence;
``force`` reruns); the rest run through ``watch.Runner`` against the metrics server of their
target, and the results table goes to stdout. ``detach`` does the same in the background.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.detached import Detached, start_detached
from mlbench_tui.errors import MlbenchError
from mlbench_tui.executors import executor_for
from mlbench_tui.lifecycle import UNCHANGED
from mlbench_tui.plan import plan_warnings
from mlbench_tui.results.table import render_results
from mlbench_tui.runs.plans import (
    PLAN_HEADER,
    PlannedRun,
    check_placement,
    dry_run_text,
    load_plans,
    mark_unchanged,
    plan_summary,
)
from mlbench_tui.runs.progress import ProgressPrinter
from mlbench_tui.runs.watch import Runner
from mlbench_tui.spec.limits import MAX_RUNS

if TYPE_CHECKING:
    from mlbench_tui.executors.api import Executor
    from mlbench_tui.server.client import MlbenchClient

DETACH_READY_S = 60.0
NOTHING_TO_DO = "nothing to do: every run of this spec already succeeded (use --force to run again)"


@dataclass(frozen=True)
class ApplyOptions:
    dry_run: bool = False
    detach: bool = False
    force: bool = False
    parallel: bool = False
    quiet: bool = False
    max_runs: int = MAX_RUNS


def detach(paths: Sequence[str], options: ApplyOptions) -> tuple[int, Path]:
    """Start ``apply`` in the background (own session, output to a log file); returns its pid and log."""
    from mlbench_tui.settings import load_settings

    logs = load_settings().paths.state_dir / "apply"
    log_path = logs / f"apply-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    argv = [sys.executable, "-m", "mlbench_tui", "apply", *[str(Path(p).resolve()) for p in paths]]
    if options.force:
        argv.append("--force")
    if options.parallel:
        argv.append("--parallel")
    argv += ["--max-runs", str(options.max_runs)]

    def planned(started: Detached) -> bool:  # it reached the store and printed its plan
        return started.proc.poll() == 0 or PLAN_HEADER in started.log_path.read_text(errors="replace")

    started, _ = start_detached(argv, log_path, planned, timeout=DETACH_READY_S, poll_s=0.1)
    code = started.proc.poll()
    if code is not None and code != 0:
        tail = " / ".join(started.tail())
        raise MlbenchError(f"the background apply failed: {tail}", hint=f"see {log_path}")
    return started.proc.pid, log_path


def apply(paths: Sequence[str], options: ApplyOptions, *, out: Any = None, err: Any = None) -> int:
    """Everything ``mlbench apply`` does; returns the exit code (1 when a run failed)."""

    out = out or sys.stdout
    printer = ProgressPrinter(err, quiet=options.quiet)
    planned = load_plans(paths, max_runs=options.max_runs)
    check_placement([item.plan for item in planned])
    for warning in plan_warnings([item.plan for item in planned], os.cpu_count() or 1):
        printer.note(f"warning: {warning}")
    if options.dry_run:
        from mlbench_tui.server.serve import socket_path
        from mlbench_tui.settings import load_settings

        settings = load_settings()
        socket = str(socket_path(settings.store_path))  # where the store's server answers on a socket
        print(dry_run_text(planned, settings.server_url, socket), file=out)
        return 0
    if options.detach:
        pid, log_path = detach(paths, options)
        text = log_path.read_text(errors="replace")
        lines: list[str] = []
        if PLAN_HEADER in text:
            block = text[text.index(PLAN_HEADER) :].splitlines()
            lines = [line for line in block[1:] if line.startswith("  ")][: len(planned)]
            printer.note("\n".join([block[0], *lines]))
        if lines and all(line.endswith(UNCHANGED) for line in lines):
            printer.note(NOTHING_TO_DO)
            return 0
        printer.note(f"applying in the background (pid {pid}); its output: {log_path}")
        printer.note("watch with: mlbench status   (or mlbench tui)")
        return 0
    cache: dict[str, Executor[Any]] = {}
    for item in planned:  # what the runs will need starts now, beside the metrics server
        executor_for(item.plan, cache).prepare(item.plan)
    with _metrics_server(planned) as (client, server_url, server_socket):
        return _apply_planned(planned, options, client, server_url, server_socket, printer, out)


@contextlib.contextmanager
def _metrics_server(planned: Sequence[PlannedRun]) -> Iterator[tuple[MlbenchClient, str | None, str | None]]:
    """The server the runs report to: the in-cluster one (port-forwarded) for targets whose
    ranks report inside the cluster, otherwise the local one (found or started detached by
    ``server.daemon``; its client re-attaches to the store's server if that one goes away, so
    the URL ranks get is wherever the server is when they launch: None), with the Unix socket
    it also answers on beside its store (None when it has none)."""
    cache: dict[str, Executor[Any]] = {}
    if any(executor_for(item.plan, cache).in_cluster_server for item in planned):
        from mlbench_tui.clusters.incluster import server_for_plans
        from mlbench_tui.server.client import MlbenchClient

        with server_for_plans([item.plan for item in planned]) as endpoint:
            if endpoint is not None:
                yield MlbenchClient(endpoint.url, endpoint.admin_token), endpoint.url, None
                return
    from mlbench_tui.server.daemon import ensure_server

    server = ensure_server()
    yield server.client(), None, server.socket


def _apply_planned(
    planned: Sequence[PlannedRun],
    options: ApplyOptions,
    client: MlbenchClient,
    server_url: str | None,
    server_socket: str | None,
    printer: ProgressPrinter,
    out: Any,
) -> int:
    mark_unchanged(planned, client, force=options.force)
    printer.note(plan_summary(planned))
    earlier = [item.existing_result() for item in planned if item.existing is not None]
    if len(earlier) == len(planned):
        printer.note(NOTHING_TO_DO)
        print(render_results(earlier), file=out)
        return 0
    runner = Runner(client, printer, server_url=server_url, server_socket=server_socket)
    try:
        results = runner.run_all(planned, parallel=options.parallel)
    except KeyboardInterrupt:
        if runner.results:
            print(render_results(runner.results), file=out)
        raise
    shown = [*earlier, *results]
    if shown:
        print(render_results(shown), file=out)
    failed = [r for r in results if not r.succeeded]
    if failed:
        names = ", ".join(f"{r.name} ({r.state})" for r in failed)
        printer.note(f"{len(failed)} run(s) did not succeed: {names}")
    if runner.under_way:
        printer.note(
            f"{len(runner.under_way)} run(s) not started here, already under way in another process: "
            + ", ".join(runner.under_way)
        )
    return 1 if failed or runner.under_way else 0
