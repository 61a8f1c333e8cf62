"""``python -m benchmarks wire_decode`` runs: the derived decoder, the hand-declared one and pydantic
decode the same batch, and it prints the ratio (the figures themselves are not asserted)."""

from __future__ import annotations

import pytest

from benchmarks import BENCHMARKS, wire_decode


def test_it_prints_each_decoder_and_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert BENCHMARKS["wire_decode"] == "benchmarks.wire_decode"
    assert wire_decode.main(["--rounds", "2", "--batches", "3", "--metrics", "5"]) == 0
    out = capsys.readouterr().out
    for decoder in ("derived (ours)", "hand-declared", "pydantic (info)"):
        assert decoder in out
    assert "ratio hand-declared / derived time" in out and "goal >= 0.95" in out


def test_the_hand_declared_peer_decodes_what_the_server_decodes() -> None:
    """The peer is the same message (else the ratio compares different work)."""
    from mlbench_tui.server.ingest import fast_metric_batch

    body = wire_decode._body(7)
    ours, peer = fast_metric_batch(body), wire_decode._hand_decoder()(body)
    assert ours is not None
    assert [(m.name, m.value, m.step, m.epoch, m.t) for m in ours.metrics] == [
        (m.name, m.value, m.step, m.epoch, m.t) for m in peer.metrics
    ]
    assert (ours.rank, ours.seq, ours.session) == (peer.rank, peer.seq, peer.session)
