"""The GPU catalog: a spec names a known model (typos answered with a hint), may opt out of the
model check, and the plan hands both to the ranks."""

from __future__ import annotations

import pytest

from mlbench_tui.clusters.prices import price_table
from mlbench_tui.clusters.providers import parse_gpu
from mlbench_tui.errors import SpecError, UsageError
from mlbench_tui.plan import RunPlan, expand, worker_config
from mlbench_tui.spec.gpus import GPU_MODELS, canonical_gpu_model, suggest_gpu_model
from mlbench_tui.spec.loader import load_text

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: g
spec:
  task: 1a
  backend: nccl
  hardware:
    gpu: {gpu}
"""


def test_the_catalog_covers_every_gpu_the_clouds_offer() -> None:
    table = price_table()
    offered = {model for cloud in ("gcp", "aws") for model in table[cloud]["gpus"]}
    offered |= {m["gpu"] for cloud in ("gcp", "aws") for m in table[cloud]["machines"].values() if "gpu" in m}
    assert offered <= set(GPU_MODELS)


@pytest.mark.parametrize(
    ("typed", "canonical", "suggestion"),
    [
        ("H100", "H100", "H100"),
        ("h100", "H100", "H100"),
        ("a100_80gb", "A100-80GB", "A100-80GB"),
        ("nvidia-tesla-t4", "T4", "T4"),
        ("H1OO", None, "H100"),  # letter O for zero
        ("V1OO", None, "V100"),
        ("HI00", None, "H100"),
        ("A10", None, "A10G"),
        ("RTX-9090", None, None),
    ],
)
def test_model_names_are_canonicalised_or_answered_with_a_suggestion(
    typed: str, canonical: str | None, suggestion: str | None
) -> None:
    assert canonical_gpu_model(typed) == canonical
    assert suggest_gpu_model(typed) == suggestion


def _load(gpu: str) -> list[RunPlan]:
    (loaded,) = load_text(SPEC.format(gpu=gpu), "g.yaml")
    return expand(loaded.spec)


def test_a_mistyped_model_fails_validation_at_its_line_with_a_hint() -> None:
    with pytest.raises(SpecError) as info:
        _load("1xH1OO")
    (issue,) = info.value.issues
    assert (issue.file, issue.line, issue.col) == ("g.yaml", 9, 10)
    assert "unknown GPU model 'H1OO'" in issue.message and "H100" in issue.message
    assert issue.hint == "did you mean 'H100'?"


def test_model_check_is_on_by_default_and_can_be_turned_off() -> None:
    (plan,) = _load("2xh100")
    assert (plan.resources.gpus, plan.resources.gpu_type, plan.resources.gpu_type_strict) == (2, "H100", True)
    config = worker_config(plan, "r")
    assert (config["device"], config["gpu_type"], config["gpu_type_strict"]) == ("cuda", "H100", True)
    (lax,) = _load("{count: 1, type: A100, strict: false}")
    assert worker_config(lax, "r")["gpu_type_strict"] is False
    (any_gpu,) = _load("1")
    assert worker_config(any_gpu, "r")["gpu_type"] is None


def test_cluster_gpu_flag_uses_the_same_catalog() -> None:
    assert str(parse_gpu("8xa100-80gb")) == "8xA100-80GB"
    with pytest.raises(UsageError) as info:
        parse_gpu("1xH1OO")
    assert info.value.hint is not None and "did you mean 'H100'?" in info.value.hint
