"""Drawing figure data with matplotlib: the requested pixel size, PNG and SVG, same data same SVG."""

from __future__ import annotations

import dataclasses
import io

import pytest
from PIL import Image

from mlbench_tui.report.draw import compact, default_size, grid_of, render, size_for
from mlbench_tui.report.figure import BarStack, Figure, Mark, Panel, RefLine, Series

FIGURE = Figure(
    "demo",
    "Demo",
    "what it measures",
    (
        Panel(
            "Lines",
            "workers",
            "seconds",
            series=(
                Series("gloo", (1.0, 2.0, 4.0), (10.0, 6.0, 4.0), "#0072B2", low=(9, 5, 3), high=(11, 7, 5)),
            ),
            marks=(Mark(8.0, 20.0, "failed", "#0072B2"),),
            refs=(RefLine("goal", 5.0), RefLine("ideal", None)),
            x_integer=True,
        ),
        Panel(
            "Log",
            "bytes",
            "GB/s",
            series=(Series("mpi", (4.0, 4e6), (0.001, 2.0), "#E69F00"),),
            x_log=True,
            y_log=True,
        ),
        Panel("Bars", "", "s", categories=("a", "b"), stacks=(BarStack("compute", (1.0, 2.0), "#4C72B0"),)),
        Panel("Empty", "x", "y", note="nothing here"),
    ),
)


@pytest.mark.parametrize("size", [(800, 600), (1600, 500)])
def test_png_has_the_requested_size(size: tuple[int, int]) -> None:
    image = Image.open(io.BytesIO(render(FIGURE, "png", width=size[0], height=size[1])))
    assert image.format == "PNG"
    assert image.size == size
    low, high = image.convert("L").getextrema()
    assert high - low > 100  # something dark was drawn on white


def test_default_size_follows_the_panel_grid() -> None:
    assert grid_of(3) == (1, 3) and grid_of(4) == (2, 2) and grid_of(5) == (3, 2)
    image = Image.open(io.BytesIO(render(FIGURE, "png")))
    assert image.size == default_size(FIGURE) == (960, 2 * 380 + 40)


def test_svg_is_self_contained_and_the_same_for_the_same_data() -> None:
    svg = render(FIGURE, "svg", width=900, height=700)
    assert svg.startswith(b"<?xml") and b'width="648pt"' in svg  # 900 px at 100 dpi = 648 pt
    # text as paths, no image or font to fetch (the http:// in it are XML namespace names)
    assert b"<text" not in svg and b"<image" not in svg and b"url(http" not in svg
    assert render(FIGURE, "svg", width=900, height=700) == svg


def test_compact_tick_labels() -> None:
    assert [compact(v) for v in (0.001, 1, 100, 1e3, 2e4, 1e6, 5e9)] == [
        "0.001",
        "1",
        "100",
        "1k",
        "20k",
        "1M",
        "5G",
    ]


def test_a_figure_file_carries_its_notes_and_keeps_its_rows_readable_at_any_width() -> None:
    noted = dataclasses.replace(FIGURE, notes=("Cost per run is left out: no run had a price per hour.",) * 3)
    plain = Image.open(io.BytesIO(render(noted, "png")))
    with_notes = Image.open(io.BytesIO(render(noted, "png", notes=True)))
    assert with_notes.size[0] == plain.size[0] and with_notes.size[1] > plain.size[1]  # room for the notes
    bottom = with_notes.convert("L").crop((0, plain.size[1], with_notes.size[0], with_notes.size[1]))
    assert bottom.getextrema()[0] < 128  # text was written there
    # only a width: the height follows the panel grid (two rows stay two readable rows)
    assert size_for(FIGURE, 1200, None) == (1200, round(800 * 1200 / 960))
    assert size_for(FIGURE, None, None) == default_size(FIGURE)
    assert size_for(FIGURE, 1200, 400) == (1200, 400)  # both: as asked


def test_bars_carry_their_values() -> None:
    labelled = Figure(
        "bars",
        "Bars",
        "",
        (Panel("Bars", "", "s", categories=("a", "b"), stacks=(BarStack("t", (1.0, 2.0), "#4C72B0"),),
               labels=("1.00 s (2.00x)", "2.00 s")),),
    )  # fmt: skip
    svg = render(labelled, "svg", width=600, height=400)
    unlabelled = render(
        dataclasses.replace(labelled, panels=(dataclasses.replace(labelled.panels[0], labels=()),)),
        "svg",
        width=600,
        height=400,
    )
    assert len(svg) > len(unlabelled)  # the labels were drawn (as paths: text is outlined in SVG)
