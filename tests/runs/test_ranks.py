"""``mlbench status RUN`` and ``mlbench results RUN`` of a finished 1,024-rank run (the session's
scale store): the ranks summarised (states, spread of step time, comm share and busy time, the
worst ranks first) in a fixed number of requests, and listed rank by rank only when asked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from benchmarks.scale_store import ScaleStore
from mlbench_tui.cli import main
from mlbench_tui.errors import UsageError
from mlbench_tui.runs.ranks import LIST_UP_TO, ranks_section
from mlbench_tui.runs.results import collect_results, results_output, run_ranks
from mlbench_tui.runs.status import status_detail
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RankInfo, RunDetail

pytestmark = pytest.mark.slow


class CountingClient(MlbenchClient):
    """A client that records the path of every request it makes."""

    def __init__(self, url: str, token: str | None) -> None:
        super().__init__(url, token)
        self.paths: list[str] = []

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        self.paths.append(path)
        return super()._request(method, path, **kw)


@pytest.fixture
def client(scale_server: EmbeddedServer) -> Iterator[CountingClient]:
    c = CountingClient(scale_server.url, scale_server.info.read_token)
    yield c
    c.close()


@pytest.fixture
def cli(
    scale_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """``mlbench ARGS...`` in this process, against the session's server: (exit code, out, err)."""
    monkeypatch.setenv("MLBENCH_SERVER_URL", scale_server.url)
    monkeypatch.setenv("MLBENCH_READ_TOKEN", scale_server.info.read_token)
    monkeypatch.setenv("MLBENCH_TOKEN", scale_server.info.admin_token)

    def run(*args: str) -> tuple[int, str, str]:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse refusing an argument
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _rank_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("  ") and line.split()[0].isdigit()]


def test_status_summarises_1024_ranks_in_two_requests(
    scale_store: ScaleStore, client: CountingClient
) -> None:
    text = status_detail(client, scale_store.run_id)
    assert len(client.paths) == 2, client.paths  # the run, every rank's figures: no request per rank
    lines = text.splitlines()
    assert "ranks:    1024: 1024 succeeded" in lines
    assert len(lines) < 40 and len(_rank_lines(text)) == 5  # the worst five, not 1,024 lines
    spread = {line.split()[0]: line for line in lines if line.startswith("          ")}
    assert "p50" in spread["step"] and "p90" in spread["step"] and "max" in spread["step"]
    assert f"(rank {scale_store.stragglers[0]})" in spread["comm"]  # the least communication
    worst = [int(line.split()[0]) for line in _rank_lines(text)]
    # the model's stragglers (slowest first) lead, as slow as they are
    assert worst[: len(scale_store.stragglers)] == list(scale_store.stragglers)
    worst_line = _rank_lines(text)[0]
    assert "  straggler" in worst_line and "rss " in worst_line  # flagged, with its hardware figures
    assert "--ranks all" in lines[-1]


def test_status_lists_every_rank_or_a_set_when_asked(
    scale_store: ScaleStore, cli: Callable[..., tuple[int, str, str]]
) -> None:
    code, out, _err = cli("status", scale_store.run_id, "--ranks", "all")
    assert code == 0 and [int(line.split()[0]) for line in _rank_lines(out)] == list(range(1024))
    code, out, _err = cli("status", scale_store.run_id, "--ranks", "0-7,512")
    assert code == 0 and [int(line.split()[0]) for line in _rank_lines(out)] == [*range(8), 512]
    assert "ranks 0-7,512:" in out and "step time p50" in out
    line_517 = _rank_lines(cli("status", scale_store.run_id, "--ranks", "517")[1])[0]
    assert line_517.split()[:3] == ["517", "succeeded", "gpu-node-0064"] and "comm " in line_517
    code, _out, err = cli("status", scale_store.run_id, "--ranks", "7-3")
    assert code == 2 and "range '7-3' runs backwards (write it as 3-7)" in err and "Traceback" not in err


def test_results_add_the_ranks_summary_and_json(
    scale_store: ScaleStore, client: CountingClient, cli: Callable[..., tuple[int, str, str]]
) -> None:
    results = collect_results(client, scale_store.run_id)
    ranks = run_ranks(client, results)
    assert ranks is not None and len(client.paths) == 3  # the run, and (for its ranks) run + figures
    text = results_output(results, "table", ranks=ranks)
    table, section = text.split("\n\n")
    assert table.splitlines()[1].startswith(scale_store.run_name)
    assert section.startswith("ranks:    1024: 1024 succeeded") and len(_rank_lines(section)) == 5
    code, out, _err = cli("results", scale_store.run_id, "-o", "json", "--ranks", "510-513")
    document = json.loads(out)["ranks"]
    assert code == 0 and document["workers"] == 1024 and document["states"] == {"succeeded": 1024}
    assert document["worst"][: len(scale_store.stragglers)] == list(scale_store.stragglers)
    assert (
        document["step_time"]["count"] == 1024
        and document["comm_share"]["min_rank"] == scale_store.stragglers[0]
    )
    assert [r["rank"] for r in document["ranks"]] == [510, 511, 512, 513]
    assert all(r["busy"] is not None and 0 < r["comm_share"] < 1 for r in document["ranks"])
    other = results[0].model_copy(update={"run_id": "r-000000000002"})
    with pytest.raises(UsageError, match="--ranks lists the ranks of one run; these results hold 2"):
        run_ranks(client, [*results, other], "all")


def test_a_small_run_lists_its_ranks_and_the_odd_states_of_a_large_one_stand_out() -> None:
    def run(workers: int, states: dict[int, str]) -> RunDetail:
        ranks = [RankInfo(rank=r, state=states.get(r, "running"), host=f"h{r // 8}") for r in range(workers)]
        return RunDetail.model_validate(
            {"id": "r-000000000001", "name": "n", "spec_name": "s", "spec_hash": "h", "task": "1a",
             "backend": "nccl", "workers": workers, "repeat": 0, "state": "running", "target_kind": "local",
             "created": "2026-01-01T00:00:00Z", "ranks": [r.model_dump() for r in ranks]}
        )  # fmt: skip

    small = ranks_section(run(LIST_UP_TO, {3: "failed"}), {})
    assert small[0] == f"ranks:    {LIST_UP_TO}: {LIST_UP_TO - 1} running, 1 failed"
    assert len(_rank_lines("\n".join(small))) == LIST_UP_TO
    failed = {r: "failed" for r in range(100, 112)}
    large = "\n".join(ranks_section(run(1024, failed | {5: "pending"}), {}))
    assert "ranks:    1024: 1011 running, 12 failed, 1 pending" in large
    odd = large.split("ranks not running:\n")[1]
    assert [int(line.split()[0]) for line in _rank_lines(odd)] == [5, *range(100, 109)]
    assert "  ... and 3 more" in odd
