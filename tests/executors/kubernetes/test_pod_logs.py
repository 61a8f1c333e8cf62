"""Pod log lines: the kubelet's timestamps and the cursor that lets a reconnecting follower
show every line once."""

from __future__ import annotations

import pytest
from support.kube_api import format_stamp

from mlbench_tui.executors.kubernetes.pod_logs import LogCursor, parse_stamp, split_stamp, stream_lines


@pytest.mark.parametrize(
    ("text", "stamp"),
    [
        ("2026-11-21T12:00:05Z", (1795262405, 0)),
        ("2026-11-21T12:00:05.1Z", (1795262405, 100_000_000)),
        ("2026-11-21T12:00:05.000000001Z", (1795262405, 1)),
        ("2026-11-21T13:30:05.5+01:30", (1795262405, 500_000_000)),
        ("2026-11-21T10:00:05-02:00", (1795262405, 0)),
    ],
)
def test_kubelet_stamps_parse_to_times_whatever_their_form(text: str, stamp: tuple[int, int]) -> None:
    assert parse_stamp(text) == stamp


def test_stamps_order_as_times_where_their_strings_do_not() -> None:
    whole, tenth = "2026-11-21T12:00:05Z", "2026-11-21T12:00:05.1Z"
    assert whole > tenth  # Go drops trailing zeros, so the strings sort the wrong way round
    assert parse_stamp(whole) < parse_stamp(tenth)  # type: ignore[operator]
    for stamp in [(1795262405, 0), (1795262405, 100_000_000), (1795262405, 123_456_789)]:
        assert parse_stamp(format_stamp(stamp)) == stamp
    assert format_stamp((1795262405, 100_000_000)) == tenth


def test_a_line_keeps_its_text_and_a_line_without_a_stamp_is_kept_whole() -> None:
    assert split_stamp("2026-11-21T12:00:05.1Z epoch 1 loss 0.5") == (
        (1795262405, 100_000_000),
        "epoch 1 loss 0.5",
    )
    assert split_stamp("2026-11-21T12:00:05Z ") == ((1795262405, 0), "")
    assert split_stamp("no stamp here") == (None, "no stamp here")


def test_chunks_split_into_lines_across_chunk_edges() -> None:
    chunks = [b"ep", b"och 1\r\nloss \xff", b"\n\nlast"]
    assert list(stream_lines(chunks)) == ["epoch 1", "loss \ufffd", "", "last"]


def test_the_cursor_admits_each_line_once_across_replays_even_with_equal_stamps() -> None:
    log = [(1, "a"), (2, "b"), (2, "b again"), (3, "c")]
    cursor = LogCursor()
    shown = [text for stamp, text in log[:3] if cursor.admit((stamp, 0))]
    assert shown == ["a", "b", "b again"]
    cursor.reconnect()  # the API replays everything, then the line that was cut off
    shown += [text for stamp, text in log if cursor.admit((stamp, 0))]
    assert shown == ["a", "b", "b again", "c"]
    cursor.reconnect()
    assert [text for stamp, text in log if cursor.admit((stamp, 0))] == []
    assert cursor.admit(None)  # no stamp, nothing to compare: shown


def test_a_pod_with_several_ranks_splits_its_log_by_the_prefix_torchrun_writes() -> None:
    from string import Template

    from mlbench_tui.executors.kubernetes.pod_logs import RANK_LOG_PREFIX_TEMPLATE, split_rank

    header = Template(RANK_LOG_PREFIX_TEMPLATE).safe_substitute(role_name="default", rank=12, local_rank=4)
    assert split_rank(f"{header}[rank 12] epoch 1") == (12, "[rank 12] epoch 1")
    assert split_rank(f"{header}") == (12, "")
    assert split_rank("W1125 torch.distributed.run: setting OMP_NUM_THREADS") == (
        None,
        "W1125 torch.distributed.run: setting OMP_NUM_THREADS",
    )
    assert split_rank("[rank 3] not torchrun's prefix") == (None, "[rank 3] not torchrun's prefix")
