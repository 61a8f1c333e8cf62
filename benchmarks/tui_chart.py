"""Chart redraw cost with 100k points per series: our braille min/max chart vs Textual's Sparkline.

Goal (issue 5): a redraw of the run screen's metric chart costs at most 5 ms with 100k points per
series, because it downsamples to the widget width first. The peer is Textual's own ``Sparkline``
widget given the same 100k values (it buckets the whole list on every render), and plotext when
it is installed (ANCHORS: ~100 ms at 100 points). Each redraw is a full one: the chart is marked
dirty and rendered to strips, the same work as ``render_line`` after new data.

    python -m benchmarks tui_chart [--points 100000] [--series 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from mlbench_worker import wire

SIZES = ((80, 16), (120, 24), (200, 50))


def _data(n: int, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(float(i), 2.3 * math.exp(-i / (n / 4)) + rng.random() * 0.1) for i in range(n)]


def _timing(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(median CPU ms of this thread, fastest wall ms): CPU time is what a redraw costs; the
    fastest wall time is the least disturbed by other processes on a shared machine."""
    fn()  # warm
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    return statistics.median(cpu), min(wall)


async def _measure(points: int, series: int, repeats: int) -> list[tuple[str, str, tuple[float, float]]]:
    from rich.console import Console
    from textual.app import App, ComposeResult
    from textual.widgets import Sparkline

    from mlbench_tui.tui.widgets.metric_chart import MetricChart

    datasets = [_data(points, seed) for seed in range(series)]

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            yield MetricChart(wire.TRAIN_LOSS, goal=0.5, id="chart")
            yield Sparkline([y for _, y in datasets[0]], id="spark")

    rows: list[tuple[str, str, tuple[float, float]]] = []
    app = Bench()
    async with app.run_test(size=(220, 60)):
        chart = app.query_one(MetricChart)
        for i, data in enumerate(datasets):
            chart.add_points(f"r{i}", data)
        spark = app.query_one(Sparkline)
        console = Console(width=220, height=60, file=open("/dev/null", "w"))  # noqa: SIM115
        for width, height in SIZES:

            def ours(w: int = width, h: int = height) -> None:
                chart._dirty = True
                chart.render_strips(w, h)

            rows.append(("ours: MetricChart", f"{width}x{height}", _timing(ours, repeats)))

            def peer(w: int = width, h: int = height) -> None:
                options = console.options.update(width=w, height=h)
                console.render_lines(spark.render(), options)  # type: ignore[arg-type]

            rows.append(
                (f"peer: Sparkline (1 series of {series})", f"{width}x{height}", _timing(peer, repeats))
            )
        console.file.close()
    try:
        import plotext as plt
    except ImportError:
        return rows
    xs, ys = zip(*datasets[0], strict=True)
    for width, height in SIZES[:1]:

        def plotext(w: int = width, h: int = height) -> None:
            plt.clf()
            plt.plotsize(w, h)
            plt.plot(list(xs), list(ys))
            plt.build()

        rows.append(("peer: plotext", f"{width}x{height}", _timing(plotext, max(3, repeats // 10))))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tui_chart", description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000, help="points per series")
    parser.add_argument("--series", type=int, default=2, help="series in the chart")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    rows = asyncio.run(_measure(args.points, args.series, args.repeats))
    print(f"chart redraw, {args.points:,} points per series, {args.series} series (median of {args.repeats})")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'':40} {'size':>8} {'cpu ms':>8} {'wall ms':>8}")
    for name, size, (cpu, wall) in rows:
        print(f"{name:40} {size:>8} {cpu:8.2f} {wall:8.2f}")
    by_size: dict[str, dict[str, float]] = {}
    for name, size, (cpu, _) in rows:
        by_size.setdefault(size, {})[name.split(":")[0]] = cpu
    for size, entry in by_size.items():
        if "ours" in entry and "peer" in entry:
            print(f"{size}: Sparkline / ours (cpu) = {entry['peer'] / entry['ours']:.1f}x")
    worst = max(cpu for name, _, (cpu, _w) in rows if name.startswith("ours"))
    print(f"goal: <= 5 ms per redraw -> worst {worst:.2f} ms cpu: {'PASS' if worst <= 5.0 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
