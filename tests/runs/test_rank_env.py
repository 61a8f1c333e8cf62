"""A spec's code-loading variables (``env_loading_code``) reach the ranks and never their launcher:
a real two-rank gloo run through ``mlbench apply`` with ``PYTHONPATH`` opted in, whose
``sitecustomize`` records every Python process that imports it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.smoke import apply_one

pytestmark = pytest.mark.slow

SITE = """\
import os, sys
seen = (os.environ.get("RANK"), os.environ.get("MLBENCH_RANK_ENV_APPLIED"), *sys.argv)
with open({record!r}, "a") as f:
    f.write(" ".join(str(part) for part in seen) + "\\n")
"""

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: preload}}
spec:
  task: 2a
  goal: light
  max_time: 3m
  workers: 2
  backend: gloo
  data: {{source: synthetic, options: {{train_samples: 512, val_samples: 128}}}}
  hyperparameters: {{max_epochs: 1}}
  env: {{PYTHONPATH: {site}}}
  env_loading_code: [PYTHONPATH]
"""


def test_pythonpath_opted_in_loads_into_each_rank_and_not_into_torchrun_or_the_shim(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    record = tmp_path / "loaded.txt"
    (site / "sitecustomize.py").write_text(SITE.format(record=str(record)))
    run = apply_one(tmp_path, SPEC.format(site=site), timeout=240)
    assert run["state"] == "succeeded"
    lines = sorted(record.read_text().splitlines())
    # only the two ranks, each after it started again with the variable (argv: -m --config FILE)
    assert [line.split()[:2] for line in lines] == [["0", "1"], ["1", "1"]], lines
    assert all(line.split()[2:4] == ["-m", "--config"] for line in lines), lines
