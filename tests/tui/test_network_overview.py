"""The run screen's overview of a run on emulated links: what was configured, how it was made,
what the links carried and whether the shaping held."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from support.results import plan

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import NetworkPlan
from mlbench_tui.results.model import NetworkFigures, RunResult
from mlbench_tui.store.api_models import RunDetail
from mlbench_tui.tui.widgets.run_overview import summary_renderable


def _plain(renderable: Any) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return " ".join(console.export_text().split())


def _detail(result: RunResult | None) -> RunDetail:
    network = NetworkPlan(bandwidth_bps=100_000_000, latency_s=0.005)
    run_plan = plan(network=network, name="qs-gloo-2w-100mbit-5ms")
    return RunDetail(
        id="r-0123456789ab", name=run_plan.name, spec_name="qs", spec_hash="abc", task="1a", backend="gloo",
        workers=2, repeat=0, state=RunState.SUCCEEDED if result else RunState.RUNNING, target_kind="local",
        created=datetime.now(UTC), result=result, network=network, plan=run_plan.model_dump(mode="json"),
    )  # fmt: skip


def test_a_running_run_shows_its_links() -> None:
    shown = _plain(summary_renderable(_detail(None)))
    assert "network 100Mbit per rank and direction, +5ms one way" in shown


def test_a_finished_run_shows_what_its_links_carried_and_whether_the_shaping_held() -> None:
    figures = NetworkFigures(
        bandwidth_bps=100_000_000, latency_s=0.005, method="emulated", nodes=2, held=False,
        problems=["node 1's sending qdisc is pfifo, not netem/tbf"], mean_mbit_s=91.0, peak_mbit_s=97.5,
        sent_bytes=123_000_000, setup_s=0.09, teardown_s=0.1,
    )  # fmt: skip
    shown = _plain(summary_renderable(_detail(RunResult(name="x", network=figures))))
    assert "2 emulated nodes (network namespaces, tc)" in shown
    assert (
        "links 91.0/100 Mbit/s (91%), peak 97.5; 123 MB sent; set up in 90.0 ms, removed in 0.100 s" in shown
    )
    assert "! not shaped for the whole run: node 1's sending qdisc is pfifo, not netem/tbf" in shown
