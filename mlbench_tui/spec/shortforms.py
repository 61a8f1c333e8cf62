"""Short forms of the spec language: durations, Kubernetes quantities, GPUs and sweeps.

Each parser is a pydantic before-validator that turns what people write (``30m``, ``500m``,
``12Gi``, ``1xT4``, ``workers: 4``) into one canonical value and raises a ``PydanticCustomError``
whose message says what a valid value looks like. The ``Annotated`` aliases carry a JSON Schema
that accepts every short form, so editors agree with the loader.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from mlbench_tui.spec.limits import (
    MAX_CPU_CORES,
    MAX_DURATION_S,
    MAX_MEMORY_BYTES,
    MIN_CPU_CORES,
    MIN_MAX_TIME_S,
    MIN_MEMORY_BYTES,
)

BACKENDS: tuple[str, ...] = ("gloo", "nccl", "mpi")
FRAMEWORKS: tuple[str, ...] = ("pytorch", "tensorflow")

_DURATION_RE = re.compile(
    r"^\s*(?:(?P<d>\d+(?:\.\d+)?)d)?\s*(?:(?P<h>\d+(?:\.\d+)?)h)?\s*"
    r"(?:(?P<m>\d+(?:\.\d+)?)m)?\s*(?:(?P<s>\d+(?:\.\d+)?)s)?\s*$"
)
_DURATION_SCHEMA_RE = r"^\s*(\d+(\.\d+)?d)?\s*(\d+(\.\d+)?h)?\s*(\d+(\.\d+)?m)?\s*(\d+(\.\d+)?s)?\s*$"
_CPU_RE = re.compile(r"^(\d+(\.\d+)?|\.\d+)(m)?$")
_MEMORY_RE = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
GPU_RE = re.compile(r"^(?:(?P<count>\d+)\s*[xX×]\s*)?(?P<type>[A-Za-z][A-Za-z0-9._-]*)$")


def show_value(value: Any) -> str:
    """A value as it appears in a message: strings quoted, numbers bare, long values cut."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def show_seconds(seconds: float) -> str:
    """A round duration the way a spec writes it: ``365d``, ``1h``, ``90s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def parse_duration(value: Any) -> Any:
    """``30m``, ``2h``, ``1h30m``, ``90s``, ``1d`` or a number of seconds -> float seconds."""
    if isinstance(value, bool):
        raise PydanticCustomError("duration", "expected a duration such as '30m', '2h' or seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_RE.fullmatch(value)
        if not value.strip() or not match or not any(match.groupdict().values()):
            raise PydanticCustomError(
                "duration",
                "invalid duration {value}: use e.g. '90s', '30m', '2h' or '1h30m'",
                {"value": show_value(value)},
            )
        parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
        seconds = parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    else:
        raise PydanticCustomError("duration", "expected a duration such as '30m', '2h' or seconds")
    if not math.isfinite(seconds) or seconds <= 0:
        raise PydanticCustomError("duration", "duration must be a positive, finite time such as '30m'")
    return seconds


def duration_at_most(most: float, least: float = 0.0) -> Callable[[Any], Any]:
    """``parse_duration`` that also refuses more than ``most`` seconds (and fewer than ``least``)."""

    def parse(value: Any) -> Any:
        seconds = parse_duration(value)
        if seconds > most:
            raise PydanticCustomError(
                "duration",
                "duration {value} is longer than {most}, the most this field takes",
                {"value": show_value(value), "most": show_seconds(most)},
            )
        if seconds < least:
            raise PydanticCustomError(
                "duration",
                "duration {value} is shorter than {least}, the least this field takes",
                {"value": show_value(value), "least": show_seconds(least)},
            )
        return seconds

    return parse


def parse_cpu(value: Any) -> Any:
    """A Kubernetes CPU quantity per rank (``2``, ``1.5``, ``500m``) -> its canonical string."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PydanticCustomError("cpu", "expected a CPU quantity such as 2, '1.5' or '500m'")
    text = str(value).strip()
    if not _CPU_RE.fullmatch(text):
        raise PydanticCustomError(
            "cpu",
            "invalid CPU quantity {value}: use cores ('2', '1.5') or millicores ('500m')",
            {"value": show_value(value)},
        )
    if cpu_cores(text) < MIN_CPU_CORES:
        raise PydanticCustomError(
            "cpu",
            "CPU quantity {value} is less than 1m, the smallest Kubernetes takes",
            {"value": show_value(value)},
        )
    if round(cpu_cores(text) * 1000, 6) % 1:
        raise PydanticCustomError(
            "cpu",
            "CPU quantity {value} is finer than 1m (a thousandth of a core), which Kubernetes does not take",
            {"value": show_value(value)},
        )
    if cpu_cores(text) > MAX_CPU_CORES:
        raise PydanticCustomError(
            "cpu",
            "CPU quantity {value} is more than {most} cores per rank",
            {"value": show_value(value), "most": f"{MAX_CPU_CORES:g}"},
        )
    return text


def cpu_cores(quantity: str) -> float:
    """Cores in a canonical CPU quantity string (``500m`` -> 0.5)."""
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def parse_memory(value: Any) -> Any:
    """A Kubernetes memory quantity (``12Gi``, ``512Mi``, bytes as an int) -> its string."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError("memory", "expected a memory quantity such as '12Gi' or '512Mi'")
    text = str(value).strip()
    if not _MEMORY_RE.fullmatch(text):
        raise PydanticCustomError(
            "memory",
            "invalid memory quantity {value}: use e.g. '512Mi', '12Gi' or '2G'",
            {"value": show_value(value)},
        )
    number = text.rstrip("kKMGTPEi")
    size = float(number) * _MEMORY_UNITS[text[len(number) :]]
    if size > MAX_MEMORY_BYTES:
        raise PydanticCustomError(
            "memory", "memory quantity {value} is more than 1Ei per rank", {"value": show_value(value)}
        )
    if size < MIN_MEMORY_BYTES:
        raise PydanticCustomError(
            "memory",
            "memory quantity {value} is less than 64Mi: a rank's interpreter alone takes more (bytes unless "
            "a unit follows, e.g. '512Mi', '12Gi')",
            {"value": show_value(value)},
        )
    return text


_MEMORY_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def memory_bytes(quantity: str) -> int:
    """Bytes in a canonical memory quantity string (``12Gi`` -> 12884901888), rounded up."""
    number = quantity.rstrip("kKMGTPEi")
    return math.ceil(float(number) * _MEMORY_UNITS[quantity[len(number) :]])


def _as_list(what: str) -> Any:
    """Before-validator for sweeps: a scalar is a sweep of one; an empty list is an error."""

    def parse(value: Any) -> Any:
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not items:
            raise PydanticCustomError("sweep", "{what} must not be an empty list", {"what": what})
        return items

    return parse


def _unique(what: str) -> Any:
    """After-validator for sweeps: each value once, so run names stay unique."""

    def check(values: list[Any]) -> list[Any]:
        seen: set[Any] = set()
        for v in values:
            if v in seen:
                raise PydanticCustomError(
                    "sweep",
                    "duplicate value {value} in the {what} sweep",
                    {"value": show_value(v), "what": what},
                )
            seen.add(v)
        return values

    return check


def _worker_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticCustomError(
            "workers",
            "workers must be a positive integer or a list of them, got {value}",
            {"value": show_value(value)},
        )
    if not 1 <= value <= 4096:
        raise PydanticCustomError(
            "workers", "workers must be between 1 and 4096, got {value}", {"value": show_value(value)}
        )
    return value


def _choice(kind: str, allowed: tuple[str, ...]) -> Callable[[Any], str]:
    """A validator for one name out of ``allowed`` (a backend, a framework), with a did-you-mean."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise PydanticCustomError(
                "literal_error",
                "unknown {kind} {value}: expected one of {expected}",
                {
                    "kind": kind,
                    "value": show_value(value),
                    "raw": value if isinstance(value, str) else "",
                    "expected": ", ".join(repr(a) for a in allowed),
                },
            )
        return value

    return check


def _name_sweep(kind: str, allowed: tuple[str, ...], examples: list[Any]) -> Any:
    """A field that takes one name or a list of distinct names to sweep over."""
    return Annotated[
        list[Annotated[str, BeforeValidator(_choice(kind, allowed))]],
        BeforeValidator(_as_list(kind)),
        AfterValidator(_unique(kind)),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "enum": list(allowed)},
                    {
                        "type": "array",
                        "items": {"type": "string", "enum": list(allowed)},
                        "minItems": 1,
                        "uniqueItems": True,
                    },
                ],
                "examples": examples,
            }
        ),
    ]


def duration_schema(most: float) -> WithJsonSchema:
    """The JSON Schema of a duration of at most ``most`` seconds (a number or '30m'-style text):
    the bound is stated for numbers, and in the description for text."""
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": most},
                {
                    "type": "string",
                    "pattern": _DURATION_SCHEMA_RE,
                    "description": f"At most {show_seconds(most)}.",
                },
            ],
            "examples": ["30m", "2h", "1h30m", 600],
        }
    )


Duration = Annotated[
    float, BeforeValidator(duration_at_most(MAX_DURATION_S)), duration_schema(MAX_DURATION_S)
]
MaxTime = Annotated[
    float,
    BeforeValidator(duration_at_most(MAX_DURATION_S, MIN_MAX_TIME_S)),
    duration_schema(MAX_DURATION_S),
]
CpuQuantity = Annotated[
    str,
    BeforeValidator(parse_cpu),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_CPU_CORES},
                {
                    "type": "string",
                    "pattern": _CPU_RE.pattern,
                    "description": f"At most {MAX_CPU_CORES:g} cores.",
                },
            ],
            "examples": ["2", "500m"],
        }
    ),
]
MemoryQuantity = Annotated[
    str,
    BeforeValidator(parse_memory),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_MEMORY_BYTES},
                {"type": "string", "pattern": _MEMORY_RE.pattern, "description": "At most 1Ei."},
            ],
            "examples": ["12Gi", "512Mi"],
        }
    ),
]
WorkersSweep = Annotated[
    list[Annotated[int, BeforeValidator(_worker_count)]],
    BeforeValidator(_as_list("workers")),
    AfterValidator(_unique("workers")),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": 4096},
                {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1, "maximum": 4096},
                    "minItems": 1,
                    "uniqueItems": True,
                },
            ],
            "examples": [2, [1, 2, 4, 8]],
        }
    ),
]
BackendSweep = _name_sweep("backend", BACKENDS, ["gloo", ["gloo", "mpi"]])
FrameworkSweep = _name_sweep("framework", FRAMEWORKS, ["pytorch", ["pytorch", "tensorflow"]])


def parse_gpu(value: Any) -> Any:
    """``1xT4``, ``T4`` (one), an int (count) or ``{count, type}`` -> a mapping for ``Gpu``."""
    if isinstance(value, bool):
        raise PydanticCustomError("gpu", "gpu must be a count, 'NxTYPE' (e.g. '1xT4') or {count, type}")
    if isinstance(value, int):
        return {"count": value}
    if isinstance(value, str):
        match = GPU_RE.fullmatch(value.strip())
        if not match:
            raise PydanticCustomError(
                "gpu",
                "invalid gpu {value}: use 'NxTYPE' such as '1xT4' or '2xA100'",
                {"value": show_value(value)},
            )
        return {"count": int(match["count"] or 1), "type": match["type"]}
    return value
