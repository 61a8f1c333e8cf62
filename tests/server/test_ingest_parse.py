"""The msgspec mirror of ``MetricBatch`` on the ingest hot path never accepts more than the wire model.

For every body the fast decoder either defers (None: pydantic then decides, with its 422 reasons)
or yields exactly the values pydantic would: same names, numbers bit for bit, same defaults.
"""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mlbench_tui.server.ingest import fast_metric_batch, valid_name
from mlbench_tui.store.api_models import MAX_BATCH_ITEMS, MetricBatch


def _batch(metric: str, extra: str = "") -> bytes:
    return ('{"rank":0,"seq":1,"metrics":[' + metric + "]" + extra + "}").encode()


EDGE_BODIES = [
    _batch('{"name":"a","value":1,"value":2}'),  # duplicate key: the last one wins in both
    b'{"rank":0,"seq":1,"seq":2,"metrics":[{"name":"a","value":1}]}',
    _batch('{"name":"\\ud800","value":1}'),  # lone surrogate
    _batch('{"name":"\\u00e9\\ud83d\\ude00","value":1}'),
    _batch('{"name":"' + "\U0001f600" * 128 + '","value":1}'),  # 128 characters, 512 bytes
    _batch('{"name":"' + "\U0001f600" * 129 + '","value":1}'),
    _batch('{"name":"","value":1}'),
    _batch('{"name":"a\\u0000b","value":1}'),
    _batch('{"name":"a\\u001fb","value":1}'),
    _batch('{"name":"a\\nb","value":1}'),
    _batch('{"name":"a\x7fb","value":1}'),
    _batch('{"name":"a","value":1e400}'),
    _batch('{"name":"a","value":-1e400}'),
    _batch('{"name":"a","value":NaN}'),
    _batch('{"name":"a","value":Infinity}'),
    _batch('{"name":"a","value":-0.0}'),
    _batch('{"name":"a","value":123456789012345678901234567890}'),
    _batch('{"name":"a","value":true}'),
    _batch('{"name":"a","value":"1.5"}'),
    _batch('{"name":"a","value":null,"step":null,"epoch":null,"t":null}'),
    _batch('{"name":"a"}'),
    _batch('{"name":"a","value":1,"step":4611686018427387904}'),
    _batch('{"name":"a","value":1,"step":4611686018427387905}'),
    _batch('{"name":"a","value":1,"step":-4611686018427387905}'),
    _batch('{"name":"a","value":1,"step":1.0}'),
    _batch('{"name":"a","value":1,"step":"7"}'),
    _batch('{"name":"a","value":1,"epoch":1e400}'),
    _batch('{"name":"a","value":1,"t":1e400}'),
    _batch('{"name":"a","value":1,"bogus":1}'),
    _batch('{"name":"a","value":1}', ',"bogus":1'),
    _batch('{"name":"a","value":1}', ',"session":null'),
    _batch('{"name":"a","value":1}', ',"session":"host-1.pid_2"'),
    _batch('{"name":"a","value":1}', ',"session":"bad session"'),
    _batch('{"name":"a","value":1}', ',"session":"host-1\\n"'),  # Python's $ matches before a final \n
    _batch('{"name":"a","value":1}', ',"session":"' + "s" * 65 + '"'),
    b'{"rank":-1,"seq":1,"metrics":[{"name":"a","value":1}]}',
    b'{"rank":65536,"seq":1,"metrics":[{"name":"a","value":1}]}',
    b'{"rank":1.0,"seq":1,"metrics":[{"name":"a","value":1}]}',
    b'{"rank":0,"seq":-1,"metrics":[{"name":"a","value":1}]}',
    b'{"rank":0,"seq":4611686018427387905,"metrics":[{"name":"a","value":1}]}',
    b'{"rank":0,"seq":1,"metrics":[]}',
    b'{"rank":0,"seq":1,"metrics":{}}',
    b'{"rank":0,"seq":1}',
    b" \n" + _batch('{"name":"a","value":1}') + b"\n ",
    b"\xef\xbb\xbf" + _batch('{"name":"a","value":1}'),
    _batch('{"name":"a\xff","value":1}'),
    _batch('{"name":"a","value":1}') + b"x",
    _batch('{"name":"a","value":01}'),
    b"",
    b"[]",
    b"null",
]


def _pydantic(body: bytes) -> Any:
    try:
        return MetricBatch.model_validate_json(body)
    except ValidationError:
        return None


def _same_as_pydantic(body: bytes) -> None:
    fast = fast_metric_batch(body)
    slow = _pydantic(body)
    if fast is None:
        return  # deferred: pydantic decides
    if not all(valid_name(m.name) for m in fast.metrics):
        return  # the ingestor defers these to pydantic as well
    assert slow is not None, f"fast path accepted what the wire model refuses: {body[:120]!r}"
    assert (fast.rank, fast.seq, fast.session) == (slow.rank, slow.seq, slow.session)
    assert len(fast.metrics) == len(slow.metrics)
    for a, b in zip(fast.metrics, slow.metrics, strict=True):
        assert a.name == b.name and a.step == b.step
        for x, y in ((a.value, b.value), (a.epoch, b.epoch), (a.t, b.t)):
            assert (x is None and y is None) or (
                type(x) is float and type(y) is float and struct.pack("<d", x) == struct.pack("<d", y)
            ), (body[:120], x, y)


@pytest.mark.parametrize("body", EDGE_BODIES)
def test_fast_decoder_defers_or_agrees_with_the_wire_model(body: bytes) -> None:
    _same_as_pydantic(body)


def test_names_with_control_characters_are_left_to_the_wire_model() -> None:
    batch = fast_metric_batch(_batch('{"name":"a\\u0001","value":1}'))
    assert batch is not None and not valid_name(batch.metrics[0].name)
    assert _pydantic(_batch('{"name":"a\\u0001","value":1}')) is None


def test_common_batches_take_the_fast_path_with_exact_floats() -> None:
    rng = random.Random(3)
    for _ in range(20):
        metrics = []
        for i in range(100):
            bits = rng.getrandbits(64)
            value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
            metrics.append(
                {
                    "name": rng.choice(["train_loss", "lr", "val_global_Prec@1", "phase_fwd_pass", "ü/ß"]),
                    "value": value if math.isfinite(value) else None,
                    "step": rng.choice([None, i, -i, 2**62]),
                    "epoch": rng.choice([None, rng.random() * 100, 3]),
                    "t": rng.choice([None, 1.7e9 + rng.random()]),
                }
            )
        body = json.dumps(
            {"rank": rng.randrange(64), "seq": rng.randrange(2**40), "metrics": metrics}
        ).encode()
        assert fast_metric_batch(body) is not None  # what the reporter sends is never deferred
        _same_as_pydantic(body)


def test_batch_length_limit_matches() -> None:
    item = '{"name":"a","value":1}'
    _same_as_pydantic(_batch(",".join([item] * MAX_BATCH_ITEMS)))
    over = _batch(",".join([item] * (MAX_BATCH_ITEMS + 1)))
    assert fast_metric_batch(over) is None and _pydantic(over) is None


def test_rejected_batch_stores_nothing_and_its_valid_new_names_work_later(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from mlbench_tui.server.app import create_app
    from mlbench_tui.server.auth import AuthConfig
    from mlbench_tui.store import queries
    from mlbench_tui.store.api_models import RunCreate
    from mlbench_tui.store.store import Store

    with Store(tmp_path / "s.db") as store:
        run, token = store.create_run(RunCreate(name="names"))
        app = create_app(store, AuthConfig(admin_token="admin", read_token="read"))
        url, auth = f"/v1/runs/{run.id}/metrics:batch", {"Authorization": f"Bearer {token}"}
        with TestClient(app) as client:
            bad = client.post(
                url, content=_batch('{"name":"fresh","value":1},{"name":"x\\u0001","value":2}'), headers=auth
            )
            assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"
            assert bad.json()["detail"][0]["loc"] == ["metrics", "1", "name"]  # pydantic's reason
            ok = client.post(url, content=_batch('{"name":"fresh","value":3,"step":1}'), headers=auth)
            assert ok.status_code == 200 and ok.json() == {"accepted": 1, "duplicate": False}
        page = store.read(lambda c: queries.metrics(c, run.id))
        assert [(s.name, s.value) for s in page.series] == [("fresh", [3.0])]
