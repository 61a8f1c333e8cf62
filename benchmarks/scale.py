"""Scale: N simulated ranks against one real ``mlbench server`` (issue 22).

Goals, at 1,024 ranks: nothing lost (every acknowledged row is in the store, no row twice), p99
acknowledgement latency of the batches sent during training at most 100 ms, and the server
under half a core. At 4,096 ranks: nothing lost, figures reported. Every size is checked for
losses.

The server runs as users start it (``mlbench server --port 0`` on a fresh ``MLBENCH_HOME``, bound
to 127.0.0.1; the admin token comes from its state file); the run is registered from a real
1,024-GPU spec and its write token goes to the ranks. The ranks are simulated by a few load
processes (``scale_load.py``, asyncio), each rank like the worker reporter: one keep-alive
connection, a batch per second with its training metrics, phase totals and telemetry
(``scale_model.TELEMETRY``), a few log lines, events at start and end, larger batches after each
validation, one flush of every rank at the end. Figures: acknowledged vs stored rows (counted by
opening the SQLite file after the server stopped), ack latency p50/p99 with a 95% interval, the
server's CPU per simulated rank (from ``/proc``, between the end of the start-up burst and the
final flush), the store's growth per rank-hour, and the load processes' own CPU and timer lag.
Because a shared machine skews all of these, each size also prints how long the server and the
load processes waited for a CPU held by another process (schedstat) and how many connections
the kernel dropped from a full listen queue.

Peer, side by side at a small size (``--peer-ranks``, 16): the same ranks send only their metric
batches, once to ours and once to an MLflow tracking server (SQLite backend, its default 4
workers, ``log-batch`` per rank per second), from its own venv as in ``benchmarks/ingest.py``.

    python -m benchmarks scale [--ranks N] [--seconds 30] [--procs P] [--skip-peer]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.ingest import default_peer_venv, setup_peer, start_mlflow, stop_process
from benchmarks.scale_load import GIVE_UP_AFTER_S, KEYS, LoadConfig, LoadStats, load_process
from benchmarks.scale_server import (
    Server,
    create_run,
    listen_overflows,
    mlflow_rows,
    start_ours,
    stop_ours,
    store_bytes,
    stored_rows,
)
from benchmarks.stats import quantile_interval

CURVE = (64, 256, 1024, 4096)
P99_GOAL_MS = 100.0
CORES_GOAL = 0.5
CONTENDED_WAIT = 0.2  # seconds per second the server may wait for a CPU before its figures are the machine's


@dataclass
class Scale:
    """The figures of one size."""

    ranks: int
    seconds: float
    procs: int
    flavour: str
    metrics_only: bool
    stats: LoadStats
    stored: dict[str, int]
    ranks_stored: int
    server_cores: float
    server_wait: float  # seconds per second its threads waited for a CPU held by another process
    server_rss_mb: float
    store_bytes: int
    overflows: int  # connections the kernel dropped from full listen queues meanwhile (SYNs retried)

    @property
    def acked(self) -> int:
        return sum(self.stats.acked.values())

    @property
    def stored_total(self) -> int:
        return sum(self.stored.values())

    @property
    def lost(self) -> int:
        """Items never acknowledged, or acknowledged and missing from the store."""
        return self.stats.lost + sum(max(0, self.stats.acked[k] - self.stored.get(k, 0)) for k in KEYS)

    @property
    def extra(self) -> int:
        """Rows stored beyond those acknowledged (a batch stored twice)."""
        return sum(max(0, self.stored.get(k, 0) - self.stats.acked[k]) for k in KEYS)

    @property
    def lossless(self) -> bool:
        return self.lost == 0 and self.extra == 0

    def p(self, q: float, phase: str = "train") -> float:
        """The ``q`` quantile of the ack latency of one phase's batches, in ms."""
        return _quantile(self.stats.latencies[phase], q) * 1000

    @property
    def growth_mb_per_rank_hour(self) -> float:
        return self.store_bytes / 1e6 / (self.ranks * self.seconds / 3600)

    @property
    def client_cores(self) -> float:
        return self.stats.cpu_s / max(1e-9, self.stats.wall_s)


# ----------------------------------------------------------------------------- one size


def default_procs(ranks: int) -> int:
    return max(1, min(4, ranks // 512))


def drive(
    server: Server,
    run_id: str,
    token: str,
    ranks: int,
    seconds: float,
    *,
    procs: int,
    flavour: str = "ours",
    metrics_only: bool = False,
    retry_every: int = 0,
    validation_every: float = 10.0,
    profile: Path | None = None,
    on_start: Callable[[float], object] | None = None,
) -> tuple[LoadStats, float, float]:
    """Simulate ``ranks`` ranks for ``seconds`` from ``procs`` load processes; returns their merged
    stats, the server's mean cores between the start-up burst and the final flush and the seconds
    per second its threads waited for a CPU meanwhile (sampled by py-spy into ``profile``, a
    collapsed-stacks file, when given). ``on_start`` gets the wall time the ranks start at (a
    client watching the run measures over the same window)."""
    configs = [
        LoadConfig(
            host=server.host,
            port=server.port,
            run_id=run_id,
            token=token,
            ranks=tuple(range(i, ranks, procs)),
            world=ranks,
            seconds=seconds,
            validation_every=validation_every,
            retry_every=retry_every,
            flavour=flavour,
            metrics_only=metrics_only,
        )
        for i in range(procs)
    ]
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    workers = [ctx.Process(target=load_process, args=(cfg, ready, go, out), daemon=True) for cfg in configs]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    start = time.time() + 0.5  # every load process is up: the ranks start together
    if on_start is not None:
        on_start(start)
    for _ in workers:
        go.put(start)
    warm = min(2.0, seconds / 4)
    window: list[tuple[float, float]] = []

    def sample() -> None:
        spy = None
        for at in (start + warm, start + seconds - 0.05):
            time.sleep(max(0.0, at - time.time()))
            window.append((server.cpu_s(), server.cpu_wait_s()))
            if profile is not None and spy is None:
                spy = subprocess.Popen(
                    ["py-spy", "record", "--pid", str(server.proc.pid), "--rate", "200", "--nonblocking",
                     "--format", "raw", "--output", str(profile), "--duration", str(int(seconds - warm))],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
        if spy is not None:
            spy.wait()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stats = LoadStats()
    deadline = time.time() + seconds + GIVE_UP_AFTER_S + 300
    for _ in workers:
        while True:
            try:
                stats.merge(out.get(timeout=1.0))
                break
            except queue.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.time() > deadline:
                    raise RuntimeError(f"a load process failed (exit codes {dead}) or hung") from None
    for w in workers:
        w.join(30)
    sampler.join()
    span = seconds - 0.05 - warm
    if len(window) < 2:
        return stats, float("nan"), float("nan")
    (cpu0, wait0), (cpu1, wait1) = window
    return stats, (cpu1 - cpu0) / span, (wait1 - wait0) / span


def measure(
    ranks: int,
    seconds: float,
    workdir: Path,
    *,
    procs: int | None = None,
    metrics_only: bool = False,
    retry_every: int = 0,
    validation_every: float = 10.0,
    profile: Path | None = None,
) -> Scale:
    """One size against a fresh ``mlbench server``: drive it, stop it, count the store."""
    procs = procs or default_procs(ranks)
    server = start_ours(Path(tempfile.mkdtemp(prefix=f"home-{ranks}-", dir=workdir)) / "home")
    try:
        _, run_id, token = create_run(server, ranks)
        before, overflows = store_bytes(server.db), listen_overflows()
        stats, cores, wait = drive(
            server,
            run_id,
            token,
            ranks,
            seconds,
            procs=procs,
            metrics_only=metrics_only,
            retry_every=retry_every,
            validation_every=validation_every,
            profile=profile,
        )
        rss, overflows = server.rss_mb(), listen_overflows() - overflows
    finally:
        stop_ours(server)
    stored, ranks_stored = stored_rows(server.db, run_id)
    growth = store_bytes(server.db) - before
    return Scale(
        ranks=ranks,
        seconds=seconds,
        procs=procs,
        flavour="ours",
        metrics_only=metrics_only,
        stats=stats,
        stored=stored,
        ranks_stored=ranks_stored,
        server_cores=cores,
        server_wait=wait,
        server_rss_mb=rss,
        store_bytes=growth,
        overflows=overflows,
    )


def measure_mlflow(ranks: int, seconds: float, workdir: Path, mlflow: Path) -> Scale:
    """The peer: the same ranks' metric batches to an MLflow server (``log-batch``)."""
    proc, target = start_mlflow(mlflow, workdir / "mlflow", workers=4)
    server = Server(proc, "", target.host, target.port, "", workdir / "mlflow" / "mlflow.db", group=True)
    try:
        procs, overflows = default_procs(ranks), listen_overflows()
        stats, cores, wait = drive(server, target.run_id, "", ranks, seconds, procs=procs, flavour="mlflow")
        rss, overflows = server.rss_mb(), listen_overflows() - overflows
    finally:
        stop_process(proc)
    stored = mlflow_rows(server.db, target.run_id)
    return Scale(
        ranks=ranks,
        seconds=seconds,
        procs=procs,
        flavour="mlflow",
        metrics_only=True,
        stats=stats,
        stored=stored,
        ranks_stored=ranks,
        server_cores=cores,
        server_wait=wait,
        server_rss_mb=rss,
        store_bytes=0,
        overflows=overflows,
    )


# ----------------------------------------------------------------------------- report


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def verdicts(s: Scale) -> list[tuple[str, bool]]:
    """(goal, met) pairs that apply to this size."""
    out = [("nothing lost", s.lossless)]
    if s.ranks == 1024 and s.flavour == "ours" and not s.metrics_only:
        out.append((f"p99 <= {P99_GOAL_MS:g} ms", s.p(0.99) <= P99_GOAL_MS))
        out.append((f"server < {CORES_GOAL:g} core", s.server_cores < CORES_GOAL))
    return out


def describe(s: Scale) -> str:
    """A few lines about one size, printed as soon as it is measured."""
    st = s.stats
    low, high = quantile_interval(st.latencies["train"], 0.99)
    lines = [
        f"{s.flavour} {s.ranks} ranks, {s.seconds:g} s, {s.procs} load process(es)"
        + (", metric batches only" if s.metrics_only else ""),
        "  acked  "
        + ", ".join(f"{k} {st.acked[k]:,}" for k in KEYS)
        + f" in {sum(st.batches.values()):,} batches",
        "  stored "
        + ", ".join(f"{k} {s.stored.get(k, 0):,}" for k in KEYS)
        + f" from {s.ranks_stored} ranks",
        f"  lost {s.lost:,} (never acknowledged {st.lost:,}), stored twice {s.extra:,}; retries "
        f"{st.retries:,}, forced retries {st.forced_retries:,}, duplicate acks {st.duplicates:,}; "
        f"connections dropped by full listen queues {s.overflows:,}",
        f"  ack latency during training: p50 {s.p(0.5):.1f} ms, p99 {s.p(0.99):.1f} ms "
        f"(95% CI {low * 1000:.1f}-{high * 1000:.1f}), max {s.p(1.0):.1f} ms of "
        f"{len(st.latencies['train']):,} batches",
        f"  start (every rank connects and sends its first batches at once): "
        f"p99 {s.p(0.99, 'start'):.0f} ms, max {s.p(1.0, 'start'):.0f} ms of {len(st.latencies['start']):,}; "
        f"final flush: p99 {s.p(0.99, 'final'):.0f} ms, max {s.p(1.0, 'final'):.0f} ms "
        f"of {len(st.latencies['final']):,}",
        f"  server {s.server_cores:.3f} cores = {s.server_cores / s.ranks * 1000:.2f} millicores/rank, "
        f"waited {s.server_wait * 1000:.0f} ms/s for a CPU, RSS {s.server_rss_mb:.0f} MB; "
        f"store +{s.store_bytes / 1e6:.1f} MB = "
        f"{s.growth_mb_per_rank_hour:.1f} MB per rank-hour",
        f"  load processes {st.cpu_s:.1f} CPU s = {s.client_cores:.2f} cores, waited "
        f"{st.cpu_wait_s / max(1e-9, st.wall_s) * 1000:.0f} ms/s for a CPU, timer lag p99 "
        f"{_quantile(st.lag, 0.99) * 1000:.0f} ms",
    ]
    lines += [f"  error: {e}" for e in st.errors[:3]]
    lines += [f"  {goal}: {'PASS' if ok else 'FAIL'}" for goal, ok in verdicts(s)]
    if s.server_wait > CONTENDED_WAIT:
        lines.append(
            f"  (the server waited {s.server_wait * 1000:.0f} ms/s for a CPU held by other processes: its "
            "latency and cores here are the machine's load as much as its own)"
        )
    return "\n".join(lines)


def table(results: list[Scale]) -> str:
    head = (
        f"{'ranks':>6} {'who':<7} {'acked rows':>11} {'stored':>11} {'lost':>5} {'twice':>5} {'p50 ms':>7} "
        f"{'p99 ms':>7} "
        f"{'flush ms':>8} {'srv cores':>9} {'mcore/rank':>10} {'srv wait':>8} {'MB/rank-h':>9} "
        f"{'load cores':>10}  goals"
    )
    rows = [head, "-" * len(head)]
    for s in results:
        who = s.flavour + ("*" if s.metrics_only else "")
        goals = ", ".join(f"{g} {'PASS' if ok else 'FAIL'}" for g, ok in verdicts(s))
        growth = f"{s.growth_mb_per_rank_hour:9.1f}" if s.store_bytes else f"{'-':>9}"
        rows.append(
            f"{s.ranks:>6} {who:<7} {s.acked:>11,} {s.stored_total:>11,} {s.lost:>5} {s.extra:>5} "
            f"{s.p(0.5):>7.1f} "
            f"{s.p(0.99):>7.1f} {s.p(1.0, 'final'):>8.0f} "
            f"{s.server_cores:>9.3f} "
            f"{s.server_cores / s.ranks * 1000:>10.3f} {s.server_wait * 1000:>5.0f} ms {growth} "
            f"{s.client_cores:>10.2f}  {goals}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=None, help=f"one size (default: the curve {CURVE})")
    parser.add_argument("--seconds", type=float, default=30.0, help="simulated training time per size")
    parser.add_argument("--procs", type=int, default=None, help="load processes (default: ranks/512, 1-4)")
    parser.add_argument("--validation-every", type=float, default=10.0, help="seconds between validations")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory for py-spy profiles of the server (collapsed stacks, one file per size)",
    )
    parser.add_argument("--peer-ranks", type=int, default=16, help="size of the side-by-side with MLflow")
    parser.add_argument("--peer-venv", type=Path, default=default_peer_venv())
    parser.add_argument("--setup-peer", action="store_true", help="create the MLflow venv if missing")
    parser.add_argument("--skip-peer", action="store_true", help="measure ours only")
    args = parser.parse_args(argv)
    if args.ranks is not None and args.ranks < 1:
        parser.error("--ranks must be at least 1")
    if args.seconds < 4:
        parser.error("--seconds must be at least 4")
    if args.profile is not None and shutil.which("py-spy") is None:
        parser.error("--profile needs py-spy on PATH (pip install py-spy)")
    sizes = (args.ranks,) if args.ranks else CURVE
    mlflow = args.peer_venv / "bin" / "mlflow"
    if not args.skip_peer and args.setup_peer:
        mlflow = setup_peer(args.peer_venv)
    if not args.skip_peer and not mlflow.exists():
        print(f"error: no MLflow at {mlflow}; run with --setup-peer (or --skip-peer)", file=sys.stderr)
        return 2

    load1, load5, _ = os.getloadavg()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load1:.2f} (1 min) {load5:.2f} (5 min): figures on a loaded machine are indicative"
    )
    print(
        f"goals: nothing lost at every size; at 1,024 ranks p99 ack <= {P99_GOAL_MS:g} ms and the server "
        f"< {CORES_GOAL:g} core; at 4,096 ranks figures reported",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="mlbench-scale-"))
    results: list[Scale] = []
    try:
        for ranks in sizes:
            profile = args.profile / f"server-{ranks}.txt" if args.profile else None
            if profile is not None:
                profile.parent.mkdir(parents=True, exist_ok=True)
            s = measure(
                ranks,
                args.seconds,
                workdir,
                procs=args.procs,
                validation_every=args.validation_every,
                profile=profile,
            )
            results.append(s)
            print(describe(s), flush=True)
        if not args.skip_peer:
            ours = measure(args.peer_ranks, args.seconds, workdir, metrics_only=True)
            results.append(ours)
            print(describe(ours), flush=True)
            try:
                peer = measure_mlflow(args.peer_ranks, args.seconds, workdir, mlflow)
            except (OSError, RuntimeError) as exc:  # a peer that cannot start costs the side by side only
                print(f"MLflow did not come up ({exc!r}): no side by side this time", flush=True)
            else:
                results.append(peer)
                print(describe(peer), flush=True)
                print(
                    f"side by side at {args.peer_ranks} ranks, metric batches only: MLflow's server uses "
                    f"{peer.server_cores / max(1e-9, ours.server_cores):.1f}x our server's CPU; its p99 ack "
                    f"is {peer.p(0.99) / max(1e-9, ours.p(0.99)):.1f}x ours"
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        "* metric batches only (the side by side with MLflow); srv wait: ms per second the server's "
        "threads were runnable but waited for a CPU (the machine's other load; latency figures with a "
        "large wait are the machine's, not the server's)"
    )
    print(table(results))
    failed = [g for s in results for g, ok in verdicts(s) if not ok]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
