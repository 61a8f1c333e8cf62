"""MLPerf's training log of every task's export, judged by MLCommons' own compliance checker.

Open division: a real short run of each task (synthetic data) through the worker runtime
(``mlbench_worker.__main__.run_rank``, one rank in this process) reporting to a real server and
SQLite store, exported by ``mlbench export``'s code. Closed division: each task as MLBench defines
it (official data, full goal), recorded in the worker's event and metric format.
"""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from mlbench_worker.__main__ import run_rank
from mlbench_worker.config import parse_config
from mlbench_worker.launch.rendezvous import Rendezvous
from mlbench_worker.reporting.reporter import Reporter
from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

from mlbench_tui.cli import main
from mlbench_tui.executors.api import RunState
from mlbench_tui.plan import RunPlan, expand, worker_config
from mlbench_tui.results.mllog import (
    MLPERF_RULESET,
    RULES,
    check,
    division,
    entries,
    fixed_hyperparameters,
    mllog_keys,
    mllog_lines,
)
from mlbench_tui.results.model import Suspect
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint
from mlbench_tui.runs.export import check_export, export_run
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.spec.loader import load_text
from mlbench_tui.spec.tasks import TASKS
from mlbench_tui.store.api_models import RunCreate, RunUpdate

pytestmark = pytest.mark.slow

TASK_IDS = ("0a", "1a", "1b", "2a", "3a", "4a", "4b")

# One small run per task: one rank, synthetic data, a few seconds on one core.
SMOKE = {
    "0a": """
  hyperparameters: {sizes_min_exp: 0, sizes_max_exp: 3, num_sizes: 4, repetitions: 3, warmup: 1}""",
    "1a": """
  goal: light
  data: {source: synthetic, options: {train_samples: 128, val_samples: 64, noise: 24.0}}
  hyperparameters: {batch_size: 32, max_epochs: 2}""",
    "1b": """
  goal: light
  data: {source: synthetic, options: {train_samples: 64, val_samples: 32, image_size: 32, num_classes: 4}}
  hyperparameters: {batch_size: 16, max_epochs: 1}""",
    "2a": """
  goal: light
  data: {source: synthetic, options: {train_samples: 512, val_samples: 128}}
  hyperparameters: {max_epochs: 2}""",
    "3a": """
  goal: light
  data:
    source: synthetic
    options: {train_tokens: 2000, val_tokens: 400, vocab_size: 50, emb_size: 16, hidden_size: 24,
              num_layers: 3, bptt: 10}
  hyperparameters: {batch_size: 8, max_epochs: 2}""",
    "4a": """
  goal: light
  data:
    source: synthetic
    options: {train_samples: 256, val_samples: 16, vocab_words: 8, min_len: 2, max_len: 5,
              hidden_size: 32, num_layers: 2, dropout: 0.0}
  hyperparameters: {global_batch_size: 64, max_epochs: 1}""",
    "4b": """
  goal: light
  data:
    source: synthetic
    options: {train_samples: 256, val_samples: 16, vocab_words: 8, min_len: 2, max_len: 5,
              d_model: 32, heads: 2, ffn_dim: 64, encoder_layers: 1, decoder_layers: 1, dropout: 0.0}
  hyperparameters: {global_batch_tokens: 512, max_epochs: 1}""",
}


def _spec(task: str, body: str, *, name: str | None = None, labels: str = "") -> str:
    return f"""apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: {name or f"mllog-{task}"}{labels}
spec:
  task: {TASKS[task].name}
  workers: 1
  backend: gloo
  target: local{body}
"""


def _plan(text: str) -> RunPlan:
    (loaded,) = load_text(text)
    (plan,) = expand(loaded.spec)
    return plan


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer(tmp_path_factory.mktemp("mllog-store") / "store.sqlite", record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: EmbeddedServer) -> Iterator[MlbenchClient]:
    with MlbenchClient(server.url, server.info.admin_token) as c:
        yield c


def run_in_process(server: EmbeddedServer, client: MlbenchClient, plan: RunPlan, spool: Path) -> str:
    """One rank of ``plan`` through the worker runtime, reporting to ``server``; returns the run id."""
    created = client.create_run(RunCreate.from_plan(plan))
    run_id = created.run.id
    reporter = Reporter(server.url, run_id, created.write_token, 0, spool_dir=str(spool))
    config = parse_config(worker_config(plan, run_id))
    assert run_rank(config, Rendezvous(0, 1, 0, None, None, "single"), reporter) == 0
    client.update_run(run_id, RunUpdate(state=RunState.SUCCEEDED, finished=datetime.now(UTC)))
    return run_id


@pytest.fixture(scope="module")
def exports(
    server: EmbeddedServer, client: MlbenchClient, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Each task's export archive, from a real short run."""
    out = tmp_path_factory.mktemp("mllog-exports")
    archives = {}
    for task in TASK_IDS:
        labels = "\n  labels: {org: ACME Research}" if task == "1a" else ""
        run_id = run_in_process(server, client, _plan(_spec(task, SMOKE[task], labels=labels)), out / "spool")
        archives[task] = export_run(client, run_id, out / f"{task}.zip").path
    return archives


def _log(archive: Path) -> list[dict[str, Any]]:
    with zipfile.ZipFile(archive) as zf:
        lines = zf.read("mllog.txt").decode().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)
    return [json.loads(line.removeprefix(":::MLLOG ")) for line in lines]


def _value(log: list[dict[str, Any]], key: str) -> Any:
    (value,) = [line["value"] for line in log if line["key"] == key]
    return value


@pytest.mark.parametrize("task", TASK_IDS)
def test_every_tasks_export_complies_with_the_projects_ruleset(task: str, exports: dict[str, Path]) -> None:
    verdict = check_export(exports[task])  # the checker, the archive's mllog.txt and mllog_rules/
    assert verdict.ok, verdict.report
    name = TASKS[task].name
    for rules in ("common.yaml", "open_common.yaml", f"open_{name}.yaml"):
        assert f"mllog_rules/{rules}" in verdict.report  # each ruleset file really ran
    assert verdict.report.rstrip().endswith("SUCCESS")
    assert _value(_log(exports[task]), "submission_division") == "open"  # synthetic data


def mlperf_common_rules(path: Path) -> tuple[dict[str, str], list[str]]:
    """MLPerf's training common rules on a log, as ``python -m mlperf_logging.compliance_checker``
    runs them, with the checker's messages: per rule (key) and the others."""
    loglines, errors = mlp_parser.parse_file(str(path), ruleset=MLPERF_RULESET)
    assert errors == []
    checker = mlp_compliance.make_checker("training", MLPERF_RULESET, quiet=False, werror=False)
    mlp_compliance.enqueued_configs.clear()
    try:
        # The benchmark's own rules are enqueued by name and do not exist for MLBench's tasks: the
        # checker stops there, after every common rule has run.
        with pytest.raises(FileNotFoundError, match=r"_(allreduce|[a-z0-9]+-[a-z0-9-]+)\.yaml"):
            checker.check_loglines(loglines, f"training_{MLPERF_RULESET}/common.yaml")
    finally:
        mlp_compliance.enqueued_configs.clear()
    return dict(checker.overwritable), list(checker.not_overwritable)


@pytest.mark.parametrize("task", TASK_IDS)
def test_mlperf_training_rules_reject_only_the_benchmark_name(
    task: str, exports: dict[str, Path], tmp_path: Path
) -> None:
    with zipfile.ZipFile(exports[task]) as zf:
        zf.extract("mllog.txt", tmp_path)
    by_rule, others = mlperf_common_rules(tmp_path / "mllog.txt")
    name = TASKS[task].name
    assert list(by_rule) == ["submission_benchmark"], by_rule
    assert f'"value": "{name}"' in by_rule["submission_benchmark"]
    assert "failed test:  v['value'] in ['flux1'," in by_rule["submission_benchmark"]  # MLPerf's names
    (missing,) = others
    assert missing.startswith("Could not find config file") and missing.endswith(f"/open_{name}.yaml")


def test_a_training_log_follows_the_run(exports: dict[str, Path], client: MlbenchClient) -> None:
    log = _log(exports["1a"])
    keys = [line["key"] for line in log]
    head = ["submission_org", "submission_platform", "submission_division", "submission_benchmark"]
    assert keys[:6] == [*head, "cache_clear", "init_start"]
    assert keys.index("init_stop") + 1 == keys.index("run_start") and keys[-1] == "run_stop"
    assert _value(log, "submission_org") == "ACME Research"  # the spec's org label
    assert _value(log, "submission_benchmark") == "resnet20-cifar10"
    with zipfile.ZipFile(exports["1a"]) as zf:
        events = json.loads(zf.read("events.json"))
    environment = next(e for e in events if e["kind"] == "environment")
    stop = next(e for e in events if e["kind"] == "run_stop")
    assert _value(log, "submission_platform").startswith(environment["payload"]["cpu_model"] + ", 1 rank")
    assert (_value(log, "train_samples"), _value(log, "eval_samples")) == (128, 64)  # the synthetic sets
    assert (_value(log, "global_batch_size"), _value(log, "micro_batch_size")) == (32, 32)
    assert _value(log, "opt_momentum") == 0.9 and _value(log, "opt_name") == "sgd"
    body = [
        (line["key"], line["metadata"].get("epoch_num")) for line in log[keys.index("run_start") + 1 : -1]
    ]
    epochs = [1, 2]
    assert body == [
        (key, epoch)
        for epoch in epochs
        for key in ("epoch_start", "epoch_stop", "eval_start", "eval_accuracy", "eval_stop")
    ]
    times = [line["time_ms"] for line in log]
    assert times == sorted(times)  # one clock, in order
    assert log[-1]["metadata"] == {
        **log[-1]["metadata"],
        **{k: stop["payload"][k] for k in ("status", "reason")},
    }


def test_accuracy_has_one_unit_throughout(exports: dict[str, Path]) -> None:
    """eval_accuracy and eval_target are in the unit of the stored metric and the spec's goal (top-1
    in percent), and so is the summary in official_result.json."""
    log = _log(exports["1a"])
    with zipfile.ZipFile(exports["1a"]) as zf:
        stored = {
            p["epoch"]: p["value"]
            for p in json.loads(zf.read("metrics.json"))
            if p["name"] == "val_global_Prec@1"
        }
        official = json.loads(zf.read("official_result.json"))
    logged = {line["metadata"]["epoch_num"]: line["value"] for line in log if line["key"] == "eval_accuracy"}
    assert logged == stored and len(logged) == 2
    target = next(line for line in log if line["key"] == "eval_target")
    assert target["value"] == official["goal"]["target"] == 70.0  # the light goal, percent
    assert target["metadata"]["metric"] == "val_global_Prec@1"


def test_an_allreduce_sweep_logs_each_point_as_a_block(exports: dict[str, Path]) -> None:
    log = _log(exports["0a"])
    with zipfile.ZipFile(exports["0a"]) as zf:
        reported = json.loads(zf.read("metrics.json"))
    # one rank moves no data: no bandwidth was reported, each point's figure is its p50 latency
    assert not [p for p in reported if p["name"].endswith(("_busbw", "_algbw"))]
    latency = {(p["name"], p["step"]): p["value"] for p in reported if p["name"].endswith("_latency_p50")}
    points = [line for line in log if line["key"] == "eval_accuracy"]
    assert {(p["metadata"]["metric"], p["metadata"]["size"]): p["value"] for p in points} == latency
    assert len(points) == 8  # sizes 1, 10, 100, 1000 in fp32 and fp16
    assert [p["metadata"]["samples_count"] for p in points] == [3 * i for i in range(1, 9)]
    assert all(p["metadata"]["unit"] == "s" and p["metadata"]["latency_p99"] > 0 for p in points)
    assert _value(log, "train_samples") == 4 * 2 * 3 and _value(log, "eval_samples") == 3
    assert _value(log, "lowest_numerical_precision_in_comm") == "fp16"
    blocks = [line["key"] for line in log if line["key"].startswith("block_")]
    assert blocks == ["block_start", "block_stop"] * 8


def test_a_sweep_of_several_ranks_logs_bus_bandwidth_in_gb_per_s() -> None:
    plan = _plan(_spec("0a", "\n  hyperparameters: {sizes_max_exp: 2, num_sizes: 3}")).model_copy(
        update={"workers": 2}
    )
    metrics, events = recorded_run(plan)
    points = [e for e in entries(plan, metrics, events, state="succeeded") if e.key == "eval_accuracy"]
    assert {(e.metadata["unit"], e.metadata["metric"]) for e in points} == {("GB/s", "allreduce_fp32_busbw")}
    assert [e.value for e in points] == [p.value for p in metrics if p.name.endswith("_busbw")]


def test_a_synthetic_run_logs_the_sizes_it_ran_with(exports: dict[str, Path]) -> None:
    awd = _log(exports["3a"])  # AWD-LSTM's smoke sizes come from the data options
    assert (_value(awd, "bptt"), _value(awd, "emb_size"), _value(awd, "num_layers")) == (10, 16, 3)
    assert _value(awd, "train_samples") == 2000  # tokens
    transformer = _log(exports["4b"])  # its data options' max_len is the toy sentences' length
    assert _value(transformer, "max_len") == 80 and _value(transformer, "global_batch_size") == 512
    assert _value(transformer, "opt_adam_beta_2") == 0.98 and _value(transformer, "opt_name") == "adam"


# ---------------------------------------------------------------------------------- closed division

OFFICIAL_SAMPLES = {
    "1a": (50_000, 10_000),
    "1b": (1_281_167, 50_000),
    "2a": (400_000, 100_000),
    "3a": (2_088_628, 217_646),
}


def _closed_plan(task: str) -> RunPlan:
    body = "" if task == "0a" else "\n  goal: full\n  data: {source: path, path: /data/official}"
    return _plan(_spec(task, body))


def recorded_run(plan: RunPlan, *, reach: bool = True) -> tuple[list[MetricPoint], list[EventRecord]]:
    """What the worker reports for ``plan`` (its events and rank 0's global metrics), as stored."""
    t = 1_700_000_000.0
    sizes = sorted({max(1, int(x)) for x in np.logspace(0, 8, 80)})  # task 0a's official sweep
    train, val = OFFICIAL_SAMPLES.get(plan.task, (4_500_000, 3_003) if plan.goal else (len(sizes) * 100, 100))
    events = [EventRecord("init_start", {}, t=t), EventRecord("environment", {"cpu_model": "Xeon"}, t=t + 1)]
    events.append(EventRecord("run_start", {"train_samples": train, "eval_samples": val}, t=t + 60))
    metrics: list[MetricPoint] = []
    t += 60
    if plan.goal is None:
        for size in sizes:
            t += 0.5
            figures = [("latency_p50", 1e-4), ("latency_p99", 2e-4)]
            if plan.workers > 1:  # one rank moves no data and reports no bandwidth
                figures.append(("busbw", size * 4e-5))
            for figure, value in figures:
                metrics.append(MetricPoint(f"allreduce_fp32_{figure}", value, step=size, t=t))
        events.append(EventRecord("run_stop", {"status": "success", "reason": "swept"}, t=t + 1))
        return metrics, events
    goal, direction = plan.goal.target, plan.goal.direction
    values = [goal * 0.5, goal * 0.9, goal] if direction == "max" else [goal * 3, goal * 1.5, goal]
    if not reach:
        values[-1] = values[-2]
    for epoch, value in enumerate(values, start=1):
        events.append(EventRecord("epoch_start", {"epoch": epoch}, t=t))
        events.append(EventRecord("eval_start", {"epoch": epoch}, t=t + 100))
        metrics.append(MetricPoint(plan.goal.metric, value, step=epoch * 10, epoch=epoch, t=t + 110))
        events.append(EventRecord("epoch_end", {"epoch": epoch, "val_time_s": 10.0 * epoch}, t=t + 110))
        t += 110
    status = "success" if reach else "aborted"
    events.append(EventRecord("run_stop", {"status": status, "reason": "recorded"}, t=t + 1))
    return metrics, events


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("task", TASK_IDS)
def test_each_task_as_mlbench_defines_it_complies_with_the_closed_rules(task: str, tmp_path: Path) -> None:
    plan = _closed_plan(task)
    assert division(plan) == "closed"
    metrics, events = recorded_run(plan)
    log = _write(tmp_path / "mllog.txt", mllog_lines(plan, metrics, events, state="succeeded"))
    verdict = check(log)
    assert verdict.ok, verdict.report
    assert f"mllog_rules/closed_{TASKS[task].name}.yaml" in verdict.report


def test_closed_rules_catch_a_changed_fixed_hyperparameter_and_a_missed_goal(tmp_path: Path) -> None:
    plan = _closed_plan("1a")
    metrics, events = recorded_run(plan)
    lines = mllog_lines(plan, metrics, events, state="succeeded")
    tampered = [
        line.replace('"value": 0.9,', '"value": 0.8,') if '"opt_momentum"' in line else line for line in lines
    ]
    verdict = check(_write(tmp_path / "momentum.txt", tampered))
    assert not verdict.ok and "CHECK for 'opt_momentum' failed" in verdict.report
    metrics, events = recorded_run(plan, reach=False)
    verdict = check(_write(tmp_path / "missed.txt", mllog_lines(plan, metrics, events, state="succeeded")))
    assert not verdict.ok and "Failed checks for eval_accuracy : v['value'] >= 80.0" in verdict.report
    verdict = check(_write(tmp_path / "open.txt", [line.replace('"closed"', '"open"') for line in lines]))
    assert verdict.ok, verdict.report  # the same log claims less in the open division


def _log_values(lines: list[str]) -> dict[str, Any]:
    return {
        doc["key"]: doc["value"] for doc in (json.loads(line.removeprefix(":::MLLOG ")) for line in lines)
    }


@pytest.mark.parametrize(("workers", "opt_name"), [(1, "sgd"), (8, "lars")])
def test_1b_logs_mlperfs_resnet_keys_for_its_update(workers: int, opt_name: str, tmp_path: Path) -> None:
    """Task 1b as MLPerf runs it, SGD on one rank (global batch 256) and LARS on eight (2048): the
    closed rules pass, under the keys MLPerf's ResNet reference logs for that update."""
    plan = _plan(
        _spec("1b", "\n  goal: full\n  data: {source: path, path: /data/imagenet}").replace(
            "workers: 1", f"workers: {workers}"
        )
    )
    assert division(plan) == "closed"
    metrics, events = recorded_run(plan)
    lines = mllog_lines(plan, metrics, events, state="succeeded")
    verdict = check(_write(tmp_path / "mllog.txt", lines))
    assert verdict.ok, verdict.report
    assert f"mllog_rules/closed_resnet50-imagenet_{opt_name}.yaml" in verdict.report
    values = _log_values(lines)
    steps = 1_281_167 // workers // 256  # per epoch, each rank's share in whole batches
    if opt_name == "lars":
        assert values["lars_opt_base_learning_rate"] == 10.0 and values["lars_epsilon"] == 0.0
        assert values["lars_opt_learning_rate_warmup_epochs"] == 5.0
        assert values["lars_opt_learning_rate_decay_steps"] == 41 * steps - 5 * steps + 1
        assert values["lars_opt_weight_decay"] == 2e-4
    else:
        assert values["sgd_opt_base_learning_rate"] == 0.1 and "lars_epsilon" not in values
        assert values["sgd_opt_learning_rate_decay_steps"] == 90 * steps + 1
        assert values["model_bn_span"] == 256 and values["opt_learning_rate_warmup_epochs"] == 0.0
    assert values["opt_name"] == opt_name and values["global_batch_size"] == 256 * workers
    assert values["label_smoothing"] == 0.1 and values["train_samples"] == 1_281_167


def test_1b_closed_rules_catch_a_changed_fixed_value(tmp_path: Path) -> None:
    plan = _plan(
        _spec("1b", "\n  goal: full\n  data: {source: download}").replace("workers: 1", "workers: 8")
    )
    metrics, events = recorded_run(plan)
    lines = mllog_lines(plan, metrics, events, state="succeeded")
    for key, good, bad in (("lars_epsilon", "0.0", "1e-08"), ("lars_opt_weight_decay", "0.0002", "0.0003")):
        tampered = [
            line.replace(f'"value": {good},', f'"value": {bad},') if f'"{key}"' in line else line
            for line in lines
        ]
        verdict = check(_write(tmp_path / f"{key}.txt", tampered))
        assert not verdict.ok and f"CHECK for '{key}' failed" in verdict.report, verdict.report


def test_division_is_closed_only_for_the_task_as_defined() -> None:
    assert division(_closed_plan("1a")) == "closed"
    light = _plan(_spec("1a", "\n  goal: light\n  data: {source: path, path: /data}"))
    synthetic = _plan(_spec("1a", "\n  goal: full\n  data: {source: synthetic}"))
    batch = _plan(
        _spec("1a", "\n  goal: full\n  data: {source: download}\n  hyperparameters: {batch_size: 256}")
    )
    assert (division(light), division(synthetic), division(batch)) == ("open", "open", "closed")
    assert division(_closed_plan("0a")) == "closed"
    assert division(_plan(_spec("0a", "\n  hyperparameters: {repetitions: 10}"))) == "open"
    # a figure that fails a physical bound keeps even the task as defined out of the closed division
    busbw = Suspect(figure="bus bandwidth (fp32)", reason="4 size(s) above the 3,000 GB/s ceiling")
    assert division(_closed_plan("0a"), [busbw]) == "open"


@pytest.mark.parametrize("task", TASK_IDS)
def test_closed_rules_check_every_fixed_hyperparameter_of_the_catalog(task: str) -> None:
    """The committed ruleset agrees with spec/tasks.py: each hyperparameter a spec may not change is
    checked under its log key, accepting the catalog's value and nothing else."""
    info = TASKS[task]
    rules = yaml.safe_load((RULES / f"closed_{info.name}.yaml").read_text())
    checks = {r["KEY"]["NAME"]: r["KEY"].get("CHECK") for r in rules if "KEY" in r}
    fixed = fixed_hyperparameters(info)
    assert fixed or task == "0a"
    # 1b's keys are named for its update, whose rules the opt_name line enqueues (lars or sgd)
    for opt_name in ("lars", "sgd") if task == "1b" else (None,):
        both = dict(checks)
        if opt_name is not None:
            extra = yaml.safe_load((RULES / f"closed_{info.name}_{opt_name}.yaml").read_text())
            both.update({r["KEY"]["NAME"]: r["KEY"].get("CHECK") for r in extra if "KEY" in r})
        for name, default in fixed.items():
            if opt_name == "sgd" and name.startswith("lars_"):
                continue  # not logged for SGD
            values = default if isinstance(default, list) else [default]
            for key, value in zip(mllog_keys(name, opt_name), values, strict=True):
                assert key in both, f"{name} ({key}) is fixed by the catalog but not checked"
                assert eval(both[key], {"v": {"value": value, "metadata": {}}}), (key, both[key])
                changed = not value if isinstance(value, bool) else value * 2 + 1
                assert not eval(both[key], {"v": {"value": changed, "metadata": {}}}), (key, both[key])
    if info.goal is not None:  # and the full goal, in the goal's unit
        good = {"value": info.goal.full, "metadata": {"metric": info.goal.metric}}
        assert eval(checks["eval_target"], {"v": good})
        assert not eval(checks["eval_target"], {"v": {**good, "value": info.goal.light}})


def test_a_run_from_a_worker_without_the_boundary_events_still_complies(tmp_path: Path) -> None:
    """Runs stored before the worker sent init_start, epoch_start and eval_start: the log takes init
    from the environment event, each epoch's start from the previous validation's end and each
    validation's start from its share of val_time_s."""
    plan = _plan(_spec("1a", "\n  goal: light\n  data: {source: synthetic}"))
    metrics, events = recorded_run(plan)
    older = [
        EventRecord(e.kind, {} if e.kind == "run_start" else e.payload, e.rank, e.t)
        for e in events
        if e.kind not in ("init_start", "epoch_start", "eval_start")
    ]
    log = entries(plan, metrics, older, state="succeeded")
    at = {(e.key, e.metadata.get("epoch_num")): e.t for e in log}
    assert at[("init_start", None)] == next(e.t for e in events if e.kind == "environment")
    assert at[("epoch_start", 2)] == at[("eval_stop", 1)]
    assert at[("eval_start", 2)] == at[("eval_stop", 2)] - 20.0 + 10.0  # val_time_s 20 after 10
    assert check(_write(tmp_path / "mllog.txt", mllog_lines(plan, metrics, older, state="succeeded"))).ok


def test_a_run_without_a_run_stop_event_is_logged_with_its_recorded_state() -> None:
    plan = _closed_plan("1a")
    metrics, events = recorded_run(plan)
    log = entries(
        plan, metrics, [e for e in events if e.kind != "run_stop"], state="cancelled", message="stop"
    )
    assert log[-1].key == "run_stop" and log[-1].metadata == {"status": "aborted", "reason": "stop"}
    assert log[-1].t == max(p.t or 0 for p in metrics)  # the last thing the run reported


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli_server(server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch) -> EmbeddedServer:
    monkeypatch.setenv("MLBENCH_SERVER_URL", server.url)
    monkeypatch.setenv("MLBENCH_TOKEN", server.info.admin_token)
    return server


def test_export_check_prints_the_checkers_report(
    cli_server: EmbeddedServer, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "run.zip"
    assert main(["export", "mllog-2a-gloo-1w", "--out", str(archive), "--org", "Lab", "--check"]) == 0
    out, err = capsys.readouterr()
    assert "open_logreg-epsilon.yaml" in out and out.rstrip().endswith("SUCCESS")
    assert (
        "mlbench-export-" not in out and f"{archive}/mllog_rules/" in out
    )  # the archive's files, no gone temp dir
    assert f"wrote {archive}" in err and "complies" in err
    assert _value(_log(archive), "submission_org") == "Lab"


def test_export_without_mlperf_logging_says_how_to_install_it(
    cli_server: EmbeddedServer,
    exports: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mlperf_logging", None)  # as if the extra were not installed
    archive = tmp_path / "run.zip"
    assert main(["export", "mllog-2a-gloo-1w", "--out", str(archive)]) == 0
    err = capsys.readouterr().err
    assert "note: left out mllog.txt" in err and "pip install 'mlbench-tui[mlperf]'" in err
    with zipfile.ZipFile(archive) as zf:
        assert "official_result.json" in zf.namelist() and "mllog.txt" not in zf.namelist()
    assert main(["export", "mllog-2a-gloo-1w", "--out", str(tmp_path / "x.zip"), "--check"]) == 1
    err = capsys.readouterr().err
    assert "--check needs MLCommons' mlperf-logging" in err and "pip install 'mlbench-tui[mlperf]'" in err
    assert not (tmp_path / "x.zip").exists()
