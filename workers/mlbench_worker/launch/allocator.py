"""The host memory allocator of a rank: keep the memory a step frees for the next step.

glibc's malloc gives the free top of its heap back to the kernel once more than its trim
threshold is free there, and serves blocks above its mmap threshold (which it moves as blocks
come and go) with fresh mappings. A training step frees its activations at its end, so with
those defaults a rank can fault every page of them back in on the next step, zero-filled by the
kernel: work a benchmark would then measure as its step. ``tuned`` (the spec's
``implementation.host_allocator`` default) fixes both thresholds once at start, so steady-state
steps reuse the heap; ``system`` leaves the C library's defaults. An allocator chosen in the
environment (``MALLOC_*_THRESHOLD_`` and the like, ``GLIBC_TUNABLES``, a preloaded jemalloc,
tcmalloc or mimalloc) is left alone either way. The fingerprint records what was done.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mlbench_worker.config import HOST_ALLOCATORS

MMAP_THRESHOLD = 32 * 2**20
"""Blocks up to this size come from the heap: glibc's largest mmap threshold on 64-bit systems."""
TRIM_THRESHOLD = 2**30
"""Free memory kept at the top of the heap before any goes back to the kernel."""

# mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# the settings of the same thresholds in the environment (an arena count is another matter)
_ENV_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_TUNABLES = ("trim_threshold", "mmap_threshold", "top_pad", "mmap_max")
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


@dataclass(frozen=True)
class AllocatorPlan:
    """What a rank does to its allocator: ``tune`` it (glibc only) or leave it, and why."""

    requested: str
    tune: bool
    reason: str

    def facts(self) -> dict[str, object]:
        """The fingerprint's entry: what was asked for, what was done and the thresholds set."""
        facts: dict[str, object] = {"requested": self.requested, "tuned": self.tune, "reason": self.reason}
        if self.tune:
            facts.update(mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD)
        return facts


def plan_allocator(requested: str, environ: Mapping[str, str], libc: str) -> AllocatorPlan:
    """Whether to tune the allocator of a process with ``environ`` whose C library is ``libc``
    (``libc_name()``: ``glibc``, or empty for another)."""
    if requested not in HOST_ALLOCATORS:
        raise ValueError(f"host_allocator must be one of {', '.join(HOST_ALLOCATORS)}, got {requested!r}")
    if requested == "system":
        return AllocatorPlan(requested, False, "the C library's defaults, as the spec asked")
    preload = environ.get("LD_PRELOAD", "")
    other = next((name for name in _OTHER_ALLOCATORS if name in preload), None)
    if other:
        return AllocatorPlan(requested, False, f"{other} is preloaded (LD_PRELOAD): left as configured")
    chosen = [name for name in _ENV_SETTINGS if name in environ]
    tunables = environ.get("GLIBC_TUNABLES", "")
    if any(f"glibc.malloc.{name}=" in tunables for name in _TUNABLES):
        chosen.append("GLIBC_TUNABLES")
    if chosen:
        where = ", ".join(chosen)
        return AllocatorPlan(requested, False, f"set in the environment ({where}): left as configured")
    if libc != "glibc":
        return AllocatorPlan(requested, False, f"not glibc ({libc or platform.system()}): nothing to tune")
    return AllocatorPlan(requested, True, "glibc: freed heap memory is kept for the next step")


def apply_plan(plan: AllocatorPlan) -> dict[str, object]:
    """Carry out ``plan`` in this process (``mallopt``); returns its fingerprint facts."""
    if plan.tune:
        try:
            libc = ctypes.CDLL(None)
            applied = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(
                _M_TRIM_THRESHOLD, TRIM_THRESHOLD
            )
        except (OSError, AttributeError):
            applied = 0
        if not applied:
            plan = replace(plan, tune=False, reason="mallopt refused")
    return plan.facts()


def libc_name() -> str:
    """``glibc`` when this process runs on glibc, else empty (musl, macOS, Windows)."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return ""
    return "glibc" if version and version.startswith("glibc") else ""


def tune_host_allocator(requested: str, environ: Mapping[str, str]) -> dict[str, object]:
    """Plan and apply ``requested`` for this process (a rank calls it once, before its model and
    data exist); returns what the fingerprint records."""
    return apply_plan(plan_allocator(requested, environ, libc_name()))
