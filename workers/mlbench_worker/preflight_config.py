"""A run's pre-flight, as the plan hands it to the ranks: what a failed check does and what each
probe should measure on each machine class, and the rule that names a rank's machine class (the
engine's reference rows use the same). Standard library only, a contract module like ``wire``,
whose worker config carries it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

OnFailure = Literal["stop", "warn"]
ON_FAILURE: tuple[str, ...] = get_args(OnFailure)


@dataclass(frozen=True)
class Expectation:
    """What a pre-flight probe should measure on one machine class (a GPU model, or ``cpu: MODEL
    xN``): the expected value and the band (a fraction of it) a healthy machine stays within."""

    machine: str  # "*": the spec's own limit, for any machine
    figure: str  # PROBE_ALLREDUCE or PROBE_GEMM
    value: float
    band: float | None = None
    source: str = ""
    limit: bool = False  # a hard limit: any figure worse than it fails


def machine_matches(device_name: str, model: str) -> bool:
    """Whether ``device_name`` is of GPU ``model`` (the ranks' pre-flight and the engine's
    reference rows share the rule): every word of the model is a word of the
    name (``NVIDIA H100 80GB HBM3`` is an ``H100``; an ``L40S`` is not an ``L4``)."""
    words = set(re.split(r"[\s_-]+", device_name.upper()))
    return set(re.split(r"[\s_-]+", model.upper())) <= words


def device_class(device_name: str, models: Iterable[str]) -> str | None:
    """The most specific of ``models`` that ``device_name`` is (``A100-80GB`` over ``A100``)."""
    fits = [m for m in models if machine_matches(device_name, m)]
    return max(fits, key=len) if fits else None


@dataclass(frozen=True)
class PreflightConfig:
    """The checks a rank runs before training, and what a failed one does: ``stop`` the run with
    its reason, or ``warn`` and train anyway. ``expectations``: the probes' expected values per
    machine class (the reference table's rows, and the spec's own limits first)."""

    on_failure: OnFailure = "stop"
    expectations: tuple[Expectation, ...] = ()
