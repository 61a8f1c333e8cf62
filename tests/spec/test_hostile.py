"""What the spec gate accepts under hostile input, and what it passes on: merges resolved, the core
schema's tags typed, look-alikes and invisible characters told apart from text people write,
code-loading variables kept for the ranks, typed data options, the run cap and its flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlbench_worker.config import parse_config
from mlbench_worker.data.options import Cifar10Synthetic, TransformerSynthetic

from mlbench_tui.cli import main
from mlbench_tui.plan import expand, plan_warnings, worker_config
from mlbench_tui.spec.characters import forbidden_character, foreign_letters, skeleton
from mlbench_tui.spec.loader import collect_text, load_text
from mlbench_tui.spec.models import BenchmarkSpec

BAD = Path(__file__).resolve().parents[1] / "fixtures" / "bad_specs"
HEAD = "apiVersion: mlbench/v1\nkind: Benchmark\n"


def _one(text: str) -> BenchmarkSpec:
    (loaded,) = load_text(HEAD + text, "s.yaml", environ={})
    return loaded.spec


def test_merge_keys_are_resolved_and_explicit_keys_win() -> None:
    spec = _one(
        "metadata: {name: merged, labels: &team {team: ml, site: a}}\n"
        "spec:\n"
        "  <<: {task: 1a, data: synthetic}\n"
        "  workers: 2\n"
        "  env: {<<: [*team], site: b}\n"
    )
    body = spec.spec
    assert (body.task, body.workers, body.data.source) == ("1a", [2], "synthetic")
    assert body.env == {"team": "ml", "site": "b"}


def test_core_schema_tags_type_their_values_and_timestamps_stay_as_written() -> None:
    spec = _one(
        "metadata: {name: tags, description: 2024-1-1}\n"
        "spec:\n"
        '  task: !!str 1a\n  data: synthetic\n  seed: !!int "7"\n  price_per_hour: !!float 3\n'
        "  env: !!map {A: !!str 5}\n"
    )
    assert spec.metadata.description == "2024-1-1"
    body = spec.spec
    assert (body.seed, body.price_per_hour, body.env) == (7, 3.0, {"A": "5"})


def test_forbidden_characters_are_named_and_tab_and_newline_are_text() -> None:
    assert forbidden_character("two\tcolumns\nand lines") is None
    assert forbidden_character("café, Zürich, 東京") is None
    assert "U+0007" in (forbidden_character("bell\a") or "")
    assert "RIGHT-TO-LEFT OVERRIDE" in (forbidden_character("a\u202eb") or "")
    assert "ZERO WIDTH SPACE" in (forbidden_character("a\u200bb") or "")
    assert "HANGUL FILLER" in (forbidden_character("\u3164") or "")


def test_look_alikes_are_named_and_text_in_another_script_is_not() -> None:
    assert "U+0430 CYRILLIC SMALL LETTER A" in (foreign_letters("tаsk", whole=True) or "")
    assert skeleton("tаsk") == "task" and skeleton("ｓynthetic") == "synthetic"
    assert foreign_letters("Тест на ГПУ", whole=False) is None  # a Russian description
    assert foreign_letters("glοo", whole=False) is not None  # Latin and Greek in one word
    spec = _one("metadata: {name: ru, description: Тест на ГПУ}\nspec: {task: 1a, data: synthetic}\n")
    assert spec.metadata.description == "Тест на ГПУ"


def test_code_loading_variables_opted_in_reach_the_ranks_only() -> None:
    spec = _one(
        "metadata: {name: jemalloc}\n"
        "spec:\n  task: 1a\n  data: synthetic\n"
        "  env: {LD_PRELOAD: /usr/lib/libjemalloc.so.2, OMP_PROC_BIND: close}\n"
        "  env_loading_code: [LD_PRELOAD]\n"
    )
    (plan,) = expand(spec)
    assert "LD_PRELOAD" not in plan.env and plan.env["OMP_PROC_BIND"] == "close"
    assert plan.rank_env == {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}
    config = parse_config(json.loads(json.dumps(worker_config(plan, "r-1"))))
    assert config.rank_env == plan.rank_env
    assert "rank_env" not in expand(_one("metadata: {name: plain}\nspec: {task: 1a}\n"))[0].model_dump()


def test_data_options_reach_the_rank_typed() -> None:
    spec = _one(
        "metadata: {name: typed}\nspec:\n  task: 4b\n"
        "  data: {source: synthetic, options: {train_samples: 64, d_model: 32, heads: 4}}\n"
    )
    (plan,) = expand(spec)
    assert plan.data.options == {
        "train_samples": 64,
        "d_model": 32,
        "heads": 4,
    }  # the plan records as written
    config = parse_config(json.loads(json.dumps(worker_config(plan, "r-1"))))
    assert config.data.options == TransformerSynthetic(train_samples=64, d_model=32, heads=4)
    one_a = expand(_one("metadata: {name: a}\nspec: {task: 1a, data: synthetic}\n"))[0]
    assert parse_config(worker_config(one_a, "r-2")).data.options == Cifar10Synthetic()


def test_every_value_validate_accepts_plans_and_reaches_the_ranks_parser() -> None:
    """The largest values each task takes, at the largest world size: the plan's arithmetic and the
    rank's parser accept them (they are what validate checks after scaling)."""
    for task, hps in (("1a", "{lr: 200, batch_size: 1048576}"), ("2a", "{lr: 4}"), ("3a", "{lr: 30}")):
        spec = _one(
            f"metadata: {{name: big-{task}}}\nspec: {{task: {task}, workers: 4096, hyperparameters: {hps}}}\n"
        )
        (plan,) = expand(spec)
        parse_config(json.loads(json.dumps(worker_config(plan, "r"))))
    _, issues = collect_text(
        HEAD + "metadata: {name: x}\nspec: {task: 1a, workers: 4096, hyperparameters: {lr: 300}}\n"
    )
    assert [i.message.split(":")[0] for i in issues] == ["spec.hyperparameters.lr"]


def test_plan_warns_when_local_ranks_exceed_the_cores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _one("metadata: {name: crowd}\nspec: {task: 0a, workers: [1, 64], hardware: {cpu: 2}}\n")
    plans = expand(spec)
    (warning,) = plan_warnings(plans, cpu_count=4)
    assert warning.startswith("run crowd-gloo-64w starts 64 local rank(s) x 2 thread(s) on 4 core(s)")
    assert plan_warnings(plans, cpu_count=128) == []
    path = tmp_path / "crowd.yaml"
    path.write_text(HEAD + "metadata: {name: crowd}\nspec: {task: 0a, workers: 4096}\n")
    assert main(["plan", str(path)]) == 0
    assert "warning: run crowd-gloo-4096w starts 4096 local rank(s)" in capsys.readouterr().err


def test_the_run_cap_names_the_count_and_the_flag_raises_it(capsys: pytest.CaptureFixture[str]) -> None:
    huge = str(BAD / "82-run-cap.yaml")
    assert main(["validate", huge]) == 2
    err = capsys.readouterr().err
    assert "784,000 runs, more than the 1,000 one apply takes" in err and "--max-runs 784000" in err
    assert main(["validate", "--max-runs", "784000", huge]) == 0
    assert "784000 run(s)" in capsys.readouterr().out
    assert main(["plan", "--max-runs", "999", huge]) == 2
    assert main(["apply", "--dry-run", huge]) == 2


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_what_validate_refuses_plan_and_a_dry_run_refuse(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["validate"], ["plan"], ["apply", "--dry-run"]):
        assert main([*argv, str(path)]) == 2, argv
        err = capsys.readouterr().err
        assert f"{path}:" in err and "Traceback" not in err
