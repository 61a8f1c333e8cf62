"""Pulumi mocks for the Pulumi program tests: echo inputs, add provider-computed outputs, record resources."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Recorded:
    """One resource the program registered: type token, logical name, inputs (camelCase keys)."""

    typ: str
    name: str
    inputs: dict[str, Any]


@dataclass
class RecordingMocks:
    """Pulumi mocks that echo inputs as outputs, add provider-computed fields, and record calls."""

    resources: list[Recorded] = field(default_factory=list)

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        outputs = dict(args.inputs)
        if args.typ == "gcp:container/cluster:Cluster":
            outputs["endpoint"] = "203.0.113.10"
            outputs["masterAuth"] = {"clusterCaCertificate": "R0tFLUNBLURBVEE="}
        if args.typ == "aws:eks/cluster:Cluster":
            outputs["endpoint"] = "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com"
            outputs["certificateAuthority"] = {"data": "RUtTLUNBLURBVEE="}
            outputs["arn"] = f"arn:aws:eks:us-east-1:123456789012:cluster/{args.inputs.get('name')}"
        if args.typ == "aws:iam/role:Role":
            outputs["arn"] = f"arn:aws:iam::123456789012:role/{args.name}"
            outputs.setdefault("name", args.name)  # the provider autonames roles
        self.resources.append(Recorded(args.typ, args.name, dict(args.inputs)))
        return f"{args.name}-id", outputs

    def call(self, args: Any) -> dict[str, Any]:
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {"names": ["us-east-1a", "us-east-1b", "us-east-1c"], "zoneIds": ["use1-az1", "use1-az2"]}
        return {}

    def of_type(self, typ: str) -> list[Recorded]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str, name_suffix: str = "") -> Recorded:
        found = [r for r in self.of_type(typ) if r.name.endswith(name_suffix)]
        assert len(found) == 1, f"expected one {typ} named *{name_suffix}, got {[r.name for r in found]}"
        return found[0]


def run_program(build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``build`` as a Pulumi program under the installed mocks; return its resolved outputs.

    ``build`` creates resources and returns a dict of Outputs; the values are resolved (secrets
    unwrapped) once the engine has registered every resource. ``result["__secret__"]`` maps each
    output name to whether Pulumi marked it secret.
    """
    import pulumi

    captured: dict[str, Any] = {}
    secret_tasks: dict[str, asyncio.Future[bool]] = {}

    @pulumi.runtime.test
    def body() -> Any:
        outputs = build()
        loop = asyncio.get_event_loop()
        for key, value in outputs.items():
            if isinstance(value, pulumi.Output):
                secret_tasks[key] = asyncio.ensure_future(value.is_secret(), loop=loop)
        return pulumi.Output.all(**outputs).apply(captured.update)

    body()
    captured["__secret__"] = {key: task.result() for key, task in secret_tasks.items()}
    return captured
