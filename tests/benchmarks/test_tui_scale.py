"""The TUI scale benchmark runs end to end at a small size (8 ranks, a few seconds live) and prints
its side-by-side table; no timing is asserted. Its peer switch restores the wide-run mode."""

from __future__ import annotations

import pytest

from benchmarks import BENCHMARKS, tui_scale
from mlbench_tui.tui import run_charts
from mlbench_tui.tui.widgets import rank_table

pytestmark = pytest.mark.slow


def test_it_prints_first_paint_and_live_cost_for_ours_and_the_peer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert BENCHMARKS["tui_scale"] == "benchmarks.tui_scale"
    code = tui_scale.main(
        ["--ranks", "8", "--seconds", "3", "--samples", "1", "--epochs", "1", "--windows", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "first paint: launch -> run screen" in out and "8 ranks" in out
    for mode in ("ours (wide-run mode)", "peer (wide mode off)"):
        assert sum(line.strip().startswith(mode) for line in out.splitlines()) == 2, mode
    assert "ratio peer / ours" in out and "TUI cores" in out


def test_the_peer_mode_is_undone_on_exit() -> None:
    wide, rows = run_charts.wide, rank_table.TABLE_ROWS
    with tui_scale.per_rank_mode():
        assert run_charts.wide is not wide and rank_table.TABLE_ROWS > 1024
    assert run_charts.wide is wide and rows == rank_table.TABLE_ROWS
