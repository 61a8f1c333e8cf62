"""Render many figures at once: one matplotlib process per core, started while the data loads.

Matplotlib draws in one thread and a report holds a dozen independent figures, so the figures
are spread over worker processes. They fork from a forkserver that imported matplotlib once
(preloaded, clean of the caller's threads: the TUI's, an embedded server's), so a worker starts
in milliseconds; the forkserver starts when the renderer is entered, so its import overlaps
whatever the caller does next (importing the rest, reading the runs). On two cores this halves
the drawing, the bulk of a report's time. One figure, or one core, draws in this process, and so
does everything where worker processes cannot start.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from mlbench_tui.report.figure import Figure

if TYPE_CHECKING:
    from mlbench_tui.report.draw import ImageFormat

DRAW_MODULE = "mlbench_tui.report.draw"
MAX_WORKERS = 8


def _render(figure: Figure, fmt: ImageFormat, width: int | None, height: int | None, notes: bool) -> bytes:
    from mlbench_tui.report.draw import render

    return render(figure, fmt, width=width, height=height, notes=notes)


def _cores() -> int:
    """The cores this process may run on (all of them where the OS cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _ready() -> None:
    """A no-op task: running it means a worker is up, matplotlib imported."""


class Renderer:
    """A context manager that renders figures, in parallel where cores allow."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = min(MAX_WORKERS, workers or _cores())
        self._pool: ProcessPoolExecutor | None = None
        self._starting: threading.Thread | None = None

    def __enter__(self) -> Renderer:
        if self.workers >= 2 and "forkserver" in multiprocessing.get_all_start_methods():
            # Starting blocks until the forkserver has imported matplotlib: off the caller's thread.
            self._starting = threading.Thread(target=self._start, name="report-renderer", daemon=True)
            self._starting.start()
        return self

    def _start(self) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([DRAW_MODULE])
        pool: ProcessPoolExecutor | None = None
        try:
            pool = ProcessPoolExecutor(self.workers, mp_context=context)
            for future in [pool.submit(_ready) for _ in range(self.workers)]:
                future.result()
        except (OSError, ValueError, RuntimeError, BrokenProcessPool):
            # No helper processes here (a TUI's stderr has no file descriptor to hand on, say):
            # the figures draw in this process instead.
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            return
        self._pool = pool

    def _ready_pool(self) -> ProcessPoolExecutor | None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        return self._pool

    def __exit__(self, *exc: object) -> None:
        pool = self._ready_pool()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
            self._pool = None

    def render(
        self,
        figures: Sequence[Figure],
        fmt: ImageFormat,
        *,
        width: int | None = None,
        height: int | None = None,
        notes: bool = False,
    ) -> list[bytes]:
        """Each figure's image, in order; with ``notes``, the figure's notes are drawn under it (a
        file on its own carries the caveats a page writes beside it)."""
        pool = self._ready_pool() if len(figures) >= 2 else None
        if pool is None:
            return [_render(f, fmt, width, height, notes) for f in figures]
        futures = [pool.submit(_render, f, fmt, width, height, notes) for f in figures]
        return [future.result() for future in futures]
