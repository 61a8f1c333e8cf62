"""Contract: the wire (``mlbench_worker.wire``) against the server's API models and the engine's plan.

Every event a rank sends is one of the wire's payloads; each must be accepted by the server's
``EventIn`` under its name, come back through ``EventOut`` and parse into the same value. The
worker config the engine builds must survive its JSON form, and the spec, plan and rank must
share one declaration of each implementation and telemetry default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

import pytest
from mlbench_worker import config as worker_config
from mlbench_worker import wire
from mlbench_worker.config import ConfigError, config_document, parse_config
from mlbench_worker.data.options import Cifar10Synthetic
from mlbench_worker.hyperparams import ResNet20

from mlbench_tui.plan import ImplementationPlan, RunPlan, worker_settings
from mlbench_tui.results import events as ev
from mlbench_tui.spec.models import Implementation, Telemetry
from mlbench_tui.store.api_models import EventBatch, EventIn, EventOut

PROGRESS = {"epoch": 3, "step": 150, "train_time_s": 12.5, "val_time_s": 1.25, "graph_capture_s": 0.5}

# One filled-in example of every payload, as a rank builds it.
PREFLIGHT_CHECKS = (
    wire.PreflightCheck(name="ecc", status="pass", detail="no uncorrected errors"),
    wire.PreflightCheck(name="gemm_tflops", status="warn", value=560.0, expected=640.0, unit="TFLOP/s"),
)
EXAMPLES: list[wire.Payload] = [
    wire.InitStart(),
    wire.Environment(facts={"torch": "2.5.1", "gpu_model": None, "ranks": [{"rank": 0, "node": "n1"}]}),
    wire.RunStart(train_samples=50_000, eval_samples=10_000, comm_precision="fp32"),
    wire.EpochStart(epoch=3),
    wire.EvalStart(epoch=3),
    wire.EpochEnd(**PROGRESS),
    wire.GoalReached(metric=wire.VAL_GLOBAL_PREC1, value=80.5, target=80.0, **PROGRESS),
    wire.RunStop(status="success", reason="goal reached", exit_code=0, **PROGRESS),
    wire.RunStop(status="success", reason="measured 160 (dtype, size) points", exit_code=0, points=160),
    wire.RankFailed(rank=1, exception="RuntimeError: boom", traceback="Traceback ...", peer_failure=False),
    wire.Startup(rank=0, process_start_t=1.7e9, phases={"interpreter": 0.25, "imports": 2.5}),
    wire.Preflight(rank=1, device="NVIDIA H200", stopped=False, seconds=1.5, checks=PREFLIGHT_CHECKS),
    wire.AllreduceSweep(
        world_size=2, latency_only=False, note=None, busbw_ceiling_gbps=450.0, ceiling_basis="NVLink"
    ),
]


def test_every_event_kind_has_one_example_and_one_payload_type() -> None:
    assert {type(p).KIND for p in EXAMPLES} == set(wire.EVENTS)
    assert len(set(wire.EVENTS)) == len(wire.EVENTS.values())
    for kind, cls in wire.EVENTS.items():
        assert kind == cls.KIND and getattr(wire, kind.upper()) == kind


@pytest.mark.parametrize("payload", EXAMPLES, ids=lambda p: f"{type(p).__name__}")
def test_the_server_accepts_each_payload_and_returns_what_parses_back(payload: wire.Payload) -> None:
    sent = json.loads(json.dumps({"kind": payload.KIND, "payload": payload.to_payload(), "t": 1.0}))
    accepted = EventIn.model_validate(sent)
    EventBatch.model_validate({"rank": 0, "seq": 0, "session": "s", "events": [sent]})
    stored = EventOut(id=1, rank=0, kind=accepted.kind, payload=accepted.payload, t=1.0)
    returned = EventOut.model_validate_json(stored.model_dump_json())
    parsed = ev.parse(ev.EventRecord(returned.kind, returned.payload, returned.rank or 0, returned.t))
    assert parsed == payload and type(parsed) is type(payload)


def _json_type(hint: Any) -> bool:
    """Whether values of ``hint`` are JSON: scalars, unions and literals of them, string-keyed objects."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return all(_json_type(arm) for arm in typing.get_args(hint))
    if origin is typing.Literal:
        return all(isinstance(v, str | int | bool) for v in typing.get_args(hint))
    if origin in (dict, Mapping):
        return typing.get_args(hint)[0] is str
    if origin is tuple:  # a list of objects whose fields are JSON (the pre-flight's checks)
        (item, _) = typing.get_args(hint)
        hints = typing.get_type_hints(item)
        fields = dataclasses.fields(item)
        return dataclasses.is_dataclass(item) and all(_json_type(hints[f.name]) for f in fields)
    return hint in (int, float, str, bool, type(None))


def test_payload_fields_are_json_types_the_api_model_keeps() -> None:
    """``EventIn.payload`` is a JSON object: every payload field holds JSON."""
    for cls in wire.EVENTS.values():
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            assert _json_type(hint), (cls.__name__, f.name, hint)
    assert EventIn.model_fields["payload"].annotation == dict[str, Any]


def test_payloads_of_earlier_workers_still_parse() -> None:
    """Stored forms: the TensorFlow task's run_stop without exit_code, stops and epochs with
    NaN-as-null, floats for ints, missing fields, and fields this version does not know."""
    tf_stop = wire.parse_event("run_stop", {"status": "success", "reason": "goal", "epoch": 5})
    assert isinstance(tf_stop, wire.RunStop) and tf_stop.exit_code == 0 and tf_stop.stopped_normally
    tf_abort = wire.parse_event("run_stop", {"status": "aborted", "reason": "rank 0 interrupted"})
    assert isinstance(tf_abort, wire.RunStop) and not tf_abort.stopped_normally
    end = wire.parse_event("epoch_end", {"epoch": 2.0, "val_time_s": None, "train_time_s": 3, "new": 1})
    assert end == wire.EpochEnd(epoch=2, train_time_s=3.0)
    assert wire.parse_event("rank_failed", {"rank": "x"}) == wire.RankFailed()
    assert wire.parse_event("run_stop", {"status": "exploded"}) == wire.RunStop()
    assert wire.parse_event("unknown_kind", {"a": 1}) is None
    assert "train_time_s" not in wire.RunStop(status="aborted", train_time_s=math.nan).to_payload()


def _plan(**fields: Any) -> RunPlan:
    from support.results import plan

    return plan(**fields)


def test_the_worker_config_survives_its_json_form() -> None:
    plan = _plan(telemetry_interval_s=None, max_time_s=90.0)
    built = worker_settings(plan, "run-1")
    parsed = parse_config(json.loads(json.dumps(config_document(built))))
    assert parsed == built and isinstance(parsed, worker_config.WorkerConfig)
    assert (
        isinstance(parsed.implementation, worker_config.ImplementationConfig)
        and parsed.telemetry_interval_s is None
    )


def test_an_absent_key_takes_the_one_declared_default() -> None:
    required = {"run_id": "r", "task": "1a", "backend": "gloo", "world_size": 1}
    minimal = parse_config(required)
    # the task's own typed hyperparameters, every one its declared default
    expected = worker_config.WorkerConfig(
        run_id="r",
        task="1a",
        backend="gloo",
        world_size=1,
        hyperparameters=ResNet20(),
        data=worker_config.DataConfig(options=Cifar10Synthetic()),  # and its typed data options
    )
    assert minimal == expected
    assert minimal.implementation == ImplementationPlan() == worker_config.ImplementationConfig()
    with pytest.raises(ConfigError, match="telemetry_interval_s"):
        parse_config(
            {"run_id": "r", "task": "1a", "backend": "gloo", "world_size": 1, "telemetry_interval_s": 0}
        )


def test_spec_plan_and_rank_share_the_implementation_and_telemetry_defaults() -> None:
    spec_defaults = Implementation()
    for f in dataclasses.fields(worker_config.ImplementationConfig):
        assert getattr(spec_defaults, f.name) == getattr(worker_config.ImplementationConfig(), f.name)
    assert set(Implementation.model_fields) == {
        f.name for f in dataclasses.fields(worker_config.ImplementationConfig)
    }
    assert RunPlan.model_fields["implementation"].annotation is worker_config.ImplementationConfig
    assert Telemetry().interval_s == worker_config.DEFAULT_TELEMETRY_INTERVAL_S
    assert RunPlan.model_fields["telemetry_interval_s"].default == worker_config.DEFAULT_TELEMETRY_INTERVAL_S
