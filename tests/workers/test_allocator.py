"""A rank's host allocator: freed step memory is reused, not faulted back in; the user's choice wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlbench_worker.launch.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD, libc_name, plan_allocator

WORKERS = Path(__file__).resolve().parents[2] / "workers"

# Ten steps that each take 40 MB from malloc in 4 MB blocks, write them and free them, as a
# step's activations come and go (torch's CPU tensors come from the same heap; malloc is called
# directly so nothing else lands on the heap in between); prints what the rank's tuning did and
# the page faults of the steady-state steps.
STEPS = """
import ctypes, json, os, resource, sys
from mlbench_worker.launch.allocator import tune_host_allocator
facts = tune_host_allocator(sys.argv[1], os.environ)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
SIZE = 4 * 2**20
def step():
    blocks = [libc.malloc(SIZE) for _ in range(10)]
    for block in blocks:
        ctypes.memset(block, 1, SIZE)
    for block in blocks:
        libc.free(block)
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(json.dumps({"facts": facts, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def run_steps(requested: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", STEPS, requested],
        env={**clean, "PYTHONPATH": str(WORKERS), **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    result: dict[str, object] = json.loads(out.splitlines()[-1])
    return result


KEPT = "glibc: freed heap memory is kept for the next step"
needs_glibc = pytest.mark.skipif(libc_name() != "glibc", reason="the tuning is glibc's mallopt")


@needs_glibc
def test_a_tuned_rank_reuses_the_memory_its_steps_free_instead_of_faulting_it_in_again() -> None:
    tuned = run_steps("tuned")
    assert tuned["facts"] == {
        "requested": "tuned",
        "tuned": True,
        "reason": KEPT,
        "mmap_threshold": MMAP_THRESHOLD,
        "trim_threshold": TRIM_THRESHOLD,
    }
    assert tuned["faults"] == 0
    # with the C library's defaults the same steps hand their 40 MB back and fault (nearly) all of it in again
    system = run_steps("system")
    assert system["facts"] == {
        "requested": "system",
        "tuned": False,
        "reason": "the C library's defaults, as the spec asked",
    }
    assert isinstance(system["faults"], int) and system["faults"] >= 0.9 * 10 * 40 * 2**20 / 4096


@needs_glibc
def test_thresholds_set_in_the_environment_are_left_as_the_user_set_them() -> None:
    kept = run_steps("tuned", MALLOC_TRIM_THRESHOLD_="65536")
    assert kept["facts"] == {
        "requested": "tuned",
        "tuned": False,
        "reason": "set in the environment (MALLOC_TRIM_THRESHOLD_): left as configured",
    }
    assert isinstance(kept["faults"], int) and kept["faults"] > 0  # the user's small threshold holds


@pytest.mark.parametrize(
    ("environ", "libc", "reason"),
    [
        ({}, "glibc", KEPT),
        ({"MALLOC_ARENA_MAX": "2"}, "glibc", KEPT),
        (
            {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096:glibc.malloc.arena_max=2"},
            "glibc",
            "set in the environment (GLIBC_TUNABLES): left as configured",
        ),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "glibc", KEPT),
        (
            {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
            "glibc",
            "jemalloc is preloaded (LD_PRELOAD): left as configured",
        ),
        (
            {"MALLOC_MMAP_THRESHOLD_": "1", "MALLOC_TOP_PAD_": "0"},
            "glibc",
            "set in the environment (MALLOC_MMAP_THRESHOLD_, MALLOC_TOP_PAD_): left as configured",
        ),
    ],
)
def test_the_plan_tunes_glibc_unless_the_environment_chose_the_allocator(
    environ: dict[str, str], libc: str, reason: str
) -> None:
    plan = plan_allocator("tuned", environ, libc)
    assert plan.reason == reason
    assert plan.tune is reason.startswith("glibc:")


def test_other_c_libraries_and_unknown_choices() -> None:
    assert not plan_allocator("tuned", {}, "").tune
    assert plan_allocator("tuned", {}, "").reason.startswith("not glibc")
    with pytest.raises(ValueError, match="host_allocator must be one of tuned, system, got 'jemalloc'"):
        plan_allocator("jemalloc", {}, "glibc")
