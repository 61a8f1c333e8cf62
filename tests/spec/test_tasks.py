"""The official catalog matches MLBench's task descriptions and the worker contract's key names."""

from __future__ import annotations

import pytest
from mlbench_worker.hyperparams import AllReduce, ResNet20

from mlbench_tui.spec.loader import load_text
from mlbench_tui.spec.tasks import TASKS, default_charts, get_task, sweep_of
from mlbench_tui.spec.templates import spec_template

# The keys the worker tasks read (the shared contract in HELPERS.md); derived keys such as
# base_lr are added by the planner.
CONTRACT_KEYS = {
    "0a": {"sizes_min_exp", "sizes_max_exp", "num_sizes", "repetitions", "warmup", "dtypes"},
    "1a": {
        "batch_size", "max_epochs", "lr", "warmup_epochs", "plateau_patience", "plateau_factor", "momentum",
        "nesterov", "weight_decay", "optimizer", "aggregation", "channels_last",
    },
    "1b": {
        "batch_size", "opt_name", "lr", "warmup_epochs", "max_epochs", "weight_decay", "label_smoothing",
        "momentum", "end_lr", "poly_power", "lars_eta", "lars_epsilon", "optimizer", "channels_last",
        "image_size", "eval_resize", "num_classes",
    },
    "2a": {"batch_size", "max_epochs", "lr", "plateau_patience", "plateau_factor", "l2", "optimizer"},
    "3a": {
        "batch_size", "bptt", "lr", "warmup_epochs", "weight_decay", "clip", "nonmono", "alpha", "beta",
        "max_epochs", "emb_size", "hidden_size", "num_layers", "dropout", "dropouth", "dropouti", "dropoute",
        "wdrop",
    },
    "4a": {
        "global_batch_size", "lr", "adam_betas", "adam_eps", "warmup_steps", "decay_start", "decay_interval",
        "decay_steps", "decay_factor", "label_smoothing", "clip", "loss_scale_init", "loss_scale_factor",
        "loss_scale_max", "loss_scale_window", "max_epochs", "max_len_train", "max_len_test", "beam_size",
        "update_freq",
    },
    "4b": {
        "global_batch_tokens", "lr", "adam_betas", "adam_eps", "warmup_steps", "label_smoothing",
        "loss_scale_init", "loss_scale_factor", "loss_scale_window", "max_epochs", "max_len", "beam_size",
    },
}  # fmt: skip


def test_ids_and_names() -> None:
    assert [(t.id, t.name) for t in TASKS.values()] == [
        ("0a", "allreduce"),
        ("1a", "resnet20-cifar10"),
        ("1b", "resnet50-imagenet"),
        ("2a", "logreg-epsilon"),
        ("3a", "awd-lstm-wikitext2"),
        ("4a", "gnmt-wmt16"),
        ("4b", "transformer-wmt17"),
    ]
    assert (
        get_task("1A") is TASKS["1a"] and get_task("gnmt-wmt16") is TASKS["4a"] and get_task("nope") is None
    )


@pytest.mark.parametrize("task_id", list(TASKS))
def test_defaults_use_the_contract_keys(task_id: str) -> None:
    task = TASKS[task_id]
    assert CONTRACT_KEYS[task_id] <= set(task.defaults)
    assert task.overridable <= set(task.defaults)
    assert set(task.choices) <= task.overridable


def test_goals_match_mlbench() -> None:
    goals = {
        t.id: (t.goal.metric, t.goal.direction, t.goal.full, t.goal.light) for t in TASKS.values() if t.goal
    }
    assert goals == {
        "1a": ("val_global_Prec@1", "max", 80, 70),
        "1b": ("val_global_Prec@1", "max", 75.9, 50),  # MLPerf Training's target; light: synthetic reaches it
        "2a": ("val_global_Prec@1", "max", 89, 80),
        "3a": ("val_global_Perplexity", "min", 70, 90),
        "4a": ("val_global_BLEU-Score", "max", 24, 20),
        "4b": ("val_global_BLEU-Score", "max", 25, 20),
    }
    assert TASKS["0a"].goal is None


def test_reference_hyperparameters() -> None:
    d = {k: dict(t.defaults) for k, t in TASKS.items()}
    assert (d["0a"]["sizes_min_exp"], d["0a"]["sizes_max_exp"], d["0a"]["num_sizes"]) == (0, 8, 80)
    assert d["0a"]["repetitions"] == 100 and d["0a"]["dtypes"] == ["fp32", "fp16"]
    assert (d["1a"]["batch_size"], d["1a"]["max_epochs"], d["1a"]["lr"]) == (128, 164, 0.02)
    assert (d["1a"]["momentum"], d["1a"]["nesterov"], d["1a"]["weight_decay"]) == (0.9, True, 1e-4)
    assert (d["1a"]["plateau_patience"], d["1a"]["plateau_factor"]) == (2, 0.5)
    assert (d["2a"]["lr"], d["2a"]["l2"], d["2a"]["batch_size"]) == (4, 2.5e-6, 128)
    assert (d["3a"]["batch_size"], d["3a"]["bptt"], d["3a"]["lr"], d["3a"]["clip"]) == (80, 70, 30, 0.25)
    assert (d["3a"]["weight_decay"], d["3a"]["nonmono"], d["3a"]["max_epochs"]) == (1.2e-6, 5, 750)
    assert (d["4a"]["global_batch_size"], d["4a"]["lr"], d["4a"]["warmup_steps"]) == (2048, 2e-3, 200)
    assert (d["4a"]["loss_scale_init"], d["4a"]["loss_scale_max"], d["4a"]["loss_scale_window"]) == (
        1024,
        8192,
        128,
    )
    assert (d["4a"]["adam_betas"], d["4a"]["clip"], d["4a"]["max_epochs"]) == ([0.9, 0.999], 5.0, 8)
    assert (d["4b"]["global_batch_tokens"], d["4b"]["lr"], d["4b"]["warmup_steps"]) == (2**17, 1.976e-3, 1000)
    assert (d["4b"]["adam_betas"], d["4b"]["adam_eps"], d["4b"]["loss_scale_init"]) == (
        [0.9, 0.98],
        1e-9,
        128,
    )
    assert TASKS["1a"].lr_linearly_scaled and TASKS["2a"].lr_linearly_scaled
    assert not TASKS["4a"].lr_linearly_scaled and TASKS["3a"].lr_scaling == "sqrt"


# MLPerf's rules let these change within a constraint the task checks (1b: weight decay 1e-4 x 2^N,
# label smoothing 0 or 0.1); see tests/workers/test_hyperparams.py.
MLPERF_TUNABLE = {"1b": {"weight_decay", "label_smoothing"}}


def test_only_batch_size_and_lr_schedule_are_overridable_for_training_tasks() -> None:
    for task in TASKS.values():
        if task.id == "0a":
            continue
        assert not (task.overridable - MLPERF_TUNABLE.get(task.id, set())) & {
            "momentum",
            "weight_decay",
            "l2",
            "label_smoothing",
            "clip",
            "beam_size",
        }


@pytest.mark.parametrize("task_id", list(TASKS))
def test_init_template_validates(task_id: str) -> None:
    text = spec_template(TASKS[task_id])
    assert text.startswith("# yaml-language-server: $schema=")
    (loaded,) = load_text(text, f"init-{task_id}.yaml", environ={})
    assert loaded.spec.spec.task == task_id


def test_the_allreduce_sweep_is_described_by_the_catalog() -> None:
    sweep = TASKS["0a"].sweep
    assert sweep is not None and all(t.sweep is None for t in TASKS.values() if t.goal is not None)
    # progress: one point of the p50 latency per size and dtype
    assert sweep.total(AllReduce()) == 160 and sweep.total(AllReduce(num_sizes=5, dtypes=("fp32",))) == 5
    assert sweep.total(ResNet20()) is None
    assert sweep.counts("allreduce_fp16_latency_p50") and not sweep.counts("allreduce_fp16_busbw")
    assert not sweep.counts("val_latency_p50")
    # the metric names the TUI and feeds treat as size curves
    assert sweep_of("allreduce_fp32_busbw") is sweep and sweep_of("train_loss") is None
    assert default_charts("0a", None) == list(sweep.charts)
    assert default_charts("1a", "val_global_Prec@1") == ["train_loss", "val_global_Prec@1", "step_time"]
    assert default_charts("nope", None) == ["train_loss", "step_time"]
