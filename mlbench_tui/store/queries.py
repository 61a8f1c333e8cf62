"""Read queries of the store, shaped for the TUI and CLI: cursors, filters and downsampling.

Every read is a plain function of a SQLAlchemy ``Connection`` returning wire models, so the server,
tests and in-process callers share them. Cursors are row ids (assigned in order by the writer):
pass the returned ``cursor`` as ``since`` to get only newer rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

import orjson
from sqlalchemy import Connection

from mlbench_tui.errors import UsageError
from mlbench_tui.ranksets import RankSet
from mlbench_tui.store.api_models import (
    EventOut,
    EventsPage,
    LogLineOut,
    LogsPage,
    MetricName,
    MetricSeries,
    MetricsPage,
    RankInfo,
    RunDetail,
    RunInfo,
)

RUN_INFO_COLUMNS = (
    "id, name, spec_name, spec_hash, task, backend, workers, repeat, goal, state, target_kind, handle, "
    "created, started, finished, result, error, labels, launch, owner, json_extract(plan, '$.network')"
)
RUN_DETAIL_COLUMNS = RUN_INFO_COLUMNS + ", spec_text, plan, spool"
RANK_COLUMNS = "rank, state, host, pid, pod, exit_code, message, updated"

MAX_REGEX_LEN = 256


def _json(text: str | None) -> Any:
    return orjson.loads(text) if text else None


def run_info_dict(row: Sequence[Any]) -> dict[str, Any]:
    """A runs row (``RUN_INFO_COLUMNS`` order) as the JSON-ready dict of a ``RunInfo``."""
    return {
        "id": row[0],
        "name": row[1],
        "spec_name": row[2],
        "spec_hash": row[3],
        "task": row[4],
        "backend": row[5],
        "workers": row[6],
        "repeat": row[7],
        "goal": _json(row[8]),
        "state": row[9],
        "target_kind": row[10],
        "handle": row[11],
        "created": row[12],
        "started": row[13],
        "finished": row[14],
        "result": _json(row[15]),
        "error": row[16],
        "labels": _json(row[17]) or {},
        "launch": _json(row[18]),
        "owner": _json(row[19]),
        "network": _json(row[20]),
    }


def rank_info(row: Sequence[Any]) -> RankInfo:
    return RankInfo(
        rank=row[0],
        state=row[1],
        host=row[2],
        pid=row[3],
        pod=row[4],
        exit_code=row[5],
        message=row[6],
        updated=row[7],
    )


def list_runs(
    conn: Connection, *, state: str | None = None, spec_name: str | None = None, limit: int = 500
) -> list[RunInfo]:
    """Runs, newest first, optionally filtered by state and spec name."""
    where: list[str] = []
    params: list[Any] = []
    if state:
        where.append("state = ?")
        params.append(state)
    if spec_name:
        where.append("spec_name = ?")
        params.append(spec_name)
    sql = f"SELECT {RUN_INFO_COLUMNS} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created DESC, id LIMIT ?"
    params.append(limit)
    rows = conn.exec_driver_sql(sql, tuple(params)).fetchall()
    return [RunInfo.model_validate(run_info_dict(row)) for row in rows]


def get_run(conn: Connection, run_id: str) -> RunDetail | None:
    """One run with spec text, plan and ranks, or None."""
    row = conn.exec_driver_sql(f"SELECT {RUN_DETAIL_COLUMNS} FROM runs WHERE id = ?", (run_id,)).first()
    if row is None:
        return None
    data = run_info_dict(row)
    data["spec_text"] = row[21]
    data["plan"] = _json(row[22]) or {}
    data["spool"] = row[23]
    ranks = conn.exec_driver_sql(
        f"SELECT {RANK_COLUMNS} FROM ranks WHERE run_id = ? ORDER BY rank", (run_id,)
    ).fetchall()
    data["ranks"] = [rank_info(r) for r in ranks]
    return RunDetail.model_validate(data)


def run_exists(conn: Connection, run_id: str) -> bool:
    return conn.exec_driver_sql("SELECT 1 FROM runs WHERE id = ?", (run_id,)).first() is not None


def token_hash(conn: Connection, run_id: str) -> str | None:
    row = conn.exec_driver_sql("SELECT token_hash FROM runs WHERE id = ?", (run_id,)).first()
    return None if row is None else str(row[0])


NameStats = dict[tuple[str, int], list[Any]]  # (name, rank) -> [count, last_step, last_value]


def metric_name_stats(conn: Connection, run_id: str, after: int = 0, stats: NameStats | None = None) -> int:
    """Fold metric rows of a run with id > ``after`` into ``stats``; returns the new high-water id.

    ``after == 0`` scans the run's series through their index; a later call only reads rows newer
    than ``after`` (a rowid range scan: ``CROSS JOIN`` keeps metrics as the outer loop), which
    makes a polled name list cost what was added since the last poll, not the size of the run.
    """
    stats = {} if stats is None else stats
    top = conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM metrics").scalar() or 0
    if after:
        sql = (
            "SELECT s.name, m.rank, count(*), max(m.step), m.value"
            " FROM metrics AS m CROSS JOIN series AS s ON s.id = m.series"
            " WHERE m.id > ? AND m.id <= ? AND s.run_id = ? GROUP BY s.name, m.rank"
        )
        params: tuple[Any, ...] = (after, top, run_id)
    else:
        sql = (
            "SELECT s.name, m.rank, count(*), max(m.step), m.value"
            " FROM series AS s CROSS JOIN metrics AS m INDEXED BY ix_metrics_series_step ON m.series = s.id"
            " WHERE s.run_id = ? AND m.id <= ? GROUP BY s.name, m.rank"
        )
        params = (run_id, top)
    for name, rank, count, last_step, last_value in conn.exec_driver_sql(sql, params):
        entry = stats.get((name, rank))
        if entry is None:
            stats[(name, rank)] = [count, last_step, last_value]
            continue
        entry[0] += count
        if last_step is not None and (entry[1] is None or last_step >= entry[1]):
            entry[1], entry[2] = last_step, last_value
    return int(top)


def metric_names(conn: Connection, run_id: str, stats: NameStats | None = None) -> list[MetricName]:
    """Every metric name of a run with its ranks, point count and latest (step, value)."""
    if stats is None:
        stats = {}
        metric_name_stats(conn, run_id, 0, stats)
    rows = [(name, rank, *values) for (name, rank), values in sorted(stats.items())]
    merged: dict[str, MetricName] = {}
    for name, rank, count, last_step, last_value in rows:
        entry = merged.get(name)
        if entry is None:
            merged[name] = MetricName(
                name=name, ranks=[rank], count=count, last_step=last_step, last_value=last_value
            )
            continue
        entry.ranks.append(rank)
        entry.count += count
        if last_step is not None and (entry.last_step is None or last_step > entry.last_step):
            entry.last_step, entry.last_value = last_step, last_value
    return sorted(merged.values(), key=lambda m: m.name)


def _downsampled(
    conn: Connection, run_id: str, names: Sequence[str], rank: int | None, since: int, points: int
) -> MetricsPage:
    """``metrics(points=...)`` in SQL: per series one index-only pass for its extent, then (when
    it has more rows than ``points``) one grouped pass into equal-width step buckets per rank.

    Python only sees the buckets, so opening a run of millions of rows costs the server about
    as much as SQLite's scan of the series shown, not the rows' transfer and grouping in Python.
    A bucket keeps the min/max of its values and its last row (the one with the highest id),
    read back by rowid; rows without a step are bucketed by id.
    """
    where = "s.run_id = ?"
    params: list[Any] = [run_id]
    if names:
        where += f" AND s.name IN ({', '.join('?' * len(names))})"
        params.extend(names)
    found = conn.exec_driver_sql(f"SELECT s.id, s.name FROM series AS s WHERE {where}", tuple(params))
    cond, extra = "", cast("tuple[Any, ...]", ())
    if since:
        cond, extra = " AND id > ?", (since,)
    if rank is not None:
        cond, extra = cond + " AND rank = ?", (*extra, rank)
    cursor = since
    by_series = "metrics INDEXED BY ix_metrics_series_step"  # never a rowid scan (after ANALYZE)
    grouped: dict[tuple[str, int], dict[str, list[Any]]] = {}
    for series_id, name in found.fetchall():
        count, stepped, step_lo, step_hi = conn.exec_driver_sql(
            f"SELECT count(*), count(step), min(step), max(step) FROM {by_series} WHERE series = ?{cond}",
            (series_id, *extra),
        ).one()
        if count <= points:
            sql = f"SELECT id, rank, step, epoch, t, value, value, value FROM {by_series}"
            sql += f" WHERE series = ?{cond}"
            rows: list[tuple[Any, ...]] = [
                tuple(row) for row in conn.exec_driver_sql(sql + " ORDER BY id", (series_id, *extra))
            ]
        else:
            id_lo, id_hi = 0, 1
            if stepped < count:  # some rows have no step: they are bucketed by id
                id_lo, id_hi = conn.exec_driver_sql(
                    f"SELECT min(id), max(id) FROM {by_series} WHERE series = ?{cond}",
                    (series_id, *extra),
                ).one()
            bucket = "CASE WHEN step IS NULL THEN ? + (id - ?) * ? / ? ELSE (step - ?) * ? / ? END"
            agg = conn.exec_driver_sql(
                f"SELECT max(id), min(value), max(value) FROM {by_series} WHERE series = ?{cond}"
                f" GROUP BY rank, {bucket}",
                (
                    series_id,
                    *extra,
                    points,
                    id_lo,
                    points,
                    id_hi - id_lo + 1,
                    step_lo or 0,
                    points,
                    (step_hi - step_lo + 1) if stepped else 1,
                ),
            ).fetchall()
            extremes = {row[0]: (row[1], row[2]) for row in agg}
            last = conn.exec_driver_sql(
                "SELECT id, rank, step, epoch, t, value FROM metrics"
                " WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
                (orjson.dumps(list(extremes)).decode(),),
            ).fetchall()
            rows = [(*row, *extremes[row[0]]) for row in last]
        if rows:
            cursor = max(cursor, rows[-1][0])
        for _id, r, step, epoch, t, value, low, high in rows:
            cols = grouped.get((name, r))
            if cols is None:
                cols = grouped[(name, r)] = {k: [] for k in ("step", "value", "t", "epoch", "min", "max")}
            cols["step"].append(step)
            cols["value"].append(value)
            cols["t"].append(t)
            cols["epoch"].append(epoch)
            cols["min"].append(low)
            cols["max"].append(high)
    series = [MetricSeries(name=name, rank=r, **cols) for (name, r), cols in sorted(grouped.items())]
    return MetricsPage(cursor=cursor, series=series, downsampled=True)


def metrics(
    conn: Connection,
    run_id: str,
    *,
    names: Sequence[str] = (),
    rank: int | None = None,
    since: int = 0,
    points: int | None = None,
    limit: int = 50_000,
    recent: bool = False,
) -> MetricsPage:
    """Metric points newer than ``since``, grouped in series per (name, rank).

    With ``points`` each series is reduced in SQL to at most that many buckets per rank (equal
    steps; min/max/last kept) and every row since the cursor is considered; otherwise at most
    ``limit`` rows are returned and the cursor lets the caller page on. ``recent`` says few
    rows (of all runs) are newer than ``since``: they are then read by rowid range instead of
    through the run's whole index.
    """
    if points is not None:
        return _downsampled(conn, run_id, names, rank, since, points)
    if recent and since:  # few new rows: walk them by id, look each one's series up
        tables = "metrics AS m CROSS JOIN series AS s ON s.id = m.series"
    else:  # the run's series first, then their rows through the (series, step) index
        tables = "series AS s CROSS JOIN metrics AS m INDEXED BY ix_metrics_series_step ON m.series = s.id"
    where = ["s.run_id = ?", "m.id > ?"]
    params: list[Any] = [run_id, since]
    if names:
        where.append(f"s.name IN ({', '.join('?' * len(names))})")
        params.extend(names)
    if rank is not None:
        where.append("m.rank = ?")
        params.append(rank)
    sql = (
        f"SELECT m.id, m.rank, s.name, m.step, m.epoch, m.t, m.value FROM {tables}"
        f" WHERE {' AND '.join(where)} ORDER BY m.id LIMIT ?"
    )
    params.append(limit)
    rows = conn.exec_driver_sql(sql, tuple(params)).fetchall()
    cursor = rows[-1][0] if rows else since
    grouped: dict[tuple[str, int], dict[str, list[Any]]] = {}
    for _id, r, name, step, epoch, t, value in rows:
        cols = grouped.get((name, r))
        if cols is None:
            cols = grouped[(name, r)] = {"step": [], "value": [], "t": [], "epoch": []}
        cols["step"].append(step)
        cols["value"].append(value)
        cols["t"].append(t)
        cols["epoch"].append(epoch)
    series = [MetricSeries(name=name, rank=r, **cols) for (name, r), cols in sorted(grouped.items())]
    return MetricsPage(cursor=cursor, series=series)


def metric_summary(
    conn: Connection, run_id: str, after: int, names: Sequence[str] = ()
) -> tuple[int, list[dict[str, Any]]]:
    """The run's metric rows with id > ``after`` as one bucket per (name, rank): the last row's
    step/epoch/t/value, the min/max of the values and the count (only for ``names`` when given);
    and the store's highest id when read, the cursor to pass next time.

    Live streams call this a few times a second per watched run (``?coalesce=``), so it reads
    the new rows by rowid range (``NOT INDEXED``: the cost is what was added since ``after``,
    not the run's size) and aggregates inside SQLite. The items have ``MetricsSummary``'s shape.
    """
    top = int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM metrics").scalar() or 0)
    if top <= after:
        return after, []
    # From a cursor: the new rows by rowid range; from 0: the run's series through their index.
    scan = "metrics NOT INDEXED" if after else "metrics INDEXED BY ix_metrics_series_step"
    only = f" AND name IN ({', '.join('?' * len(names))})" if names else ""
    rows = conn.exec_driver_sql(
        "SELECT s.name, g.rank, g.top, g.lo, g.hi, g.n, m.step, m.epoch, m.t, m.value FROM"
        " (SELECT series, rank, max(id) AS top, min(value) AS lo, max(value) AS hi, count(*) AS n"
        f"  FROM {scan} WHERE id > ? AND id <= ?"
        f"  AND series IN (SELECT id FROM series WHERE run_id = ?{only})"
        "  GROUP BY series, rank) AS g"
        " JOIN metrics AS m ON m.id = g.top JOIN series AS s ON s.id = g.series",
        (after, top, run_id, *names),
    ).fetchall()
    series = [
        {
            "name": name,
            "rank": rank,
            "step": [step],
            "epoch": [epoch],
            "t": [t],
            "value": [value],
            "min": [low],
            "max": [high],
            "count": count,
        }
        for name, rank, _top, low, high, count, step, epoch, t, value in sorted(rows, key=lambda r: r[:2])
    ]
    return top, series


def compile_regex(pattern: str | None) -> re.Pattern[str] | None:
    if not pattern:
        return None
    if len(pattern) > MAX_REGEX_LEN:
        raise UsageError(f"regex longer than {MAX_REGEX_LEN} characters")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"invalid regex {pattern!r}: {exc}") from exc


def logs(
    conn: Connection,
    run_id: str,
    *,
    since: int = 0,
    rank: int | None = None,
    ranks: RankSet | None = None,
    regex: str | None = None,
    stream: str | None = None,
    limit: int = 1000,
    tail: bool = False,
) -> LogsPage:
    """Log lines newer than ``since`` (oldest first), filtered by rank (one, or a set), stream and
    regex: the first ``limit`` of them, or with ``tail`` the last ``limit`` (a view opening on a
    long run's latest lines). The cursor is the newest line read."""
    pattern = compile_regex(regex)
    where = ["run_id = ?", "id > ?", "id < ?"]
    extra: list[Any] = []
    if rank is not None:
        where.append("rank = ?")
        extra.append(rank)
    if ranks is not None:
        condition, values = ranks.sql()
        where.append(condition)
        extra.extend(values)
    if stream:
        where.append("stream = ?")
        extra.append(stream)
    sql = f"SELECT id, rank, stream, seq, t, text FROM logs WHERE {' AND '.join(where)}"
    sql += " ORDER BY id DESC LIMIT ?" if tail else " ORDER BY id LIMIT ?"
    out: list[LogLineOut] = []
    cursor = since
    low, high = since, 2**63 - 1  # the id range still to read
    chunk = limit if pattern is None else max(limit, 2000)
    while len(out) < limit:
        rows = conn.exec_driver_sql(sql, (run_id, low, high, *extra, chunk)).fetchall()
        for row in rows:
            cursor = max(cursor, row[0])
            if tail:
                high = row[0]
            else:
                low = row[0]
            if pattern is None or pattern.search(row[5]):
                out.append(
                    LogLineOut(id=row[0], rank=row[1], stream=row[2], seq=row[3], t=row[4], text=row[5])
                )
                if len(out) >= limit:
                    break
        if len(rows) < chunk:
            break
    if tail:
        out.reverse()
    return LogsPage(cursor=cursor, lines=out)


def events(
    conn: Connection, run_id: str, *, since: int = 0, kind: str | None = None, limit: int = 1000
) -> EventsPage:
    """Events newer than ``since``, oldest first, optionally of one kind."""
    where = ["run_id = ?", "id > ?"]
    params: list[Any] = [run_id, since]
    if kind:
        where.append("kind = ?")
        params.append(kind)
    params.append(limit)
    rows = conn.exec_driver_sql(
        f"SELECT id, rank, kind, payload, t FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?",
        tuple(params),
    ).fetchall()
    out = [EventOut(id=r[0], rank=r[1], kind=r[2], payload=_json(r[3]) or {}, t=r[4]) for r in rows]
    return EventsPage(cursor=rows[-1][0] if rows else since, events=out)
