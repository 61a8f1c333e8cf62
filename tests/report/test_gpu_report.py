"""The report of real GPU runs (two stores recorded on an NVIDIA H200): the figure data of a GPU
run holds its telemetry against time with units, and the page that ``mlbench report`` writes,
opened in a real headless Chromium, shows GPU panels that drew their lines, not empty axes."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from support.chromium import Chromium, chromium_path

from mlbench_tui.formatting import format_energy
from mlbench_tui.report.build import build_figures
from mlbench_tui.report.figure import RUN_COLOURS, Figure
from mlbench_tui.report.inputs import load_records
from mlbench_tui.server.serve import EmbeddedServer

STORES = Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "h200-2026-11-27"
RUN = "gpu-1a-fp32-nccl-1w"  # ResNet-20 on one H200: 8 telemetry samples, goal reached at 1.37 s
FAILED = "gpu-3a-fp32-graphs-nccl-1w"  # a CUDA error of six lines
LINE = tuple(int(RUN_COLOURS[0][i : i + 2], 16) for i in (1, 3, 5))  # the first run's colour
MIN_LINE_PIXELS = 300  # a drawn series; an empty panel's legend swatches came to 138 at most


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    home = tmp_path / "suite"
    shutil.copytree(STORES / "suite", home)
    for path in home.rglob("*"):  # the fixture is read-only in some checkouts; the copy is not
        path.chmod(0o755 if path.is_dir() else 0o644)
    return home


@pytest.fixture
def figures(suite: Path) -> Iterator[dict[str, Figure]]:
    server = EmbeddedServer(suite / "mlbench.db", record=False).start()
    try:
        client = server.info.client()
        records = load_records(client, [r.id for r in client.list_runs()])
        yield {f.key: f for f in build_figures(records)}
    finally:
        server.stop()


def test_gpu_panels_of_a_real_run_plot_telemetry_against_time_with_units(figures: dict[str, Figure]) -> None:
    task = figures["training-1a"]  # the task's two runs overlaid: eager and CUDA graphs
    titles = [p.title for p in task.panels]
    assert titles[-4:] == ["GPU utilisation", "GPU memory", "GPU power", "Energy since training started"]
    util, memory, power = (task.panel(t) for t in ("GPU utilisation", "GPU memory", "GPU power"))
    for panel, unit in ((util, "utilisation (%)"), (memory, "memory in use (GiB)"), (power, "power (W)")):
        assert (panel.x_label, panel.y_label) == ("time since training started (s)", unit)
        assert [s.label for s in panel.series] == ["nccl-1w", "graphs-nccl-1w"]  # one line per run
        assert len(panel.series[0].x) == 8  # every sample, none dropped for lacking a step
    busy = util.series[0]
    assert max(busy.y) == 53.0
    assert busy.x[0] < 0 < busy.x[-1]  # sampled from start-up on, through training
    assert max(memory.series[0].y) < 3.0  # GiB
    assert memory.corner == "GPU total: 140.4 GiB"  # 143,771 MiB: a label, not a line on the axis
    assert max(power.series[0].y) == pytest.approx(178.484)
    assert f"{RUN}: GPU utilisation n/a: 1 reading in 1.4 s" in task.notes  # as status and results say


def test_a_real_gpu_run_marks_the_energy_to_its_goal(figures: dict[str, Figure]) -> None:
    energy = figures["training-1a"].panel("Energy since training started")
    mark = energy.marks[0]
    # the figure's energy to the goal is the result's (run_start to goal_reached, from the counter)
    assert mark.label == format_energy(237.16680805642864) == "237 J"
    assert mark.x == pytest.approx(1.40983, abs=1e-4)  # goal_reached - run_start, seconds
    assert energy.y_label == "energy (J)"
    assert f"{RUN}: energy to the goal 237 J (all ranks)" in figures["training-1a"].notes


def test_one_worker_specs_are_a_table_and_nothing_is_drawn_empty(figures: dict[str, Figure]) -> None:
    assert not [key for key in figures if key.startswith("scaling-")]  # every spec ran one worker count
    allreduce = figures["allreduce-fp32"]
    assert [p.title for p in allreduce.panels] == ["Latency p50", "Latency p99"]
    assert any(n.startswith("Bus bandwidth is left out") for n in allreduce.notes)
    assert all(not p.empty for f in figures.values() for p in f.panels)
    assert sorted(figures) == [
        "allreduce-best-busbw", "allreduce-fp16", "allreduce-fp32",
        "implementations-1a", "implementations-2a", "implementations-3a",
        "training-1a", "training-2a", "training-3a", "training-4a", "training-4b",
    ]  # fmt: skip  # 11 figures for 9 runs, not 30


def _line_pixels(image: Image.Image, row: int, col: int, rows: int, cols: int) -> int:
    """Pixels of the first rank's line colour in one panel's cell of a figure image."""
    width, height = image.size
    cell = image.crop(
        (width * col // cols, height * row // rows, width * (col + 1) // cols, height * (row + 1) // rows)
    )
    return sum(
        count
        for count, (r, g, b) in cell.getcolors(maxcolors=1 << 20) or []
        if abs(r - LINE[0]) < 40 and abs(g - LINE[1]) < 40 and abs(b - LINE[2]) < 60
    )


def test_the_gpu_report_opens_in_chromium_with_gpu_panels_that_drew_their_lines(
    suite: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "MLBENCH_HOME": str(suite)}
    env.pop("MLBENCH_SERVER_URL", None)
    env.pop("MLBENCH_DB", None)
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "report", RUN, FAILED, "--out", str(tmp_path / "r.html")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert '<figure id="training-1a">' in page and '<figure id="training-3a">' in page
    assert "<details><summary>failed: rank 0 failed: AcceleratorError: CUDA error" in page
    assert not re.search(r"cudnn|91900|\{'requested'", page)
    binary = chromium_path()
    if binary is None:
        pytest.skip("chromium is not installed (./dev test installs it; or: apt-get install -y chromium)")
    run = "#training-1a img"
    with Chromium(binary, width=1280, height=1600) as browser:
        load = browser.open(tmp_path / "r.html", elements=(run,))
    assert load.failed == [] and load.errors == []
    assert all(image["complete"] and image["width"] > 600 for image in load.images), load.images
    drawn = Image.open(io.BytesIO(load.elements[run])).convert("RGB")
    # seven panels in four rows of two: utilisation, memory, power and energy are the last four cells
    for row, col in ((1, 1), (2, 0), (2, 1), (3, 0)):
        assert _line_pixels(drawn, row, col, 4, 2) > MIN_LINE_PIXELS, (row, col)
