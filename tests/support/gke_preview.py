"""Preview the GKE program ``mlbench cluster create gcp`` runs, under Pulumi's official mocks.

tests/test_packaging.py copies this script out of the checkout and runs it with the interpreter
of a fresh virtual environment holding only the built wheel: the program comes from the provider
exactly as the Automation API gets it, with the stack config the provider writes. It prints the
files the provider and the program were imported from and every resource the program registered,
as one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pulumi

from mlbench_tui.clusters import automation
from mlbench_tui.clusters.providers import ClusterRequest, GpuSpec

resources: list[dict[str, Any]] = []


class Mocks(pulumi.runtime.Mocks):
    """Echo each resource's inputs as its outputs and record it."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        resources.append({"type": args.typ, "name": args.name, "inputs": args.inputs})
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        return {}, []


def main() -> None:
    provider = automation.GcpProvider()
    request = ClusterRequest("gcp", "wheel", nodes=2, gpu=GpuSpec(1, "T4"), spot=True, project="proj-wheel")
    config = provider.stack_config(request, provider.shape(request))
    pulumi.runtime.set_mocks(Mocks(), project=provider.project, stack=request.name, preview=True)
    # The Automation API namespaces a project's own keys with the project name, as here.
    pulumi.runtime.set_all_config(
        {key if ":" in key else f"{provider.project}:{key}": value for key, value in config.items()}
    )
    program = provider.program()
    pulumi.runtime.test(program)()
    found = {
        "automation": automation.__file__,
        "program": sys.modules[program.__module__].__file__,
        "resources": resources,
    }
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main()
