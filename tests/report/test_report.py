"""``mlbench report`` end to end on a recorded 16-run store: the real CLI writes one offline HTML
page that a real headless Chromium opens without fetching anything, and PNG/SVG figure files of
the requested size; the figures hold the stored results' numbers."""

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

from mlbench_tui.report.build import build_figures
from mlbench_tui.report.figure import RUN_COLOURS
from mlbench_tui.report.inputs import load_records
from mlbench_tui.server.serve import EmbeddedServer

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "tests" / "fixtures" / "report" / "store.sqlite3"
FIGURES = [
    "scaling-report-train",
    "allreduce-fp16",
    "allreduce-fp32",
    "allreduce-best-busbw",
    "training-1a",  # the task's eight runs overlaid
    *(f"ranks-report-train-{b}-2w-r{r}" for b in ("gloo", "mpi") for r in (0, 1)),  # multi-rank runs only
]
TRAIN_RUNS = 8


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    shutil.copyfile(STORE, path)
    return path


def mlbench(store: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLBENCH_DB": str(store), "MLBENCH_HOME": str(store.parent / "home")}
    env.pop("MLBENCH_SERVER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def server(store: Path) -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer(store, record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_report_opens_offline_in_headless_chromium(store: Path, tmp_path: Path) -> None:
    proc = mlbench(store, "report", "--out", "out/report.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"wrote out/report.html (16 runs, {len(FIGURES)} figures)"
    page = (tmp_path / "out" / "report.html").read_text()
    assert re.findall(r'<figure id="([^"]+)"', page) == FIGURES
    assert "<script" not in page and "<link" not in page and 'src="http' not in page
    captions = re.findall(r"<p class=caption>([^<]+)</p>", page)
    assert len(captions) == len(set(captions)) == 5  # one per kind: scaling, all-reduce, training, ranks
    assert "<figcaption><p>" not in page  # no figure repeats its kind's caption
    binary = chromium_path()
    if binary is None:
        pytest.skip("chromium is not installed (./dev test installs it; or: apt-get install -y chromium)")
    with Chromium(binary, width=1280, height=1600) as browser:
        load = browser.open(tmp_path / "out" / "report.html", elements=("#training-1a img",))
    assert load.failed == [] and load.errors == []
    # the overlay chart has one line per run: each run's colour is drawn in the goal-metric panel
    overlay = Image.open(io.BytesIO(load.elements["#training-1a img"])).convert("RGB")
    width, height = overlay.size
    cell = overlay.crop((0, 0, width // 2, height // 2))  # the first of two rows: goal metric
    counts = cell.getcolors(maxcolors=1 << 20) or []
    drawn = [c for c in RUN_COLOURS[:TRAIN_RUNS] if _pixels(counts, c) > 40]
    assert len(drawn) == TRAIN_RUNS, drawn
    assert all(url.startswith(("file:", "data:")) for url in load.requests), load.requests
    assert load.title == "mlbench report: report-allreduce, report-train"
    assert len(load.images) == len(FIGURES)
    assert all(image["complete"] and image["width"] > 600 for image in load.images), load.images
    shot = Image.open(io.BytesIO(load.screenshot)).convert("RGB")
    assert shot.size == (1280, 1600)
    colours = shot.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, tables and a figure, not a blank or error page
    white = max(count for count, colour in colours if colour == (255, 255, 255))
    assert white < 0.95 * shot.size[0] * shot.size[1]


def _pixels(counts: list[tuple[int, tuple[int, int, int]]], colour: str) -> int:
    rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return sum(n for n, c in counts if all(abs(a - b) < 30 for a, b in zip(c, rgb, strict=True)))


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_figure_files_of_the_requested_size(store: Path, tmp_path: Path, fmt: str) -> None:
    size = ("--width", "800", "--height", "500")
    proc = mlbench(
        store, "report", "report-allreduce", "--format", fmt, "--out-dir", "figs", *size, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    files = sorted((tmp_path / "figs").iterdir())
    assert [f.name for f in files] == [f"{key}.{fmt}" for key in sorted(FIGURES[1:4])]
    for path in files:
        kind = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True, check=True).stdout
        if fmt == "png":
            assert kind.startswith("PNG image data, 800 x 500"), kind
        else:
            assert kind.startswith("SVG Scalable Vector Graphics image"), kind
            assert 'width="576pt" height="360pt"' in path.read_text()  # 800 x 500 px at 100 dpi


def test_bad_references_and_paths_are_clear_errors(store: Path, tmp_path: Path) -> None:
    proc = mlbench(store, "report", "no-such-spec", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: no runs for 'no-such-spec'")
    (tmp_path / "a-file").write_text("")
    proc = mlbench(store, "report", "report-train-gloo-1w-r0", "--out", "a-file/report.html", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: cannot write a-file/report.html")
    assert "Traceback" not in proc.stderr
    proc = mlbench(store, "report", "--format", "png", "--width", "5", cwd=tmp_path)
    assert proc.returncode == 2 and "expected 100 to 10000 pixels, got 5" in proc.stderr


def test_report_reads_the_store_beside_a_server_that_writes_it(
    store: Path, server: EmbeddedServer, tmp_path: Path
) -> None:
    # The report reads the store file itself, needing no server of its own: here another one
    # (unrecorded, so not one to reuse) holds the store's writer. Its results were computed by
    # older rules, so they are read through that server once first (which recomputes them).
    server.info.client().list_runs()
    proc = mlbench(store, "report", "report-train", "--out", "r.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "wrote r.html (8 runs, 6 figures)"  # scaling, training, 4 ranks


def test_figures_hold_the_stored_results(server: EmbeddedServer) -> None:
    client = server.info.client()
    runs = sorted(client.list_runs(), key=lambda r: r.created)
    records = load_records(client, [r.id for r in runs])
    figures = {f.key: f for f in build_figures(records)}
    assert sorted(figures) == sorted(FIGURES)
    results = {r.result.name: r.result for r in records}

    def mean_tta(backend: str, workers: int) -> float:
        times = [results[f"report-train-{backend}-{workers}w-r{r}"].time_to_accuracy_s for r in (0, 1)]
        return sum(t or 0.0 for t in times) / 2  # two repeats: the olympic mean is the mean

    tta = figures["scaling-report-train"].panel("Time to accuracy")
    assert [(s.label, s.x) for s in tta.series] == [("gloo", (1.0, 2.0)), ("mpi", (1.0, 2.0))]
    for series in tta.series:
        assert series.y == pytest.approx([mean_tta(series.label, w) for w in (1, 2)])
    speedup = figures["scaling-report-train"].panel("Speedup")
    assert [s.label for s in speedup.series] == [
        "gloo",
        "gloo without communication",
        "mpi",
        "mpi without communication",
    ]
    assert speedup.series[2].y == pytest.approx((1.0, mean_tta("mpi", 1) / mean_tta("mpi", 2)))
    busbw = figures["allreduce-fp32"].panel("Bus bandwidth")
    assert [s.label for s in busbw.series] == ["gloo 2w", "gloo 4w", "mpi 2w", "mpi 4w"]
    assert all(len(s.x) == 16 for s in busbw.series)  # the spec's 16 sizes, bytes = 4 x elements
    assert busbw.series[0].x[0] == 4.0 and busbw.series[0].x[-1] == 4_000_000.0
    best = figures["allreduce-best-busbw"].panel("Best bus bandwidth")
    assert [s.label for s in best.series] == ["gloo fp16", "gloo fp32", "mpi fp32"]  # no fp16 on MPI
    peaks = [
        (results[f"report-allreduce-mpi-{w}w-r{r}"].allreduce or {})["fp32"].peak_busbw_gbps
        for w in (2, 4)
        for r in (0, 1)
    ]
    # the best of the mean curve lies within the repeats' own peaks
    assert min(peaks) <= max(best.series[2].y) <= max(peaks)
    training = figures["training-1a"]
    goal = training.panel("Validation Prec@1")
    assert len(goal.series) == TRAIN_RUNS and len({s.colour for s in goal.series}) == TRAIN_RUNS
    assert goal.refs[0].y == 70.0 and all(s.y[-1] >= 70.0 for s in goal.series)
    index = [s.label for s in goal.series].index("gloo-2w-r0")
    assert goal.marks[index].x == pytest.approx(results["report-train-gloo-2w-r0"].time_to_accuracy_s)
    ranks = figures["ranks-report-train-gloo-2w-r0"]
    assert [s.label for s in ranks.panel("Step time per rank").series][:2] == ["rank 0", "rank 1"]
