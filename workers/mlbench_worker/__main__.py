"""``python -m mlbench_worker --config FILE``: run one rank of one benchmark run.

Exit status: 0 when the task ended (goal reached, sweep done, or stopped by ``max_time`` /
``max_epochs``; the ``run_stop`` event says which), 1 when this rank failed (after reporting
``rank_failed`` and ``run_stop`` failed), 2 for an unusable configuration, 130 when interrupted.
Every rank's ``run_stop`` carries that status as ``exit_code`` (``mlbench_worker.rank_run``).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

from mlbench_worker import rank_env, wire
from mlbench_worker.config import ConfigError, WorkerConfig, load_config
from mlbench_worker.knobs import HyperparameterError
from mlbench_worker.rank_env import RANK_ENV_APPLIED
from mlbench_worker.reporting import error_file
from mlbench_worker.timing.startup import CLOCK

if TYPE_CHECKING:
    from mlbench_worker.context import ReporterLike
    from mlbench_worker.launch.rendezvous import Rendezvous


def make_reporter(rank: int) -> ReporterLike:
    """The reporter for this rank, configured from MLBENCH_SERVER_URL/RUN_ID/RUN_TOKEN."""
    from mlbench_worker.reporting.reporter import Reporter

    return Reporter.from_env(rank)


_PEER_LOST = ("closed by peer", "reset by peer", "connection refused", "broken pipe", "timed out")


def is_peer_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is this rank noticing that another rank died (a consequence, not a cause).

    The root cause of a failed run is then the ``rank_failed`` event with ``peer_failure: false``.
    """
    try:
        import torch.distributed as dist

        if isinstance(exc, dist.DistNetworkError):
            return True
    except (ImportError, AttributeError):
        pass
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(marker in text for marker in _PEER_LOST)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mlbench_worker",
        description="Run one rank of an mlbench benchmark run (launched by torchrun, mpiexec or a Job).",
    )
    parser.add_argument("--config", help="worker config JSON (default: $MLBENCH_CONFIG)")
    return parser.parse_args(argv)


def run_rank(config: WorkerConfig, rdv: Rendezvous, reporter: ReporterLike) -> int:
    """Set up this rank, run the task and report how it ended; returns the exit status."""
    from mlbench_worker.context import (
        RunContext,
        init_comm,
        limit_threads,
        seed_everything,
        select_device,
    )
    from mlbench_worker.faults import maybe_inject_fault_at_exit
    from mlbench_worker.launch.allocator import tune_host_allocator
    from mlbench_worker.rank_run import RankRun
    from mlbench_worker.tasks import Outcome, UnknownTaskError, load_task
    from mlbench_worker.telemetry.fingerprint import fingerprint, rank_facts

    run = RankRun(
        reporter,
        rdv.rank,
        user_errors=(ConfigError, HyperparameterError, UnknownTaskError),
        peer_failure=is_peer_failure,
    )

    def task() -> Outcome:
        allocator = tune_host_allocator(config.implementation.host_allocator, os.environ)
        limit_threads(config.threads_per_rank)
        seed_everything(config.seed)
        train = load_task(config.task)
        CLOCK.mark("imports")
        placement = select_device(config, rdv)
        CLOCK.mark("device")
        comm = init_comm(config, rdv, placement.device)
        CLOCK.mark("rendezvous")
        run.rank = comm.rank
        run.on_failure.append(lambda: comm.abort(1))
        run.after_success += [comm.close, lambda: maybe_inject_fault_at_exit(comm.rank)]
        ctx = RunContext(
            config=config,
            rendezvous=rdv,
            comm=comm,
            device=placement.device,
            reporter=reporter,
            placement=placement,
            host_allocator=allocator,
        )
        ranks = comm.allgather_object(rank_facts(ctx))  # every rank takes part
        if ctx.is_main:
            wire.emit(reporter, wire.Environment(facts=fingerprint(ctx, ranks)))
        CLOCK.mark("environment")
        if config.preflight is not None:
            from mlbench_worker.telemetry.preflight import run_preflight

            run_preflight(ctx)  # raises PreflightFailed on every rank when the run stops for it
            CLOCK.mark("preflight")
        outcome = train(ctx)
        ctx.mark_run_start()
        CLOCK.report(reporter, comm.rank)  # tasks without training steps: their start ends at run_start
        return outcome

    return run.run(task)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    CLOCK.mark("interpreter")
    from mlbench_worker.launch.netns import join_from_environment

    try:  # first of all, while this process has one thread: every socket it opens is the node's
        join_from_environment()
    except OSError as exc:
        print(f"error: cannot join this rank's emulated node: {exc}", file=sys.stderr)
        return 2
    args = _parse_args(argv)
    path = args.config or os.environ.get(rank_env.CONFIG)
    if not path:
        print("error: no worker config: pass --config FILE or set MLBENCH_CONFIG", file=sys.stderr)
        return 2
    try:
        config = load_config(path)
    except (ConfigError, HyperparameterError) as exc:
        error_file.record(exc, traceback.format_exc(), peer_failure=False)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    restart_with_rank_env(config.rank_env, path)
    from mlbench_worker.launch.detect import detect_rendezvous

    try:
        rdv = detect_rendezvous()
    except ConfigError as exc:
        error_file.record(exc, traceback.format_exc(), peer_failure=False)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from mlbench_worker.telemetry.sampler import attach

    reporter = attach(make_reporter(rdv.rank), config, rdv)  # hardware telemetry, off the training thread
    if config.framework == "tensorflow":  # its own process model (TF_CONFIG), no torch process group
        from mlbench_worker.tasks.tf_resnet20 import run_rank as run_tensorflow_rank

        return run_tensorflow_rank(config, rdv, reporter)
    return run_rank(config, rdv, reporter)


def restart_with_rank_env(rank_env: Mapping[str, str], config_path: str) -> None:
    """Start this rank again (same pid, ``execve``) with the code-loading variables its spec opted
    in to (``LD_PRELOAD``, ``PYTHONPATH``, ...), unless it already runs with them.

    They act when a process starts, so the rank sets them by starting again, before it imports
    anything heavy; the launchers before it (torchrun, mpiexec, srun, a warm-start server) never
    run with them. Returns only when there is nothing to do.
    """
    if not rank_env or os.environ.get(RANK_ENV_APPLIED) == "1":
        return
    argv = [sys.executable, "-u", "-m", "mlbench_worker", "--config", config_path]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, {**os.environ, **rank_env, RANK_ENV_APPLIED: "1"})


def end_process(status: int) -> NoReturn:
    """Exit now, without the interpreter's teardown that launchers wait on.

    Every end has closed the reporter (a clean one the process group too), so nothing is left to
    flush; tearing down torch's modules would still take seconds per rank, which torchrun and
    mpiexec (and the run's status) wait for, and after a failure it can block for good: the
    process group left open is destroyed by the garbage collector, whose TCPStore joins a libuv
    thread that does not always stop (seen on a one-rank gloo run whose task raised).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    end_process(main())
