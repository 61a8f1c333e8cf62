"""Hourly cost estimates for a cluster request, from a bundled price table (``prices.json``).

The table holds rounded list prices for one region per cloud, dated (``as_of``), plus the
machine shape mlbench picks for a GPU request (``1xT4`` -> ``n1-standard-4`` + one
``nvidia-tesla-t4`` on GCP, ``g4dn.xlarge`` on AWS). Estimates are shown before anything is
created so nobody launches an 8xH100 pool by accident; they are approximate by design.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from mlbench_tui.clusters.providers import ClusterRequest, GpuSpec
from mlbench_tui.errors import UsageError
from mlbench_tui.spec.gpus import canonical_gpu_model

PRICED_PROVIDERS: tuple[str, ...] = ("gcp", "aws")
GCP_DEFAULT_ZONES_PER_REGION = 3


@lru_cache(maxsize=1)
def price_table() -> dict[str, Any]:
    """The bundled price table (parsed once)."""
    text = resources.files("mlbench_tui.clusters").joinpath("prices.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


@dataclass(frozen=True)
class NodeShape:
    """What one node of the benchmark pool is: machine type and the GPUs attached to it."""

    machine_type: str
    gpu_model: str | None = None
    gpu_count: int = 0
    accelerator: str | None = None  # GCP accelerator type, e.g. 'nvidia-tesla-t4'; None on AWS


def _cloud(provider: str) -> dict[str, Any]:
    table = price_table()
    if provider not in PRICED_PROVIDERS:
        raise UsageError(f"no price table for provider {provider!r}")
    cloud: dict[str, Any] = table[provider]
    return cloud


def accelerator_model(accelerator: str) -> str | None:
    """The catalog GPU model of a GCP accelerator type (``nvidia-h100-80gb`` -> ``H100``), from the
    price table, else from the name itself (``nvidia-tesla-t4`` -> ``T4``); None when unknown."""
    for model, entry in _cloud("gcp")["gpus"].items():
        if entry.get("accelerator") == accelerator:
            return str(model)
    return canonical_gpu_model(accelerator)


def resolve_shape(provider: str, gpu: GpuSpec | None, machine_type: str | None) -> NodeShape:
    """Pick (or check) the machine type for a GPU request on a cloud; clear errors on mismatch."""
    cloud = _cloud(provider)
    if gpu is None:
        return NodeShape(machine_type=machine_type or cloud["cpu_default_machine"])
    offered = cloud["gpus"]
    if gpu.model not in offered:
        raise UsageError(
            f"GPU model {gpu.model} is not offered on {provider} by mlbench",
            hint=f"choose one of: {', '.join(offered)}",
        )
    entry = offered[gpu.model]
    accelerator = entry.get("accelerator")
    if machine_type is None:
        machine_type = entry["machines"].get(str(gpu.count))
        if machine_type is None:
            counts = ", ".join(f"{c}x{gpu.model}" for c in entry["machines"])
            raise UsageError(
                f"no default machine type for {gpu} on {provider}",
                hint=f"use one of {counts}, or pass --machine-type",
            )
    machine = cloud["machines"].get(machine_type)
    bundled = machine.get("bundled_gpus") if machine else None
    if machine is not None and bundled is not None:
        if machine["gpu"] != gpu.model or bundled != gpu.count:
            raise UsageError(
                f"machine type {machine_type} comes with {bundled}x{machine['gpu']}, not {gpu}",
                hint="drop --machine-type to let mlbench pick one, or change --gpu",
            )
    elif machine is not None and (provider == "aws" or entry.get("bundled")):
        raise UsageError(
            f"machine type {machine_type} has no {gpu.model} GPUs",
            hint="drop --machine-type to let mlbench pick one",
        )
    elif machine is None and entry.get("bundled"):
        choices = ", ".join(entry["machines"].values())
        raise UsageError(f"{gpu.model} on {provider} needs a machine type that bundles it: {choices}")
    return NodeShape(machine_type, gpu_model=gpu.model, gpu_count=gpu.count, accelerator=accelerator)


@dataclass(frozen=True)
class CostLine:
    """One priced item: ``quantity`` units at ``unit_price`` per hour (None when unknown)."""

    label: str
    quantity: int
    unit_price: float | None

    @property
    def subtotal(self) -> float | None:
        return None if self.unit_price is None else self.quantity * self.unit_price


@dataclass(frozen=True)
class CostEstimate:
    """An hourly estimate: the priced lines, the total at the requested size and at max size."""

    provider: str
    region: str
    as_of: str
    lines: list[CostLine]
    total_per_hour: float
    max_total_per_hour: float
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """False when some item has no price in the table (the total leaves it out)."""
        return all(line.unit_price is not None for line in self.lines)

    def render(self) -> str:
        """Human-readable estimate for the confirmation prompt."""
        out = [f"Estimated cost ({self.region} list prices as of {self.as_of}, approximate):"]
        for line in self.lines:
            if line.unit_price is None:
                price = "price unknown"
            else:
                price = f"{line.quantity} x ${line.unit_price:.4f} = ${line.subtotal:.2f}/h"
            out.append(f"  {line.label:<52} {price}")
        total = f"  total ~ ${self.total_per_hour:.2f}/h (~${self.total_per_hour * 24:.2f}/day)"
        if not self.complete:
            total += ", excluding items without a price"
        out.append(total)
        if self.max_total_per_hour > self.total_per_hour + 1e-9:
            out.append(f"  up to ~ ${self.max_total_per_hour:.2f}/h when the autoscaler reaches the max size")
        out.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(out)


def _price(entry: dict[str, Any] | None, spot: bool, what: str, notes: list[str]) -> float | None:
    if entry is None:
        notes.append(f"{what} is not in the bundled price table")
        return None
    if spot:
        if entry.get("spot") is not None:
            return float(entry["spot"])
        notes.append(f"no spot price for {what} in the table; the on-demand price is shown as an upper bound")
    return float(entry["on_demand"])


def estimate(request: ClusterRequest, shape: NodeShape) -> CostEstimate:
    """Hourly cost of ``request`` with pool nodes of ``shape`` (GPU pool + system pool + fee)."""
    cloud = _cloud(request.provider)
    notes: list[str] = []
    zones = 1
    if request.provider == "gcp" and request.zone is None and request.region is not None:
        zones = GCP_DEFAULT_ZONES_PER_REGION
        notes.append(f"regional cluster: node counts apply in each of the region's {zones} zones")
    wanted = request.region or request.zone
    if wanted and not wanted.startswith(cloud["region"]):
        notes.append(f"prices are {cloud['region']} list prices; {wanted} may differ")
    kind = "spot" if request.spot else "on-demand"
    machine = cloud["machines"].get(shape.machine_type)
    lines = [
        CostLine(
            f"{shape.machine_type} (benchmark pool, {kind})",
            request.nodes * zones,
            _price(machine, request.spot, shape.machine_type, notes),
        )
    ]
    if shape.gpu_model and shape.accelerator and not (machine or {}).get("bundled_gpus"):
        gpu_entry = cloud["gpus"][shape.gpu_model]
        lines.append(
            CostLine(
                f"{shape.accelerator} GPU ({kind})",
                request.nodes * zones * shape.gpu_count,
                _price(gpu_entry, request.spot, shape.accelerator, notes),
            )
        )
    system = cloud["system_pool"]
    system_machine = cloud["machines"][system["machine_type"]]
    system_label = f"{system['machine_type']} (system pool, on-demand)"
    lines.append(CostLine(system_label, system["nodes"] * zones, system_machine["on_demand"]))
    lines.append(CostLine(cloud["control_plane"]["label"], 1, cloud["control_plane"]["on_demand"]))
    total = sum(line.subtotal or 0.0 for line in lines)
    pool_per_node = sum((line.subtotal or 0.0) for line in lines[:-2]) / request.nodes
    max_total = total + pool_per_node * (request.autoscaling_max - request.nodes)
    return CostEstimate(
        provider=request.provider,
        region=cloud["region"],
        as_of=price_table()["as_of"],
        lines=lines,
        total_per_hour=round(total, 4),
        max_total_per_hour=round(max_total, 4),
        notes=[*dict.fromkeys(notes), "disks, network egress and load balancers are not included"],
    )
