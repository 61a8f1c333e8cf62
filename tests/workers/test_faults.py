"""``MLBENCH_INJECT_FAULT``: which rank fails where, and how (raise, or hang like a stuck rank)."""

from __future__ import annotations

import pytest
from mlbench_worker.faults import _parse


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        (None, None),
        ("rank=1,step=3", (1, 3, "raise")),
        ("rank=0,step=2,mode=hang", (0, 2, "hang")),
    ],
)
def test_fault_specs(spec: str | None, fault: tuple[int, int, str] | None) -> None:
    assert _parse(spec) == fault


@pytest.mark.parametrize(
    ("spec", "words"), [("rank=x", "integers"), ("rank=1,mode=explode", "'raise' or 'hang'")]
)
def test_bad_fault_specs(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        _parse(spec)
