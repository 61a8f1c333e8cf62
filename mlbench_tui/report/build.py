"""Build a report for chosen runs: their figures as data, then the HTML page or image files.

The one entry point the CLI (``mlbench report``) and the TUI's compare screen (``R``) share.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench_tui.errors import MlbenchError
from mlbench_tui.report.figure import Figure
from mlbench_tui.report.implementations import implementation_figures
from mlbench_tui.report.inputs import RunRecord, load_records, sweeps, training
from mlbench_tui.report.network import network_figures
from mlbench_tui.report.overlays import task_figures
from mlbench_tui.report.renderer import Renderer
from mlbench_tui.report.scaling import scaling_figures
from mlbench_tui.report.sweep import sweep_figures
from mlbench_tui.report.training import ranks_figures

if TYPE_CHECKING:
    from mlbench_tui.report.draw import ImageFormat
    from mlbench_tui.store.read_api import RunReader


class ReportError(MlbenchError):
    """A report that cannot be made (no runs chosen, an unwritable path)."""


def build_figures(records: Sequence[RunRecord]) -> list[Figure]:
    """Every figure of the report, in page order: scaling per spec that ran several worker counts,
    all-reduce, implementations, each task's runs overlaid, then the ranks of multi-rank runs;
    panels with nothing to draw are left out, a note saying why."""
    colours: dict[str, str] = {}
    trained = training(records)
    figures = [
        *scaling_figures(trained, colours),
        *network_figures(trained, colours),
        *sweep_figures(sweeps(records), colours),
        *implementation_figures(trained),
        *task_figures(trained),
        *ranks_figures(trained),
    ]
    return [f.without_empty() for f in figures]


def _drawn(figures: Sequence[Figure]) -> list[Figure]:
    """The figures with something to draw (the rest are their notes alone)."""
    return [f for f in figures if f.panels]


def _title(records: Sequence[RunRecord]) -> str:
    specs = sorted({r.result.spec_name for r in records if r.result.spec_name})
    shown = ", ".join(specs[:3]) + (f" and {len(specs) - 3} more" if len(specs) > 3 else "")
    return f"mlbench report: {shown or 'runs'}"


@dataclass(frozen=True)
class Written:
    """What a report wrote: the files, and how many runs and figures they cover."""

    paths: tuple[Path, ...]
    runs: int
    figures: int


def _records(client: RunReader, run_ids: Sequence[str]) -> list[RunRecord]:
    if not run_ids:
        raise ReportError("no runs to report on", hint="run a benchmark first: mlbench apply SPEC")
    return load_records(client, run_ids)


def report_html(records: Sequence[RunRecord], renderer: Renderer) -> tuple[str, int]:
    """The page for ``records`` and its number of figures."""
    from mlbench_tui.report.page import render_page

    figures = build_figures(records)
    drawn = _drawn(figures)
    images = dict(zip((f.key for f in drawn), renderer.render(drawn, "png"), strict=True))
    return render_page(records, figures, images, title=_title(records)), len(figures)


def write_report(
    client: RunReader, run_ids: Sequence[str], path: Path, *, renderer: Renderer | None = None
) -> Written:
    """Write the HTML report of ``run_ids`` to ``path`` (atomically)."""
    with _renderer(renderer) as drawing:
        records = _records(client, run_ids)
        text, count = report_html(records, drawing)
    _write(path, text.encode("utf-8"))
    return Written((path,), len(records), count)


def write_figures(
    client: RunReader,
    run_ids: Sequence[str],
    out_dir: Path,
    fmt: ImageFormat,
    *,
    width: int | None = None,
    height: int | None = None,
    renderer: Renderer | None = None,
) -> Written:
    """Write each figure as ``<key>.<fmt>`` under ``out_dir`` (``width`` x ``height`` pixels)."""
    with _renderer(renderer) as drawing:
        records = _records(client, run_ids)
        figures = _drawn(build_figures(records))
        images = drawing.render(figures, fmt, width=width, height=height, notes=True)
    paths = []
    for figure, image in zip(figures, images, strict=True):
        path = out_dir / f"{_safe(figure.key)}.{fmt}"
        _write(path, image)
        paths.append(path)
    return Written(tuple(paths), len(records), len(figures))


def _renderer(given: Renderer | None) -> AbstractContextManager[Renderer]:
    """The caller's renderer (kept open for it), or a new one for this call."""
    return nullcontext(given) if given is not None else Renderer()


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        raise ReportError(f"cannot write {path}: {exc.strerror or exc}") from None
