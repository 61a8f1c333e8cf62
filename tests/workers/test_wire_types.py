"""The one reader of wire messages (``wire_types.read``): strict for a config, tolerant for a
stored payload, both from the same declaration (types, ``Limits``, defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import pytest
from mlbench_worker import wire
from mlbench_worker.wire_types import Invalid, Limits, read, to_json


@dataclass(frozen=True, kw_only=True)
class Inner:
    size: Annotated[int, Limits(ge=1, le=8)] = 1


@dataclass(frozen=True, kw_only=True)
class Message:
    name: Annotated[str, Limits(min_length=1, pattern=r"^[a-z]+$")]
    mode: Literal["a", "b"] = "a"
    ratio: Annotated[float, Limits(gt=0)] | None = None
    inner: Inner = field(default_factory=Inner)
    seconds: dict[str, float] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "missing key 'name'"),
        ({"name": ""}, "'name' must not be empty, got ''"),
        ({"name": "ab\n"}, "'name' must match ^[a-z]+$, got 'ab\\n'"),  # $ is the string's very end
        ({"name": "x", "mode": "c"}, "'mode' must be one of a, b, got 'c'"),
        ({"name": "x", "ratio": 0}, "'ratio' must be > 0, got 0"),
        ({"name": "x", "ratio": "1"}, "'ratio' must be float or null, got '1'"),
        ({"name": "x", "inner": {"size": 9}}, "'inner.size' must be between 1 and 8, got 9"),
        ({"name": "x", "inner": {"size": 2.0}}, "'inner.size' must be int, got 2.0"),
        ({"name": "x", "seconds": {"load": "slow"}}, "'seconds.load' must be float, got 'slow'"),
        ({"name": "x", "tags": [1]}, "'tags[0]' must be str, got 1"),
        ("x", "the document must be an object"),
    ],
)
def test_strict_reading_names_the_key_and_what_it_must_be(document: object, message: str) -> None:
    with pytest.raises(Invalid) as caught:
        read(Message, document, strict=True)
    assert str(caught.value) == message


def test_strict_reading_takes_declared_defaults_and_ignores_unknown_keys() -> None:
    got = read(Message, {"name": "x", "ratio": 2, "seed": None, "mode": None, "inner": {}}, strict=True)
    assert got == Message(name="x", ratio=2.0)
    assert isinstance(got.ratio, float)


def test_tolerant_reading_puts_defaults_where_values_do_not_fit() -> None:
    got = read(
        Message,
        {"name": "x", "mode": "c", "ratio": -1, "inner": {"size": 4.0}, "seconds": {"a": 1, "b": "x"}},
        strict=False,
    )
    assert got == Message(name="x", inner=Inner(size=4), seconds={"a": 1.0})  # integral floats are ints


def test_to_json_leaves_out_unset_optional_fields_and_keeps_required_nulls() -> None:
    assert to_json(wire.MetricIn(name="loss", value=float("nan"))) == {"name": "loss", "value": None}
    assert to_json(wire.LogIn(text="hi", t=1.5)) == {"text": "hi", "stream": "stdout", "t": 1.5}


def test_event_payloads_round_trip_through_the_reader() -> None:
    stop = wire.RunStop(status="failed", reason="boom", exit_code=1, epoch=3)
    assert wire.RunStop.from_payload(stop.to_payload()) == stop
    startup = wire.Startup.from_payload({"rank": 1, "phases": {"imports": 1.5, "bad": "x", "n": None}})
    assert startup.phases == {"imports": 1.5} and startup.rank == 1
