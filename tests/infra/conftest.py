"""Fixtures for the infra tests: Pulumi's official mocks, installed fresh for each test."""

from __future__ import annotations

from typing import Any

import pytest
from support.pulumi_mocks import RecordingMocks


@pytest.fixture
def pulumi_mocks() -> RecordingMocks:
    """Install fresh Pulumi mocks (real engine-side behaviour, no cloud calls) for one test."""
    import pulumi

    recorder = RecordingMocks()

    class _Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
            return recorder.new_resource(args)

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
            return recorder.call(args), []

    pulumi.runtime.set_mocks(_Mocks(), project="mlbench-test", stack="unit", preview=False)
    return recorder
