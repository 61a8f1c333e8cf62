"""The variables a run's env may set that the ranks read, parsed by the one parser the spec's checks
use too; and a rank's code-loading variables, set by the rank starting itself again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlbench_worker.env_settings import (
    Fault,
    parse_collective_timeout,
    parse_data_dir,
    parse_fault,
    parse_thread_count,
)
from mlbench_worker.rank_env import RANK_ENV_APPLIED


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("rnak=1", "'rnak=1' is not one of"),
        ("rank=1,step", "'step' is not one of"),
        ("rank=1,rank=2", "rank is given twice"),
        ("rank=-1", "count from 0"),
        ("rank=0,step=-3", "count from 0"),
        ("rank=0,factor=3", "factor is for mode=slow only"),
        ("rank=0,mode=slow,factor=nan", "above 1 and at most 100"),
        ("rank=0,mode=slow,factor=1000", "above 1 and at most 100"),
    ],
)
def test_a_fault_the_ranks_would_ignore_or_misread_is_refused(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_fault(text)


def test_faults_as_documented() -> None:
    assert parse_fault(" rank=2 , step=exit , mode=hang ") == Fault(2, None, "hang")
    assert parse_fault("mode=slow") == Fault(0, 0, "slow", 2.0)


@pytest.mark.parametrize("text", ["nan", "inf", "-5", "0", "1e9", "soon", "0.5"])
def test_collective_timeouts_out_of_range_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="MLBENCH_COLLECTIVE_TIMEOUT_S"):
        parse_collective_timeout(text)


def test_collective_timeout_and_data_dir_and_threads_as_the_ranks_read_them() -> None:
    assert parse_collective_timeout(None) == 1800.0 and parse_collective_timeout("90") == 90.0
    assert parse_data_dir("/data/cache") == "/data/cache" and parse_data_dir(None) is None
    with pytest.raises(ValueError, match="relative"):
        parse_data_dir("cache")
    assert parse_thread_count("4") == 4
    for bad in ("0", "lots", "99999"):
        with pytest.raises(ValueError, match="thread count"):
            parse_thread_count(bad)


def test_a_rank_starts_again_with_its_code_loading_variables(tmp_path: Path) -> None:
    """``restart_with_rank_env`` replaces the process (same pid) by ``python -m mlbench_worker``
    with the variables set: a ``sitecustomize`` on the new PYTHONPATH records what it started
    with; the worker then fails on the missing config, as it would have without them."""
    site = tmp_path / "site"
    site.mkdir()
    record = tmp_path / "record.txt"
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"with open({str(record)!r}, 'a') as f:\n"
        "    f.write(f\"{os.getpid()} {os.environ.get('MARK')} {os.environ.get('"
        + RANK_ENV_APPLIED
        + "')} {' '.join(sys.argv)}\\n\")\n"
    )
    code = (
        "import os; from mlbench_worker.__main__ import restart_with_rank_env\n"
        "print(os.getpid(), flush=True)\n"
        f"restart_with_rank_env({{'PYTHONPATH': {str(site)!r}, 'MARK': 'x'}}, '/nonexistent/config.json')"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", RANK_ENV_APPLIED)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "cannot read worker config" in done.stderr
    pid = done.stdout.split()[0]
    (line,) = record.read_text().splitlines()  # the first process never loaded it
    assert line.split()[:3] == [pid, "x", "1"] and line.endswith("-m --config /nonexistent/config.json")
    again = {**env, RANK_ENV_APPLIED: "1"}
    done = subprocess.run([sys.executable, "-c", code], env=again, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and len(record.read_text().splitlines()) == 1  # applied once, not again
