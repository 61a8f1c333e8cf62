"""Cluster requests, GPU specs, machine shapes and the hourly cost estimate."""

from __future__ import annotations

from typing import Any

import pytest

from mlbench_tui.clusters.prices import accelerator_model, estimate, price_table, resolve_shape
from mlbench_tui.clusters.providers import ClusterRequest, GpuSpec, parse_gpu
from mlbench_tui.errors import UsageError
from mlbench_tui.executors.kubernetes.placement import gpu_model_label


@pytest.mark.parametrize(
    ("text", "expected"), [("1xT4", GpuSpec(1, "T4")), (" 8 X a100 ", GpuSpec(8, "A100"))]
)
def test_parse_gpu(text: str, expected: GpuSpec) -> None:
    assert parse_gpu(text) == expected


@pytest.mark.parametrize(
    ("text", "message"), [("T4", "invalid GPU spec"), ("0xT4", "count"), ("1xTPU", "unknown")]
)
def test_parse_gpu_rejects(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_gpu(text)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nodes": 0}, "--nodes must be at least 1"),
        ({"min_nodes": 3, "max_nodes": 2, "nodes": 2}, "greater than --max-nodes"),
        ({"nodes": 5, "max_nodes": 4}, "outside the autoscaling range"),
        ({"name": "Bad_Name"}, "invalid cluster name"),
        ({"disk_gb": 5}, "--disk-gb"),
    ],
)
def test_request_validation(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ClusterRequest(**{"provider": "gcp", "name": "test", **fields})


def test_autoscaling_bounds_default_to_a_fixed_size_pool() -> None:
    request = ClusterRequest("gcp", "t", nodes=3)
    assert (request.autoscaling_min, request.autoscaling_max) == (3, 3)
    request = ClusterRequest("gcp", "t", nodes=1, min_nodes=0, max_nodes=4)
    assert (request.autoscaling_min, request.autoscaling_max) == (0, 4)


def test_shapes_picked_for_gpu_requests() -> None:
    t4 = resolve_shape("gcp", GpuSpec(1, "T4"), None)
    assert (t4.machine_type, t4.accelerator, t4.gpu_count) == ("n1-standard-4", "nvidia-tesla-t4", 1)
    assert resolve_shape("gcp", GpuSpec(8, "A100"), None).machine_type == "a2-highgpu-8g"
    assert resolve_shape("aws", GpuSpec(1, "T4"), None).machine_type == "g4dn.xlarge"
    assert resolve_shape("aws", GpuSpec(4, "A10G"), None).machine_type == "g5.12xlarge"
    assert resolve_shape("aws", None, None).machine_type == "m5.2xlarge"
    # A machine type the table does not know is trusted (priced as unknown later).
    assert resolve_shape("aws", GpuSpec(1, "T4"), "g4dn.16xlarge").machine_type == "g4dn.16xlarge"


def test_every_offered_gcp_accelerator_maps_back_to_its_model_label() -> None:
    """The GKE pool's ``mlbench.io/gpu-model`` label comes from its accelerator type."""
    for model, entry in price_table()["gcp"]["gpus"].items():
        assert accelerator_model(entry["accelerator"]) == model
        assert gpu_model_label(model) == model.lower()
    assert accelerator_model("nvidia-h100-80gb") == "H100"
    assert accelerator_model("nvidia-tesla-t4") == "T4" and accelerator_model("nvidia-b200") is None


@pytest.mark.parametrize(
    ("provider", "gpu", "machine", "message"),
    [
        ("gcp", GpuSpec(1, "A10G"), None, "not offered on gcp"),
        ("gcp", GpuSpec(3, "T4"), None, "no default machine type"),
        ("aws", GpuSpec(1, "T4"), "g5.xlarge", "comes with 1xA10G"),
        ("aws", GpuSpec(1, "T4"), "m5.large", "has no T4"),
        ("gcp", GpuSpec(1, "L4"), "n1-standard-8", "has no L4"),
    ],
)
def test_shape_mismatches_are_usage_errors(
    provider: str, gpu: GpuSpec, machine: str | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        resolve_shape(provider, gpu, machine)


def test_gcp_estimate_adds_pool_gpus_system_pool_and_fee() -> None:
    request = ClusterRequest("gcp", "test", nodes=2, gpu=GpuSpec(1, "T4"), max_nodes=4)
    result = estimate(request, resolve_shape("gcp", request.gpu, None))
    gcp = price_table()["gcp"]
    expected = (
        2 * gcp["machines"]["n1-standard-4"]["on_demand"]
        + 2 * gcp["gpus"]["T4"]["on_demand"]
        + gcp["machines"]["e2-standard-2"]["on_demand"]
        + gcp["control_plane"]["on_demand"]
    )
    assert result.total_per_hour == pytest.approx(expected)
    assert result.total_per_hour == pytest.approx(1.247)
    per_node = gcp["machines"]["n1-standard-4"]["on_demand"] + gcp["gpus"]["T4"]["on_demand"]
    assert result.max_total_per_hour == pytest.approx(expected + 2 * per_node)
    text = result.render()
    assert "total ~ $1.25/h" in text and "up to ~ $2.33/h" in text
    assert price_table()["as_of"] in text


def test_spot_and_regional_estimates() -> None:
    on_demand = ClusterRequest("aws", "t", nodes=2, gpu=GpuSpec(1, "T4"))
    spot = ClusterRequest("aws", "t", nodes=2, gpu=GpuSpec(1, "T4"), spot=True)
    shape = resolve_shape("aws", on_demand.gpu, None)
    assert estimate(spot, shape).total_per_hour < estimate(on_demand, shape).total_per_hour
    zonal = ClusterRequest("gcp", "t", gpu=GpuSpec(1, "T4"), zone="us-central1-a")
    regional = ClusterRequest("gcp", "t", gpu=GpuSpec(1, "T4"), region="us-central1")
    t4 = resolve_shape("gcp", zonal.gpu, None)
    fee = price_table()["gcp"]["control_plane"]["on_demand"]
    assert estimate(regional, t4).total_per_hour - fee == pytest.approx(
        3 * (estimate(zonal, t4).total_per_hour - fee)
    )
    assert any("3 zones" in note for note in estimate(regional, t4).notes)


def test_unknown_prices_are_flagged_not_guessed() -> None:
    request = ClusterRequest("aws", "t", gpu=GpuSpec(1, "T4"), machine_type="g4dn.16xlarge", spot=True)
    result = estimate(request, resolve_shape("aws", request.gpu, request.machine_type))
    assert not result.complete
    assert "price unknown" in result.render() and "excluding items without a price" in result.render()
    spot_a100 = ClusterRequest("aws", "t", gpu=GpuSpec(8, "A100"), spot=True)
    notes = estimate(spot_a100, resolve_shape("aws", spot_a100.gpu, None)).notes
    assert any("no spot price for p4d.24xlarge" in note for note in notes)
