"""spec.network: rates and delays as people write them, sweeps, bounds, located errors with hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_tui.plan import expand, spec_hash
from mlbench_tui.spec.loader import collect_paths, load_paths
from mlbench_tui.spec.network import format_bandwidth, format_latency, network_tag

HEAD = """apiVersion: mlbench/v1
kind: Benchmark
metadata: {name: net}
spec:
  task: 2a
  data: synthetic
  workers: [2, 4]
"""


def _write(tmp_path: Path, network: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(HEAD + network)
    return path


def _issues(tmp_path: Path, network: str) -> list[str]:
    _loaded, issues = collect_paths([_write(tmp_path, network)], environ={})
    return [issue.render().replace(str(tmp_path) + "/", "") for issue in issues]


@pytest.mark.parametrize(
    ("written", "bps"),
    [
        ("100Mbit", 100_000_000),
        ("100mbit", 100_000_000),
        ("100Mbps", 100_000_000),
        ("1Gbit/s", 1_000_000_000),
        ("2.5Gbit", 2_500_000_000),
        ("10Gbit", 10_000_000_000),
        ("1500kbit", 1_500_000),
        ("unlimited", None),
    ],
)
def test_bandwidth_spellings_normalise_to_bits_per_second(
    tmp_path: Path, written: str, bps: int | None
) -> None:
    (loaded,) = load_paths([_write(tmp_path, f"  network: {{bandwidth: {written}}}\n")], environ={})
    assert loaded.spec.spec.network is not None
    assert loaded.spec.spec.network.bandwidth == [bps]


def test_two_spellings_of_one_rate_share_one_hash(tmp_path: Path) -> None:
    (a,) = load_paths([_write(tmp_path, "  network: 100Mbit\n")], environ={})
    (b,) = load_paths([_write(tmp_path, "  network: {bandwidth: 100Mbps, latency: 0}\n")], environ={})
    assert spec_hash(a.spec) == spec_hash(b.spec)


def test_a_spec_without_network_keeps_its_hash_and_names(tmp_path: Path) -> None:
    (loaded,) = load_paths([_write(tmp_path, "")], environ={})
    assert "network" not in loaded.spec.normalized()["spec"]
    plans = expand(loaded.spec)
    assert [p.name for p in plans] == ["net-gloo-2w", "net-gloo-4w"]
    assert all(p.network is None for p in plans)
    assert all(p.emulated_nodes() == 1 for p in plans)


def test_bandwidth_and_latency_sweep_like_workers(tmp_path: Path) -> None:
    network = "  network:\n    bandwidth: [10Mbit, 1Gbit, unlimited]\n    latency: [0ms, 5ms]\n"
    (loaded,) = load_paths([_write(tmp_path, network)], environ={})
    plans = expand(loaded.spec)
    assert len(plans) == 2 * 3 * 2
    assert [p.name for p in plans[:6]] == [
        "net-gloo-2w-10mbit",
        "net-gloo-2w-10mbit-5ms",
        "net-gloo-2w-1gbit",
        "net-gloo-2w-1gbit-5ms",
        "net-gloo-2w-unlimited",
        "net-gloo-2w-unlimited-5ms",
    ]
    shaped = plans[1]
    assert shaped.network is not None
    assert (shaped.network.bandwidth_bps, shaped.network.latency_s) == (10_000_000, 0.005)
    assert shaped.network.label() == "10Mbit +5ms"
    assert shaped.emulated_nodes() == 2  # one rank per emulated node by default
    assert [shaped.node_of(rank) for rank in range(2)] == [0, 1]


def test_ranks_per_node_groups_ranks_into_nodes(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        HEAD.replace("workers: [2, 4]", "workers: 4\n  hardware: {ranks_per_node: 2}") + "  network: 1Gbit\n"
    )
    (plan,) = expand(load_paths([path], environ={})[0].spec)
    assert plan.emulated_nodes() == 2
    assert [plan.node_of(rank) for rank in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        (
            "  network: {bandwidth: 100Mbt}\n",
            "spec.yaml:8:24: spec.network.bandwidth: invalid bandwidth '100Mbt' "
            "(hint: did you mean '100Mbit'?)",
        ),
        (
            "  network: {bandwidth: 100}\n",
            "spec.yaml:8:24: spec.network.bandwidth: bandwidth 100 has no unit "
            "(hint: write '100Mbit' (megabits per second) or '100Gbit')",
        ),
        (
            "  network: {bandwidth: 100MB/s}\n",
            "spec.yaml:8:24: spec.network.bandwidth: bandwidth '100MB/s' is in bytes per second; "
            "the spec takes bits per second (hint: write '800Mbit')",
        ),
        (
            "  network: {bandwidth: -5Mbit}\n",
            "spec.yaml:8:24: spec.network.bandwidth: invalid bandwidth '-5Mbit' "
            "(hint: write a rate in bits per second such as '100Mbit' or '1Gbit', or 'unlimited')",
        ),
        (
            "  network: {bandwidth: 0Mbit}\n",
            "spec.yaml:8:24: spec.network.bandwidth: bandwidth '0Mbit' is not a positive rate "
            "(hint: write 'unlimited' for no limit)",
        ),
        (
            "  network: {bandwidth: 999999Tbit}\n",
            "spec.yaml:8:24: spec.network.bandwidth: bandwidth '999999Tbit' is outside 1Mbit to 400Gbit "
            "(hint: write 'unlimited' for no limit)",
        ),
        (
            "  network: {bandwidth: 10kbit}\n",
            "spec.yaml:8:24: spec.network.bandwidth: bandwidth '10kbit' is outside 1Mbit to 400Gbit",
        ),
        (
            "  network: {bandwidth: unlimted}\n",
            "spec.yaml:8:24: spec.network.bandwidth: invalid bandwidth 'unlimted' "
            "(hint: did you mean 'unlimited'?)",
        ),
        (
            "  network: {latency: 5}\n",
            "spec.yaml:8:22: spec.network.latency: latency 5 has no unit (hint: write '5ms' (milliseconds))",
        ),
        (
            "  network: {latency: 5msec}\n",
            "spec.yaml:8:22: spec.network.latency: invalid latency '5msec' (hint: did you mean '5ms'?)",
        ),
        (
            "  network: {latency: 2s}\n",
            "spec.yaml:8:22: spec.network.latency: latency '2s' is more than 1s, the most a link here adds",
        ),
        (
            "  network: {latency: -1ms}\n",
            "spec.yaml:8:22: spec.network.latency: invalid latency '-1ms' "
            "(hint: write e.g. '5ms' or '250us')",
        ),
        (
            "  network: {bandwidth: [100Mbit, 100Mbps]}\n",
            "spec.yaml:8:24: spec.network.bandwidth: '100Mbit' appears twice in the bandwidth sweep "
            "(two spellings of one value?)",
        ),
        (
            "  network: {bandwith: 1Gbit}\n",
            "spec.yaml:8:13: unknown key 'bandwith' in spec.network (hint: did you mean 'bandwidth'?)",
        ),
    ],
)
def test_bad_values_are_located_with_a_hint(tmp_path: Path, network: str, expected: str) -> None:
    assert _issues(tmp_path, network) == [expected]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    issues = _issues(tmp_path, "  network:\n    bandwidth: [10Mbit, 7Qbit]\n    latency: 3 parsecs\n")
    assert [issue.split(": ", 1)[0] for issue in issues] == ["spec.yaml:9:25", "spec.yaml:10:14"]


def test_run_names_stay_within_the_kubernetes_limit(tmp_path: Path) -> None:
    long_name = "n" * 45
    path = tmp_path / "spec.yaml"
    path.write_text(
        HEAD.replace("name: net", f"name: {long_name}") + "  network: {bandwidth: 1500kbit, latency: 250us}\n"
    )
    _loaded, issues = collect_paths([path], environ={})
    assert len(issues) == 1
    assert "run names would be up to 68 characters" in issues[0].message


def test_formatting_round_trips() -> None:
    assert format_bandwidth(2_500_000_000) == "2.5Gbit"
    assert format_bandwidth(None) == "unlimited"
    assert format_latency(0.005) == "5ms"
    assert format_latency(0.00025) == "250us"
    assert network_tag(2_500_000_000, 0.0) == "2500mbit"
    assert network_tag(None, 0.00025) == "unlimited-250us"


def test_kubernetes_bandwidth_is_refused_on_other_targets(tmp_path: Path) -> None:
    assert _issues(tmp_path, "  network: {bandwidth: 1Gbit, kubernetes_bandwidth: tc}\n") == [
        "spec.yaml:8:53: spec.network.kubernetes_bandwidth: network.kubernetes_bandwidth applies to "
        "kubernetes targets; this spec runs on local "
        "(hint: remove it: local runs shape their emulated links with tc)"
    ]


def test_one_rank_runs_once_without_a_network(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(HEAD.replace("workers: [2, 4]", "workers: [1, 2]") + "  network: [10Mbit, 1Gbit]\n")
    plans = expand(load_paths([path], environ={})[0].spec)
    assert [(p.name, p.network is None) for p in plans] == [
        ("net-gloo-1w", True),  # one rank has no link: the baseline of every bandwidth
        ("net-gloo-2w-10mbit", False),
        ("net-gloo-2w-1gbit", False),
    ]
