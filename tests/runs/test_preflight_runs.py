"""The pre-flight on real gloo ranks: it runs before training, its outcome is stored with the run
and shown beside the result; a failed check stops the run before training (every rank, with the
reason) or, with ``on_failure: warn``, is reported while the run trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.smoke import mlbench

pytestmark = pytest.mark.slow

DOC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: {name}}}
spec:
  task: 2a
  goal: light
  workers: {workers}
  backend: gloo
  data: {{source: synthetic, options: {{train_samples: 1024, val_samples: 128}}}}
  hyperparameters: {{max_epochs: 1}}
  preflight: {preflight}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    home = tmp_path_factory.mktemp("preflight")
    spec = home / "preflight.yaml"
    docs = [
        # limits of its own that any machine meets under any load (the reference rows' bands are a
        # few percent: a busy machine's probe would warn; tests/workers/test_preflight.py judges)
        DOC.format(name="pf-on", workers=1, preflight="{min_gemm_tflops: 1.0e-9, max_allreduce_us: 1.0e+9}"),
        DOC.format(name="pf-stop", workers=2, preflight="{min_gemm_tflops: 100000}"),
        DOC.format(
            name="pf-warn", workers=1, preflight="{on_failure: warn, max_allreduce_us: 0.001, enabled: true}"
        ),
        DOC.format(name="pf-off", workers=1, preflight="auto"),  # a CPU run: auto is off
    ]
    spec.write_text("---\n".join(docs))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLBENCH_HOME", str(home))
        applied = mlbench("apply", "-q", str(spec), timeout=600)
        assert applied.returncode == 1, applied.stderr  # pf-stop failed, as it should
        listed = json.loads(mlbench("results", str(spec), "-o", "json").stdout)["runs"]
        status = {r["name"]: mlbench("status", r["name"]).stdout for r in listed}
    return {r["name"]: {**r, "status": status[r["name"]]} for r in listed}


def test_a_passing_pre_flight_is_stored_and_shown_beside_the_result(
    runs: dict[str, dict[str, object]],
) -> None:
    run = runs["pf-on-gloo-1w"]
    assert run["state"] == "succeeded"
    pf = run["preflight"]
    assert isinstance(pf, dict) and pf["status"] == "passed" and not pf["stopped"] and pf["ranks"] == 1
    assert pf["gemm_tflops"] > 0 and pf["allreduce_us"] > 0
    assert {c["name"] for c in pf["checks"]} == {"gemm_tflops", "preflight_allreduce_us"}  # no GPU: no NVML
    status = str(run["status"])
    assert "preflight: passed on 1 rank in " in status and "gemm_tflops: " in status
    assert "preflight" in run["startup"]["phases"]  # its seconds are part of the start, not of training
    assert runs["pf-off-gloo-1w"]["preflight"] is None


def test_a_failed_pre_flight_stops_every_rank_before_training(runs: dict[str, dict[str, object]]) -> None:
    run = runs["pf-stop-gloo-2w"]
    assert run["state"] == "failed"
    assert "pre-flight failed: rank 0: gemm_tflops:" in str(run["message"])
    assert "limit 1e+05 TFLOP/s (the spec's limit)" in str(run["message"])
    pf = run["preflight"]
    assert isinstance(pf, dict) and pf["status"] == "failed" and pf["stopped"] and pf["ranks"] == 2
    assert run["steps_to_goal"] is None and run["step_time"] is None  # it never trained
    assert "the run stopped before training" in str(run["status"])


def test_a_failed_pre_flight_with_warn_trains_and_says_so(runs: dict[str, dict[str, object]]) -> None:
    run = runs["pf-warn-gloo-1w"]
    assert run["state"] == "succeeded" and run["reached"] is True
    pf = run["preflight"]
    assert isinstance(pf, dict) and pf["status"] == "failed" and not pf["stopped"]
    status = str(run["status"])
    assert "! failed (on_failure: warn: the run trained anyway)" in status
    assert "preflight_allreduce_us fail (rank 0)" in status


def test_bad_preflight_settings_are_refused_at_their_line(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(DOC.format(name="pf-bad", workers=1, preflight="sometimes"))
    checked = mlbench("validate", str(spec))
    assert checked.returncode != 0
    assert "bad.yaml:11:14: spec.preflight: preflight must be 'auto', 'on', 'off', 'warn'" in checked.stderr
