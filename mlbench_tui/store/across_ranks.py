"""Reads across the ranks of one run, for views of hundreds to thousands of ranks: every rank's
latest value of a metric, and a metric's percentiles across ranks bucket by bucket.

Both go through the (series, step) index of one metric at a time and answer for all ranks in
one read: no request, and no query, per rank. ``latest_by_rank`` walks the index from the
newest step down and stops once every rank has been seen (or after a bounded number of rows),
so its cost is about the number of ranks, not the length of the run. ``rank_bands`` reads each
rank's value at the last step of each bucket (found in the index alone) and takes the
percentiles in Python: at most ``points`` x ranks rows, however long the run.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Connection

from mlbench_tui.results.ranks import percentile
from mlbench_tui.store.api_models import MetricBand, MetricBands, RanksLatest, RankValues

LATEST_DEPTH = 8  # rows read per rank at most while looking for every rank's latest point
INDEX = "metrics INDEXED BY ix_metrics_series_step"


def _top(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM metrics").scalar() or 0)


def _series(conn: Connection, run_id: str, names: Sequence[str]) -> list[tuple[int, str]]:
    """(series id, name) of the run's metrics among ``names``, in the order of ``names``."""
    ids = dict(
        (name, sid)
        for sid, name in conn.exec_driver_sql(
            f"SELECT id, name FROM series WHERE run_id = ? AND name IN ({', '.join('?' * len(names))})",
            (run_id, *names),
        )
    )
    return [(ids[name], name) for name in dict.fromkeys(names) if name in ids]


def _workers(conn: Connection, run_id: str) -> int:
    return int(conn.exec_driver_sql("SELECT workers FROM runs WHERE id = ?", (run_id,)).scalar() or 1)


def latest_by_rank(conn: Connection, run_id: str, names: Sequence[str]) -> RanksLatest:
    """Per metric of ``names``: each rank's latest point (highest step, then newest row; the
    newest row for a metric reported without steps).

    The walk down the index stops once every rank was seen; when ``LATEST_DEPTH`` rows per rank
    did not reach some rank (it stopped reporting long ago), one grouped scan of the metric
    finds the rest."""
    cursor = _top(conn)
    workers = _workers(conn, run_id)
    out: list[RankValues] = []
    for sid, name in _series(conn, run_id, names):
        found: dict[int, tuple[Any, Any, Any, Any]] = {}
        rows = conn.exec_driver_sql(
            f"SELECT rank, step, epoch, t, value FROM {INDEX} WHERE series = ? AND id <= ?"
            " ORDER BY step DESC, id DESC",
            (sid, cursor),
        )
        budget = workers * LATEST_DEPTH
        for rank, step, epoch, t, value in rows:
            if rank not in found:
                found[rank] = (step, epoch, t, value)
                if len(found) >= workers:
                    break
            budget -= 1
            if budget <= 0:
                break
        rows.close()
        if len(found) < workers and budget <= 0:  # some rank fell far behind: one grouped scan
            for rank, step, epoch, t, value, _id in conn.exec_driver_sql(
                f"SELECT rank, step, epoch, t, value, max(id) FROM {INDEX}"
                " WHERE series = ? AND id <= ? GROUP BY rank",
                (sid, cursor),
            ):
                found.setdefault(rank, (step, epoch, t, value))
        ranks = sorted(found)
        out.append(
            RankValues(
                name=name,
                rank=ranks,
                step=[found[r][0] for r in ranks],
                epoch=[found[r][1] for r in ranks],
                t=[found[r][2] for r in ranks],
                value=[found[r][3] for r in ranks],
            )
        )
    return RanksLatest(cursor=cursor, series=out)


def rank_bands(conn: Connection, run_id: str, names: Sequence[str], points: int) -> MetricBands:
    """Per metric of ``names``: p50, p90 and max across ranks in at most ``points`` buckets
    (every step its own bucket when there are few enough)."""
    top = _top(conn)
    found = (_band(conn, sid, name, points, top) for sid, name in _series(conn, run_id, names))
    return MetricBands(cursor=top, bands=[band for band in found if band is not None])


def _band(conn: Connection, sid: int, name: str, points: int, top: int) -> MetricBand | None:
    where = "series = ? AND id <= ?"
    params: tuple[Any, ...] = (sid, top)
    lo, hi = (
        conn.exec_driver_sql(f"SELECT {end}(step) FROM {INDEX} WHERE {where}", params).scalar()
        for end in ("min", "max")
    )  # one index seek each
    if lo is not None:
        # Every step when there are few enough, else the last step of each of ``points`` equal
        # spans of steps (one index seek per span): points x ranks rows, however long the run.
        where += " AND step IS NOT NULL"
        if hi - lo + 1 > points:
            edges = [lo + (hi - lo + 1) * k // points for k in range(points + 1)]
            spans = [[a, b] for a, b in itertools.pairwise(edges) if a < b]
            last = conn.exec_driver_sql(
                f"SELECT (SELECT max(step) FROM {INDEX} WHERE {where}"
                " AND step >= json_extract(j.value, '$[0]') AND step < json_extract(j.value, '$[1]'))"
                " FROM json_each(?) AS j",
                (*params, orjson.dumps(spans).decode()),
            )
            steps = [row[0] for row in last if row[0] is not None]
            where += " AND step IN (SELECT value FROM json_each(?))"
            params = (*params, orjson.dumps(steps).decode())
        rows = conn.exec_driver_sql(
            f"SELECT step AS b, rank, value, step, t, max(id) FROM {INDEX} WHERE {where} GROUP BY step, rank",
            params,
        )
    else:  # no steps: equal spans of time, each rank's last sample in each (every row is read)
        t0, t1 = conn.exec_driver_sql(f"SELECT min(t), max(t) FROM {INDEX} WHERE {where}", params).one()
        if t0 is None:
            return None
        span = (t1 - t0) * (1 + 1e-9) or 1.0  # the last row falls in the last bucket, not one more
        rows = conn.exec_driver_sql(
            f"SELECT CAST((t - ?) * ? / ? AS INTEGER) AS b, rank, value, step, t, max(id) FROM {INDEX}"
            f" WHERE {where} GROUP BY b, rank",
            (t0, points, span, *params),
        )
    by_bucket: dict[Any, list[tuple[float, int, Any, float]]] = {}
    for b, rank, value, step, t, _id in rows:  # each rank's last row of the bucket
        if value is not None:
            by_bucket.setdefault(b, []).append((value, rank, step, t))
    band = MetricBand(name=name, step=[], t=[], ranks=[], p50=[], p90=[], max=[], max_rank=[])
    for b in sorted(by_bucket):
        found = by_bucket[b]
        values = sorted(v for v, _r, _s, _t in found)
        peak, peak_rank = max((v, -r) for v, r, _s, _t in found)
        band.step.append(max((s for _v, _r, s, _t in found if s is not None), default=None))
        band.t.append(max(t for _v, _r, _s, t in found))
        band.ranks.append(len(found))
        band.p50.append(percentile(values, 50))
        band.p90.append(percentile(values, 90))
        band.max.append(peak)
        band.max_rank.append(-peak_rank)
    return band
