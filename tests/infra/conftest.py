"""Fixtures for the infra tests: Pulumi's official mocks, and the repo root on sys.path.

``infra/`` (the Pulumi programs) is not an installed package, so the repo root is put on the
import path for these tests, as ``pulumi up`` does through the stacks' ``__main__.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.infra.mocks import RecordingMocks  # noqa: E402


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
