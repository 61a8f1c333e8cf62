"""The network dimension of a spec: each rank's link bandwidth and added latency, swept like workers.

``network: {bandwidth: 100Mbit, latency: 5ms}`` (or the short form ``network: 100Mbit``) puts the
ranks on emulated links: bandwidth per rank in each direction (``10Mbit``, ``1Gbit``, ``unlimited``),
latency the one-way delay added to each packet. A list sweeps: ``bandwidth: [10Mbit, 100Mbit, 1Gbit]``
is three runs per world size. Values are normalized to bits per second (None: unlimited) and
seconds, so two spellings of one rate give one spec hash. A spec without ``network`` runs on the
machine's own network, as before.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from mlbench_tui.spec.base import StrictModel
from mlbench_tui.spec.shortforms import show_value

MIN_BANDWIDTH_BPS = 1_000_000  # 1 Mbit/s: slower links make every real task a day long
MAX_BANDWIDTH_BPS = 400_000_000_000  # 400 Gbit/s: the fastest NICs sold
MAX_LATENCY_S = 1.0  # one second each way: beyond any WAN; rendezvous timeouts start to bite
UNLIMITED = "unlimited"

_PREFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BANDWIDTH_RE = re.compile(
    r"^(?P<number>\d+(?:\.\d+)?|\.\d+)\s*(?P<prefix>[kKmMgGtT]?)(?P<unit>bit|bits|bps|bit/s|b/s)$"
)
_BYTES_RE = re.compile(
    r"^(?P<number>\d+(?:\.\d+)?|\.\d+)\s*(?P<prefix>[kKmMgGtT]?)(?P<binary>i?)(?:B/s|Bps|B)$"
)
_LATENCY_RE = re.compile(r"^(?P<number>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>us|µs|ms|s)$")
_LATENCY_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_BANDWIDTH_SCHEMA_RE = r"^(unlimited|(\d+(\.\d+)?|\.\d+)\s*[kKmMgGtT]?(bit|bits|bps|bit/s|b/s))$"
_LATENCY_SCHEMA_RE = r"^(\d+(\.\d+)?|\.\d+)\s*(us|µs|ms|s)$"


def format_bandwidth(bps: int | None) -> str:
    """A rate the way a spec writes it: ``100Mbit``, ``2.5Gbit``, ``unlimited``."""
    if bps is None:
        return UNLIMITED
    for prefix, size in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if bps >= size:
            return f"{bps / size:g}{prefix}bit"
    return f"{bps}bit"


def format_latency(seconds: float) -> str:
    """A delay the way a spec writes it: ``5ms``, ``250us``, ``1s``."""
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds >= 1e-3 or seconds == 0:
        return f"{round(seconds * 1e3, 6):g}ms"
    return f"{round(seconds * 1e6, 3):g}us"


def _bandwidth_hint(text: str) -> str:
    words = re.sub(r"[\d.\s]", "", text)
    number = re.match(r"^\s*(\d+(?:\.\d+)?|\.\d+)", text)
    if difflib.get_close_matches(text.strip().lower(), [UNLIMITED], n=1, cutoff=0.6):
        return f"did you mean '{UNLIMITED}'?"
    units = ["kbit", "Mbit", "Gbit", "Tbit"]
    close = difflib.get_close_matches(words, units + [u.lower() for u in units], n=1, cutoff=0.5)
    if number and close:
        unit = next(u for u in units if u.lower() == close[0].lower())
        return f"did you mean '{number[1]}{unit}'?"
    if number and not words:
        return f"add a unit: '{number[1]}Mbit' (megabits per second) or '{number[1]}Gbit'"
    return "write a rate in bits per second such as '100Mbit' or '1Gbit', or 'unlimited'"


def parse_bandwidth(value: Any) -> Any:
    """``100Mbit``, ``1Gbit``, ``1.5Gbit/s``, ``100Mbps`` or ``unlimited`` -> bits per second (None)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PydanticCustomError(
            "bandwidth",
            "bandwidth must be a rate such as '100Mbit' or 'unlimited', got {value}",
            {"value": show_value(value)},
        )
    if isinstance(value, int | float):
        raise PydanticCustomError(
            "bandwidth",
            "bandwidth {value} has no unit",
            {
                "value": show_value(value),
                "hint": f"write '{value:g}Mbit' (megabits per second) or '{value:g}Gbit'",
            },
        )
    text = value.strip()
    if text.lower() == UNLIMITED:
        return None
    match = _BANDWIDTH_RE.fullmatch(text)
    if match is None:
        as_bytes = _BYTES_RE.fullmatch(text)
        if as_bytes is not None:
            prefix = as_bytes["prefix"].lower()
            size = 1024 ** (" kmgt".index(prefix)) if as_bytes["binary"] and prefix else _PREFIXES[prefix]
            bits = round(float(as_bytes["number"]) * size * 8)
            raise PydanticCustomError(
                "bandwidth",
                "bandwidth {value} is in bytes per second; the spec takes bits per second",
                {"value": show_value(value), "hint": f"write '{format_bandwidth(bits)}'"},
            )
        raise PydanticCustomError(
            "bandwidth",
            "invalid bandwidth {value}",
            {"value": show_value(value), "hint": _bandwidth_hint(text)},
        )
    bps = float(match["number"]) * _PREFIXES[match["prefix"].lower()]
    if not math.isfinite(bps) or bps <= 0:
        raise PydanticCustomError(
            "bandwidth",
            "bandwidth {value} is not a positive rate",
            {"value": show_value(value), "hint": "write 'unlimited' for no limit"},
        )
    if bps < MIN_BANDWIDTH_BPS or bps > MAX_BANDWIDTH_BPS:
        raise PydanticCustomError(
            "bandwidth",
            "bandwidth {value} is outside {least} to {most}",
            {
                "value": show_value(value),
                "least": format_bandwidth(MIN_BANDWIDTH_BPS),
                "most": format_bandwidth(MAX_BANDWIDTH_BPS),
                "hint": "write 'unlimited' for no limit" if bps > MAX_BANDWIDTH_BPS else None,
            },
        )
    if bps != round(bps):
        raise PydanticCustomError(
            "bandwidth",
            "bandwidth {value} is not a whole number of bits per second",
            {"value": show_value(value)},
        )
    return round(bps)


def parse_latency(value: Any) -> Any:
    """``5ms``, ``250us``, ``0.5ms``, ``0`` -> seconds of added one-way delay."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PydanticCustomError(
            "latency", "latency must be a delay such as '5ms', got {value}", {"value": show_value(value)}
        )
    if isinstance(value, int | float):
        if value == 0:
            return 0.0
        raise PydanticCustomError(
            "latency",
            "latency {value} has no unit",
            {"value": show_value(value), "hint": f"write '{value:g}ms' (milliseconds)"},
        )
    match = _LATENCY_RE.fullmatch(value.strip())
    if match is None:
        number = re.match(r"^\s*(\d+(?:\.\d+)?|\.\d+)", value)
        unit = re.sub(r"[\d.\s]", "", value)
        close = difflib.get_close_matches(unit, list(_LATENCY_UNITS), n=1, cutoff=0.4)
        hint = f"did you mean '{number[1]}{close[0]}'?" if number and close else "write e.g. '5ms' or '250us'"
        raise PydanticCustomError(
            "latency", "invalid latency {value}", {"value": show_value(value), "hint": hint}
        )
    seconds = float(match["number"]) * _LATENCY_UNITS[match["unit"]]
    if seconds > 0 and round(seconds * 1e6) == 0:
        raise PydanticCustomError(
            "latency", "latency {value} is below 1us, the finest delay tc sets", {"value": show_value(value)}
        )
    seconds = round(seconds * 1e6) / 1e6
    if not math.isfinite(seconds) or seconds > MAX_LATENCY_S:
        raise PydanticCustomError(
            "latency",
            "latency {value} is more than {most}, the most a link here adds",
            {"value": show_value(value), "most": format_latency(MAX_LATENCY_S)},
        )
    return seconds


def _sweep(what: str, parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """One value or a list of distinct values, each parsed (a sweep of one for a scalar)."""

    def parse_all(value: Any) -> Any:
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not items:
            raise PydanticCustomError("sweep", "{what} must not be an empty list", {"what": what})
        return items

    return parse_all


def _distinct(what: str, show: Callable[[Any], str]) -> Callable[[list[Any]], list[Any]]:
    def check(values: list[Any]) -> list[Any]:
        seen: set[Any] = set()
        for value in values:
            if value in seen:
                raise PydanticCustomError(
                    "sweep",
                    "{value} appears twice in the {what} sweep (two spellings of one value?)",
                    {"value": show(value), "what": what},
                )
            seen.add(value)
        return values

    return check


def _sweep_schema(item: dict[str, Any], examples: list[Any]) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "anyOf": [item, {"type": "array", "items": item, "minItems": 1, "uniqueItems": True}],
            "examples": examples,
        }
    )


BandwidthSweep = Annotated[
    list[Annotated[int | None, BeforeValidator(parse_bandwidth)]],
    BeforeValidator(_sweep("bandwidth", parse_bandwidth)),
    AfterValidator(_distinct("bandwidth", lambda bps: repr(format_bandwidth(bps)))),
    _sweep_schema(
        {
            "type": "string",
            "pattern": _BANDWIDTH_SCHEMA_RE,
            "description": f"Bits per second, {format_bandwidth(MIN_BANDWIDTH_BPS)} to "
            f"{format_bandwidth(MAX_BANDWIDTH_BPS)}, or 'unlimited'.",
        },
        ["100Mbit", ["10Mbit", "100Mbit", "1Gbit"]],
    ),
]
LatencySweep = Annotated[
    list[Annotated[float, BeforeValidator(parse_latency)]],
    BeforeValidator(_sweep("latency", parse_latency)),
    AfterValidator(_distinct("latency", lambda s: repr(format_latency(s)))),
    _sweep_schema(
        {
            "anyOf": [
                {"type": "string", "pattern": _LATENCY_SCHEMA_RE, "description": "At most 1s."},
                {"type": "number", "const": 0},
            ]
        },
        ["5ms", ["0ms", "5ms", "50ms"]],
    ),
]


def _unlimited() -> list[int | None]:
    return [None]


class Network(StrictModel):
    """The links between ranks: bandwidth per rank and added latency, emulated or enforced by the target."""

    bandwidth: BandwidthSweep = Field(
        default_factory=_unlimited,
        description="Each rank's link rate in each direction: '10Mbit', '100Mbit', '1Gbit', '10Gbit' "
        "(bits per second), or 'unlimited'; a list sweeps: [10Mbit, 100Mbit, 1Gbit].",
    )
    latency: LatencySweep = Field(
        default_factory=lambda: [0.0],
        description="One-way delay added to every packet a rank sends: '5ms', '250us' (0: none); "
        "a list sweeps: [0ms, 5ms, 50ms]. Needs the kernel's netem qdisc where it is emulated.",
    )
    kubernetes_bandwidth: Literal["cni", "tc"] | None = Field(
        default=None,
        description="Kubernetes targets only: how a pod's bandwidth is limited. 'cni' (the default) sets "
        "the bandwidth CNI plugin's pod annotations; 'tc' shapes the pod's interface from an init "
        "container with NET_ADMIN, for clusters without that plugin. Latency always uses the init container.",
    )

    def points(self) -> list[tuple[int | None, float]]:
        """Every (bandwidth, latency) pair of the sweep, bandwidth-major, in the order written."""
        return [(bandwidth, latency) for bandwidth in self.bandwidth for latency in self.latency]


def _network_short_form(value: Any) -> Any:
    """``network: 100Mbit`` (or a list of rates) for ``{bandwidth: ...}``."""
    if isinstance(value, str | list):
        return {"bandwidth": value}
    return value


NetworkField = Annotated[Network, BeforeValidator(_network_short_form)]


def network_tag(bandwidth_bps: int | None, latency_s: float) -> str:
    """The run-name part of one sweep point, DNS-1123 safe: ``100mbit``, ``2500mbit-5ms``, ``unlimited``."""
    if bandwidth_bps is None:
        tag = UNLIMITED
    else:
        tag = f"{bandwidth_bps}bit"
        for prefix, size in (("t", 10**12), ("g", 10**9), ("m", 10**6), ("k", 10**3)):
            if bandwidth_bps % size == 0:
                tag = f"{bandwidth_bps // size}{prefix}bit"
                break
    if latency_s > 0:
        micros = round(latency_s * 1e6)
        tag += f"-{micros // 1000}ms" if micros % 1000 == 0 else f"-{micros}us"
    return tag


def network_schema(schema: dict[str, Any]) -> None:
    """``network``'s JSON Schema also takes the short form: one rate or a list of rates."""
    keep: dict[str, Any] = {k: schema.pop(k) for k in ("description", "title", "default") if k in schema}
    full = dict(schema)
    schema.clear()
    schema.update(keep)
    rate = {"type": "string", "pattern": _BANDWIDTH_SCHEMA_RE}
    schema["anyOf"] = [rate, {"type": "array", "items": rate, "minItems": 1, "uniqueItems": True}, full]
