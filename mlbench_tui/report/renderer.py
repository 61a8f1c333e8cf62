"""Render many figures at once: one matplotlib process per core, started while the data loads.

Matplotlib draws in one thread and a report holds a dozen independent figures, so the figures
are spread over worker processes. They fork from a forkserver that imported matplotlib once
(preloaded, clean of the caller's threads: the CLI's embedded server runs in one), so a worker
starts in milliseconds; the forkserver starts when the renderer is entered, so its import overlaps
whatever the caller does next (starting the server, reading the runs). One figure, or one core,
draws in this process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TYPE_CHECKING

from mlbench_tui.report.figure import Figure

if TYPE_CHECKING:
    from mlbench_tui.report.draw import ImageFormat

DRAW_MODULE = "mlbench_tui.report.draw"
MAX_WORKERS = 8


def _render(figure: Figure, fmt: ImageFormat, width: int | None, height: int | None) -> bytes:
    from mlbench_tui.report.draw import render

    return render(figure, fmt, width=width, height=height)


def _ready() -> None:
    """A no-op task: the first one starts the forkserver and a worker (importing matplotlib)."""


class Renderer:
    """A context manager that renders figures, in parallel where cores allow."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = min(MAX_WORKERS, workers or len(os.sched_getaffinity(0)))
        self._pool: ProcessPoolExecutor | None = None
        self._warm: Future[None] | None = None

    def __enter__(self) -> Renderer:
        if self.workers >= 2 and "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([DRAW_MODULE])
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context)
            self._warm = self._pool.submit(_ready)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def render(
        self,
        figures: Sequence[Figure],
        fmt: ImageFormat,
        *,
        width: int | None = None,
        height: int | None = None,
    ) -> list[bytes]:
        """Each figure's image, in order."""
        if self._pool is None or len(figures) < 2:
            return [_render(f, fmt, width, height) for f in figures]
        futures = [self._pool.submit(_render, f, fmt, width, height) for f in figures]
        return [future.result() for future in futures]
