"""The TUI's run screen on a 1,024-rank run: first paint, and its CPU during a live run (issue 22).

Goals: the run screen's first paint within 1 s on a finished 1,024-rank run; live updates of a
1,024-rank run at a bounded cost per update (figures: the TUI's CPU seconds per second, and per
update). Everything but the TUI is a real process: ``mlbench server`` over a store of one finished
1,024-rank run (``scale_store.build_scale_store``, or a copy of ``--store``), and for the live
part ``scale.drive``'s load processes simulating the ranks of a second, running run. The TUI runs
in this process, headless (``App.run_test``: Textual renders every frame, only terminal writes
are skipped), so its CPU is ``time.process_time`` here (the load processes and the server are
other processes; the thread that drives them costs a few ms, printed).

First paint: from entering ``run_test`` (imports done before; process start-up is
``tui_startup``'s figure) to the frame after the run screen shows, on its Ranks tab, the ranks'
summary (every rank's state and the step-time spread) and the step-time chart (the percentile
bands on a wide run). Live: the run screen open on ``--tab`` while the ranks report, CPU and
updates counted over the steady part (after the ranks' start-up burst, before the final flush);
an update is one ``RunChanged`` the screen applied, its apply time measured on its own.

Peer, side by side in the same process: the same TUI with its wide-run mode turned off
(``per_rank_mode``), i.e. as before the wide-run work: every rank's history and live series read
and summarised, every rank a row of the rank table in rank order, the step-time chart one line
per rank for the first ranks. What stays new in the peer is the rank strip and the spread line.

    python -m benchmarks tui_scale [--ranks 1024] [--seconds 25] [--samples 5] [--tab ranks]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

from benchmarks.scale import default_procs, drive
from benchmarks.scale_server import Server, create_run, start_ours, stop_ours

FIRST_PAINT_GOAL_S = 1.0
SIZE = (160, 50)
PAINT_TIMEOUT_S = 120.0  # the peer reads every rank's history: it may take long, not forever
MODES = ("ours", "peer")


@contextlib.contextmanager
def per_rank_mode() -> Iterator[None]:
    """The run screen without its wide-run mode (the peer): ``run_charts.wide`` always False
    (every rank's history and live series, no bands), the rank table with every rank, in rank
    order (no cap of ``TABLE_ROWS`` worst ranks). Restored on exit."""
    from mlbench_tui.tui import run_charts
    from mlbench_tui.tui.widgets import rank_table

    saved = {
        (run_charts, "wide"): run_charts.wide,
        (rank_table, "TABLE_ROWS"): rank_table.TABLE_ROWS,
        (rank_table, "worst_first"): rank_table.worst_first,
    }
    setattr(run_charts, "wide", lambda run: False)  # noqa: B010 (a patched global, not an attribute)
    setattr(rank_table, "TABLE_ROWS", 1 << 30)  # noqa: B010
    setattr(rank_table, "worst_first", lambda views: sorted(views, key=lambda v: v.rank))  # noqa: B010
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def _mode(mode: str) -> contextlib.AbstractContextManager[None]:
    return per_rank_mode() if mode == "peer" else contextlib.nullcontext()


# ----------------------------------------------------------------------------- the timed TUI


def _timed_app(url: str, token: str, run_id: str, tab: str) -> Any:
    """The real app, opening ``run_id``'s screen on ``tab`` right after the runs screen (as a
    user pressing enter would), its screen counting the updates it applies."""
    from mlbench_tui.tui.app import MlbenchApp
    from mlbench_tui.tui.messages import RunChanged
    from mlbench_tui.tui.screens.run_detail import RunDetailScreen

    class Screen(RunDetailScreen):
        def __init__(self) -> None:
            super().__init__(run_id)
            self.updates: list[tuple[float, float]] = []  # (wall, apply CPU s)

        def on_mount(self) -> None:  # RunDetailScreen.on_mount runs too, after this one
            self.call_later(self.action_show_tab, tab)

        def _apply_batch(self, message: RunChanged) -> None:
            c0 = time.thread_time()
            super()._apply_batch(message)
            self.updates.append((time.time(), time.thread_time() - c0))

    class App(MlbenchApp):
        detail: Screen | None = None

        def on_mount(self) -> None:  # MlbenchApp.on_mount (the runs screen) runs after this one
            self.call_later(self._open)

        def _open(self) -> None:
            self.detail = Screen()
            self.push_screen(self.detail)

    return App(url, token=token, update_interval=0.25)


def _painted(screen: Any, ranks: int) -> bool:
    """The Ranks tab's summary covers every rank with the step-time spread, and the step-time
    chart has its lines (the bands on a wide run)."""
    from mlbench_tui.results.ranks import STEP_TIME
    from mlbench_tui.tui.widgets.rank_table import RankTable

    if screen is None or not screen.is_mounted or screen.run is None:
        return False
    summary = str(screen.query_one(RankTable).query_one("#rank-summary").render())
    if f"{ranks} ranks" not in summary or "step time p50" not in summary:
        return False
    chart = screen.charts.charts.get(STEP_TIME)
    return chart is not None and any(len(s) for s in chart.series.values())


async def first_paint(url: str, token: str, run_id: str, ranks: int) -> float:
    """Seconds from launching the app to the frame that shows the run screen's figures."""
    app = _timed_app(url, token, run_id, "ranks")
    t0 = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        deadline = t0 + PAINT_TIMEOUT_S
        while not _painted(app.detail, ranks):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the run screen did not show {ranks} ranks within {PAINT_TIMEOUT_S:g} s")
            await asyncio.sleep(0.005)
        painted = asyncio.Event()
        app.detail.call_after_refresh(painted.set)
        await painted.wait()
        elapsed = time.perf_counter() - t0
        await pilot.pause()
    return elapsed


@dataclass
class Live:
    """The TUI's figures over the steady part of a live run."""

    mode: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    updates: int = 0
    apply_s: list[float] = field(default_factory=list)  # CPU of each update's apply
    driver_cpu_s: float = 0.0  # the thread driving the load processes (included in cpu_s)
    acked: int = 0
    backlog: int = 0  # updates posted to the screen and not yet applied when the ranks stopped

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s else float("nan")

    @property
    def per_update_ms(self) -> float:
        return self.cpu_s / self.updates * 1000 if self.updates else float("nan")

    def apply_ms(self, q: float) -> float:
        if not self.apply_s:
            return float("nan")
        ordered = sorted(self.apply_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def live(server: Server, ranks: int, seconds: float, tab: str, mode: str) -> Live:
    """A fresh run of ``ranks`` simulated ranks reporting for ``seconds`` while the TUI shows it;
    the TUI's CPU is read when the ranks are past their start-up burst and again before their
    final flush (the window ``scale.drive`` measures the server over), by a thread of its own
    (the TUI's event loop may be too busy to read it on time)."""
    _, run_id, write_token = create_run(server, ranks)
    # the load processes' queues need multiprocessing's resource tracker, which passes stderr's
    # file descriptor to its process: start it before Textual replaces sys.stderr
    resource_tracker.ensure_running()
    app = _timed_app(server.url, server.admin_token, run_id, tab)
    out = Live(mode)
    window: list[tuple[float, float]] = []  # (wall, process CPU) at the window's ends
    result: list[Any] = []
    warm = min(2.0, seconds / 4)

    def sample(start: float) -> None:
        for at in (start + warm, start + seconds - 0.05):
            time.sleep(max(0.0, at - time.time()))
            window.append((time.time(), time.process_time()))

    def run() -> None:
        c0 = time.thread_time()
        sampler: list[threading.Thread] = []

        def started(start: float) -> None:
            sampler.append(threading.Thread(target=sample, args=(start,), daemon=True))
            sampler[0].start()

        try:
            procs = default_procs(ranks)
            result.append(drive(server, run_id, write_token, ranks, seconds, procs=procs, on_start=started))
        except BaseException as exc:
            result.append(exc)
        out.driver_cpu_s = time.thread_time() - c0
        for thread in sampler:
            thread.join()

    async with app.run_test(size=SIZE) as pilot:
        deadline = time.time() + PAINT_TIMEOUT_S
        while app.detail is None or app.detail.feed is None or not app.detail.feed.loaded:
            if time.time() > deadline:
                raise RuntimeError("the run screen did not load the live run")
            await asyncio.sleep(0.05)
        await pilot.pause(0.5)
        driver = threading.Thread(target=run, daemon=True)
        driver.start()
        while driver.is_alive():
            await asyncio.sleep(0.1)
        updates = list(app.detail.updates)
        out.backlog = app.detail._message_queue.qsize()  # updates posted, not yet applied
    if isinstance(result[0], BaseException):
        raise result[0]
    out.acked = sum(result[0][0].acked.values())
    if len(window) < 2:
        raise RuntimeError("the live window was not sampled")
    (t0, c0), (t1, c1) = window
    out.wall_s, out.cpu_s = t1 - t0, c1 - c0
    out.apply_s = [cpu for w, cpu in updates if t0 <= w <= t1]
    out.updates = len(out.apply_s)
    return out


# ----------------------------------------------------------------------------- the store


def prepare_store(
    workdir: Path, ranks: int, store: Path | None, epochs: int, windows: int
) -> tuple[Path, int]:
    """A copy of ``store`` (built there first when missing) in ``workdir``, so the live runs added
    meanwhile leave it as it was; returns the copy and its metric rows."""
    from benchmarks.scale_store import build_scale_store

    source = store or workdir / "built.db"
    if not source.exists():
        print(f"building a {ranks}-rank store at {source} ...", flush=True)
        built = build_scale_store(source, ranks=ranks, epochs=epochs, windows_per_epoch=windows)
        print(f"  {built.rows['metrics']:,} metric rows, {built.rows['logs']:,} log lines", flush=True)
    db = workdir / "store.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{db}{suffix}")
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = int(conn.execute("SELECT count(*) FROM metrics").fetchone()[0])
    return db, rows


def finished_run(server: Server, ranks: int) -> str:
    """The newest finished run of ``ranks`` ranks in the server's store."""
    from mlbench_tui.server.client import MlbenchClient

    with MlbenchClient(server.url, server.admin_token, timeout=60) as client:
        runs = [r for r in client.list_runs() if r.workers == ranks and r.state.is_terminal()]
    if not runs:
        raise RuntimeError(f"the store holds no finished run of {ranks} ranks")
    return max(runs, key=lambda r: r.created).id


# ----------------------------------------------------------------------------- report


def report(
    ranks: int,
    rows: int,
    samples: int,
    seconds: float,
    tab: str,
    paint: dict[str, list[float]],
    runs: dict[str, Live],
) -> str:
    lines = [
        f"first paint: launch -> run screen's Ranks tab with every rank's summary and the step-time "
        f"chart, {ranks} ranks ({rows:,} metric rows), {samples} sample(s), headless {SIZE[0]}x{SIZE[1]}",
    ]
    names = {"ours": "ours (wide-run mode)", "peer": "peer (wide mode off)"}
    for mode, values in paint.items():
        lines.append(
            f"  {names[mode]:<22} median {statistics.median(values):7.3f} s   min {min(values):7.3f} s"
            f"   max {max(values):7.3f} s"
        )
    if len(paint) == 2:
        ours, peer = (statistics.median(paint[m]) for m in MODES)
        lines.append(f"  ratio peer / ours: {peer / ours:.1f}x")
    if "ours" in paint:
        ok = statistics.median(paint["ours"]) < FIRST_PAINT_GOAL_S
        lines.append(f"  goal < {FIRST_PAINT_GOAL_S:g} s (median): {'PASS' if ok else 'FAIL'}")
    lines.append(
        f"live: {ranks} simulated ranks reporting for {seconds:g} s, the run screen on its {tab} tab "
        "(steady part: after the start-up burst, before the final flush)"
    )
    lines.append(
        f"  {'':<22} {'TUI cores':>9} {'updates/s':>9} {'ms CPU/update':>13} {'apply p50':>9}"
        f" {'apply p99':>9} {'backlog':>7} {'rows acked':>11} {'driver CPU':>10}"
    )
    for mode, s in runs.items():
        lines.append(
            f"  {names[mode]:<22} {s.cores:>9.3f} {s.updates / s.wall_s:>9.2f} {s.per_update_ms:>13.1f}"
            f" {s.apply_ms(0.5):>6.1f} ms {s.apply_ms(0.99):>6.1f} ms {s.backlog:>7}"
            f" {s.acked:>11,}"
            f" {s.driver_cpu_s * 1000:>7.0f} ms"
        )
    if len(runs) == 2:
        ours_live, peer_live = runs["ours"], runs["peer"]
        lines.append(
            f"  ratio peer / ours: {peer_live.cores / ours_live.cores:.1f}x the cores, "
            f"{peer_live.per_update_ms / ours_live.per_update_ms:.1f}x the CPU per update"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks tui_scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=25.0, help="length of the live run")
    parser.add_argument("--samples", type=int, default=5, help="first paints per mode")
    parser.add_argument("--tab", default="ranks", choices=("overview", "ranks", "charts", "logs"))
    parser.add_argument("--store", type=Path, default=None, help="reuse (or build once) this store")
    parser.add_argument("--epochs", type=int, default=3, help="of the store built (3 epochs: ~280 rows/rank)")
    parser.add_argument("--windows", type=int, default=10, help="report windows per epoch of the store built")
    parser.add_argument("--skip-peer", action="store_true", help="measure ours only")
    args = parser.parse_args(argv)
    if args.ranks < 1 or args.samples < 1 or args.seconds < 2:
        parser.error("--ranks and --samples must be at least 1, --seconds at least 2")
    load1, load5, _ = os.getloadavg()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load1:.2f} (1 min) {load5:.2f} (5 min): figures on a loaded machine are indicative",
        flush=True,
    )
    import mlbench_tui.tui.app  # noqa: F401 (imports are not the first paint's: see tui_startup)

    modes = ("ours",) if args.skip_peer else MODES
    workdir = Path(tempfile.mkdtemp(prefix="mlbench-tui-scale-"))
    try:
        db, rows = prepare_store(workdir, args.ranks, args.store, args.epochs, args.windows)
        server = start_ours(workdir / "home", db)
        try:
            run_id = finished_run(server, args.ranks)
            paint: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(args.samples):  # the modes interleaved: a drift of the load hits both
                for mode in modes:
                    with _mode(mode):
                        paint[mode].append(
                            asyncio.run(first_paint(server.url, server.admin_token, run_id, args.ranks))
                        )
            print(
                f"first paints: {', '.join(f'{m} ' + ' '.join(f'{v:.3f}' for v in paint[m]) for m in modes)}",
                flush=True,
            )
            runs: dict[str, Live] = {}
            for mode in modes:
                with _mode(mode):
                    runs[mode] = asyncio.run(live(server, args.ranks, args.seconds, args.tab, mode))
                print(f"live {mode}: {runs[mode].cores:.3f} cores", flush=True)
        finally:
            stop_ours(server)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(report(args.ranks, rows, args.samples, args.seconds, args.tab, paint, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
