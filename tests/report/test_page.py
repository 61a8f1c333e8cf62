"""The HTML page: header (runs with their outcomes, specs with hashes, environments), every
figure embedded with what it measures, and nothing to fetch."""

from __future__ import annotations

import base64
import re

from report.test_figures import sweep, trained

from mlbench_tui.lifecycle import RunState
from mlbench_tui.report.build import build_figures
from mlbench_tui.report.page import render_page
from mlbench_tui.results.model import StartupFigures, Suspect

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_page_names_every_run_outcome_spec_and_environment() -> None:
    failed = trained("gloo", 4, 0, None, state=RunState.FAILED, message="rank 3 exited with code 1")
    records = [trained("gloo", 1, 0, 100.0), failed, sweep("mpi", 2, 0, {1: 0.5}, {1: 1e-5})]
    records[0].result.fingerprint.update({"cpu_model": "EPYC <7763>", "torch": "2.13", "hostname": "node-1"})
    figures = build_figures(records)
    page = render_page(records, figures, {f.key: PNG for f in figures}, title="mlbench report: spec")
    assert page.startswith("<!doctype html>") and "<title>mlbench report: spec</title>" in page
    assert "3 run(s), 1 without a result" in page
    assert "<td class=ok>reached in 1 m 40 s</td>" in page
    assert "<td class=bad>failed: rank 3 exited with code 1</td>" in page
    assert "<td class=ok>sweep recorded</td>" in page
    assert "spec hash <code>abc123</code>, 2 run(s)" in page and "<pre>spec: text</pre>" in page
    assert "<td>EPYC &lt;7763&gt;</td>" in page  # escaped
    assert "node-1" not in page  # per-run details stay out of the environment table
    assert re.findall(r'<figure id="([^"]+)"', page) == [f.key for f in figures]
    assert page.count("data:image/png;base64,") == len(figures)
    assert "<li>spec-gloo-4w-r0: failed: rank 3 exited with code 1</li>" in page
    for figure in figures:
        assert figure.caption.replace("'", "&#x27;") in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing fetched when opened


def test_a_long_failure_is_one_line_with_the_whole_text_folded_away() -> None:
    error = "AcceleratorError: CUDA error: an illegal memory access was encountered\nSearch for it\nat line 3"
    failed = trained("nccl", 1, 0, None, state=RunState.FAILED, message=error)
    figures = build_figures([failed])
    page = render_page([failed], figures, {f.key: PNG for f in figures if f.panels}, title="t")
    summary = "failed: AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert (
        f"<td class=bad><details><summary>{summary}</summary><pre>failed: {error}</pre></details></td>"
        in page
    )
    assert f"<li>spec-nccl-1w-r0: {summary}</li>" in page  # figure notes: the first line only
    assert "Search for it" not in page.replace(f"<pre>failed: {error}</pre>", "")


def test_a_run_s_checks_are_one_line_with_every_suspect_and_why_folded_away() -> None:
    run = trained("nccl", 1, 0, 10.0)
    run.result.suspects = [
        Suspect(figure="images/s", reason="85,333 per rank, above the 59,259 of one graph")
    ]
    figures = build_figures([run])
    page = render_page([run], figures, {f.key: PNG for f in figures if f.panels}, title="t")
    assert (
        "<td class=bad><details><summary>! 1 suspect</summary>"
        "<pre>suspect: ! images/s: 85,333 per rank, above the 59,259 of one graph</pre></details></td>"
    ) in page
    plain = trained("nccl", 1, 1, 10.0)
    page = render_page([plain], build_figures([plain]), {}, title="t")
    assert "<td>-</td><td class=name><code>" in page  # nothing to check: no row, no suspect


def test_environment_is_shown_once_readably_with_what_differed() -> None:
    one, two = trained("nccl", 1, 0, 10.0), trained("nccl", 1, 1, 9.0)
    shared = {"cudnn": 91900, "gpu_models": ["NVIDIA H200", "NVIDIA H100"], "cuda_graphs": False}
    one.result.fingerprint.update({**shared, "host_allocator": {"requested": "tuned", "tuned": True}})
    two.result.fingerprint.update({**shared, "host_allocator": {"requested": "system", "tuned": False}})
    page = render_page([one, two], [], {}, title="t")
    assert "Shared by all 2 run(s):" in page
    assert "<tr><th>cuDNN</th><td class=long>9.19.0</td></tr>" in page
    assert "<td class=long>NVIDIA H200, NVIDIA H100</td>" in page and "<td class=long>no</td>" in page
    assert "<th>runs</th><th>host allocator</th>" in page  # the one thing that differed, once
    assert "<td>requested tuned; tuned yes</td>" in page and "<td>requested system; tuned no</td>" in page
    assert "{" not in page.split("<h2>Environment</h2>")[1]  # no Python reprs
    assert page.count("cuDNN") == 1


def test_a_run_s_start_shows_the_launcher_s_part_split_as_the_target_reported_it() -> None:
    run = trained("gloo", 2, 0, 10.0)
    run.result.startup = StartupFigures(
        launcher_s=6.0,
        launcher="queued and spawned",
        launcher_parts={"queued": 4.0, "spawned": 2.0},
        phases={"interpreter": 0.5, "imports": 1.5},
        slowest_rank=1,
        ranks=2,
    )
    page = render_page([run], build_figures([run]), {}, title="t")
    assert (
        "<pre>startup: 8.00 s before training; queued and spawned 6.00 s (queued 4.00 s, spawned 2.00 s); "
        "rank 1 (slowest of 2): interpreter 0.500 s, imports 1.50 s"
    ) in page
