"""``MLBENCH_INJECT_FAULT``: which rank fails where, and how (raise, or hang like a stuck rank)."""

from __future__ import annotations

import time

import pytest
from mlbench_worker.faults import Fault, parse_fault, slowed


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        (None, None),
        ("rank=1,step=3", Fault(1, 3, "raise")),
        ("rank=0,step=2,mode=hang", Fault(0, 2, "hang")),
        ("rank=0,step=exit,mode=hang", Fault(0, None, "hang")),
        ("rank=1,mode=slow,factor=2", Fault(1, 0, "slow", 2.0)),
        ("rank=3,mode=slow", Fault(3, 0, "slow", 2.0)),
    ],
)
def test_fault_specs(spec: str | None, fault: Fault | None) -> None:
    assert parse_fault(spec) == fault


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("rank=x", "integers"),
        ("rank=1,mode=explode", "'raise', 'hang' or 'slow'"),
        ("rank=1,mode=slow,factor=fast", "a number as factor"),
        ("rank=1,mode=slow,factor=0.5", "above 1"),
    ],
)
def test_bad_fault_specs(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_fault(spec)


def test_a_slowed_phase_takes_factor_times_as_long_and_the_others_are_untouched() -> None:
    """The sleep follows what the phase itself took (measured around it), so the phase ends no
    sooner than ``factor`` times its own time, whatever the machine's speed; other phases run
    as they are."""
    took: dict[str, float] = {}

    def busy(step: list[str]) -> None:
        started = time.perf_counter()
        while time.perf_counter() - started < 0.002:
            pass
        step.append("fwd")

    def agg(step: list[str]) -> None:
        step.append("agg")

    phases = slowed([("fwd_pass", busy), ("agg", agg)], 3.0, frozenset({"fwd_pass"}))
    assert phases[1][1] is agg
    seen: list[str] = []
    for name, run in phases:
        started = time.perf_counter()
        run(seen)
        took[name] = time.perf_counter() - started
    assert seen == ["fwd", "agg"]
    assert took["fwd_pass"] >= 3 * 0.002
