"""Metric batch decoding on the ingest hot path: the msgspec struct derived from the wire contract's
one declaration (``mlbench_worker.wire.MetricBatch`` through ``store.wire_models``, what the server
decodes with) vs a hand-declared msgspec struct of the same message (what the server declared
before the derivation; msgspec's own best), with pydantic's model (the fallback for refused
bodies, derived too) shown for information.

Goal: the derived struct decodes at >= 0.95x the hand-declared one's speed. Short rounds
interleave the decoders in one process so machine load hits them alike. The goal is checked on
each decoder's fastest round (its cost without interference: on a loaded machine the slower
rounds measure the load); the median of the per-round ratios, with a distribution-free 95%
interval (``benchmarks/stats.py``), is shown beside it.

    python -m benchmarks wire_decode [--rounds 300] [--batches 50] [--metrics 100]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from mlbench_worker import wire

from benchmarks.stats import median_interval

GOAL = 0.95
_Finite = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
_SESSION = re.compile(r"[A-Za-z0-9._-]*")


class _HandMetric(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=wire.MAX_NAME_LEN)]
    value: _Finite | None
    step: Annotated[int, msgspec.Meta(ge=-(2**62), le=2**62)] | None = None
    epoch: _Finite | None = None
    t: _Finite | None = None


class _HandBatch(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    rank: Annotated[int, msgspec.Meta(ge=0, le=wire.MAX_RANK)]
    seq: Annotated[int, msgspec.Meta(ge=0, le=2**62)]
    metrics: Annotated[list[_HandMetric], msgspec.Meta(min_length=1, max_length=wire.MAX_BATCH_ITEMS)]
    session: Annotated[str, msgspec.Meta(max_length=64)] = ""


def _hand_decoder() -> Callable[[bytes], Any]:
    decoder = msgspec.json.Decoder(_HandBatch)

    def decode(body: bytes) -> Any:
        batch = decoder.decode(body)
        if batch.session and _SESSION.fullmatch(batch.session) is None:
            raise ValueError("session")
        return batch

    return decode


def _body(metrics: int) -> bytes:
    names = (wire.TRAIN_LOSS, wire.LR, wire.STEP_TIME, wire.TRAIN_PREC1, wire.phase_metric("agg"))
    items = [
        {"name": names[i % len(names)], "value": 0.5 + i, "step": i, "epoch": 1.0, "t": 1.7e9 + i}
        for i in range(metrics)
    ]
    return json.dumps({"rank": 3, "seq": 17, "session": "0123456789abcdef", "metrics": items}).encode()


def _per_batch_us(decode: Callable[[bytes], Any], body: bytes, batches: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        decode(body)
    return (time.perf_counter() - start) / batches * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks wire_decode", description=__doc__)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batches", type=int, default=50, help="batches decoded per decoder per round")
    parser.add_argument("--metrics", type=int, default=100, help="metrics per batch")
    args = parser.parse_args(argv)

    from mlbench_tui.server.ingest import fast_metric_batch
    from mlbench_tui.store.api_models import MetricBatch

    body = _body(args.metrics)
    hand = _hand_decoder()
    assert fast_metric_batch(body) is not None and hand(body) is not None
    decoders: dict[str, Callable[[bytes], Any]] = {
        "derived (ours)": fast_metric_batch,
        "hand-declared": hand,
        "pydantic (info)": MetricBatch.model_validate_json,
    }
    times: dict[str, list[float]] = {name: [] for name in decoders}
    order = list(decoders.items())
    for round_ in range(args.rounds):
        for name, decode in order if round_ % 2 else reversed(order):  # neither always goes first
            times[name].append(_per_batch_us(decode, body, args.batches))
    load = os.getloadavg()[0]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    sizes = f"{args.rounds} rounds of {args.batches} batches of {args.metrics} metrics"
    print(f"load average {load:.2f}; {sizes}")
    for name, values in times.items():
        fastest, median = min(values), statistics.median(values)
        print(f"  {name:<18} {fastest:8.1f} us per batch (fastest round), {median:8.1f} (median)")
    ratio = min(times["hand-declared"]) / min(times["derived (ours)"])
    ratios = [h / d for d, h in zip(times["derived (ours)"], times["hand-declared"], strict=True)]
    low, high = median_interval(ratios)
    mark = "ok" if ratio >= GOAL else "MISSED"
    print(f"ratio hand-declared / derived time, fastest rounds: {ratio:.3f}   goal >= {GOAL} {mark}")
    middle = statistics.median(ratios)
    print(f"  median of the per-round ratios (info): {middle:.3f} (95% {low:.3f} .. {high:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
