"""``MLBENCH_INJECT_FAULT``: which rank fails where, and how (raise, or hang like a stuck rank)."""

from __future__ import annotations

import pytest
from mlbench_worker.faults import Fault, parse_fault


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        (None, None),
        ("rank=1,step=3", Fault(1, 3, "raise")),
        ("rank=0,step=2,mode=hang", Fault(0, 2, "hang")),
        ("rank=0,step=exit,mode=hang", Fault(0, None, "hang")),
    ],
)
def test_fault_specs(spec: str | None, fault: Fault | None) -> None:
    assert parse_fault(spec) == fault


@pytest.mark.parametrize(
    ("spec", "words"), [("rank=x", "integers"), ("rank=1,mode=explode", "'raise' or 'hang'")]
)
def test_bad_fault_specs(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_fault(spec)
