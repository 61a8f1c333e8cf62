"""Fixtures for the Pulumi program tests (``infra/mlbench_infra``): Pulumi's mocks, fresh per test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from support.pulumi_mocks import RecordingMocks


@pytest.fixture
def pulumi_mocks() -> Iterator[RecordingMocks]:
    """Install fresh Pulumi mocks (real engine-side behaviour, no cloud calls) for one test, on an
    event loop of its own: Pulumi's resources take the thread's current loop, and a test that ran
    ``asyncio.run`` before leaves the main thread without one."""
    import pulumi

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    recorder = RecordingMocks()

    class _Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
            return recorder.new_resource(args)

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
            return recorder.call(args), []

    pulumi.runtime.set_mocks(_Mocks(), project="mlbench-test", stack="unit", preview=False)
    yield recorder
    asyncio.set_event_loop(None)
    loop.close()
